# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pass saw on the host, read once before planning: the one input of the planner besides the
wanted assignments (``planner.plan_pass``). ``entry/converge.py`` observes it; tests build it by hand."""

from __future__ import annotations

from typing import Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain, Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import Releases
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import Ledger
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import Records
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus, HostMemory
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import PodView
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record


@record
class Observed:
    """What a pass saw on the host, read once before planning."""

    node_id: str
    boot_id: str
    inventory: Inventory
    vendor: Optional[VendorSpec]  # None: not read (a node without NVIDIA's spec has one whose path is None)
    live: Dict[str, LiveHold]  # allocation id -> the hold, from /etc/cdi
    env_files: Dict[str, Optional[bytes]]  # allocation id -> current env file content
    ledger: Ledger  # what the node has reported
    state_dir: str  # the state directory's node path (``node/state_files.py``), which conditions name
    privileged: bool = True
    mps: bool = False
    domains: List[Domain] = field(default_factory=list)
    domains_error: Optional[str] = None
    slices: Dict[str, SliceState] = field(default_factory=dict)  # slice name -> the slice as the host shows it
    slices_unavailable: Optional[str] = None  # why this host cannot make hold slices
    memory: Optional[HostMemory] = None  # read only when a new hold needs admission
    # the online CPUs and NUMA nodes, read only when a new or changed hold books cpus or mems; None: not read, or
    # unreadable (``cpus_unreadable`` says why), and cpus and mems go unchecked
    cpus: Optional[HostCpus] = None
    cpus_unreadable: Optional[str] = None
    releases: Releases = field(default_factory=Releases)  # pending Kubernetes releases
    kube: Optional[PodView] = None  # what pods hold, asked only when a Kubernetes release needs it
    now: float = 0.0
    damaged_specs: List[str] = field(default_factory=list)  # node paths of damaged specs set aside earlier
    runtimes: List[Runtime] = field(default_factory=list)  # the node's container runtimes
    maintenance: Records = field(default_factory=dict)  # GPU UUID -> {reason, since}: out of service
    health_cleared: Dict[str, float] = field(default_factory=dict)  # GPU UUID -> when it left maintenance
    spec_dir: bool = True  # /etc/cdi is a directory: a reported hold whose spec is not there is gone

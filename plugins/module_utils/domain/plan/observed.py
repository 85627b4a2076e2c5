# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pass saw on the host, read once before planning: the one input of the planner besides the
wanted assignments (``planner.plan_pass``). ``entry/converge.py`` observes it; tests build it by hand."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import DEFAULT_STATE_DIR, Releases
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record


@record
class Observed:
    """What a pass saw on the host, read once before planning."""

    node_id: str
    boot_id: str
    inventory: Any
    vendor: Any
    live: Dict[str, Any]  # allocation id -> LiveHold, from /etc/cdi
    env_files: Dict[str, Optional[bytes]]  # allocation id -> current env file content
    ledger: Any
    privileged: bool = True
    mps: bool = False
    domains: List = field(default_factory=list)
    domains_error: Optional[str] = None
    slices: Dict[str, Any] = field(default_factory=dict)  # slice name -> SliceState
    slices_unavailable: Optional[str] = None  # why this host cannot make hold slices
    memory: Optional[Any] = None  # HostMemory, read only when a new hold needs admission
    # HostCpus: the online CPUs and NUMA nodes, read only when a new or changed hold books cpus or mems; None:
    # not read, or unreadable (``cpus_unreadable`` says why), and cpus and mems go unchecked
    cpus: Optional[Any] = None
    cpus_unreadable: Optional[str] = None
    releases: Releases = field(default_factory=Releases)  # pending Kubernetes releases
    kube: Optional[Any] = None  # KubeView: what pods hold, asked only when a Kubernetes release needs it
    now: float = 0.0
    state_dir: str = DEFAULT_STATE_DIR
    damaged_specs: List[str] = field(default_factory=list)  # node paths of damaged specs set aside earlier
    runtimes: List = field(default_factory=list)  # cdi_runtimes.Runtime: the node's container runtimes
    maintenance: Dict[str, dict] = field(default_factory=dict)  # GPU UUID -> {reason, since}: out of service
    health_cleared: Dict[str, float] = field(default_factory=dict)  # GPU UUID -> when it left maintenance
    spec_dir: bool = True  # /etc/cdi is a directory: a reported hold whose spec is not there is gone

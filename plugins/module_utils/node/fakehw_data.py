# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a fakehw file says the host has, checked field by field: ``fakehw_from_data`` and the ``FakeHw`` it builds.

The data is what ``node/fakehw.py`` read from the file (JSON, else YAML): input like any other, so it
is validated strictly. Any wrong type, missing or duplicate id, negative number or unknown field raises
``FakeHwError`` with a message that names the field (``gpus[1].uuid: required``), the first one in the
file's order: the top-level ids, ``gpus``, ``domains``, ``kubelet``, ``runtimes``, ``driver``, then the
CPUs and NUMA nodes.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime, parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import XID_CLASSES, problems
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_CPU,
    MAX_NODE,
    InvalidAssignment,
    check_cpulist,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.cpulist import format_cpulist, parse_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Domain,
    Gpu,
    Inventory,
    MigInstance,
    PodDevices,
    normalize_pci_address,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import dra_device_ids
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import FakeHwError
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import boolean as _bool
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import checked_list as _list
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import err as _err
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import gpu_uuid as _gpu_uuid
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import int_or as _int_or
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import mapping as _mapping
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import optional_int as _int
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import required_int as _required_int
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import required_text as _required_text
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import text as _text
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig_fields import (
    FakeMigGpu,
    claim_uuid,
    mig_entries,
    mig_side,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

# Every state ``virsh domstate`` prints; as on a real host (``virsh list --state-running
# --state-paused``), only a running or a paused domain has its GPUs and memory.
DOMAIN_STATES = ("running", "idle", "paused", "in shutdown", "shut off", "crashed", "pmsuspended", "no state")
ACTIVE_DOMAIN_STATES = ("running", "paused")

_TOP_FIELDS = ("node_id", "boot_id", "gpus", "domains", "kubelet", "runtimes", "driver", "cpus", "numa_nodes")
_NUMA_FIELDS = ("node", "cpus", "memory")
_DRIVER_FIELDS = ("version", "device_nodes", "files")
_HEALTH_FIELDS = ("retired_pages_pending", "row_remap_failure", "xids", "reset_clears")
MAX_DRIVER_PATHS = 4096
_NODE_PATH_RE = lazy_pattern(r"^/[^\x00-\x1f\x7f]{0,4095}$")
_DEVICE_NUMBER_RE = lazy_pattern(r"^([0-9]{1,9}):([0-9]{1,9})$")
_GPU_FIELDS = ("uuid", "index", "minor", "numa_node", "pci_bus_id", "name", "mig", "health",
               "mig_mode", "mig_mode_pending", "mig_mode_needs_reset", "processes")
_DOMAIN_FIELDS = ("instance_id", "state", "memory_bytes", "hugepages", "gpus")
_KUBELET_FIELDS = ("reachable", "pods")
_POD_FIELDS = ("namespace", "name", "container", "device_ids", "dynamic_resources")
_CLAIM_FIELDS = ("claim_name", "claim_namespace", "claim_resources")
_CLAIM_RESOURCE_FIELDS = ("driver_name", "pool_name", "device_name", "cdi_devices")


@record
class FakeDriver:
    """The fakehw file's ``driver``: the node's /dev and driver files, as the stale-edit checks see them."""

    version: Optional[str] = None
    device_nodes: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # node path -> (major, minor)
    files: FrozenSet[str] = frozenset()  # node paths that exist (besides what is under root)


@record
class FakeHw:
    """What a fakehw file says the host has."""

    node_id: Optional[str] = None
    boot_id: Optional[str] = None
    inventory: Inventory = field(default_factory=lambda: Inventory(gpus=[], source="fakehw"))
    domains: List[Domain] = field(default_factory=list)
    kubelet_reachable: bool = True
    pods: List[PodDevices] = field(default_factory=list)
    runtimes: List[Runtime] = field(default_factory=list)  # as an operator would list them
    driver: Optional[FakeDriver] = None
    cpus: Optional[HostCpus] = None  # the CPUs and NUMA nodes ``cpus``/``numa_nodes`` describe; None: not described
    mig: Dict[str, FakeMigGpu] = field(default_factory=dict)  # each GPU's MIG side, by GPU UUID (node/fakehw_mig.py)


# --------------------------------------------------------------------------
# The file, section by section


def fakehw_from_data(data: Any, source: str = "fakehw file") -> FakeHw:
    """Validate parsed fakehw data (the file's top-level mapping) and build a
    ``FakeHw``. Raises ``FakeHwError`` naming the first bad field.

    An empty file (``None``) is a host without GPUs, VMs or pods.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FakeHwError("%s: the top level must be a mapping, not %s" % (source, type_name(data)))
    _mapping(data, source, _TOP_FIELDS)
    node_id = _text(data.get("node_id"), "node_id")
    boot_id = _text(data.get("boot_id"), "boot_id")
    gpus, mig = _gpus(data.get("gpus"))
    domains = _domains(data.get("domains"))
    reachable, pods = _kubelet(data.get("kubelet"))
    runtimes = _runtimes(data.get("runtimes"), source)
    return FakeHw(
        node_id=node_id,
        boot_id=boot_id,
        inventory=Inventory(gpus=gpus, source="fakehw"),
        domains=domains,
        kubelet_reachable=reachable,
        pods=pods,
        runtimes=runtimes,
        driver=_driver(data.get("driver")),
        cpus=_host_cpus(data.get("cpus"), data.get("numa_nodes")),
        mig=mig,
    )


def _gpus(value: object) -> Tuple[List[Gpu], Dict[str, FakeMigGpu]]:
    """``gpus``: each GPU with a UUID, an index and a minor of its own (MIG UUIDs included), and its MIG side."""
    seen: Dict[str, str] = {}
    indexes: Dict[int, str] = {}
    minors: Dict[int, str] = {}
    gpus = []
    mig: Dict[str, FakeMigGpu] = {}
    for i, item in enumerate(_list(value, "gpus")):
        where = "gpus[%d]" % i
        _mapping(item, where, _GPU_FIELDS)
        uuid = _gpu_uuid(item.get("uuid"), where + ".uuid")
        claim_uuid(seen, uuid, where + ".uuid")
        index = _int_or(item.get("index"), where + ".index", i)
        if index in indexes:
            raise _err(where + ".index", "duplicate index %d (also at %s)" % (index, indexes[index]))
        indexes[index] = where + ".index"
        minor = _int(item.get("minor"), where + ".minor")
        if minor is not None:
            if minor in minors:
                raise _err(where + ".minor", "duplicate minor %d (also at %s)" % (minor, minors[minor]))
            minors[minor] = where + ".minor"
        instances, gis = mig_entries(item.get("mig"), where, seen)
        mig[uuid] = mig_side(item, where, uuid, instances, gis)
        gpus.append(_gpu(item, where, uuid, index, minor, instances))
    return gpus, mig


def _gpu(item: Dict[str, Any], where: str, uuid: str, index: int, minor: Optional[int], mig: Tuple[MigInstance, ...]) -> Gpu:
    """The rest of one GPU: its health, PCI address, NUMA node and name."""
    health = item.get("health")
    if health is None:
        health = {}
    _mapping(health, where + ".health", _HEALTH_FIELDS)
    _bool(health.get("reset_clears"), where + ".health.reset_clears", True)  # read by reset_fakehw_gpus
    xids = [_required_int(xid, "%s.health.xids[%d]" % (where, k))
            for k, xid in enumerate(_list(health.get("xids"), where + ".health.xids")[:64])]
    pci = _text(item.get("pci_bus_id"), where + ".pci_bus_id")
    if pci is not None:
        normal = normalize_pci_address(pci)
        if normal is None:
            raise _err(where + ".pci_bus_id", "must be a PCI address like 0000:3b:00.0, not %r" % pci[:80])
        pci = normal
    return Gpu(
        uuid=uuid,
        index=index,
        minor=minor,
        numa_node=_int(item.get("numa_node"), where + ".numa_node"),
        pci_bus_id=pci,
        name=_text(item.get("name"), where + ".name"),
        mig=mig,
        health=problems(_bool(health.get("retired_pages_pending"), where + ".health.retired_pages_pending", False),
                        _bool(health.get("row_remap_failure"), where + ".health.row_remap_failure", False)),
        xids=tuple((xid, None) for xid in xids if xid in XID_CLASSES),
    )


def _domains(value: object) -> List[Domain]:
    """``domains``: libvirt's VMs, each with an instance id of its own, a state and the GPUs it has."""
    domains = []
    instance_ids: Dict[str, str] = {}
    for i, item in enumerate(_list(value, "domains")):
        where = "domains[%d]" % i
        _mapping(item, where, _DOMAIN_FIELDS)
        instance_id = _required_text(item.get("instance_id"), where + ".instance_id")
        if instance_id in instance_ids:
            raise _err(where + ".instance_id", "duplicate instance_id %r (also at %s)"
                       % (instance_id, instance_ids[instance_id]))
        instance_ids[instance_id] = where + ".instance_id"
        state = item.get("state")
        if state is None:
            state = "running"
        if state not in DOMAIN_STATES:
            raise _err(where + ".state", "must be a libvirt domain state (%s), not %r"
                       % (", ".join(DOMAIN_STATES), state))
        domain_gpus: List[str] = []
        for j, listed in enumerate(_list(item.get("gpus"), where + ".gpus")):
            uuid = _gpu_uuid(listed, "%s.gpus[%d]" % (where, j))
            if uuid in domain_gpus:
                raise _err("%s.gpus[%d]" % (where, j), "duplicate GPU %s" % uuid)
            domain_gpus.append(uuid)
        domains.append(
            Domain(
                instance_id=instance_id,
                state=state,
                memory_bytes=_int_or(item.get("memory_bytes"), where + ".memory_bytes", 0),
                hugepages=_bool(item.get("hugepages"), where + ".hugepages", False),
                gpus=tuple(domain_gpus),
            )
        )
    return domains


def _kubelet(value: object) -> Tuple[bool, List[PodDevices]]:
    """``kubelet``: whether it answers, and the pods it lists with their devices (a device plugin's ids and
    the devices of their DRA claims)."""
    kubelet = _mapping({} if value is None else value, "kubelet", _KUBELET_FIELDS)
    reachable = _bool(kubelet.get("reachable"), "kubelet.reachable", True)
    pods = []
    for i, item in enumerate(_list(kubelet.get("pods"), "kubelet.pods")):
        where = "kubelet.pods[%d]" % i
        _mapping(item, where, _POD_FIELDS)
        ids = []
        for j, device_id in enumerate(_list(item.get("device_ids"), where + ".device_ids")):
            ids.append(_required_text(device_id, "%s.device_ids[%d]" % (where, j)))
        for device_id in dra_device_ids(_claim_resources(item.get("dynamic_resources"), where)):
            if device_id not in ids:
                ids.append(device_id)
        pods.append(
            PodDevices(
                namespace=_required_text(item.get("namespace"), where + ".namespace"),
                name=_required_text(item.get("name"), where + ".name"),
                container=_required_text(item.get("container"), where + ".container"),
                device_ids=tuple(ids),
            )
        )
    return reachable, pods


def _claim_resources(value: object, where: str) -> List[Tuple[str, List[str]]]:
    """A pod's ``dynamic_resources`` (the kubelet's DRA claims, as in its pod-resources answer)
    as ``(device_name, cdi device names)`` per claim resource."""
    found = []
    for i, claim in enumerate(_list(value, where + ".dynamic_resources")):
        at = "%s.dynamic_resources[%d]" % (where, i)
        _mapping(claim, at, _CLAIM_FIELDS)
        _text(claim.get("claim_name"), at + ".claim_name")
        _text(claim.get("claim_namespace"), at + ".claim_namespace")
        for j, resource in enumerate(_list(claim.get("claim_resources"), at + ".claim_resources")):
            there = "%s.claim_resources[%d]" % (at, j)
            _mapping(resource, there, _CLAIM_RESOURCE_FIELDS)
            _text(resource.get("driver_name"), there + ".driver_name")
            _text(resource.get("pool_name"), there + ".pool_name")
            cdi = [_required_text(name, "%s.cdi_devices[%d]" % (there, k))
                   for k, name in enumerate(_list(resource.get("cdi_devices"), there + ".cdi_devices"))]
            found.append((_text(resource.get("device_name"), there + ".device_name") or "", cdi))
    return found


def _runtimes(value: object, source: str) -> List[Runtime]:
    """``runtimes``: the node's container runtimes, as the ``cdi_runtimes`` option lists them (never ``auto``)."""
    try:
        runtimes = parse_runtimes_option(value or [], source="fakehw", where="runtimes")
    except ValueError as exc:
        raise FakeHwError("%s: %s" % (source, exc))
    if runtimes == "auto":
        raise _err("runtimes", "must list the node's runtimes ({name, version}), not auto")
    return runtimes


def _cpulist(value: object, where: str, highest: int = MAX_CPU, what: str = "CPU") -> FrozenSet[int]:
    """A cpulist of the file (``"0-31"``, an integer for one, ``""`` for none) as a set of numbers."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value == "":
        return frozenset()
    try:
        check_cpulist(value, where, highest, what)
    except InvalidAssignment as exc:
        raise FakeHwError(str(exc))
    return frozenset(parse_cpulist(str(value)))  # a string: the check refuses anything else


def _host_cpus(cpus: object, numa_nodes: object) -> Optional[HostCpus]:
    """``cpus`` (the online CPUs) and ``numa_nodes`` (``[{node, cpus, memory}]``) as ``HostCpus``; None when the
    file describes neither (the host then reads sysfs under its root, else checks no CPUs). ``cpus`` alone is
    one node 0 with every CPU and the memory; ``numa_nodes`` alone puts every CPU of its nodes online."""
    if cpus is None and numa_nodes is None:
        return None
    online = _cpulist(cpus, "cpus") if cpus is not None else None
    nodes: Dict[int, FrozenSet[int]] = {}
    memory: Set[int] = set()
    where_cpu: Dict[int, int] = {}
    for i, item in enumerate(_list(numa_nodes, "numa_nodes")):
        where = "numa_nodes[%d]" % i
        _mapping(item, where, _NUMA_FIELDS)
        node = _required_int(item.get("node"), where + ".node")
        if node > MAX_NODE:
            raise _err(where + ".node", "NUMA node %d is beyond %d, the most any host has" % (node, MAX_NODE))
        if node in nodes:
            raise _err(where + ".node", "duplicate NUMA node %d" % node)
        node_cpus = _cpulist(item.get("cpus") if item.get("cpus") is not None else "", where + ".cpus")
        for cpu in sorted(node_cpus):  # the nodes' CPUs are disjoint: at most MAX_CPU + 1 in all
            if cpu in where_cpu:
                raise _err(where + ".cpus", "CPU %d is on NUMA node %d too" % (cpu, where_cpu[cpu]))
            where_cpu[cpu] = node
        if online is not None and not node_cpus <= online:
            outside = node_cpus - online
            raise _err(where + ".cpus", "%s %s not in cpus (%s)" % (
                "CPU" if len(outside) == 1 else "CPUs", format_cpulist(outside) + (" is" if len(outside) == 1 else " are"),
                format_cpulist(online) or "none"))
        nodes[node] = node_cpus
        if _bool(item.get("memory"), where + ".memory", True):
            memory.add(node)
    if online is None:
        online = frozenset(where_cpu)
    if not nodes:
        nodes, memory = {0: online}, {0}
    return HostCpus(online=online, memory_nodes=frozenset(memory), node_cpus=nodes)


def _driver(value: object) -> Optional[FakeDriver]:
    """``driver: {version, device_nodes: {path: "major:minor"}, files: [path]}``, or None without one."""
    if value is None:
        return None
    driver = _mapping(value, "driver", _DRIVER_FIELDS)
    version = _text(driver.get("version"), "driver.version")
    nodes = driver.get("device_nodes")
    if nodes is None:
        nodes = {}
    if not isinstance(nodes, dict):
        raise _err("driver.device_nodes", "must be a mapping of device paths to major:minor, not %s" % type_name(nodes))
    if len(nodes) > MAX_DRIVER_PATHS:
        raise _err("driver.device_nodes", "lists %d paths; at most %d" % (len(nodes), MAX_DRIVER_PATHS))
    device_nodes: Dict[str, Tuple[int, int]] = {}
    for path, number in nodes.items():
        where = "driver.device_nodes[%r]" % (str(path)[:80],)
        if not isinstance(path, str) or not _NODE_PATH_RE.match(path):
            raise _err(where, "must be an absolute path")
        match = _DEVICE_NUMBER_RE.match(number) if isinstance(number, str) else None
        if not match:
            raise _err(where, "must be major:minor like 195:0, not %r" % (str(number)[:80],))
        device_nodes[path] = (int(match.group(1)), int(match.group(2)))
    files = _list(driver.get("files"), "driver.files")
    if len(files) > MAX_DRIVER_PATHS:
        raise _err("driver.files", "lists %d paths; at most %d" % (len(files), MAX_DRIVER_PATHS))
    for j, path in enumerate(files):
        if not isinstance(path, str) or not _NODE_PATH_RE.match(path):
            raise _err("driver.files[%d]" % j, "must be an absolute path")
    return FakeDriver(version=version, device_nodes=device_nodes, files=frozenset(files))

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

from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

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
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.support.speed import LazyPattern

MAX_INT = 2 ** 63 - 1

_GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}$")
_MIG_UUID_RE = lazy_pattern(r"^MIG-[A-Za-z0-9-]{1,128}(/[0-9]{1,9}/[0-9]{1,9})?$")
# Names and ids: printable, no whitespace at the ends, no control characters.
_TEXT_RE = lazy_pattern(r"^[^\x00-\x1f\x7f]{1,512}$")
_TEXT_SHAPE = "a non-empty string without control characters"

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
_GPU_FIELDS = ("uuid", "index", "minor", "numa_node", "pci_bus_id", "name", "mig", "health")
_MIG_FIELDS = ("gi", "ci", "uuid")
_DOMAIN_FIELDS = ("instance_id", "state", "memory_bytes", "hugepages", "gpus")
_KUBELET_FIELDS = ("reachable", "pods")
_POD_FIELDS = ("namespace", "name", "container", "device_ids", "dynamic_resources")
_CLAIM_FIELDS = ("claim_name", "claim_namespace", "claim_resources")
_CLAIM_RESOURCE_FIELDS = ("driver_name", "pool_name", "device_name", "cdi_devices")


class FakeHwError(BcdError):
    """The fakehw file cannot be read or is not valid. The message names the
    file or the field and is fit to show to a user."""


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


# --------------------------------------------------------------------------
# The checks every field goes through


def _err(where: str, message: str) -> FakeHwError:
    return FakeHwError("%s: %s" % (where, message))


def _mapping(value: object, where: str, allowed: Sequence[str]) -> Dict[str, Any]:
    """``value`` when it is a mapping of the ``allowed`` fields (their values are the callers' to check)."""
    if not isinstance(value, dict):
        raise _err(where, "must be a mapping, not %s" % type_name(value))
    for key in value:
        if not isinstance(key, str):
            raise _err(where, "keys must be strings, not %s" % type_name(key))
        if key not in allowed:
            raise _err(where, "unknown field %r (known: %s)" % (key, ", ".join(allowed)))
    return value


def _list(value: object, where: str) -> List[Any]:
    """``value`` when it is a list (its items are the callers' to check); empty when absent."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _err(where, "must be a list, not %s" % type_name(value))
    return value


def _checked_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(where, "must be a non-negative integer, not %s" % type_name(value))
    if value < 0:
        raise _err(where, "must be a non-negative integer, not %d" % value)
    if value > MAX_INT:
        raise _err(where, "is too large")
    return value


def _int(value: object, where: str) -> Optional[int]:
    """A non-negative integer, None when absent."""
    return None if value is None else _checked_int(value, where)


def _int_or(value: object, where: str, default: int) -> int:
    """A non-negative integer, ``default`` when absent."""
    return default if value is None else _checked_int(value, where)


def _required_int(value: object, where: str) -> int:
    if value is None:
        raise _err(where, "required")
    return _checked_int(value, where)


def _bool(value: object, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _err(where, "must be true or false, not %s" % type_name(value))
    return value


def _checked_text(value: object, where: str, required: bool, pattern: LazyPattern, shape: str) -> str:
    if not isinstance(value, str):
        raise _err(where, "must be a string, not %s" % type_name(value))
    if value == "" and required:
        raise _err(where, "required")
    if not pattern.match(value) or value != value.strip():
        raise _err(where, "must be %s, not %r" % (shape, value[:80]))
    return value


def _text(value: object, where: str) -> Optional[str]:
    """A name or an id (``_TEXT_RE``), None when absent."""
    return None if value is None else _checked_text(value, where, False, _TEXT_RE, _TEXT_SHAPE)


def _required_text(value: object, where: str, pattern: LazyPattern = _TEXT_RE, shape: str = _TEXT_SHAPE) -> str:
    if value is None:
        raise _err(where, "required")
    return _checked_text(value, where, True, pattern, shape)


def _gpu_uuid(value: object, where: str) -> str:
    return _required_text(value, where, pattern=_GPU_UUID_RE, shape="a GPU UUID (GPU-...)")


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
    gpus = _gpus(data.get("gpus"))
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
    )


def _claim(seen: Dict[str, str], uuid: str, where: str) -> None:
    """A GPU or MIG UUID named once in the whole file (``seen``: where each was named)."""
    if uuid in seen:
        raise _err(where, "duplicate UUID %s (also at %s)" % (uuid, seen[uuid]))
    seen[uuid] = where


def _gpus(value: object) -> List[Gpu]:
    """``gpus``: each GPU with a UUID, an index and a minor of its own (MIG UUIDs included)."""
    seen: Dict[str, str] = {}
    indexes: Dict[int, str] = {}
    minors: Dict[int, str] = {}
    gpus = []
    for i, item in enumerate(_list(value, "gpus")):
        where = "gpus[%d]" % i
        _mapping(item, where, _GPU_FIELDS)
        uuid = _gpu_uuid(item.get("uuid"), where + ".uuid")
        _claim(seen, uuid, where + ".uuid")
        index = _int_or(item.get("index"), where + ".index", i)
        if index in indexes:
            raise _err(where + ".index", "duplicate index %d (also at %s)" % (index, indexes[index]))
        indexes[index] = where + ".index"
        minor = _int(item.get("minor"), where + ".minor")
        if minor is not None:
            if minor in minors:
                raise _err(where + ".minor", "duplicate minor %d (also at %s)" % (minor, minors[minor]))
            minors[minor] = where + ".minor"
        gpus.append(_gpu(item, where, uuid, index, minor, _migs(item.get("mig"), where, seen)))
    return gpus


def _migs(value: object, where: str, seen: Dict[str, str]) -> Tuple[MigInstance, ...]:
    """A GPU's ``mig``: each instance with a ``gi``/``ci`` pair of its own on the GPU, and a UUID."""
    mig = []
    pairs: Dict[Tuple[int, int], str] = {}
    for j, inst in enumerate(_list(value, where + ".mig")):
        mwhere = "%s.mig[%d]" % (where, j)
        _mapping(inst, mwhere, _MIG_FIELDS)
        gi = _required_int(inst.get("gi"), mwhere + ".gi")
        ci = _required_int(inst.get("ci"), mwhere + ".ci")
        muuid = _required_text(inst.get("uuid"), mwhere + ".uuid", pattern=_MIG_UUID_RE, shape="a MIG UUID (MIG-...)")
        if (gi, ci) in pairs:
            raise _err(mwhere, "duplicate gi %d ci %d (also at %s)" % (gi, ci, pairs[(gi, ci)]))
        pairs[(gi, ci)] = mwhere
        _claim(seen, muuid, mwhere + ".uuid")
        mig.append(MigInstance(gi=gi, ci=ci, uuid=muuid))
    return tuple(mig)


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

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load a fakehw hardware file: the GPUs, VMs and pods of a test host.

A host is fakehw when the ``fakehw`` option names such a file (DESIGN.md,
"The hosts: real and fakehw"); everything a real host would learn from NVML,
libvirt and the kubelet comes from it instead. The file is input like any
other, so it is validated strictly: any wrong type, missing or duplicate id,
negative number or unknown field raises ``FakeHwError`` with a message that
names the field (``gpus[1].uuid: required``). JSON is read first; YAML needs
PyYAML, which is optional.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from typing import Any, Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import XID_CLASSES, problems
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_CPU,
    MAX_NODE,
    InvalidAssignment,
    check_cpulist,
    parse_cpulist,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Domain,
    Gpu,
    Inventory,
    MigInstance,
    PodDevices,
    normalize_pci_address,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import dra_device_ids
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus, format_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NotRegularFile, read_regular, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.support.bounded_json import structure_problem
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.patterns import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

# PyYAML is imported only to read a file that is not JSON (_strict_loader); whether it is there is
# known without importing it.
HAS_YAML = importlib.util.find_spec("yaml") is not None


# A node of 64 GPUs is some 20 KiB; PyYAML reads well under a MiB a second, and every pass reads the file.
MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_INT = 2 ** 63 - 1

_GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}$")
_MIG_UUID_RE = lazy_pattern(r"^MIG-[A-Za-z0-9-]{1,128}(/[0-9]{1,9}/[0-9]{1,9})?$")
# Names and ids: printable, no whitespace at the ends, no control characters.
_TEXT_RE = lazy_pattern(r"^[^\x00-\x1f\x7f]{1,512}$")

# Every state ``virsh domstate`` prints; as on a real host (``virsh list --state-running
# --state-paused``), only a running or a paused domain has its GPUs and memory.
DOMAIN_STATES = ("running", "idle", "paused", "in shutdown", "shut off", "crashed", "pmsuspended", "no state")
ACTIVE_DOMAIN_STATES = ("running", "paused")


class FakeHwError(BcdError):
    """The fakehw file cannot be read or is not valid. The message names the
    file or the field and is fit to show to a user."""


@record
class FakeDriver:
    """The fakehw file's ``driver``: the node's /dev and driver files, as the stale-edit checks see them."""

    version: Optional[str] = None
    device_nodes: Dict[str, tuple] = field(default_factory=dict)  # node path -> (major, minor)
    files: frozenset = frozenset()  # node paths that exist (besides what is under root)


@record
class FakeHw:
    """What a fakehw file says the host has."""

    node_id: Optional[str] = None
    boot_id: Optional[str] = None
    inventory: Inventory = field(default_factory=lambda: Inventory(gpus=[], source="fakehw"))
    domains: List[Domain] = field(default_factory=list)
    kubelet_reachable: bool = True
    pods: List[PodDevices] = field(default_factory=list)
    runtimes: List[Any] = field(default_factory=list)  # cdi_runtimes.Runtime, as an operator would list them
    driver: Optional[FakeDriver] = None
    cpus: Optional[HostCpus] = None  # the CPUs and NUMA nodes ``cpus``/``numa_nodes`` describe; None: not described


# --------------------------------------------------------------------------
# Reading


def _claim_resources(value, where):
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
            cdi = [_text(name, "%s.cdi_devices[%d]" % (there, k), required=True)
                   for k, name in enumerate(_list(resource.get("cdi_devices"), there + ".cdi_devices"))]
            found.append((_text(resource.get("device_name"), there + ".device_name") or "", cdi))
    return found


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_pairs(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey("duplicate key %r" % key)
        result[key] = value
    return result


_YAML = {}  # type: Dict[str, Any]


def _strict_loader():
    """``(yaml, loader)``: PyYAML and a SafeLoader that refuses a key given twice in one mapping (plain
    PyYAML keeps the last one silently), made on first use."""
    if not _YAML:
        import yaml  # pylint: disable=import-outside-toplevel

        class _StrictLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
            """SafeLoader that refuses duplicate keys."""

        def _construct_strict_mapping(loader, node, deep=False):
            keys = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<" merges may be overridden; that is not a duplicate
                key = loader.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in keys
                except TypeError:  # an unhashable key; construct_mapping says so
                    duplicate = False
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, "duplicate key %r" % (key,), key_node.start_mark
                    )
                try:
                    keys.add(key)
                except TypeError:
                    pass
            return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

        _StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_strict_mapping)
        _YAML.update(yaml=yaml, loader=_StrictLoader)
    return _YAML["yaml"], _YAML["loader"]


def parse_fakehw_text(text, source="fakehw file"):
    # type: (str, str) -> FakeHw
    """Parse fakehw content (JSON, else YAML) and validate it."""
    return fakehw_from_data(_parsed(text, source), source=source)


def _parsed(text, source):
    """The content's data, as JSON (else YAML) reads it, not yet validated."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_pairs)
    except _DuplicateKey as exc:
        raise FakeHwError("%s: %s" % (source, exc))
    except RecursionError:
        raise FakeHwError("%s: nested too deeply" % source)
    except ValueError as json_exc:
        if not HAS_YAML:
            raise FakeHwError(
                "%s is not valid JSON (%s) and PyYAML is not installed to read it as YAML"
                % (source, json_exc)
            )
        problem = structure_problem(text.encode("utf-8", "surrogatepass"), MAX_DEPTH)  # before PyYAML reads ahead
        if problem is not None:
            raise FakeHwError("%s: %s" % (source, "nested too deeply" if problem.startswith("nested") else problem))
        yaml, loader = _strict_loader()
        try:
            return yaml.load(text, Loader=loader)  # a SafeLoader
        except yaml.YAMLError as yaml_exc:
            raise FakeHwError("%s is neither valid JSON nor valid YAML: %s" % (source, _one_line(yaml_exc)))
        except RecursionError:
            raise FakeHwError("%s: nested too deeply" % source)
        except (ValueError, TypeError, OverflowError) as exc:  # a scalar PyYAML cannot convert: 10 000 digits
            raise FakeHwError("%s is neither valid JSON nor valid YAML: %s" % (source, _one_line(exc)))


def load_fakehw(path):
    # type: (str) -> FakeHw
    """Read and validate the fakehw file at ``path``. Raises ``FakeHwError``. The file is opened without
    waiting (a FIFO in its place would block every pass) and must be a regular file."""
    return parse_fakehw_text(_read_text(path), source="fakehw file %s" % path)


def _read_text(path):
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile:
        raise FakeHwError("fakehw file %s is not a regular file" % path)
    except OSError as exc:
        raise FakeHwError("cannot read fakehw file %s: %s" % (path, exc.strerror or exc))
    if len(raw) > MAX_FILE_BYTES:
        raise FakeHwError("fakehw file %s is larger than %d bytes" % (path, MAX_FILE_BYTES))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FakeHwError("fakehw file %s is not UTF-8: %s" % (path, exc))


def reset_fakehw_gpus(path, uuids):
    # type: (str, List[str]) -> Dict[str, bool]
    """A GPU reset on a fakehw node: each GPU of ``uuids`` loses its ``health`` faults in the hardware file, as a
    reset clears NVML's pending page retirements and row remappings, unless its ``health.reset_clears`` is false (a
    GPU a reset does not help: its faults stay). ``{uuid: whether its faults were cleared}``. The file is
    validated first and written again as JSON, atomically, with its mode; ``FakeHwError`` when it is not valid or
    does not list a GPU."""
    source = "fakehw file %s" % path
    data = _parsed(_read_text(path), source)
    fakehw_from_data(data, source=source)  # the file as a pass reads it, or the reason it is not
    listed = dict((item.get("uuid"), item) for item in (data or {}).get("gpus") or [])
    missing = [uuid for uuid in uuids if uuid not in listed]
    if missing:
        raise FakeHwError("%s does not list %s" % (source, ", ".join(missing)))
    cleared = {}
    for uuid in uuids:
        health = listed[uuid].get("health") or {}
        cleared[uuid] = health.get("reset_clears") is not False
        if cleared[uuid]:
            listed[uuid].pop("health", None)
    content = json_bytes(data, indent=2, sort_keys=False, ensure_ascii=False)
    write_atomic(path, content, stat.S_IMODE(os.stat(path).st_mode))
    return cleared


def _one_line(exc):
    return " ".join(str(exc).split())


# --------------------------------------------------------------------------
# Validation


def _err(where, message):
    return FakeHwError("%s: %s" % (where, message))


def _mapping(value, where, allowed):
    if not isinstance(value, dict):
        raise _err(where, "must be a mapping, not %s" % type_name(value))
    for key in value:
        if not isinstance(key, str):
            raise _err(where, "keys must be strings, not %s" % type_name(key))
        if key not in allowed:
            raise _err(where, "unknown field %r (known: %s)" % (key, ", ".join(allowed)))
    return value


def _list(value, where):
    if value is None:
        return []
    if not isinstance(value, list):
        raise _err(where, "must be a list, not %s" % type_name(value))
    return value


def _int(value, where, required=False, default=None):
    if value is None:
        if required:
            raise _err(where, "required")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(where, "must be a non-negative integer, not %s" % type_name(value))
    if value < 0:
        raise _err(where, "must be a non-negative integer, not %d" % value)
    if value > MAX_INT:
        raise _err(where, "is too large")
    return value


def _bool(value, where, default):
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _err(where, "must be true or false, not %s" % type_name(value))
    return value


def _text(value, where, required=False, pattern=_TEXT_RE, shape="a non-empty string without control characters"):
    if value is None:
        if required:
            raise _err(where, "required")
        return None
    if not isinstance(value, str):
        raise _err(where, "must be a string, not %s" % type_name(value))
    if value == "" and required:
        raise _err(where, "required")
    if not pattern.match(value) or value != value.strip():
        raise _err(where, "must be %s, not %r" % (shape, value[:80]))
    return value


def _gpu_uuid(value, where, required=True):
    return _text(value, where, required=required, pattern=_GPU_UUID_RE, shape="a GPU UUID (GPU-...)")


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


def fakehw_from_data(data, source="fakehw file"):
    # type: (Any, str) -> FakeHw
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
    seen_uuids = {}  # type: Dict[str, str]

    def claim(uuid, where):
        if uuid in seen_uuids:
            raise _err(where, "duplicate UUID %s (also at %s)" % (uuid, seen_uuids[uuid]))
        seen_uuids[uuid] = where

    gpus = []
    indexes = {}  # type: Dict[int, str]
    minors = {}  # type: Dict[int, str]
    for i, item in enumerate(_list(data.get("gpus"), "gpus")):
        where = "gpus[%d]" % i
        _mapping(item, where, _GPU_FIELDS)
        uuid = _gpu_uuid(item.get("uuid"), where + ".uuid")
        claim(uuid, where + ".uuid")
        index = _int(item.get("index"), where + ".index", default=i)
        if index in indexes:
            raise _err(where + ".index", "duplicate index %d (also at %s)" % (index, indexes[index]))
        indexes[index] = where + ".index"
        minor = _int(item.get("minor"), where + ".minor")
        if minor is not None:
            if minor in minors:
                raise _err(where + ".minor", "duplicate minor %d (also at %s)" % (minor, minors[minor]))
            minors[minor] = where + ".minor"
        mig = []
        pairs = {}  # type: Dict[tuple, str]
        for j, inst in enumerate(_list(item.get("mig"), where + ".mig")):
            mwhere = "%s.mig[%d]" % (where, j)
            _mapping(inst, mwhere, _MIG_FIELDS)
            gi = _int(inst.get("gi"), mwhere + ".gi", required=True)
            ci = _int(inst.get("ci"), mwhere + ".ci", required=True)
            muuid = _text(inst.get("uuid"), mwhere + ".uuid", required=True,
                          pattern=_MIG_UUID_RE, shape="a MIG UUID (MIG-...)")
            if (gi, ci) in pairs:
                raise _err(mwhere, "duplicate gi %d ci %d (also at %s)" % (gi, ci, pairs[(gi, ci)]))
            pairs[(gi, ci)] = mwhere
            claim(muuid, mwhere + ".uuid")
            mig.append(MigInstance(gi=gi, ci=ci, uuid=muuid))
        health = item.get("health")
        if health is None:
            health = {}
        _mapping(health, where + ".health", _HEALTH_FIELDS)
        _bool(health.get("reset_clears"), where + ".health.reset_clears", True)  # read by reset_fakehw_gpus
        xids = []
        for k, xid in enumerate(_list(health.get("xids"), where + ".health.xids")[:64]):
            xids.append(_int(xid, "%s.health.xids[%d]" % (where, k), required=True))
        pci = _text(item.get("pci_bus_id"), where + ".pci_bus_id")
        if pci is not None:
            normal = normalize_pci_address(pci)
            if normal is None:
                raise _err(where + ".pci_bus_id", "must be a PCI address like 0000:3b:00.0, not %r" % pci[:80])
            pci = normal
        gpus.append(
            Gpu(
                uuid=uuid,
                index=index,
                minor=minor,
                numa_node=_int(item.get("numa_node"), where + ".numa_node"),
                pci_bus_id=pci,
                name=_text(item.get("name"), where + ".name"),
                mig=tuple(mig),
                health=problems(_bool(health.get("retired_pages_pending"), where + ".health.retired_pages_pending", False),
                                _bool(health.get("row_remap_failure"), where + ".health.row_remap_failure", False)),
                xids=tuple((xid, None) for xid in xids if xid in XID_CLASSES),
            )
        )

    domains = []
    instance_ids = {}  # type: Dict[str, str]
    for i, item in enumerate(_list(data.get("domains"), "domains")):
        where = "domains[%d]" % i
        _mapping(item, where, _DOMAIN_FIELDS)
        instance_id = _text(item.get("instance_id"), where + ".instance_id", required=True)
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
        domain_gpus = []
        for j, uuid in enumerate(_list(item.get("gpus"), where + ".gpus")):
            uuid = _gpu_uuid(uuid, "%s.gpus[%d]" % (where, j))
            if uuid in domain_gpus:
                raise _err("%s.gpus[%d]" % (where, j), "duplicate GPU %s" % uuid)
            domain_gpus.append(uuid)
        domains.append(
            Domain(
                instance_id=instance_id,
                state=state,
                memory_bytes=_int(item.get("memory_bytes"), where + ".memory_bytes", default=0),
                hugepages=_bool(item.get("hugepages"), where + ".hugepages", False),
                gpus=tuple(domain_gpus),
            )
        )

    kubelet = data.get("kubelet")
    if kubelet is None:
        kubelet = {}
    _mapping(kubelet, "kubelet", _KUBELET_FIELDS)
    reachable = _bool(kubelet.get("reachable"), "kubelet.reachable", True)
    pods = []
    for i, item in enumerate(_list(kubelet.get("pods"), "kubelet.pods")):
        where = "kubelet.pods[%d]" % i
        _mapping(item, where, _POD_FIELDS)
        ids = []
        for j, device_id in enumerate(_list(item.get("device_ids"), where + ".device_ids")):
            ids.append(_text(device_id, "%s.device_ids[%d]" % (where, j), required=True))
        for device_id in dra_device_ids(_claim_resources(item.get("dynamic_resources"), where)):
            if device_id not in ids:
                ids.append(device_id)
        pods.append(
            PodDevices(
                namespace=_text(item.get("namespace"), where + ".namespace", required=True),
                name=_text(item.get("name"), where + ".name", required=True),
                container=_text(item.get("container"), where + ".container", required=True),
                device_ids=tuple(ids),
            )
        )

    try:
        runtimes = parse_runtimes_option(data.get("runtimes") or [], source="fakehw", where="runtimes")
    except ValueError as exc:
        raise FakeHwError("%s: %s" % (source, exc))
    if runtimes == "auto":
        raise _err("runtimes", "must list the node's runtimes ({name, version}), not auto")

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


def _cpulist(value, where, highest=MAX_CPU, what="CPU"):
    """A cpulist of the file (``"0-31"``, an integer for one, ``""`` for none) as a set of numbers."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value == "":
        return frozenset()
    try:
        check_cpulist(value, where, highest, what)
    except InvalidAssignment as exc:
        raise FakeHwError(str(exc))
    return frozenset(parse_cpulist(value))


def _host_cpus(cpus, numa_nodes):
    """``cpus`` (the online CPUs) and ``numa_nodes`` (``[{node, cpus, memory}]``) as ``HostCpus``; None when the
    file describes neither (the host then reads sysfs under its root, else checks no CPUs). ``cpus`` alone is
    one node 0 with every CPU and the memory; ``numa_nodes`` alone puts every CPU of its nodes online."""
    if cpus is None and numa_nodes is None:
        return None
    online = _cpulist(cpus, "cpus") if cpus is not None else None
    nodes = {}  # type: Dict[int, frozenset]
    memory = set()
    where_cpu = {}  # type: Dict[int, int]
    for i, item in enumerate(_list(numa_nodes, "numa_nodes")):
        where = "numa_nodes[%d]" % i
        _mapping(item, where, _NUMA_FIELDS)
        node = _int(item.get("node"), where + ".node", required=True)
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


def _driver(value):
    """``driver: {version, device_nodes: {path: "major:minor"}, files: [path]}``, or None without one."""
    if value is None:
        return None
    _mapping(value, "driver", _DRIVER_FIELDS)
    version = _text(value.get("version"), "driver.version")
    nodes = value.get("device_nodes")
    if nodes is None:
        nodes = {}
    if not isinstance(nodes, dict):
        raise _err("driver.device_nodes", "must be a mapping of device paths to major:minor, not %s" % type_name(nodes))
    if len(nodes) > MAX_DRIVER_PATHS:
        raise _err("driver.device_nodes", "lists %d paths; at most %d" % (len(nodes), MAX_DRIVER_PATHS))
    device_nodes = {}
    for path, number in nodes.items():
        where = "driver.device_nodes[%r]" % (str(path)[:80],)
        if not isinstance(path, str) or not _NODE_PATH_RE.match(path):
            raise _err(where, "must be an absolute path")
        match = _DEVICE_NUMBER_RE.match(number) if isinstance(number, str) else None
        if not match:
            raise _err(where, "must be major:minor like 195:0, not %r" % (str(number)[:80],))
        device_nodes[path] = (int(match.group(1)), int(match.group(2)))
    files = _list(value.get("files"), "driver.files")
    if len(files) > MAX_DRIVER_PATHS:
        raise _err("driver.files", "lists %d paths; at most %d" % (len(files), MAX_DRIVER_PATHS))
    for j, path in enumerate(files):
        if not isinstance(path, str) or not _NODE_PATH_RE.match(path):
            raise _err("driver.files[%d]" % j, "must be an absolute path")
    return FakeDriver(version=version, device_nodes=device_nodes, files=frozenset(files))

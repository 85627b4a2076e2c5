# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stale CDI edits: what a spec names that the node no longer has.

NVIDIA's spec is generated for one driver and one device layout. After a driver or
kernel upgrade, or a MIG change, it can name device nodes that are gone or whose
major/minor changed, and driver-versioned library mounts (``libcuda.so.<old>``) that no
longer exist: ``nvidia-smi`` works, a container's ``cuInit`` fails, or the runtime
refuses to start it (a bind mount whose source is missing). An edit is *true* when
the node has what it names:

* a device node exists at its host path (``hostPath``, else ``path``) and is a device,
  with the major/minor the edit gives, when it gives them;
* a mount's absolute host path exists;
* the driver the spec was generated for (read from the version its driver-versioned
  libraries carry) is the running driver, when both are known.

``check_vendor`` compares a vendor spec with the node through a *probe* (the host:
``device_number(path)``, ``file_exists(path)``, ``driver_version()``) and returns a
copy that keeps only true edits, with what differs in ``stale`` and the devices left
without any true device node in ``unusable`` (a new hold on one of those is refused
with ``device-missing``: a spec without the device's own node would hand out nothing).

Given the node's inventory too, it compares the spec's ``MIG-`` devices with the node's MIG
instances (``mig_differences``): a MIG layout change (``bcd.devices.mig_layout``, or the boot run
that makes the instances again with fresh UUIDs) leaves a spec naming MIG devices that are gone
and lacking the new ones, and NVIDIA's ``nvidia-cdi-refresh`` does not follow MIG changes
(NVIDIA/nvidia-container-toolkit#1828). Both are stale; the node's instances the spec does not name
are in ``unnamed_mig``, and a new hold on one is refused with ``device-missing`` (its device would
carry none of its device nodes: no ``/dev/nvidia-caps`` access, a container without the GPU).
``stale_edits`` does the same for any spec, so ``holds_info`` can mark holds whose
files still carry stale edits. Every check is bounded (``MAX_PATHS``).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import VENDOR_SPEC_STALE
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

MAX_PATHS = 4096  # paths looked at per spec; a spec naming more is judged on the first ones
MAX_REPORTED = 8  # differences spelled out in one message; the rest are counted

NOT_A_DEVICE = (-1, -1)  # what a probe's device_number returns for a path that is no device node
UNKNOWN_DEVICE = (-2, -2)  # ... for one that is there but cannot be looked at (taken as true)

_LIBRARY_VERSION_RE = lazy_pattern(r"\.so\.([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)$")
_DRIVER_VERSION_RE = lazy_pattern(r"Kernel Module(?: for [A-Za-z0-9_]+)?\s+([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4})?)\b")


class Probe(Protocol):
    """What the checks ask of the node (the host: ``node/vendor_spec.DriverProbe``)."""

    def device_number(self, node_path: str) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the device node at ``node_path`` (``NOT_A_DEVICE``, ``UNKNOWN_DEVICE``); None
        when nothing is there."""

    def file_exists(self, node_path: str) -> bool:
        """Whether ``node_path`` exists on the node."""

    def driver_version(self) -> Optional[str]:
        """The running driver's version, None when it is not known."""


def driver_version_from_proc(text: Optional[str]) -> Optional[str]:
    """The running driver's version from ``/proc/driver/nvidia/version`` (proprietary or open
    kernel module); None when the text does not say."""
    match = _DRIVER_VERSION_RE.search(text or "")
    return match.group(1) if match else None


def _edits_of(spec: object) -> List[Tuple[str, Optional[str], Dict[str, Any]]]:
    """``(where, edits)`` for the spec-level edits and each device's, skipping malformed parts."""
    out: List[Tuple[str, Optional[str], Dict[str, Any]]] = []
    if not isinstance(spec, dict):
        return out
    if isinstance(spec.get("containerEdits"), dict):
        out.append(("containerEdits", None, spec["containerEdits"]))
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        if isinstance(device, dict) and isinstance(device.get("containerEdits"), dict):
            out.append(("device %s" % device.get("name"), device.get("name"), device["containerEdits"]))
    return out


def generated_for(spec: object) -> Optional[str]:
    """The driver version a spec's driver-versioned library mounts carry (the most common one), or None."""
    versions: Counter[str] = Counter()
    for _where, _name, edits in _edits_of(spec):
        mounts = edits.get("mounts")
        for mount in mounts if isinstance(mounts, list) else []:
            host_path = mount.get("hostPath") if isinstance(mount, dict) else None
            match = _LIBRARY_VERSION_RE.search(host_path) if isinstance(host_path, str) else None
            if match:
                versions[match.group(1)] += 1
    return versions.most_common(1)[0][0] if versions else None


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_PATHS

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


def _node_problem(node: object, probe: Probe, budget: _Budget) -> Optional[str]:
    """Why a ``deviceNodes`` entry is not true on the node, or None."""
    if not isinstance(node, dict):
        return None
    path = node.get("hostPath") or node.get("path")
    if not isinstance(path, str) or not path.startswith("/") or not budget.take():
        return None
    number = probe.device_number(path)
    if number is None:
        return "device node %s is missing" % path
    found = tuple(number)  # a probe may answer a list
    if found == UNKNOWN_DEVICE:
        return None
    if found == NOT_A_DEVICE:
        return "%s is not a device node" % path
    major, minor = node.get("major"), node.get("minor")
    if isinstance(major, int) and isinstance(minor, int) and (major, minor) != found:
        return "device node %s is %d:%d on the node, not %d:%d" % (path, found[0], found[1], major, minor)
    return None


def _mount_problem(mount: object, probe: Probe, budget: _Budget) -> Optional[str]:
    """Why a ``mounts`` entry is not true on the node, or None."""
    if not isinstance(mount, dict):
        return None
    path = mount.get("hostPath")
    if not isinstance(path, str) or not path.startswith("/") or not budget.take():
        return None
    if not probe.file_exists(path):
        return "mount source %s is gone" % path
    return None


def _true_edits(edits: Dict[str, Any], probe: Probe, budget: _Budget,
                problems: List[str]) -> Tuple[Dict[str, Any], int, int]:
    """A copy of ``edits`` without its stale device nodes and mounts (each appended to ``problems``),
    and how many device nodes it had and kept."""
    kept = copy.deepcopy(edits)
    had = left = 0
    nodes = kept.get("deviceNodes")
    if isinstance(nodes, list):
        true_nodes = []
        for node in nodes:
            problem = _node_problem(node, probe, budget)
            had += 1
            if problem is None:
                true_nodes.append(node)
                left += 1
            else:
                problems.append(problem)
        kept["deviceNodes"] = true_nodes
        if not true_nodes:
            del kept["deviceNodes"]
    mounts = kept.get("mounts")
    if isinstance(mounts, list):
        true_mounts = []
        for mount in mounts:
            problem = _mount_problem(mount, probe, budget)
            if problem is None:
                true_mounts.append(mount)
            else:
                problems.append(problem)
        kept["mounts"] = true_mounts
        if not true_mounts:
            del kept["mounts"]
    return kept, had, left


def _driver_problem(spec: object, probe: Probe) -> Optional[str]:
    running = probe.driver_version()
    wanted = generated_for(spec)
    if running and wanted and running != wanted:
        return "generated for driver %s, the node runs %s" % (wanted, running)
    return None


def stale_edits(spec: object, probe: Probe) -> List[str]:
    """What in ``spec`` (a parsed CDI spec) is not true on the node: a list of one-line differences,
    empty when everything it names is there."""
    problems: List[str] = []
    budget = _Budget()
    for _where, _name, edits in _edits_of(spec):
        _true_edits(edits, probe, budget, problems)
    driver = _driver_problem(spec, probe)
    if driver:
        problems.insert(0, driver)
    return _unique(problems)


def mig_differences(vendor: VendorSpec, inventory: Optional[Inventory]) -> Tuple[List[str], Dict[str, str]]:
    """How the ``MIG-`` devices ``vendor`` names differ from the node's MIG instances (``inventory``):
    one line for each device it names that the node does not have and for each instance of the node
    it does not name, and the latter as ``{MIG uuid, lower case: "GPU-… gi<G>/ci<C>"}``. Nothing
    when the inventory was not read (its ``source`` is ``none``, or it has an ``error``), for a WSL
    spec (no MIG devices) or a spec that names no device by UUID (its own warning says so). The
    first ``MAX_PATHS`` of each side are compared."""
    if inventory is None or inventory.source == "none" or inventory.error or vendor.is_wsl:
        return [], {}
    names = list(vendor.devices)[:MAX_PATHS]
    if not any(name.lower().startswith(("gpu-", "mig-")) for name in names):
        return [], {}
    named = set(name.lower() for name in names if name.lower().startswith("mig-"))
    node: Dict[str, Tuple[str, str]] = {}  # lower case: (as the inventory gives it, where it is)
    for gpu in inventory.gpus:
        for instance in gpu.mig[:MAX_PATHS - len(node)]:
            node.setdefault(instance.uuid.lower(), (instance.uuid, "%s gi%d/ci%d" % (gpu.uuid, instance.gi, instance.ci)))
    lines = ["it names %s but the node has no such MIG device" % name
             for name in names if name.lower().startswith("mig-") and name.lower() not in node]
    unnamed = dict((key, where) for key, (_uuid, where) in node.items() if key not in named)
    lines.extend("%s (%s) is not in it" % (where, uuid) for key, (uuid, where) in node.items() if key in unnamed)
    return lines, unnamed


def check_vendor(vendor: VendorSpec, spec: object, probe: Probe, inventory: Optional[Inventory] = None) -> VendorSpec:
    """``vendor`` (a ``VendorSpec`` read from ``spec``, the parsed file) checked against the node: a
    copy whose device and common edits are only the true ones, ``stale`` listing what differs and
    ``unusable`` the devices (by name) left without a true device node of their own. With the node's
    ``inventory``, its MIG devices are compared too (``mig_differences``): ``unnamed_mig`` holds the
    node's MIG devices it does not name."""
    problems: List[str] = []
    budget = _Budget()
    checked = copy.copy(vendor)
    checked.devices = {}
    checked.unusable = {}
    mig_lines, checked.unnamed_mig = mig_differences(vendor, inventory)
    for name, edits in vendor.devices.items():
        own: List[str] = []
        kept, had, left = _true_edits(edits, probe, budget, own) if isinstance(edits, dict) else (edits, 0, 0)
        checked.devices[name] = kept
        if had and not left:
            checked.unusable[name] = "; ".join(_unique(own)[:MAX_REPORTED])
        problems.extend(own)
    common, _had, _left = _true_edits(vendor.common_edits or {}, probe, budget, problems)
    checked.common_edits = common
    driver = _driver_problem(spec, probe)
    checked.stale = _unique(([driver] if driver else []) + mig_lines + problems)
    return checked


def summary(problems: Sequence[str]) -> str:
    """One line for a condition or a warning: the first differences, and how many more."""
    shown = problems[:MAX_REPORTED]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (" (and %d more)" % more if more > 0 else "")


def stale_condition(vendor: Optional[VendorSpec]) -> Optional[Dict[str, Any]]:
    """The node condition a stale vendor spec raises; None when it is fresh."""
    if vendor is None or not vendor.stale:
        return None
    stale = vendor.stale
    refused = ", and one on a MIG device it does not name is refused" if vendor.unnamed_mig else ""
    return {
        "type": VENDOR_SPEC_STALE,
        "status": "True",
        "reason": "NodeDiffersFromSpec",
        "message": "%s does not match the node: %s; new holds get only its true edits%s (regenerate it: "
                   "nvidia-ctk cdi generate, or restart nvidia-cdi-refresh)" % (vendor.path, summary(stale), refused),
    }


def _unique(items: Sequence[str]) -> List[str]:
    seen = set()
    out: List[str] = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node has: its GPUs and their MIG instances, as plain data.

Every inventory source (NVML, ``nvidia-smi``, a fakehw file) produces an
``Inventory``; atoms are resolved against it and nothing else.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern


@record(frozen=True)
class MigInstance:
    """One MIG device: GPU instance ``gi``, compute instance ``ci``, its ``MIG-`` UUID."""

    gi: int
    ci: int
    uuid: str


# An XID the kernel logged for a GPU: ``(xid, when)``, ``when`` in seconds since the epoch, None when the log
# does not say (``domain/health.xids_from_log``).
XidSeen = Tuple[int, Optional[float]]


@record(frozen=True)
class Gpu:
    """One physical GPU as the driver lists it."""

    uuid: str
    index: int
    minor: Optional[int] = None
    numa_node: Optional[int] = None
    pci_bus_id: Optional[str] = None
    name: Optional[str] = None
    mig: Tuple[MigInstance, ...] = ()
    health: Tuple[str, ...] = ()  # what the driver's own state says is wrong (domain/health.py); empty when nothing
    xids: Tuple[XidSeen, ...] = ()  # (xid, when) of the reset and reboot classes logged for it (domain/health.gpu_health)

    def mig_instance(self, gi: int, ci: int) -> Optional[MigInstance]:
        for inst in self.mig:
            if inst.gi == gi and inst.ci == ci:
                return inst
        return None


@record
class Inventory:
    """The GPUs of a node. ``source`` names where they came from; ``error``
    says why a source could not be read (an empty inventory is then not a
    statement that the node has no GPUs)."""

    gpus: List[Gpu] = field(default_factory=list)
    source: str = "none"
    error: Optional[str] = None

    def gpu(self, uuid: str) -> Optional[Gpu]:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None


@record(frozen=True)
class Domain:
    """A running or paused VM the node manages, with the GPUs it has through VFIO."""

    instance_id: str
    state: str = "running"
    memory_bytes: int = 0
    hugepages: bool = False
    gpus: Tuple[str, ...] = ()


@record(frozen=True)
class PodDevices:
    """A pod container that the kubelet says holds devices."""

    namespace: str
    name: str
    container: str
    device_ids: Tuple[str, ...] = ()


# PCI addresses, as the inventory readers and the fakehw file write them

_PCI_RE = lazy_pattern(
    r"^(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):"
    r"(?P<slot>[0-9A-Fa-f]{1,2})\.(?P<function>[0-7])$"
)


def format_pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    """The canonical (sysfs) form: ``0000:3b:00.0``, lower case."""
    return "%04x:%02x:%02x.%x" % (domain, bus, slot, function)


def normalize_pci_address(text: Optional[str]) -> Optional[str]:
    """``00000000:3B:00.0`` (nvidia-smi, NVML), ``0000:3b:00.0`` (sysfs) or
    ``3b:00.0`` -> ``0000:3b:00.0``; None when ``text`` is not a PCI address."""
    if not isinstance(text, str):
        return None
    match = _PCI_RE.match(text.strip())
    if not match:
        return None
    return format_pci_address(
        int(match.group("domain") or "0", 16),
        int(match.group("bus"), 16),
        int(match.group("slot"), 16),
        int(match.group("function"), 16),
    )

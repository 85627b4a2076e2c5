# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The running and paused libvirt domains (``virsh``), with the GPUs passed through to each.

A VM holds a GPU when its domain XML has a PCI host device at that GPU's PCI address; the address
is matched against the GPU inventory's ``pci_bus_id``. ``virsh`` runs on a read-only connection.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Domain,
    Inventory,
    format_pci_address,
    normalize_pci_address,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import (
    InventoryError,
    RunCommand,
    Which,
    default_run_command,
    failure_text,
    parse_xml,
    run_tool,
    xml_text,
)


def _libvirt_number(value: Optional[str]) -> Optional[int]:
    """libvirt writes PCI address parts as ``0x3b``; decimal is accepted too."""
    if value is None:
        return None
    value = value.strip()
    try:
        if value[:2].lower() == "0x":
            return int(value[2:], 16)
        return int(value, 10)
    except ValueError:
        return None


def pci_address_from_libvirt(domain: Optional[str], bus: Optional[str], slot: Optional[str],
                             function: Optional[str]) -> Optional[str]:
    """A libvirt ``<address domain= bus= slot= function=>`` as ``0000:3b:00.0``;
    None when a part is missing or out of range (``domain`` defaults to 0)."""
    parts = [
        _libvirt_number(domain) if domain is not None else 0,
        _libvirt_number(bus),
        _libvirt_number(slot),
        _libvirt_number(function),
    ]
    d, b, s, f = parts
    if d is None or b is None or s is None or f is None or min(d, b, s, f) < 0:
        return None
    if d > 0xFFFFFFFF or b > 0xFF or s > 0x1F or f > 0x7:
        return None
    return format_pci_address(d, b, s, f)


_MEMORY_UNITS = {
    "b": 1, "bytes": 1,
    "kb": 1000, "k": 1024, "kib": 1024,
    "mb": 1000 ** 2, "m": 1024 ** 2, "mib": 1024 ** 2,
    "gb": 1000 ** 3, "g": 1024 ** 3, "gib": 1024 ** 3,
    "tb": 1000 ** 4, "t": 1024 ** 4, "tib": 1024 ** 4,
    "pb": 1000 ** 5, "p": 1024 ** 5, "pib": 1024 ** 5,
    "eb": 1000 ** 6, "e": 1024 ** 6, "eib": 1024 ** 6,
}


def parse_libvirt_memory(element: Optional[ET.Element]) -> Optional[int]:
    """Bytes of a libvirt ``<memory unit='KiB'>N</memory>`` (KiB when no unit);
    None when absent or malformed."""
    if element is None or element.text is None:
        return None
    text = element.text.strip()
    unit = (element.get("unit") or "KiB").strip().lower()
    if not text.isdigit() or unit not in _MEMORY_UNITS:
        return None
    return int(text) * _MEMORY_UNITS[unit]


def parse_domain_xml(text: str, pci_to_gpu: Dict[str, str], state: str = "running") -> Domain:
    """A ``Domain`` from ``virsh dumpxml`` output.

    ``pci_to_gpu`` maps normalised PCI addresses to GPU UUIDs; a PCI host
    device not in it (a NIC, a GPU the driver does not list) is not named in
    ``gpus``. Raises ``InventoryError`` on XML that is not a domain.
    """
    root = parse_xml(text, "virsh dumpxml")
    if root.tag != "domain":
        raise InventoryError("virsh dumpxml: root element is <%s>, not <domain>" % root.tag)
    name = xml_text(root, "name")
    if not name:
        raise InventoryError("virsh dumpxml: domain without a <name>")
    memory = parse_libvirt_memory(root.find("memory"))
    if memory is None:
        memory = parse_libvirt_memory(root.find("currentMemory")) or 0
    hugepages = root.find("memoryBacking/hugepages") is not None
    gpus = []
    for hostdev in root.findall("devices/hostdev"):
        if hostdev.get("type") != "pci" or hostdev.get("mode", "subsystem") != "subsystem":
            continue
        address = hostdev.find("source/address")
        if address is None:
            continue
        pci = pci_address_from_libvirt(
            address.get("domain"), address.get("bus"), address.get("slot"), address.get("function")
        )
        uuid = pci_to_gpu.get(pci) if pci else None
        if uuid and uuid not in gpus:
            gpus.append(uuid)
    return Domain(instance_id=name, state=state, memory_bytes=memory, hugepages=hugepages, gpus=tuple(gpus))


def _pci_index(inventory: Optional[Inventory]) -> Dict[str, str]:
    index = {}
    for gpu in (inventory.gpus if inventory is not None else []):
        pci = normalize_pci_address(gpu.pci_bus_id)
        if pci:
            index[pci] = gpu.uuid
    return index


VIRSH = ["virsh", "--readonly", "--connect", "qemu:///system"]


def read_libvirt_domains(run_command: Optional[RunCommand] = None, inventory: Optional[Inventory] = None,
                         which: Optional[Which] = None, virsh: Optional[List[str]] = None
                         ) -> Tuple[List[Domain], Optional[str]]:
    """Running and paused libvirt domains, as ``(domains, error)``. Never raises.

    Without ``virsh``: ``([], None)``. ``virsh`` (default: a read-only
    connection to ``qemu:///system``) lists the running and the paused
    domains; each is read with ``dumpxml``. PCI host devices are mapped to
    GPU UUIDs through the inventory's ``pci_bus_id``. A list that fails gives
    ``([], error)``; a domain that vanished between list and dumpxml is
    skipped; one whose XML cannot be read is skipped and named in ``error``.
    """
    run_command = run_command or default_run_command
    which = which or shutil.which
    base = list(virsh or VIRSH)
    try:
        if not which(base[0]):
            return [], None
        pci_to_gpu = _pci_index(inventory)
        names: List[Tuple[str, str]] = []
        for state, flag in (("running", "--state-running"), ("paused", "--state-paused")):
            argv = base + ["list", "--name", flag]
            rc, out, err = run_tool(run_command, argv)
            if rc != 0:
                return [], failure_text(argv, rc, out, err)
            for line in out.splitlines():
                line = line.strip()
                if line and line not in [name for name, _state in names]:
                    names.append((line, state))
        domains = []
        problems = []
        for name, state in names:
            argv = base + ["dumpxml", "--domain", name]
            rc, out, err = run_tool(run_command, argv)
            if rc != 0:
                if re.search(r"failed to get domain|domain not found", err + out, re.IGNORECASE):
                    continue  # stopped and undefined since the list
                problems.append(failure_text(argv, rc, out, err))
                continue
            try:
                domain = parse_domain_xml(out, pci_to_gpu, state=state)
            except InventoryError as exc:
                problems.append("domain %r: %s" % (name, exc))
                continue
            domains.append(domain)
        return domains, ("; ".join(problems) if problems else None)
    except Exception as exc:
        return [], "libvirt domains could not be read: %s" % exc

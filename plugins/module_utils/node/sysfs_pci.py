# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What sysfs says of a PCI device: its NUMA node (``/sys/bus/pci/devices/<addr>/numa_node``), and its PCI device
id as mig-parted's ``device-filter`` names it (``0x20B010DE``: device, then vendor).

The NVML and ``nvidia-smi`` readers ask it when the driver does not say; ``sysfs_root`` lets a test
point it at a directory.
"""

from __future__ import annotations

import os
from typing import Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import normalize_pci_address
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern


def read_numa_node(pci_bus_id: Optional[str], sysfs_root: str = "/") -> Optional[int]:
    """The NUMA node of a PCI device from ``/sys/bus/pci/devices/<addr>/numa_node``
    (under ``sysfs_root``); None when unknown (no file, or ``-1``)."""
    address = normalize_pci_address(pci_bus_id)
    if address is None:
        return None
    path = os.path.join(sysfs_root, "sys", "bus", "pci", "devices", address, "numa_node")
    try:
        with open(path) as handle:
            value = int(handle.read(64).strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


_ID_RE = lazy_pattern(r"\A0x([0-9a-fA-F]{4})\n?\Z")


def read_pci_device_id(pci_bus_id: Optional[str], sysfs_root: str = "/") -> Optional[str]:
    """``0x<device><vendor>`` in upper-case hex (``0x20B010DE``, an A100-SXM4-40GB) from the ``device`` and
    ``vendor`` files of ``/sys/bus/pci/devices/<addr>`` (under ``sysfs_root``), as ``nvidia-smi -q`` prints its
    ``pci_device_id``; None when unknown."""
    address = normalize_pci_address(pci_bus_id)
    if address is None:
        return None
    found = []
    for name in ("device", "vendor"):
        try:
            with open(os.path.join(sysfs_root, "sys", "bus", "pci", "devices", address, name)) as handle:
                match = _ID_RE.match(handle.read(16))
        except (OSError, ValueError):
            return None
        if match is None:
            return None
        found.append(match.group(1).upper())
    return "0x%s%s" % tuple(found)

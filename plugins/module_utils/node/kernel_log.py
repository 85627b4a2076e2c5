# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU faults (XIDs) of this boot, from the kernel log (``/dev/kmsg``).

Only root may read the log on most nodes: an unreadable log gives no XIDs, never an error. What an
XID means is the domain's (``domain/health.py``); this reads the records and says when the node
booted, so that a fault from before the boot is not held against a GPU.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import MAX_LOG_BYTES, bus_of, xids_from_log
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory, XidSeen
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root
from ansible_collections.bcd.devices.plugins.module_utils.support import records

# ``{bus id: [(xid, when), ...]}`` (``domain/health.xids_from_log``).
Xids = Dict[str, List[XidSeen]]


def boot_time(root: str = "/") -> Optional[float]:
    """When the node booted (seconds since the epoch), from /proc/uptime under ``root``; None unknown."""
    try:
        with open(join_root(root, "/proc/uptime"), "rb") as handle:
            return time.time() - float(handle.read(64).split()[0])
    except (OSError, FsError, ValueError, IndexError):
        return None


def read_kernel_xids(root: str = "/", max_bytes: int = MAX_LOG_BYTES) -> Xids:
    """``{bus id: [(xid, when), ...]}`` of the reset and reboot classes from this boot's kernel log
    (``/dev/kmsg`` under ``root``, read without blocking, at most ``max_bytes``); empty when it cannot
    be read (only root may read it on most nodes)."""
    try:
        fd = os.open(join_root(root, "/dev/kmsg"), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, FsError):
        return {}
    chunks, size = [], 0
    try:
        while size < max_bytes:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:  # the end of the ring buffer
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                break
            if not record:
                break
            chunks.append(record)
            size += len(record)
    finally:
        os.close(fd)
    return xids_from_log(b"".join(chunks).decode("utf-8", "replace"), boot_time(root))


def with_kernel_health(inventory: Inventory, xids: Xids) -> Inventory:
    """``inventory`` with each GPU's XIDs (found by PCI bus id)."""
    if not xids:
        return inventory
    gpus = []
    for gpu in inventory.gpus:
        found = xids.get(bus_of(gpu.pci_bus_id) or "")
        gpus.append(records.replace(gpu, xids=gpu.xids + tuple(found)) if found else gpu)
    return records.replace(inventory, gpus=gpus)

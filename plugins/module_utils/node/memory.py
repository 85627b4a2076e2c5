# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host memory as admission counts it, read from ``/proc/meminfo`` and the huge page files.

The same files under ``root`` on a fakehw host; absent files mean the memory is
unreadable, and admission is skipped with a warning (``domain/plan/admission.py``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import PAGE_SIZES, HostMemory
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NodePaths

MEMINFO = "/proc/meminfo"
HUGEPAGES = "/sys/kernel/mm/hugepages/hugepages-%dkB/%s"
NODE_ROOT = "/sys/devices/system/node"
NODE_HUGEPAGES = NODE_ROOT + "/node%d/hugepages/hugepages-%dkB/free_hugepages"
NODE_RE = lazy_pattern(r"^node([0-9]+)$")


def _int_file(host: NodePaths, path: str) -> Optional[int]:
    content = host.read(path)
    if content is None:
        return None
    text = content.strip()
    return int(text) if text.isdigit() else None


def read_host_memory(host: NodePaths) -> Optional[HostMemory]:
    """``HostMemory`` from ``/proc/meminfo`` and the huge page files under the host's root, or None."""
    content = host.read(MEMINFO)
    if content is None:
        return None
    fields: Dict[str, int] = {}
    for line in content.decode("ascii", "replace").splitlines():
        key, _sep, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    if "MemTotal" not in fields:
        return None
    memory = HostMemory(mem_total=fields["MemTotal"], hugetlb=fields.get("Hugetlb", 0))
    try:
        nodes = sorted(int(m.group(1)) for m in (NODE_RE.fullmatch(n) for n in os.listdir(host.path(NODE_ROOT))) if m)
    except OSError:
        nodes = []
    for size, _attribute, kib in PAGE_SIZES:
        free = _int_file(host, HUGEPAGES % (kib, "free_hugepages"))
        reserved = _int_file(host, HUGEPAGES % (kib, "resv_hugepages")) or 0
        memory.free_pages[size] = max(0, (free or 0) - reserved)
        per_node: Dict[int, int] = {}
        for node in nodes:
            value = _int_file(host, NODE_HUGEPAGES % (node, kib))
            if value is not None:
                per_node[node] = value
        memory.node_free_pages[size] = per_node
    return memory

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host admission: a new hold whose limits book memory or huge pages must fit.

VMs and holds never take what the other was promised, so admission counts what
is *committed*, not what is used:

* normal memory available: ``MemTotal`` less the whole huge page pool
  (``Hugetlb``) and 1 GiB of headroom for the host;
* committed: every running or paused domain (its memory unless huge-page
  backed, plus VMM overhead ``memory/32 + 256 MiB``) and every bound hold's
  memory limit (a Kubernetes hold's booked memory included);
* huge pages, per size: host-wide ``free_hugepages`` less ``resv_hugepages``,
  and each NUMA node's ``free_hugepages``, less what bound holds may still
  fault in (their limit less their slice's ``hugetlb.<size>.current``) on their
  ``mems`` nodes.

A hold with only ``cpus`` or ``cpu_millis`` is not admitted. The host is read
once per pass, only when a hold needs it, and holds earlier in the pass count
against later ones.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import parse_cpulist

MIB = 1 << 20
GIB = 1 << 30
HEADROOM = GIB
# (slice size name, limits attribute, page size in KiB)
PAGE_SIZES = (("2MB", "hugepages_2mi", 2048), ("1GB", "hugepages_1gi", 1048576))
MEMINFO = "/proc/meminfo"
HUGEPAGES = "/sys/kernel/mm/hugepages/hugepages-%dkB/%s"
NODE_ROOT = "/sys/devices/system/node"
NODE_HUGEPAGES = NODE_ROOT + "/node%d/hugepages/hugepages-%dkB/free_hugepages"
NODE_RE = re.compile(r"^node([0-9]+)$")
UNREADABLE = "host memory unreadable; binding without host-side admission"


class Exhausted(Exception):
    """The hold does not fit; the message is the spec page's ``ResourcesExhausted: …``."""


@dataclass
class HostMemory:
    """What the host has, read once."""

    mem_total: int  # bytes
    hugetlb: int  # bytes in the huge page pool
    free_pages: Dict[str, int] = field(default_factory=dict)  # size -> host-wide free less reserved
    node_free_pages: Dict[str, Dict[int, int]] = field(default_factory=dict)  # size -> node -> free

    @property
    def normal_available(self):
        return self.mem_total - self.hugetlb - HEADROOM


def _int_file(host, path):
    content = host.read(path)
    if content is None:
        return None
    text = content.strip()
    return int(text) if text.isdigit() else None


def read_host_memory(host):
    """``HostMemory`` from ``/proc/meminfo`` and the huge page files under the host's root, or None."""
    content = host.read(MEMINFO)
    if content is None:
        return None
    fields = {}
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
        per_node = {}
        for node in nodes:
            value = _int_file(host, NODE_HUGEPAGES % (node, kib))
            if value is not None:
                per_node[node] = value
        memory.node_free_pages[size] = per_node
    return memory


def needs_admission(limits):
    return limits is not None and bool(limits.memory_bytes or limits.hugepages_2mi or limits.hugepages_1gi)


def _nodes_of(limits, memory, size):
    known = memory.node_free_pages.get(size) or {}
    if limits is not None and limits.mems:
        return sorted(parse_cpulist(limits.mems))
    return sorted(known)


class Admission(object):
    """The host's memory ledger for one pass: what is committed, and what each new hold takes."""

    def __init__(self, memory, domains=()):
        self.memory = memory
        self.committed = 0
        for domain in domains:
            if domain.state not in ("running", "paused"):
                continue
            own = 0 if domain.hugepages else domain.memory_bytes
            self.committed += own + domain.memory_bytes // 32 + 256 * MIB
        self.outstanding = dict((size, 0) for size, _a, _k in PAGE_SIZES)  # pages bound holds may still take
        self.node_outstanding = dict((size, {}) for size, _a, _k in PAGE_SIZES)

    def count(self, limits, current=None):
        """Book a bound (or just admitted) hold's limits; ``current`` is its slice's ``hugetlb.<size>.current``."""
        if limits is None:
            return
        self.committed += limits.memory_bytes or 0
        for size, attribute, kib in PAGE_SIZES:
            pages = getattr(limits, attribute) or 0
            faulted = ((current or {}).get(size, 0)) // (kib * 1024)
            still = max(0, pages - faulted)
            if not still:
                continue
            self.outstanding[size] += still
            for node in _nodes_of(limits, self.memory, size):
                self.node_outstanding[size][node] = self.node_outstanding[size].get(node, 0) + still

    def check(self, limits):
        """Raise ``Exhausted`` when the hold does not fit; otherwise book it."""
        if limits.memory_bytes:
            left = max(0, self.memory.normal_available - self.committed)
            if limits.memory_bytes > left:
                raise Exhausted("ResourcesExhausted: %d MiB of memory needed, %d MiB left on this host"
                                % (-(-limits.memory_bytes // MIB), left // MIB))
        for size, attribute, kib in PAGE_SIZES:
            pages = getattr(limits, attribute) or 0
            if not pages:
                continue
            free = self.memory.free_pages.get(size, 0) - self.outstanding[size]
            per_node = self.memory.node_free_pages.get(size) or {}
            if limits.mems and per_node:
                on_nodes = sum(max(0, per_node.get(node, 0) - self.node_outstanding[size].get(node, 0))
                               for node in parse_cpulist(limits.mems))
                free = min(free, on_nodes)
            free = max(0, free)
            if pages > free:
                raise Exhausted("ResourcesExhausted: %d hugepages of %d KiB needed, %d free" % (pages, kib, free))
        self.count(limits)


def admission_for(host, domains) -> Optional[Admission]:
    memory = read_host_memory(host)
    return Admission(memory, domains) if memory is not None else None

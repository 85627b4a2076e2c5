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
(``node/memory.py``) once per pass, only when a hold needs it, and holds earlier in the pass count
against later ones (``claims.Claims`` carries the bookings).
"""

from __future__ import annotations

from typing import Dict

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import parse_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.domain.records import record

MIB = 1 << 20
GIB = 1 << 30
HEADROOM = GIB
# (slice size name, limits attribute, page size in KiB)
PAGE_SIZES = (("2MB", "hugepages_2mi", 2048), ("1GB", "hugepages_1gi", 1048576))
UNREADABLE = "host memory unreadable; binding without host-side admission"


class Exhausted(BcdError):
    """The hold does not fit; the message is ``ResourcesExhausted: …`` (docs/slices-and-admission.md)."""


@record
class HostMemory:
    """What the host has, read once."""

    mem_total: int  # bytes
    hugetlb: int  # bytes in the huge page pool
    free_pages: Dict[str, int] = {}  # size -> host-wide free less reserved
    node_free_pages: Dict[str, Dict[int, int]] = {}  # size -> node -> free

    @property
    def normal_available(self):
        return self.mem_total - self.hugetlb - HEADROOM


def needs_admission(limits):
    return limits is not None and bool(limits.memory_bytes or limits.hugepages_2mi or limits.hugepages_1gi)


def _nodes_of(limits, memory, size):
    known = memory.node_free_pages.get(size) or {}
    if limits is not None and limits.mems:
        return sorted(parse_cpulist(limits.mems))
    return sorted(known)


@record(frozen=True)
class Admission:
    """The host's memory ledger: what is committed. Immutable: ``counted`` and ``check`` return a new one
    with the hold booked, so a hold refused later in its checks books nothing."""

    memory: HostMemory
    committed: int = 0
    outstanding: Dict[str, int] = {}  # size -> pages bound holds may still take
    node_outstanding: Dict[str, Dict[int, int]] = {}  # size -> node -> pages

    def __init__(self, memory, domains=(), committed=None, outstanding=None, node_outstanding=None):
        # a frozen dataclass built from the domains: the VMs' memory is committed from the start
        if committed is None:
            committed = 0
            for domain in domains:
                if domain.state not in ("running", "paused"):
                    continue
                own = 0 if domain.hugepages else domain.memory_bytes
                committed += own + domain.memory_bytes // 32 + 256 * MIB
        object.__setattr__(self, "memory", memory)
        object.__setattr__(self, "committed", committed)
        object.__setattr__(self, "outstanding", dict(outstanding or ((size, 0) for size, _a, _k in PAGE_SIZES)))
        object.__setattr__(self, "node_outstanding", dict(
            (size, dict(nodes)) for size, nodes in (node_outstanding or {}).items()) or
            dict((size, {}) for size, _a, _k in PAGE_SIZES))

    def counted(self, limits, current=None):
        """This ledger with a bound (or just admitted) hold's limits booked; ``current`` is its slice's
        ``hugetlb.<size>.current``."""
        if limits is None:
            return self
        outstanding = dict(self.outstanding)
        node_outstanding = dict((size, dict(nodes)) for size, nodes in self.node_outstanding.items())
        for size, attribute, kib in PAGE_SIZES:
            pages = getattr(limits, attribute) or 0
            faulted = ((current or {}).get(size, 0)) // (kib * 1024)
            still = max(0, pages - faulted)
            if not still:
                continue
            outstanding[size] = outstanding.get(size, 0) + still
            for node in _nodes_of(limits, self.memory, size):
                per_node = node_outstanding.setdefault(size, {})
                per_node[node] = per_node.get(node, 0) + still
        return Admission(self.memory, committed=self.committed + (limits.memory_bytes or 0), outstanding=outstanding,
                         node_outstanding=node_outstanding)

    def check(self, limits):
        """Raise ``Exhausted`` when the hold does not fit; otherwise return this ledger with it booked."""
        if limits.memory_bytes:
            left = max(0, self.memory.normal_available - self.committed)
            if limits.memory_bytes > left:
                raise Exhausted("ResourcesExhausted: %d MiB of memory needed, %d MiB left on this host"
                                % (-(-limits.memory_bytes // MIB), left // MIB))
        for size, attribute, kib in PAGE_SIZES:
            pages = getattr(limits, attribute) or 0
            if not pages:
                continue
            free = self.memory.free_pages.get(size, 0) - self.outstanding.get(size, 0)
            per_node = self.memory.node_free_pages.get(size) or {}
            if limits.mems and per_node:
                on_nodes = sum(max(0, per_node.get(node, 0) - self.node_outstanding.get(size, {}).get(node, 0))
                               for node in parse_cpulist(limits.mems))
                free = min(free, on_nodes)
            free = max(0, free)
            if pages > free:
                raise Exhausted("ResourcesExhausted: %d hugepages of %d KiB needed, %d free" % (pages, kib, free))
        return self.counted(limits)

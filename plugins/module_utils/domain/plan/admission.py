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

A hold with only ``cpus`` or ``cpu_millis`` is not admitted for memory. The host is read
(``node/memory.py``) once per pass, only when a hold needs it, and holds earlier in the pass count
against later ones (``claims.Claims`` carries the bookings).

The host's CPUs and NUMA nodes (``HostCpus``, read by ``node/cpus.py`` once per pass, only when a new or
changed hold books ``cpus`` or ``mems``) are checked too: ``cpus_problem`` says which of a hold's CPUs
are not online and which of its ``mems`` have no memory here, for a refusal; systemd would bind them as
given (``AllowedCPUs=0-4096``) and the kernel narrow them in silence. ``locality`` says when a hold's
``cpus`` or ``mems`` lie off its GPUs' NUMA nodes: a note, never a refusal (placement is the control
plane's), because host-to-GPU copies and NCCL traffic from such CPUs cross the sockets' interconnect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.cpulist import format_cpulist, parse_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain, Inventory

Hugetlb = Mapping[str, int]  # a slice's hugetlb.<size>.current: huge page size -> bytes faulted in

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
    free_pages: Dict[str, int] = field(default_factory=dict)  # size -> host-wide free less reserved
    node_free_pages: Dict[str, Dict[int, int]] = field(default_factory=dict)  # size -> node -> free

    @property
    def normal_available(self) -> int:
        return self.mem_total - self.hugetlb - HEADROOM


def needs_admission(limits: Optional[Limits]) -> bool:
    return limits is not None and bool(limits.memory_bytes or limits.hugepages_2mi or limits.hugepages_1gi)


def _nodes_of(limits: Optional[Limits], memory: HostMemory, size: str) -> List[int]:
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
    outstanding: Dict[str, int] = field(default_factory=dict)  # size -> pages bound holds may still take
    node_outstanding: Dict[str, Dict[int, int]] = field(default_factory=dict)  # size -> node -> pages

    def __init__(self, memory: HostMemory, domains: Iterable[Domain] = (), committed: Optional[int] = None,
                 outstanding: Optional[Mapping[str, int]] = None,
                 node_outstanding: Optional[Mapping[str, Mapping[int, int]]] = None) -> None:
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

    def counted(self, limits: Optional[Limits], current: Optional[Hugetlb] = None) -> Admission:
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

    def check(self, limits: Limits, current: Optional[Hugetlb] = None) -> Admission:
        """Raise ``Exhausted`` when the hold does not fit; otherwise return this ledger with it booked.
        ``current``: the ``hugetlb.<size>.current`` of the slice it goes into (a hold bound again into its own
        slice, whose workload runs on): the pages faulted in there are the hold's already, not needed again."""
        if limits.memory_bytes:
            left = max(0, self.memory.normal_available - self.committed)
            if limits.memory_bytes > left:
                raise Exhausted("ResourcesExhausted: %d MiB of memory needed, %d MiB left on this host"
                                % (-(-limits.memory_bytes // MIB), left // MIB))
        for size, attribute, kib in PAGE_SIZES:
            pages = getattr(limits, attribute) or 0
            if not pages:
                continue
            faulted = ((current or {}).get(size, 0)) // (kib * 1024)
            if pages <= faulted:
                continue
            free = self.memory.free_pages.get(size, 0) - self.outstanding.get(size, 0)
            per_node = self.memory.node_free_pages.get(size) or {}
            if limits.mems and per_node:
                on_nodes = sum(max(0, per_node.get(node, 0) - self.node_outstanding.get(size, {}).get(node, 0))
                               for node in parse_cpulist(limits.mems))
                free = min(free, on_nodes)
            free = max(0, free)
            if pages - faulted > free:
                raise Exhausted("ResourcesExhausted: %d hugepages of %d KiB needed, %d free" % (pages - faulted, kib, free))
        return self.counted(limits, current)


# -- the host's CPUs and NUMA nodes -------------------------------------------------------------------

# How many holds the one locality warning of a pass names; the plan entry of each says it anyway.
LOCALITY_NAMED = 8


@record
class HostCpus:
    """The host's CPUs and NUMA nodes, read once (``node/cpus.py``; the fakehw file's description)."""

    online: FrozenSet[int]  # the online CPUs
    memory_nodes: FrozenSet[int]  # the NUMA nodes with memory: the only ones cpuset.mems takes
    node_cpus: Dict[int, FrozenSet[int]] = field(default_factory=dict)  # NUMA node -> its CPUs; a node not listed: not known


def _named(noun: str, numbers: FrozenSet[int], one: str, many: str) -> str:
    """``CPUs 64-4096 are``, ``CPU 64 is``."""
    if len(numbers) == 1:
        return "%s %s %s" % (noun, format_cpulist(numbers), one)
    return "%ss %s %s" % (noun, format_cpulist(numbers), many)


def cpus_problem(limits: Optional[Limits], host: Optional[HostCpus]) -> Optional[str]:
    """Why ``limits`` cannot be honoured on this host, or None: CPUs of ``cpus`` that are not online, NUMA nodes
    of ``mems`` without memory (cpuset.mems takes no other). None too when the host was not read (``host``
    None: a fakehw node that describes no CPUs, a host whose sysfs could not be read).

    The planner refuses such a hold with ``invalid-assignment``, not ``resources-exhausted``: nothing the node
    has promised to others stands in the way, and nothing released later makes room; the booking names
    hardware this node does not have, which is input the node cannot honour as given, like limits on a node
    that cannot make slices. Each count is bounded: a checked cpulist names at most ``MAX_CPU`` + 1 CPUs and
    ``MAX_NODE`` + 1 nodes (``assignment.check_cpulist``), and so does what the host was read to have."""
    if limits is None or host is None:
        return None
    problems: List[str] = []
    if limits.cpus:
        missing = frozenset(parse_cpulist(limits.cpus)) - host.online
        if missing:
            problems.append("limits.cpus %s: %s not online on this node (online: %s)"
                            % (limits.cpus, _named("CPU", missing, "is", "are"), format_cpulist(host.online) or "none"))
    if limits.mems:
        missing = frozenset(parse_cpulist(limits.mems)) - host.memory_nodes
        if missing:
            problems.append("limits.mems %s: %s no memory on this node (NUMA nodes with memory: %s)"
                            % (limits.mems, _named("NUMA node", missing, "has", "have"),
                               format_cpulist(host.memory_nodes) or "none"))
    return "; ".join(problems) or None


def gpu_numa_nodes(atoms: Iterable[Atom], inventory: Inventory) -> Optional[FrozenSet[int]]:
    """The NUMA nodes of the GPUs ``atoms`` are on (NVML, sysfs or the fakehw file say), or None when the node
    of any of them is not known."""
    numa = dict((gpu.uuid, gpu.numa_node) for gpu in inventory.gpus)
    nodes: Set[int] = set()
    for atom in atoms:
        node = numa.get(atom.gpu_uuid)
        if node is None:
            return None
        nodes.add(node)
    return frozenset(nodes) or None


def locality(limits: Optional[Limits], gpu_nodes: Optional[FrozenSet[int]], host: Optional[HostCpus]) -> Optional[Dict[str, Any]]:
    """A note when a hold's ``cpus`` or ``mems`` lie outside its GPUs' NUMA nodes, else None (they are local,
    the hold books neither, or what is local is not known: a GPU's node, that node's CPUs). Never a refusal:
    where a workload runs is the control plane's to decide, and it may have had reasons (no local CPUs left).
    It matters because a CPU on another socket reaches the GPU, and its pinned host memory, over the
    sockets' interconnect: host-to-GPU copies slow down and NCCL's rings and trees that start there cross
    sockets. ``{gpu_numa_nodes, local_cpus, remote_cpus, remote_mems, text}``; a cpulist is None when all of
    it is local."""
    if limits is None or host is None or not gpu_nodes or not (limits.cpus or limits.mems):
        return None
    if any(node not in host.node_cpus for node in gpu_nodes):
        return None
    local = frozenset().union(*(host.node_cpus[node] for node in gpu_nodes))
    remote_cpus = frozenset(parse_cpulist(limits.cpus)) - local if limits.cpus else frozenset()
    remote_mems = frozenset(parse_cpulist(limits.mems)) - gpu_nodes if limits.mems else frozenset()
    if not remote_cpus and not remote_mems:
        return None
    parts = (["cpus %s" % format_cpulist(remote_cpus)] if remote_cpus else []) + \
        (["mems %s" % format_cpulist(remote_mems)] if remote_mems else [])
    text = "%s lie outside its GPUs' NUMA node%s %s (CPUs %s)" % (
        " and ".join(parts), "s" if len(gpu_nodes) > 1 else "", format_cpulist(gpu_nodes),
        format_cpulist(local) or "none")
    return {"gpu_numa_nodes": sorted(gpu_nodes), "local_cpus": format_cpulist(local),
            "remote_cpus": format_cpulist(remote_cpus) or None, "remote_mems": format_cpulist(remote_mems) or None,
            "text": text}


def locality_warning(notes: Sequence[Tuple[str, Mapping[str, Any]]]) -> str:
    """The one warning of a pass whose new holds are not NUMA-local: ``notes`` are ``(allocation_id, note)``."""
    named = ["%s: %s" % (allocation_id, note["text"]) for allocation_id, note in notes[:LOCALITY_NAMED]]
    if len(notes) > LOCALITY_NAMED:
        named.append("and %d more (each one's plan entry has its locality)" % (len(notes) - LOCALITY_NAMED))
    return ("not NUMA-local to their GPUs, held as booked (placement is the control plane's; host-to-GPU copies "
            "and NCCL traffic from there cross sockets): " + "; ".join(named))

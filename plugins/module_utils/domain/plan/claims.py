# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who claims what on the node, as one immutable value a pass threads through its phases, and the phase
that makes it once the pass's releases are planned (``claims_of``).

``Claims`` holds, by owner, every atom something has: the live holds, the
releases this pass plans but has not made yet, the Kubernetes releases pending
on pods, the GPUs VMs have (``vms``), those in maintenance and those unhealthy;
and what holds and VMs booked of the host's memory and huge pages, per NUMA
node (``admission.Admission``), a slice whose hold is gone and that still runs
a workload included (``SLICE``: replaced, not added to, when its allocation is
bound again into it, ``admit_into_slice``). Every method returns a new value; none changes
the one it is called on, so a hold refused at any check books nothing: the
planner keeps the claims it had before the check.

A release that has not happened keeps its atoms claimed (``releasing``): a new
hold on them is no conflict, but it *needs* that release (``needs``) and the
planner makes its bind depend on it, so a bind never runs while the hold it
replaces is still live (``actions.apply_plan``).

A pass asks once per atom, over up to 4096 atoms and as many claims, so the
claims are indexed by GPU and atom key as they are added: each question costs
what the claims on one GPU cost at most (``conflicts``, ``needs``), never a
scan of every claim. The indexes are plain dicts a value never changes after
it is made; a new value copies only the index of the GPUs it adds claims on.

``claims_of`` gathers who claims what once a pass's releases are planned: the GPUs VMs have
(``vfio_claims``), those in maintenance or unhealthy, the holds that stay, the Kubernetes releases
pending on pods, the releases the pass makes (claimed until made) and what all of them booked of the
host's memory. The kept and the new holds are checked against it, and add their own (``keep``, ``bind``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import gpu_health, unhealthy_message
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_GPU, Atom, AtomKey, atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import Admission, HostMemory, Hugetlb
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import allocation_of, limits_of_slice, slice_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record, replace

if TYPE_CHECKING:  # the pass's values: the claims are made from them, and the root helper imports this module
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Pass, Pending, Released
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed

# The kinds of claim on an atom.
LIVE = "live"  # a live hold (or one bound earlier in this pass)
RELEASING = "releasing"  # a release this pass plans: claimed until it is made
PENDING = "pending"  # a Kubernetes release waiting for pods (or a taken-back one)
SLICE = "slice"  # a booking only: a slice whose hold is gone, still running a workload, keeps its limits
# The owner of every GPU while releasing.unreadable is there (the Kubernetes releases it held are not known).
UNREADABLE_RELEASES = "(pending Kubernetes releases that could not be read)"


@record(frozen=True)
class Claim:
    atom: Atom
    owner: str
    kind: str = LIVE


@record(frozen=True)
class Booking:
    """What a hold (or a slice still running a workload) booked of the host's memory and huge pages."""

    owner: str
    limits: Limits
    current: Optional[Hugetlb] = None  # its slice's hugetlb.<size>.current
    kind: str = LIVE


@record(frozen=True)
class OnGpu:
    """The claims on one GPU, in the order they were made: on the whole GPU, on its parts, and by atom key."""

    whole: Tuple[Claim, ...] = ()
    parts: Tuple[Claim, ...] = ()
    keyed: Mapping[AtomKey, Tuple[Claim, ...]] = field(default_factory=dict)  # never changed once made

    def adding(self, claims: Sequence[Claim]) -> OnGpu:
        whole, parts, keyed = self.whole, self.parts, dict(self.keyed)
        for claim in claims:
            if claim.atom.whole:
                whole = whole + (claim,)
            else:
                parts = parts + (claim,)
            keyed[claim.atom.key] = keyed.get(claim.atom.key, ()) + (claim,)
        return OnGpu(whole, parts, keyed)

    def on(self, atom: Atom) -> Iterable[Claim]:
        """The claims sharing hardware with ``atom``: the same atom, or a whole GPU and anything on it."""
        if atom.whole:
            return self.whole + self.parts
        return self.whole + tuple(claim for claim in self.keyed.get(atom.key, ()) if not claim.atom.whole)


_NOTHING = OnGpu()
GpuIndex = Mapping[str, OnGpu]


def _indexed(index: GpuIndex, claims: Sequence[Claim]) -> Dict[str, OnGpu]:
    """``index`` with ``claims`` added: a new dict, sharing every GPU's entry but those ``claims`` are on."""
    by_gpu: Dict[str, List[Claim]] = {}
    for claim in claims:
        by_gpu.setdefault(claim.atom.gpu_uuid, []).append(claim)
    new = dict(index)
    for gpu_uuid, on_gpu in by_gpu.items():
        new[gpu_uuid] = new.get(gpu_uuid, _NOTHING).adding(on_gpu)
    return new


def _first(table: Mapping[str, str], pairs: Iterable[Tuple[str, str]]) -> Dict[str, str]:
    """``table`` with each (GPU UUID, value) of ``pairs`` added unless the GPU has one already."""
    new = dict(table)
    for uuid, value in pairs:
        new.setdefault(uuid, value)
    return new


def _ledger_of(memory: Optional[HostMemory], domains: Sequence[Domain], bookings: Sequence[Booking]) -> Optional[Admission]:
    """The admission ledger of ``memory`` with ``domains`` and every booking but those a release frees."""
    if memory is None:
        return None
    ledger = Admission(memory, domains)
    for booking in bookings:
        if booking.kind != RELEASING:
            ledger = ledger.counted(booking.limits, booking.current)
    return ledger


def _beyond(old: Limits, new: Limits) -> Optional[Limits]:
    """What ``old`` limits book of memory and huge pages beyond ``new`` (on ``old``'s NUMA nodes), or None."""
    def more(name: str) -> Optional[int]:
        return max(0, (getattr(old, name) or 0) - (getattr(new, name) or 0)) or None

    memory, pages_2mi, pages_1gi = more("memory_bytes"), more("hugepages_2mi"), more("hugepages_1gi")
    if not (memory or pages_2mi or pages_1gi):
        return None
    return Limits(mems=old.mems, memory_bytes=memory, hugepages_2mi=pages_2mi, hugepages_1gi=pages_1gi)


@record(frozen=True)
class Claims:
    """Every claim on the node's GPUs and memory. Immutable: each method returns a new ``Claims`` (its dicts
    are never changed once made)."""

    held: GpuIndex = field(default_factory=dict)  # GPU UUID -> live and pending claims on it
    releasing: GpuIndex = field(default_factory=dict)  # GPU UUID -> claims of releases this pass makes
    vms: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> instance id a VM has or is to have it
    maintenance: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> reason
    unhealthy: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> message
    memory: Optional[HostMemory] = None  # None: the host's memory was not read (no admission)
    domains: Tuple[Domain, ...] = ()  # the running domains whose memory is committed
    bookings: Tuple[Booking, ...] = ()
    released_memory: Tuple[str, ...] = ()  # owners whose booking a release in this pass frees
    ledger: Optional[Admission] = None  # the admission of ``memory``, ``domains`` and the bookings kept

    # --- adding claims -----------------------------------------------------------------------------------------

    def hold(self, owner: str, atoms: Iterable[Atom], kind: str = LIVE) -> Claims:
        """``owner`` holds ``atoms`` (a live hold, a pending release, a release this pass makes)."""
        claims = [Claim(atom, owner, kind) for atom in atoms]
        if kind == RELEASING:
            return replace(self, releasing=_indexed(self.releasing, claims))
        return replace(self, held=_indexed(self.held, claims))

    def every_gpu(self, owner: str, gpu_uuids: Iterable[str]) -> Claims:
        """``owner`` holds every GPU whole (an unreadable releases file)."""
        return self.hold(owner, [Atom(id=uuid, device_class=CLASS_GPU, gpu_uuid=uuid) for uuid in gpu_uuids],
                         PENDING)

    def pass_through(self, instance_id: str, gpu_uuids: Iterable[str]) -> Claims:
        return replace(self, vms=_first(self.vms, ((uuid, instance_id) for uuid in gpu_uuids)))

    def out_of_service(self, records: Mapping[str, Mapping[str, str]]) -> Claims:
        """GPUs in maintenance (``{uuid: {reason, ...}}``): no new hold may claim them."""
        return replace(self, maintenance=_first(self.maintenance,
                                                ((uuid, records[uuid]["reason"]) for uuid in sorted(records))))

    def sick(self, gpu_uuid: str, message: str) -> Claims:
        return replace(self, unhealthy=_first(self.unhealthy, [(gpu_uuid, message)]))

    def book(self, owner: str, limits: Optional[Limits], current: Optional[Hugetlb] = None, kind: str = LIVE) -> Claims:
        if limits is None:
            return self
        booking = Booking(owner, limits, current, kind)
        if kind == RELEASING:
            released = self.released_memory if owner in self.released_memory else self.released_memory + (owner,)
            return replace(self, bookings=self.bookings + (booking,), released_memory=released)
        ledger = self.ledger.counted(limits, current) if self.ledger is not None else None
        return replace(self, bookings=self.bookings + (booking,), ledger=ledger)

    def with_memory(self, memory: Optional[HostMemory], domains: Sequence[Domain] = ()) -> Claims:
        return replace(self, memory=memory, domains=tuple(domains), ledger=_ledger_of(memory, domains, self.bookings))

    # --- questions ----------------------------------------------------------------------------------------------

    def vm_of(self, gpu_uuid: str) -> Optional[str]:
        return self.vms.get(gpu_uuid)

    def maintenance_of(self, gpu_uuid: str) -> Optional[str]:
        return self.maintenance.get(gpu_uuid)

    def unhealthy_of(self, gpu_uuid: str) -> Optional[str]:
        return self.unhealthy.get(gpu_uuid)

    def holding(self, atom: Atom, owner: Optional[str] = None) -> Tuple[Optional[Claim], Optional[Claim], Optional[Claim]]:
        """The first claim other than ``owner``'s (and other than releases this pass makes) on ``atom`` itself,
        on a part of its GPU and on its whole GPU, each None when there is none."""
        on_gpu = self.held.get(atom.gpu_uuid, _NOTHING)

        def first(claims: Iterable[Claim]) -> Optional[Claim]:
            return next((claim for claim in claims if claim.owner != owner), None)

        return first(on_gpu.keyed.get(atom.key, ())), first(on_gpu.parts), first(on_gpu.whole)

    def needs(self, atoms: Iterable[Atom]) -> List[str]:
        """The owners whose release, planned in this pass, frees atoms of ``atoms``: a hold on them waits for it.
        A hold's own release counts too (it moves to other devices, or is written again)."""
        found: Dict[str, None] = {}
        for atom in atoms:
            on_gpu = self.releasing.get(atom.gpu_uuid)
            if on_gpu is not None:
                found.update((claim.owner, None) for claim in on_gpu.on(atom))
        return list(found)

    def memory_released(self) -> List[str]:
        """The owners whose memory or huge pages a release in this pass frees: an admitted hold waits for them."""
        return list(self.released_memory)

    def admission(self) -> Optional[Admission]:
        """The host's memory ledger: VMs and every booking but those a release in this pass frees."""
        return self.ledger

    def admit(self, owner: str, limits: Limits) -> Claims:
        """``owner``'s limits booked, when the host has room; raises ``admission.Exhausted`` otherwise. Without
        a reading of the host's memory, booked unchecked (the planner warns)."""
        if self.ledger is not None:
            self.ledger.check(limits)
        return self.book(owner, limits)

    def admit_into_slice(self, owner: str, limits: Limits) -> Claims:
        """``admit`` for a hold that goes into its allocation's own slice, which may still run a workload of
        the allocation's old hold (moved to other devices, or bound again after a release) and keep that
        hold's limits (a ``SLICE`` booking of ``owner``). The new hold's limits replace the slice's, so they
        are admitted against everything else: counted once, never on top of the slice's own. The huge pages
        its workload faulted in are the new hold's already. What the slice has beyond the new limits stays
        booked for the rest of the pass (until the bind has set the slice, it keeps them; a kept hold whose
        limits shrink is counted the same way); from the next pass on, the hold's limits alone count."""
        old = tuple(booking for booking in self.bookings if booking.owner == owner and booking.kind == SLICE)
        if not old:
            return self.admit(owner, limits)
        rest = tuple(booking for booking in self.bookings if not (booking.owner == owner and booking.kind == SLICE))
        current = old[0].current
        claims = replace(self, bookings=rest, ledger=_ledger_of(self.memory, self.domains, rest))
        if claims.ledger is not None:
            claims.ledger.check(limits, current)
        claims = claims.book(owner, limits, current)
        for booking in old:
            claims = claims.book(owner, _beyond(booking.limits, limits), kind=SLICE)
        return claims


# --- who claims what once a pass's releases are planned --------------------------------------------------


def vfio_claims(instances: Optional[Sequence[Dict[str, Any]]], observed: Observed) -> Tuple[Dict[str, str], Dict[str, str]]:
    """GPUs VMs have or are to have: the instance specs, the running domains, and
    what still-running domains had at the last pass (a GPU dropped from a running
    VM's spec stays the VM's until its next start)."""
    claims: Dict[str, str] = {}
    for instance in instances or []:
        for gpu in instance.get("gpus") or []:
            claims.setdefault(gpu, instance.get("instance_id") or "?")
    now: Dict[str, str] = {}
    for domain in observed.domains:
        for gpu in domain.gpus:
            now.setdefault(gpu, domain.instance_id)
    if observed.domains_error is None:
        running = set(domain.instance_id for domain in observed.domains)
        remembered = dict((gpu, inst) for gpu, inst in observed.ledger.vfio.items() if inst in running)
    else:
        remembered = dict(observed.ledger.vfio)
    for gpu, instance_id in list(now.items()) + list(remembered.items()):
        claims.setdefault(gpu, instance_id)
    merged = dict(remembered)
    merged.update(now)
    return claims, merged


def claims_of(ctx: Pass, live: Mapping[str, LiveHold], released: Released, vfio: Mapping[str, str]) -> Claims:
    """Who claims what once the releases are planned, as one value: VMs (``vfio``: GPU -> instance),
    maintenance, unhealthy GPUs, the holds that stay, the Kubernetes releases pending on pods, the releases
    this pass makes (claimed until made), and what they booked of the host's memory."""
    observed = ctx.observed
    claims = Claims()
    for gpu_uuid, instance in vfio.items():
        claims = claims.pass_through(instance, [gpu_uuid])
    claims = claims.out_of_service(observed.maintenance)
    for gpu in observed.inventory.gpus:
        health = gpu_health(gpu, observed.health_cleared)
        if health:
            claims = claims.sick(gpu.uuid, unhealthy_message(gpu.uuid, health))
    claims = _pending_claims(ctx, live, released.pending, _live_claims(ctx, live, claims))
    for allocation_id, atoms in released.retained.items():  # the old devices its new hold takes: its own still
        claims = claims.hold(allocation_id, atoms)
    for allocation_id in sorted(released.freeing):
        freed = released.freeing[allocation_id]
        claims = claims.hold(allocation_id, freed.atoms, RELEASING).book(allocation_id, freed.booked, kind=RELEASING)
    for name in sorted(observed.slices):
        # A slice whose hold is gone but whose workload still runs keeps what it was promised.
        current = observed.slices[name]
        if current.populated and allocation_of(name) not in live:
            claims = claims.book(allocation_of(name), limits_of_slice(current), current.hugetlb_current, SLICE)
    if ctx.marker_stays(released):
        claims = claims.every_gpu(UNREADABLE_RELEASES, [gpu.uuid for gpu in observed.inventory.gpus])
    if observed.memory is not None:
        claims = claims.with_memory(observed.memory, observed.domains)
    return claims


def _live_claims(ctx: Pass, live: Mapping[str, LiveHold], claims: Claims) -> Claims:
    """``claims`` with the live holds' atoms, and what each was bound with (a kept hold's growth is admitted
    on top: ``_admit_growth``)."""
    observed, bound = ctx.observed, ctx.observed.ledger.bound
    for allocation_id in sorted(live):
        claims = claims.hold(allocation_id, live[allocation_id].atoms)
        assignment = ctx.wanted.get(allocation_id)
        if allocation_id in bound or assignment is None:
            limits = observed.ledger.limits_of(allocation_id)
        else:
            limits = assignment.limits
        current = observed.slices.get(slice_name(allocation_id))
        claims = claims.book(allocation_id, limits, current.hugetlb_current if current is not None else None)
    return claims


def _pending_claims(ctx: Pass, live: Mapping[str, LiveHold], pending: Mapping[str, Pending], claims: Claims) -> Claims:
    """``claims`` with the Kubernetes releases pending after this pass: their devices, and what they booked."""
    ledger = ctx.observed.ledger
    for allocation_id in sorted(pending):
        release = pending[allocation_id].release
        claims = claims.hold(allocation_id, atoms_of(release.device_ids), PENDING)
        if allocation_id not in live:  # a pending Kubernetes release keeps what it booked until reported
            booked = ledger.limits_of(allocation_id)
            if release.taken_back and allocation_id in ctx.superseded:
                # taken back for the allocation's new hold, whose AllocationBound replaces the old booking:
                # what it booked is freed by this pass, not counted against the new hold (or any other)
                claims = claims.book(allocation_id, booked, kind=RELEASING)
            else:
                claims = claims.book(allocation_id, booked)
    return claims

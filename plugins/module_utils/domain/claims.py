# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who claims what on the node, as one immutable value a pass threads through its phases.

``Claims`` holds, by owner, every atom something has: the live holds, the
releases this pass plans but has not made yet, the Kubernetes releases pending
on pods, the GPUs VMs have (``vms``), those in maintenance and those unhealthy;
and what holds and VMs booked of the host's memory and huge pages, per NUMA
node (``admission.Admission``). Every method returns a new value; none changes
the one it is called on, so a hold refused at any check books nothing: the
planner keeps the claims it had before the check.

A release that has not happened keeps its atoms claimed (``releasing``): a new
hold on them is no conflict, but it *needs* that release (``needs``) and the
planner makes its bind depend on it, so a bind never runs while the hold it
replaces is still live (``actions.apply_plan``).

The questions a bind asks of every atom (``holding``, ``needs``) look only at the
claims on that atom's GPU, through an index built once per value and extended by
``hold``: asked of all claims, they made a bind of the largest section accepted
(4 096 atoms) quadratic, 4 s of its CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.admission import Admission, HostMemory
from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASS_GPU, Atom

# The kinds of claim on an atom.
LIVE = "live"  # a live hold (or one bound earlier in this pass)
RELEASING = "releasing"  # a release this pass plans: claimed until it is made
PENDING = "pending"  # a Kubernetes release waiting for pods (or a taken-back one)


@dataclass(frozen=True)
class Claim:
    atom: Atom
    owner: str
    kind: str = LIVE


@dataclass(frozen=True)
class Booking:
    """What a hold (or a slice still running a workload) booked of the host's memory and huge pages."""

    owner: str
    limits: object  # assignment.Limits
    current: Optional[dict] = None  # its slice's hugetlb.<size>.current
    kind: str = LIVE


def _overlap(one, other):
    """Whether two atoms share hardware: the same atom, or a whole GPU and anything on it."""
    return one.key == other.key or (one.gpu_uuid == other.gpu_uuid and (one.whole or other.whole))


@dataclass(frozen=True)
class Claims:
    """Every claim on the node's GPUs and memory. Immutable: each method returns a new ``Claims``."""

    atoms: Tuple[Claim, ...] = ()
    vms: Tuple[Tuple[str, str], ...] = ()  # (GPU UUID, instance id) a VM has or is to have
    maintenance: Tuple[Tuple[str, str], ...] = ()  # (GPU UUID, reason)
    unhealthy: Tuple[Tuple[str, str], ...] = ()  # (GPU UUID, message)
    memory: Optional[HostMemory] = None  # None: the host's memory was not read (no admission)
    domains: Tuple = ()  # the running domains whose memory is committed
    bookings: Tuple[Booking, ...] = ()
    # The positions in ``atoms`` of the claims on each GPU; not an init field, so ``replace`` never copies it
    # to a value whose atoms differ: built when first asked (``_on_gpu``), extended by ``hold``.
    _by_gpu: Optional[Dict[str, Tuple[int, ...]]] = field(default=None, init=False, repr=False, compare=False)

    # --- adding claims -----------------------------------------------------------------------------------------

    def hold(self, owner: str, atoms: Iterable[Atom], kind: str = LIVE) -> Claims:
        """``owner`` holds ``atoms`` (a live hold, a pending release, a release this pass makes)."""
        added = tuple(Claim(atom, owner, kind) for atom in atoms)
        held = replace(self, atoms=self.atoms + added)
        if self._by_gpu is not None:  # the new value's index is this one's and the added claims
            index = dict(self._by_gpu)
            for position, claim in enumerate(added, len(self.atoms)):
                index[claim.atom.gpu_uuid] = index.get(claim.atom.gpu_uuid, ()) + (position,)
            object.__setattr__(held, "_by_gpu", index)
        return held

    def every_gpu(self, owner: str, gpu_uuids: Iterable[str]) -> Claims:
        """``owner`` holds every GPU whole (an unreadable releases file)."""
        return self.hold(owner, [Atom(id=uuid, device_class=CLASS_GPU, gpu_uuid=uuid) for uuid in gpu_uuids],
                         PENDING)

    def pass_through(self, instance_id: str, gpu_uuids: Iterable[str]) -> Claims:
        return replace(self, vms=self.vms + tuple((uuid, instance_id) for uuid in gpu_uuids))

    def out_of_service(self, records) -> Claims:
        """GPUs in maintenance (``{uuid: {reason, ...}}``): no new hold may claim them."""
        return replace(self, maintenance=self.maintenance + tuple(
            (uuid, records[uuid]["reason"]) for uuid in sorted(records)))

    def sick(self, gpu_uuid: str, message: str) -> Claims:
        return replace(self, unhealthy=self.unhealthy + ((gpu_uuid, message),))

    def book(self, owner: str, limits, current=None, kind: str = LIVE) -> Claims:
        if limits is None:
            return self
        return replace(self, bookings=self.bookings + (Booking(owner, limits, current, kind),))

    def with_memory(self, memory: Optional[HostMemory], domains: Sequence = ()) -> Claims:
        return replace(self, memory=memory, domains=tuple(domains))

    # --- a release --------------------------------------------------------------------------------------------

    def releasing(self, owner: str, keep_booking: bool = False) -> Claims:
        """``owner``'s release is planned in this pass: its atoms (and, unless ``keep_booking``, its memory)
        are claimed until the release is made, and whatever takes them needs it."""
        atoms = tuple(replace(claim, kind=RELEASING) if claim.owner == owner and claim.kind == LIVE else claim
                      for claim in self.atoms)
        bookings = self.bookings
        if not keep_booking:
            bookings = tuple(replace(booking, kind=RELEASING) if booking.owner == owner and booking.kind == LIVE
                             else booking for booking in bookings)
        return replace(self, atoms=atoms, bookings=bookings)

    def pending(self, owner: str, device_atoms: Iterable[Atom]) -> Claims:
        """``owner``'s hold is gone but pods hold its devices: claimed (a conflict) until the release is reported."""
        kept = tuple(claim for claim in self.atoms if claim.owner != owner)
        return replace(self, atoms=kept).hold(owner, device_atoms, PENDING)

    def without(self, owner: str) -> Claims:
        """``owner`` no longer claims anything (a release made in an earlier pass, being dropped)."""
        return replace(self, atoms=tuple(claim for claim in self.atoms if claim.owner != owner),
                       bookings=tuple(booking for booking in self.bookings if booking.owner != owner))

    # --- questions ----------------------------------------------------------------------------------------------

    def owners(self, kind: str = LIVE) -> List[str]:
        found = []  # type: List[str]
        for claim in self.atoms:
            if claim.kind == kind and claim.owner not in found:
                found.append(claim.owner)
        return found

    def atoms_of(self, owner: str) -> List[Atom]:
        return [claim.atom for claim in self.atoms if claim.owner == owner]

    def vm_of(self, gpu_uuid: str) -> Optional[str]:
        return next((instance for uuid, instance in self.vms if uuid == gpu_uuid), None)

    def maintenance_of(self, gpu_uuid: str) -> Optional[str]:
        return next((reason for uuid, reason in self.maintenance if uuid == gpu_uuid), None)

    def unhealthy_of(self, gpu_uuid: str) -> Optional[str]:
        return next((message for uuid, message in self.unhealthy if uuid == gpu_uuid), None)

    def _on_gpu(self, gpu_uuids: Iterable[str]) -> List[Claim]:
        """The claims on these GPUs, in the order of ``atoms``."""
        if self._by_gpu is None:
            index = {}  # type: Dict[str, Tuple[int, ...]]
            for position, claim in enumerate(self.atoms):
                index[claim.atom.gpu_uuid] = index.get(claim.atom.gpu_uuid, ()) + (position,)
            object.__setattr__(self, "_by_gpu", index)
        index = self._by_gpu or {}
        positions = [position for uuid in set(gpu_uuids) for position in index.get(uuid, ())]
        return [self.atoms[position] for position in sorted(positions)]

    def holding(self, atoms: Iterable[Atom], owner: Optional[str] = None):
        """Claims other than ``owner``'s and other than releases this pass makes, on ``atoms``' GPUs."""
        return [claim for claim in self._on_gpu(atom.gpu_uuid for atom in atoms)
                if claim.kind != RELEASING and claim.owner != owner]

    def needs(self, atoms: Iterable[Atom]) -> List[str]:
        """The owners whose release, planned in this pass, frees atoms of ``atoms``: a hold on them waits for it.
        A hold's own release counts too (it moves to other devices, or is written again). Two atoms overlap only
        on one GPU, so only the claims on ``atoms``' GPUs are looked at."""
        atoms = list(atoms)
        found = []  # type: List[str]
        for claim in self._on_gpu(atom.gpu_uuid for atom in atoms):
            if claim.kind == RELEASING and claim.owner not in found and any(_overlap(claim.atom, a) for a in atoms):
                found.append(claim.owner)
        return found

    def memory_released(self) -> List[str]:
        """The owners whose memory or huge pages a release in this pass frees: an admitted hold waits for them."""
        found = []  # type: List[str]
        for booking in self.bookings:
            if booking.kind == RELEASING and booking.owner not in found:
                found.append(booking.owner)
        return found

    def admission(self) -> Optional[Admission]:
        """The host's memory ledger: VMs and every booking but those a release in this pass frees."""
        if self.memory is None:
            return None
        admission = Admission(self.memory, self.domains)
        for booking in self.bookings:
            if booking.kind != RELEASING:
                admission = admission.counted(booking.limits, booking.current)
        return admission

    def admit(self, owner: str, limits) -> Claims:
        """``owner``'s limits booked, when the host has room; raises ``admission.Exhausted`` otherwise. Without
        a reading of the host's memory, booked unchecked (the planner warns)."""
        admission = self.admission()
        if admission is not None:
            admission.check(limits)
        return self.book(owner, limits)

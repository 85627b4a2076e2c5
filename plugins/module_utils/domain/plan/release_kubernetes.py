# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes phase of a pass: releases pending on pods, and a Kubernetes hold that goes.

A Kubernetes hold is released in four steps (``kube_release``): recorded,
withdrawn at once, reported only once no pod holds its devices, and claimed
meanwhile. Each pass first settles what earlier passes left pending: an
unreadable releases file is set aside, the marker cleared once the kube side
allows, a release the spec takes back dropped unreported, and a release no
pod holds any more reported. Called by ``planner.plan_pass`` with its
``decisions.Pass`` (``release_kubernetes`` through ``release.release_unwanted``,
which the planner hands it); each function returns what it decided
(``decisions.Released``) and changes nothing.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import (
    PendingRelease,
    device_names,
    pods_holding,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import (
    ClearMarker,
    DropRelease,
    QuarantineReleases,
    ReleaseKubernetes,
    ReportRelease,
    TakeBackRelease,
    Withdraw,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Freed, Pass, Pending, Released
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reading import retained_atoms
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import released_event, withdraw_files


def _releasing(ctx: Pass, allocation_id: str, device_ids: Sequence[str]) -> Released:
    """A release this pass makes (reported, withdrawn or dropped): its devices and what it booked stay
    claimed until it is made, and a hold that takes them waits for it (``claims.Claims.needs``)."""
    return Released(freeing={allocation_id: Freed(tuple(atoms_of(device_ids)), ctx.observed.ledger.limits_of(allocation_id))})


def _pending(release: PendingRelease, holders: Optional[List[str]]) -> Released:
    """A Kubernetes release still pending after this pass: its devices claimed while ``holders`` hold them."""
    return Released(pending={release.allocation_id: Pending(release, holders)})


def _not_taken(device_ids: Sequence[str], assignment: Assignment) -> List[str]:
    """The old devices ``assignment`` (the allocation's new hold) does not take."""
    wanted = set(atom.key for atom in atoms_of(ref.id for ref in assignment.devices))
    return [device_id for device_id in device_ids if all(atom.key not in wanted for atom in atoms_of([device_id]))]


def _held(ctx: Pass, device_ids: Sequence[str]) -> Tuple[List[str], Optional[List[str]]]:
    """Of ``device_ids``, those a pod holds (every one while the kube side cannot be asked), and who holds them."""
    observed = ctx.observed
    holders = pods_holding(observed.kube, device_ids, observed.inventory) if device_ids else []
    if holders is None:
        return list(device_ids), None
    if not holders:
        return [], []
    return [device_id for device_id in device_ids
            if pods_holding(observed.kube, [device_id], observed.inventory)], holders


def _wanted_again(ctx: Pass, allocation_id: str, old: Sequence[str],
                  left: Sequence[str]) -> Tuple[List[str], Optional[List[str]], Released]:
    """An allocation wanted again, ``old`` its old devices and ``left`` those its new hold does not take. Returns
    the old devices that stay claimed (those of ``left`` a pod holds), who holds them, and this pass's claims
    of the others: what of them its new hold takes again is the allocation's still (``retained_atoms``: no hold
    before it in spec order gets it), the rest is freed by its new AllocationBound (a hold that takes it waits
    for it)."""
    held, holders = _held(ctx, left)
    freed = [device_id for device_id in old if device_id not in held]
    decided = _releasing(ctx, allocation_id, freed) if freed else Released()
    assignment = ctx.wanted.get(allocation_id)
    taken = retained_atoms(old, assignment) if assignment is not None else ()
    if taken:
        decided += Released(retained={allocation_id: taken})
    return held, holders, decided


def _take_back(ctx: Pass, release: PendingRelease, assignment: Assignment) -> Released:
    """The spec wants an allocation with a pending release again: the release is never reported. Old
    devices the new hold does not take stay claimed while pods hold them, then go unreported."""
    return _hold_taken_back(ctx, release, _not_taken(release.device_ids, assignment), "the spec wants it again")


def _hold_taken_back(ctx: Pass, release: PendingRelease, left: Sequence[str],
                     why: str = "its old devices are free") -> Released:
    """A taken-back release: dropped unreported once no pod holds any of ``left`` (the old devices the
    allocation's hold does not take), else kept, narrowed to those pods hold, and claimed."""
    allocation_id = release.allocation_id
    held, holders, claimed = _wanted_again(ctx, allocation_id, release.device_ids, left)
    if not held:
        return claimed + Released(actions=(DropRelease(allocation_id, release.generation, why),))
    narrowed = PendingRelease(allocation_id, held, release.generation, release.since, taken_back=True)
    if narrowed == release:
        return claimed + _pending(narrowed, holders)
    return claimed + _pending(narrowed, holders) + Released(actions=(
        TakeBackRelease(allocation_id, tuple(held), release.generation, narrowed, holders),))


def release_kubernetes(ctx: Pass, hold: LiveHold, why: str, wanted: bool = False) -> Released:
    """A Kubernetes hold that goes: recorded, withdrawn, and reported only if no pod holds its devices.
    ``wanted``: the allocation stays, on other devices or as a plain hold: never reported released;
    its old devices stay claimed (taken back) while pods hold them."""
    observed, generation = ctx.observed, ctx.generation
    files = tuple(withdraw_files(observed, hold.allocation_id))
    device_ids = tuple(hold.device_ids)
    gone = Released(gone=frozenset([hold.allocation_id]))
    if wanted:
        # what stays claimed is what a later pass's take-back keeps (``_take_back``): the old devices the
        # new hold does not take that pods hold; the new hold's own are the allocation's still
        left = _not_taken(hold.device_ids, ctx.wanted[hold.allocation_id])
        held, holders, claimed = _wanted_again(ctx, hold.allocation_id, hold.device_ids, left)
        if not held:
            return gone + claimed + Released(actions=(Withdraw(hold.allocation_id, files, device_ids, generation, why),))
        release = PendingRelease(hold.allocation_id, held, generation, observed.now, taken_back=True)
        return gone + claimed + _pending(release, holders) + Released(actions=(ReleaseKubernetes(
            hold.allocation_id, files, device_ids, generation, release, why, holders),))
    release = PendingRelease(hold.allocation_id, list(hold.device_ids), generation, observed.now)
    holders = pods_holding(observed.kube, hold.device_ids, observed.inventory)
    if holders == []:
        return gone + _releasing(ctx, hold.allocation_id, hold.device_ids) + Released(actions=(ReleaseKubernetes(
            hold.allocation_id, files, device_ids, generation, release, why,
            event=released_event(observed, hold.allocation_id, generation, hold.device_ids)),))
    return gone + _pending(release, holders) + Released(actions=(ReleaseKubernetes(
        hold.allocation_id, files, device_ids, generation, release, why, holders),))


def plan_kubernetes_releases(ctx: Pass) -> Released:
    """Kubernetes releases pending from earlier passes: set an unreadable file aside, clear the marker
    once the kube side allows, drop releases the spec takes back, report those no pod holds."""
    observed = ctx.observed
    decided: List[Released] = []  # joined once, at the end
    releases = observed.releases
    if releases.unreadable is not None:
        # said in the pass that does it, whether or not the marker can be cleared at once: the releases
        # the file held are lost, and someone must learn of it
        decided.append(Released(actions=(QuarantineReleases("", observed.now, observed.state_dir, releases.unreadable),),
                                warnings=("%s/releasing.json is unreadable (%s): it is set aside, never deleted; the "
                                          "Kubernetes releases it held cannot be reported"
                                          % (observed.state_dir, releases.unreadable),)))
    if ctx.marker and observed.kube is not None and observed.kube.error is None:
        known = set()  # what pods may hold of allocations the node knows: their devices and parent GPUs
        for device_ids in [hold.device_ids for hold in observed.live.values()] + \
                [release.device_ids for release in releases.pending.values()]:
            known |= device_names(device_ids, observed.inventory)
            known |= set(atom.gpu_uuid for atom in atoms_of(device_ids))
        unknown = sorted(observed.kube.held - known)
        gpus = set(gpu.uuid for gpu in observed.inventory.gpus)
        gpus |= set(inst.uuid for gpu in observed.inventory.gpus for inst in gpu.mig)
        # a slot is named by its atom id (GPU-…/s<n>): one of an unknown allocation counts by its GPU
        if not [name for name in unknown if name.split("/", 1)[0] in gpus]:
            decided.append(Released(actions=(ClearMarker("", observed.state_dir),), marker_cleared=True))
    decided.extend(_settle(ctx, releases.pending[allocation_id]) for allocation_id in sorted(releases.pending))
    return Released.join(decided)


def _settle(ctx: Pass, release: PendingRelease) -> Released:
    """One Kubernetes release pending from an earlier pass: taken back, reported, or left pending."""
    observed, allocation_id = ctx.observed, release.allocation_id
    assignment = ctx.wanted.get(allocation_id)
    if assignment is not None and allocation_id in ctx.superseded:
        return _take_back(ctx, release, assignment)
    device_ids = release.device_ids
    if release.taken_back:
        bound = observed.ledger.bound.get(allocation_id)
        if allocation_id in observed.live or bound is None:
            # old devices of an allocation live again (its own release is reported): claimed until free
            return _hold_taken_back(ctx, release, release.device_ids)
        # taken back for a hold that never became live: the journal's last word on the allocation is
        # still its old AllocationBound, so it is reported released once free, with those devices
        device_ids = list(bound.device_ids or release.device_ids)
    # its files, if a crash left them, are withdrawn
    files = withdraw_files(observed, allocation_id)
    gone = Released(gone=frozenset([allocation_id]))
    holders = pods_holding(observed.kube, release.device_ids, observed.inventory)
    if holders == []:
        return gone + _releasing(ctx, allocation_id, release.device_ids) + Released(actions=(ReportRelease(
            allocation_id, tuple(files), released_event(observed, allocation_id, release.generation, device_ids), tuple(device_ids),
            release.generation),))
    if not files:
        return gone + _pending(release, holders)
    return gone + _pending(release, holders) + Released(actions=(Withdraw(
        allocation_id, tuple(files), device_ids=tuple(release.device_ids), generation=release.generation),))

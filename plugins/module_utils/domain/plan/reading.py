# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the phases of a pass read alike: the questions more than one phase asks of the observation, of the
claims and of what the releases decided, and the steps a damaged spec takes wherever it is planned.

A phase (``release``, ``release_kubernetes``, ``claims``, ``keep``, ``bind``, ``conditions``) imports these
and the shared values (``decisions``, ``claims``, ``actions``, ``reports``), never another phase: the
planner (``planner._plan_once``) is the one module that calls them all, in order."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold, damaged_spec_path
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment, limits_record
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import ReleaseDamaged, SliceApply, SliceStop, SpecAside
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import UNREADABLE
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Outcome, Pass
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import released_event, withdraw_files
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState, settings_of, slice_name, wanted_slice

# --- the observation ---------------------------------------------------------------------------------------------


def stale_env_files(observed: Observed) -> Dict[str, bytes]:
    """Env files no hold stands behind: of an allocation without a spec in /etc/cdi (a damaged one counts as
    a spec), never reported bound, with no release unfinished or pending. Only a bind that never finished
    leaves one: its env file was written, and the pass died before its spec (on a fresh node, before there
    was an /etc/cdi). A hold the node reported is never among them, whether /etc/cdi is there or not; one
    written and not yet reported whose spec comes back gets its env file again (``keep._keep_files``)."""
    ledger, pending = observed.ledger, observed.releases.pending
    return dict((allocation_id, content) for allocation_id, content in observed.env_files.items()
                if content is not None and allocation_id not in observed.live and allocation_id not in ledger.bound
                and allocation_id not in ledger.unfinished_releases and allocation_id not in pending)


def kubernetes_released(observed: Observed) -> Set[str]:
    """Allocations whose Kubernetes hold or pending release a pass may take back unreported, and those whose
    old hold a pass withdrew unreported before it died (``reported_without_spec``)."""
    return set(observed.releases.pending) | set(
        allocation_id for allocation_id, hold in observed.live.items() if hold.kubernetes) | reported_without_spec(observed)


def reported_without_spec(observed: Observed) -> Set[str]:
    """Allocations the node last reported bound whose spec is gone and that no record releases (none, or a
    Kubernetes release taken back, which keeps only the old devices pods held): a Kubernetes hold wanted
    again, withdrawn unreported by a pass that died before its new bind (or a spec deleted by hand). The
    journal still gives them their old devices."""
    if not observed.spec_dir:
        return set()
    pending = observed.releases.pending
    return set(allocation_id for allocation_id in observed.ledger.bound
               if allocation_id not in observed.live and allocation_id not in observed.ledger.unfinished_releases
               and (allocation_id not in pending or pending[allocation_id].taken_back))


def retained_atoms(device_ids: Sequence[str], assignment: Assignment) -> Tuple[Atom, ...]:
    """What of the old devices ``device_ids`` the allocation's new hold (``assignment``) takes again, on the
    hardware: an old atom it names again, an old part of a GPU it takes whole, the part it takes of an old whole
    GPU. Claimed as the allocation's own until its new hold is bound."""
    new = atoms_of(ref.id for ref in assignment.devices)
    kept: Dict[Tuple[object, ...], Atom] = {}
    for old in atoms_of(device_ids):
        for atom in new:
            if old.gpu_uuid == atom.gpu_uuid and (old.key == atom.key or old.whole or atom.whole):
                narrower = atom if old.whole else old
                kept.setdefault(narrower.key, narrower)
    return tuple(kept.values())


def wanted_slice_op(assignment: Assignment, current: Optional[SliceState] = None) -> Optional[SliceApply]:
    """The slice a hold's limits want (``current``: the slice as the host shows it now, or None); None when they
    book nothing a slice enforces (``slices.cgroup_parent_of`` says the same: the hold has no slice)."""
    wanted = wanted_slice(assignment.limits)
    if wanted is None:
        return None
    properties, huge = wanted
    return SliceApply(slice_name(assignment.allocation_id), properties, huge,
                      settings_of(current) if current is not None else None, limits_record(assignment.limits))


# --- the claims --------------------------------------------------------------------------------------------------


def unreadable_memory(claims: Claims) -> Outcome:
    """Admission cannot be checked (the host's memory was not read): said (once a pass, ``_plan_once``)."""
    return Outcome(warnings=(UNREADABLE,)) if claims.memory is None else Outcome()


# --- a damaged spec, set aside wherever it is planned ------------------------------------------------------------


def aside_of(observed: Observed, hold: LiveHold) -> SpecAside:
    """A damaged spec set aside (never deleted), under the name planned for it now."""
    return SpecAside(hold.path, hold.content, damaged_spec_path(hold.allocation_id, observed.now), observed.now)


def damaged_release(ctx: Pass, hold: LiveHold, why: str) -> ReleaseDamaged:
    """The release of a hold whose spec is damaged: the spec set aside, the env file removed, its empty slice
    stopped, and ``AllocationReleased`` with the devices the node last reported bound (nothing if it never
    did). Planned by the release phase for one no longer wanted, and by the binds for one whose new hold is
    refused."""
    observed, allocation_id = ctx.observed, hold.allocation_id
    files = [aside_of(observed, hold)] + [change for change in withdraw_files(observed, allocation_id)
                                          if change.kind != "cdi"]
    bound = observed.ledger.bound.get(allocation_id)
    device_ids = bound.device_ids if bound is not None else ()
    event = released_event(observed, allocation_id, ctx.generation, device_ids) if bound is not None else None
    current = observed.slices.get(slice_name(allocation_id))
    stop = SliceStop(current.name, settings_of(current)) if current is not None and not current.populated else None
    return ReleaseDamaged(allocation_id, tuple(files), event, device_ids, ctx.generation, why, slice=stop)

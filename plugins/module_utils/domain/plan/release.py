# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Phases 1 and 2 of a pass (``planner.plan_pass``) but for the Kubernetes steps (``release_kubernetes``):
releases an earlier pass cut short are finished; holds no longer wanted are released (before any bind, so a GPU
can move between allocations in one generation), a damaged spec set aside, a hold whose spec is gone released or
held for its new bind; env files a bind that never finished left are removed. Each returns a
``decisions.Released``: its steps, and what each release frees once made (claimed until then). A Kubernetes hold
no longer wanted is released by the function the planner hands ``release_unwanted``
(``release_kubernetes.release_kubernetes``): no phase imports another.
"""

from __future__ import annotations

from typing import AbstractSet, Callable, List, Mapping, Optional, Sequence, Set, Type

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold, env_file_path
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import (
    FileChange,
    FinishRelease,
    Release,
    RemoveEnv,
    SliceStop,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import env_file_atoms, env_file_claim
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Freed, Pass, Released, needs_root
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reading import (
    aside_of,
    damaged_release,
    reported_without_spec,
    retained_atoms,
    stale_env_files,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import released_event, summary_of, withdraw_files
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import settings_of, slice_name


def _release_action(kind: Type[Release], observed: Observed, allocation_id: str, generation: int,
                    device_ids: Sequence[str], why: str) -> Release:
    state = observed.slices.get(slice_name(allocation_id))
    return kind(allocation_id, tuple(withdraw_files(observed, allocation_id)),
                released_event(observed, allocation_id, generation, device_ids), tuple(device_ids), generation, why,
                slice=SliceStop(state.name, settings_of(state)) if state is not None and not state.populated else None,
                busy=state.name if state is not None and state.populated else None)


def finish_releases(ctx: Pass) -> Released:
    """1. Releases an earlier pass recorded but did not finish."""
    observed, generation = ctx.observed, ctx.generation
    decided: List[Released] = []
    for allocation_id in sorted(observed.ledger.unfinished_releases):
        unfinished = observed.ledger.unfinished_releases[allocation_id]
        action = _release_action(FinishRelease, observed, allocation_id,
                                 unfinished.generation if unfinished.generation is not None else generation,
                                 unfinished.device_ids, "cut short by an earlier pass")
        if (action.files or action.slice) and not observed.privileged:
            decided.append(Released(errors=(needs_root("finishing the release of %s" % allocation_id),)))
            continue
        decided.append(Released(actions=(action,), gone=frozenset([allocation_id])))
        decided.append(_releasing(observed, allocation_id, unfinished.device_ids))
    return Released.join(decided)


def _releasing(observed: Observed, allocation_id: str, device_ids: Sequence[str],
               atoms: Optional[Sequence[Atom]] = None) -> Released:
    """A release this pass makes: its atoms and what it booked stay claimed until it is made."""
    current = observed.slices.get(slice_name(allocation_id))
    booked = None
    if current is None or not current.populated:  # a slice still running a workload keeps what it booked
        booked = observed.ledger.limits_of(allocation_id)
    return Released(freeing={allocation_id: Freed(tuple(atoms if atoms is not None else atoms_of(device_ids)), booked)})


# How a Kubernetes hold that goes is released (``release_kubernetes.release_kubernetes``): ``(ctx, hold, why,
# wanted)``, ``wanted`` when the allocation stays (on other devices, or as a plain hold).
KubernetesRelease = Callable[[Pass, LiveHold, str, bool], Released]


def release_unwanted(ctx: Pass, live: Mapping[str, LiveHold], releasing: AbstractSet[str],
                     release_kubernetes: KubernetesRelease) -> Released:
    """2. Holds no longer wanted, or wanted with other devices or another binding; a Kubernetes hold through
    ``release_kubernetes``."""
    keep = set(ctx.wanted) | set(ctx.parsed.refused_ids) | ctx.unsupported
    decided = [_release_spec_gone(ctx, keep, releasing)]  # joined once, at the end
    for allocation_id in sorted(live):
        hold = live[allocation_id]
        assignment = ctx.wanted.get(allocation_id)
        if hold.problem is not None and (assignment is not None or allocation_id not in keep):
            decided.append(_set_aside(ctx, hold, assignment))
            continue
        rebind = assignment is not None and (
            sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices)
            or hold.kubernetes != assignment.kubernetes)
        if allocation_id in keep and not rebind:
            continue
        if not ctx.observed.privileged:
            decided.append(Released(errors=(needs_root("releasing %s" % allocation_id),), holds=(summary_of(hold),)))
            continue
        why = "wanted with other devices" if rebind else "no longer wanted"
        if hold.kubernetes:
            decided.append(release_kubernetes(ctx, hold, why, allocation_id in ctx.superseded))
        else:
            decided.append(Released(actions=(_release_action(Release, ctx.observed, allocation_id, ctx.generation,
                                                             hold.device_ids, why),), gone=frozenset([allocation_id])))
            decided.append(_releasing(ctx.observed, allocation_id, hold.device_ids, hold.atoms))
    return Released.join(decided)


def _set_aside(ctx: Pass, hold: LiveHold, assignment: Optional[Assignment]) -> Released:
    """A damaged spec (its devices cannot be read back) is never deleted: set aside, and the hold is written
    again from its assignment (``bind_new``) or, no longer wanted (no ``assignment``), released."""
    observed = ctx.observed
    if not observed.privileged:
        return Released(errors=(needs_root("setting the damaged %s aside" % hold.path),))
    aside = Released(warnings=("%s; it is set aside as %s" % (hold.problem, aside_of(observed, hold).aside),),
                     damaged={hold.allocation_id: hold}, gone=frozenset([hold.allocation_id]))
    return aside + _release_damaged(ctx, hold, "no longer wanted") if assignment is None else aside


def _release_spec_gone(ctx: Pass, keep: Set[str], releasing: AbstractSet[str]) -> Released:
    """Holds the node reported bound whose spec is gone (deleted by hand) and that are no longer wanted:
    released, so their env file goes with them and the control plane learns of it. One still wanted is
    bound again from its assignment (``bind_new``)."""
    observed = ctx.observed
    decided: List[Released] = []
    if not observed.spec_dir:
        return Released()
    for allocation_id in sorted(observed.ledger.bound):
        # one still wanted is bound again (bound_again), unless an earlier round found it is not (plan_pass)
        if (allocation_id in keep and (allocation_id not in ctx.wanted or allocation_id in ctx.superseded)) or \
                allocation_id in observed.live or allocation_id in releasing or \
                allocation_id in observed.releases.pending or allocation_id in observed.ledger.unfinished_releases:
            continue
        if not observed.privileged:
            decided.append(Released(errors=(needs_root("releasing %s" % allocation_id),)))
            continue
        device_ids = list(observed.ledger.bound[allocation_id].device_ids)
        decided.append(Released(actions=(_release_action(Release, observed, allocation_id, ctx.generation, device_ids,
                                                         "its spec is gone"),)))
        decided.append(_releasing(observed, allocation_id, device_ids))
    return Released.join(decided)


def remove_stale_env(ctx: Pass) -> Released:
    """2. Env files a bind that never finished left (``stale_env_files``), removed before anything is bound,
    also where the allocation is bound again in this pass (its bind writes its env file anew): the GPUs such
    a file names in ``NVIDIA_VISIBLE_DEVICES`` are claimed until it is gone, as the root helper claims them
    (``conflicts.env_file_claim``), so a bind that takes one of them waits for the removal, and no two env
    files ever name one GPU for two allocations."""
    observed = ctx.observed
    decided: List[Released] = []
    stale = stale_env_files(observed)  # the pass's (``Pass.stale_env``), with their content
    for number, allocation_id in enumerate(sorted(stale)):
        action = RemoveEnv(allocation_id, (FileChange("allocation-env", env_file_path(allocation_id),
                                                      stale[allocation_id], None),))
        if not observed.privileged:
            decided.append(Released(errors=(needs_root(action.text),)))
            continue
        atoms = env_file_claim(env_file_atoms(stale[allocation_id], observed.inventory), number)
        decided.append(Released(actions=(action,), freeing={allocation_id: Freed(tuple(atoms))}))
    return Released.join(decided)


def _release_damaged(ctx: Pass, hold: LiveHold, why: str) -> Released:
    """A hold whose spec is damaged that goes (``reading.damaged_release``): what it frees is claimed until then."""
    action = damaged_release(ctx, hold, why)
    return _releasing(ctx.observed, hold.allocation_id, action.device_ids) + Released(actions=(action,))


def bound_again(ctx: Pass, releasing: AbstractSet[str]) -> Released:
    """Allocations reported bound whose spec is gone, to be bound again in this pass (``ctx.superseded``): their
    old devices are freed only by their new AllocationBound (a hold that takes them waits for it), and those
    their new hold takes are theirs still (no hold before them in spec order gets them). One not bound again is
    reported released (``_release_spec_gone``, in the next round of ``plan_pass``)."""
    observed = ctx.observed
    decided: List[Released] = []
    for allocation_id in sorted(reported_without_spec(observed) & ctx.superseded):
        assignment = ctx.wanted.get(allocation_id)
        if assignment is None or allocation_id in releasing:
            continue
        reported = observed.ledger.bound[allocation_id]
        release = observed.releases.pending.get(allocation_id)  # taken back: the old devices pods held
        old = [device_id for device_id in reported.device_ids if release is None or device_id not in release.device_ids]
        taken = retained_atoms(old, assignment)
        decided.append(Released(freeing={allocation_id: Freed(tuple(atoms_of(old)), reported.limits)},
                                retained={allocation_id: taken} if taken else {}))
    return Released.join(decided)

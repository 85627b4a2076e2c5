# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: one pure function from the wanted assignments and the observed
host to the ordered plan of a pass (a list of ``actions.Action``).

Check mode is this plan without the apply; diff mode shows it; a real run
executes exactly it. ``plan_pass`` runs the phases of a pass in this order
(docs/architecture.md, "One pass"), each a module of its own that returns what
it decided as a named value (``decisions``: ``Released``, ``Outcome``) and
reads what phases share through ``reading``, never through another phase:

1. Kubernetes releases pending from earlier passes are reported once no pod
   holds them, or dropped unreported when the spec wants the allocation
   again (``release_kubernetes``); plain releases cut short by an earlier pass are
   finished (``release``);
2. holds no longer wanted are released (``release``, ``release_kubernetes``) (before any bind, so a GPU can move
   between allocations in one generation); a released hold's slice is
   stopped once empty; a Kubernetes hold is recorded and withdrawn, and
   reported once free; env files a bind that never finished left (no spec,
   report or release behind them) are removed, their GPUs claimed until
   then; then slices of holds gone earlier are stopped once empty. Who claims
   what then is one value (``claims``), and so are the pass's conditions
   (``conditions``);
3. holds still wanted are kept (``keep``): a missing slice is created again (after a
   reboot), a changed rendering is written again, a missing env file
   rewritten, a hold never reported is reported;
4. new holds, in spec order (``bind``), are checked — binding, privilege, atoms,
   conflicts, host admission — and bound, their slice first; each claims its
   atoms (and its memory) against the holds after it; one bound again into
   its own slice, still running a workload, replaces that slice's booking
   (admitted once). One refused at this generation by an earlier pass stays
   refused with the same reason: a refusal is final at its generation (an
   input that sends it with another assignment at that generation is refused
   before the pass: ``generations.pass_generation``);
5. every refusal not yet reported for this generation becomes one
   ``AllocationFailed``, but that of a hold the node keeps (its new limits,
   binding or input refused, or its move to other devices, refused before
   anything is released: ``_pass_of``), which raises ``HoldChangeRefused``
   instead;
6. every condition that appeared or cleared since the last pass becomes one
   signed event (``condition_events``).
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import ALLOCATION_FAILED
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    Limits,
    ParsedInput,
    unsupported_binding,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, Bind, KeepSlice, Refuse, Release, SliceStop, SpecAside, StopSlice
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import UNREADABLE
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.bind import bind_new, refused_move
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import claims_of, vfio_claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.condition_events import condition_reports
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conditions import pass_conditions, passing_conditions, pending_releases
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Outcome, Pass, Released, needs_root
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.diffs import plan_diffs
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.keep import grows, keep_wanted, placed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reading import kubernetes_released, stale_env_files
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.release import bound_again, finish_releases, release_unwanted, remove_stale_env
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.release_kubernetes import plan_kubernetes_releases, release_kubernetes
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import damaged_condition, kept_as_bound_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import allocation_of, settings_of, slice_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

# What callers import from here: the planner's input and output, and what the converger reads of limits.
__all__ = ["Observed", "Plan", "grows", "placed", "plan_pass"]


@record
class Plan:
    generation: int
    actions: List[Action] = field(default_factory=list)
    failures: List[Refusal] = field(default_factory=list)  # at ``generation``, in spec order, one per allocation
    warnings: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # retryable: the pass cannot finish now
    holds: List[Dict[str, Any]] = field(default_factory=list)  # the holds once the plan is applied
    conditions: List[Dict[str, Any]] = field(default_factory=list)
    pending_releases: List[Dict[str, Any]] = field(default_factory=list)  # Kubernetes releases still waiting for pods
    vfio: Dict[str, str] = field(default_factory=dict)  # GPUs running domains have now
    renders: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # allocation -> render_record, for the next pass
    booked: Dict[str, Optional[Limits]] = field(default_factory=dict)  # allocation -> limits a kept hold without a slice books
    vendor_path: Optional[str] = None  # the vendor spec the holds' edits come from (node path), for --diff

    @property
    def changes(self) -> List[Action]:
        return [action for action in self.actions if action.changes]

    def text(self) -> str:
        lines = [action.text for action in self.actions] or ["nothing to do"]
        lines.extend("warning: %s" % warning for warning in self.warnings)
        lines.extend("retry: %s" % error for error in self.errors)
        return "\n".join(lines)

    def diffs(self, full: bool = False) -> List[Dict[str, Any]]:
        """Ansible ``--diff`` output: the plan as text first (what a reader scans), then each file (and
        slice) the actions change, one diff each, a spec's vendor edits as one line unless ``full``
        (``domain/plan/diffs.py``)."""
        entries = [{"prepared": "plan:\n" + "\n".join("  " + line for line in self.text().splitlines()) + "\n"}]
        entries.extend(plan_diffs(self.actions, full, self.vendor_path))
        return entries


def plan_pass(generation: int, parsed: ParsedInput, observed: Observed, instances: Optional[Sequence[Dict[str, Any]]] = None) -> Plan:
    """The ordered plan for one pass. Pure: reads only its arguments.

    A Kubernetes hold wanted again (moved, or re-bound as a plain hold) is withdrawn unreported only if
    its new hold is bound in this pass: its new ``AllocationBound`` is what tells the control plane the
    old devices are free. Whether it is bound is known only once the binds are checked, so the plan is
    made again without the allocations that were not (refused, or not renderable) until none is left:
    their old hold is then reported released like any other, and one refused keeps that refusal (checked
    again against its own old hold, now a release to report, it could be refused for another reason, or
    bound beside that release). Holds withdrawn unreported that take each
    other's atoms (two Kubernetes holds swapping GPUs) cannot all be bound after the new bind that frees
    their atoms: the first of such a cycle in spec order is reported released instead, before any bind.
    Each round only shrinks the allocations withdrawn unreported, so this ends within as many rounds as
    there are such allocations."""
    superseded: Optional[FrozenSet[str]] = None
    withheld: Dict[str, Refusal] = {}
    while True:
        ctx, plan, live_after = _plan_once(generation, parsed, observed, instances, superseded, withheld)
        unreported = ctx.superseded & kubernetes_released(observed)
        unbound = (ctx.superseded - live_after) & unreported
        refused = dict((failure.allocation_id, failure) for failure in plan.failures)
        withheld.update((allocation_id, refused[allocation_id]) for allocation_id in unbound if allocation_id in refused)
        if not unbound:
            unbound = _unreported_cycle(ctx, plan.actions, unreported)
        if not unbound:
            return plan
        superseded = ctx.superseded - unbound


def _unreported_cycle(ctx: Pass, actions: Sequence[Action], unreported: FrozenSet[str]) -> FrozenSet[str]:
    """The first allocation, in spec order, of a cycle of binds that each need the release of one withdrawn
    unreported (``unreported``): its new ``AllocationBound`` is what frees its old atoms, so no order of
    the binds journals every release before the bind that takes its atoms. Empty when there is none."""
    needs: Dict[str, Set[str]] = {}
    for action in actions:
        if isinstance(action, Bind) and action.allocation_id in unreported:
            needs[action.allocation_id] = set(action.needs) & unreported
    for start in sorted(needs, key=ctx.parsed.position):
        seen: Set[str] = set()
        path: List[str] = [start]
        while path:
            current = path.pop()
            for needed in sorted(needs.get(current, set()) - {current}):
                if needed == start:
                    return frozenset([start])
                if needed not in seen:
                    seen.add(needed)
                    path.append(needed)
    return frozenset()


def _pass_of(generation: int, parsed: ParsedInput, observed: Observed, instances: Optional[Sequence[Dict[str, Any]]],
             superseded: Optional[FrozenSet[str]], withheld: Mapping[str, Refusal]) -> Tuple[Pass, Tuple[Refusal, ...]]:
    """The pass's inputs, and the refusal of each live hold kept as it is before anything is planned: one re-sent
    with a binding the node does not take (unsupported-binding), as for any refused input (the node never drops
    a hold on its own), and a plain hold moved to other devices whose new cpus or mems would narrow the slice its
    workload still runs in (``bind.refused_move``): its old hold is not released, and the refusal is said as
    ``HoldChangeRefused`` (``_report_failures``)."""
    refusals: List[Refusal] = []
    for assignment in parsed.assignments:
        if assignment.allocation_id not in observed.live:
            continue
        if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
            refusals.append(Refusal(assignment.allocation_id, Reason.UNSUPPORTED_BINDING,
                                    unsupported_binding(assignment.binding)))
            continue
        moved = refused_move(observed, assignment)
        if moved is not None:
            refusals.append(moved)
    unsupported = frozenset(refusal.allocation_id for refusal in refusals)
    wanted = dict((assignment.allocation_id, assignment) for assignment in parsed.assignments
                  if assignment.allocation_id not in unsupported)
    marker = bool(observed.releases.marker or observed.releases.unreadable is not None)
    ctx = Pass(generation, parsed, observed, instances, wanted, unsupported,
               frozenset(wanted) if superseded is None else superseded, marker, dict(withheld),
               frozenset(stale_env_files(observed)))
    return ctx, tuple(refusals)


def _plan_once(generation: int, parsed: ParsedInput, observed: Observed, instances: Optional[Sequence[Dict[str, Any]]],
               superseded: Optional[FrozenSet[str]], withheld: Mapping[str, Refusal]) -> Tuple[Pass, Plan, Set[str]]:
    """One round of the phases, in the spec's order, each a function of the observation and the claims;
    the plan is built once from what they returned. Returns the allocations live once it is applied too."""
    ctx, unsupported = _pass_of(generation, parsed, observed, instances, superseded, withheld)
    # 1. Kubernetes releases pending from earlier passes; plain releases cut short
    released = plan_kubernetes_releases(ctx) + finish_releases(ctx)
    # 2. holds no longer wanted (those the phases above settled are no longer live)
    released += release_unwanted(ctx, _live(observed, released), released.freeing.keys(), release_kubernetes)
    released += bound_again(ctx, released.freeing.keys())
    released += remove_stale_env(ctx)
    live = _live(observed, released)
    vfio, now = vfio_claims(ctx.instances, observed)
    claims = claims_of(ctx, live, released, vfio)
    # 3. holds still wanted; 4. new holds
    kept, claims = keep_wanted(ctx, live, claims)
    bound, claims = bind_new(ctx, live, released.damaged, claims)
    # slices of holds gone earlier: decided once the slices the kept and bound holds want are known,
    # placed after the releases, before anything is bound
    leftover = _leftover_slices(observed, _released_slices(released.actions + bound.actions) | kept.sliced | bound.sliced)
    decided = Outcome(warnings=released.warnings, errors=released.errors, holds=released.holds,
                      refusals=unsupported) + kept + bound + leftover
    # 5. refusals: an AllocationFailed for each, but for a hold the node keeps, which raises a condition instead
    refusals, failures, kept_as_bound = _report_failures(ctx, decided.refusals, live)
    actions = list(released.actions + leftover.actions + kept.actions + bound.actions + refusals)
    asides = list(observed.damaged_specs) + [change.aside for action in actions for change in action.node_files()
                                             if isinstance(change, SpecAside)]
    conditions = pass_conditions(ctx, live, released) + ([damaged_condition(asides)] if asides else []) + kept_as_bound
    pending = pending_releases(observed, released)
    # 6. the conditions that appeared or cleared since the last pass, each one signed event
    actions.extend(condition_reports(observed, conditions, pending, generation, passing_conditions(ctx, released)))
    plan = Plan(generation=generation, actions=actions, failures=failures, warnings=_said_once(decided.warnings, UNREADABLE),
                errors=list(decided.errors), holds=list(decided.holds), conditions=conditions,
                pending_releases=pending, vfio=dict(sorted(now.items())), renders=dict(decided.renders),
                booked=dict(decided.booked), vendor_path=getattr(observed.vendor, "path", None))
    return ctx, plan, set(live) | set(action.allocation_id for action in actions if isinstance(action, Bind))


def _said_once(warnings: Sequence[str], warning: str) -> List[str]:
    """``warnings`` with ``warning`` said once a pass, where it first is."""
    if list(warnings).count(warning) < 2:
        return list(warnings)
    first = list(warnings).index(warning) + 1
    return list(warnings[:first]) + [said for said in warnings[first:] if said != warning]


def _live(observed: Observed, released: Released) -> Dict[str, LiveHold]:
    """The live holds, but those ``released`` releases, withdraws or sets aside."""
    return dict((allocation_id, hold) for allocation_id, hold in observed.live.items()
                if allocation_id not in released.gone)


def _released_slices(actions: Sequence[Action]) -> FrozenSet[str]:
    """The slices the releases among ``actions`` handle: each stops its hold's slice once empty, or keeps it."""
    return frozenset(slice_name(action.allocation_id) for action in actions if isinstance(action, Release))


def _leftover_slices(observed: Observed, wanted: FrozenSet[str]) -> Outcome:
    """Slices whose hold is neither wanted nor released in this pass (``wanted``: the slices the
    releases, the kept and the bound holds handle): stopped again once empty, so a slice whose
    workload outlived its release goes when that workload exits."""
    decided = Outcome()
    for name in sorted(observed.slices):
        if name in wanted:
            continue
        current = observed.slices[name]
        allocation_id = allocation_of(name)
        if current.populated:
            decided += Outcome(actions=(KeepSlice(allocation_id, name),))
        elif not observed.privileged:
            decided += Outcome(errors=(needs_root("stopping %s" % name),))
        else:
            decided += Outcome(actions=(StopSlice(allocation_id, SliceStop(name, settings_of(current))),))
    return decided


def _report_failures(ctx: Pass, refusals: Sequence[Refusal],
                     live: Mapping[str, LiveHold]) -> Tuple[Tuple[Action, ...], List[Refusal], List[Dict[str, Any]]]:
    """5. Failures, in spec order: one AllocationFailed per allocation and generation, but for an allocation
    whose hold stays live after the plan (``live``: a kept hold whose new limits, binding or input were refused,
    kept as it was bound). The control plane, told an allocation failed, lets its devices go and places it
    again, while the node still holds them: such a refusal is returned in ``failures`` like any other, and said
    to the control plane as the condition ``HoldChangeRefused`` of the allocation (its event names the devices
    still held), journaled when it appears and cleared once the hold takes its assignment or goes. It is not
    final at its generation: the next pass judges it again."""
    observed, generation = ctx.observed, ctx.generation
    actions: List[Action] = []
    failures: List[Refusal] = []
    reported: Set[str] = set()
    kept: List[Dict[str, Any]] = []
    for refusal in sorted(refusals, key=lambda refusal: ctx.parsed.position(refusal.allocation_id)):
        allocation_id = refusal.allocation_id
        if allocation_id in reported:  # an allocation sent twice: its first refusal stands
            continue
        reported.add(allocation_id)
        failures.append(refusal)
        hold = live.get(allocation_id)
        if hold is not None:
            kept.append(kept_as_bound_condition(hold, generation, refusal))
            continue
        if observed.ledger.refused_at(allocation_id) == generation:
            continue
        body = {"node_id": observed.node_id, "allocation_id": allocation_id, "generation": generation,
                "reason": refusal.reason, "message": refusal.message}
        actions.append(Refuse(allocation_id, {"type": ALLOCATION_FAILED, "body": body}, generation))
    return tuple(actions), failures, kept

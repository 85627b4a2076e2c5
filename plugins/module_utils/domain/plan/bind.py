# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Phase 4 of a pass (``planner.plan_pass``): new holds, in spec order, are checked (binding, privilege,
atoms, conflicts, host admission) and bound, their slice first; each claims its atoms (and its memory) against
the holds after it. One bound again into its own slice, still running a workload, replaces that slice's booking
(admitted once). One refused at this generation by an earlier pass stays refused with the same reason: a refusal
is final at its generation. Returns an ``decisions.Outcome`` and the claims with the new holds'."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    LiveHold,
    RenderError,
    RenderRefused,
    cdi_spec_path,
    env_file_path,
    render_hold,
    render_key,
    render_record,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    Assignment,
    hold_request,
    limits_record,
    unsupported_binding,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, AtomRefused, resolve_devices
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, Bind, FileChange, Rebind, SpecAside
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import (
    Exhausted,
    cpus_problem,
    gpu_numa_nodes,
    locality,
    locality_warning,
    needs_admission,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import conflicts
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Outcome, Pass
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reading import (
    aside_of,
    damaged_release,
    kubernetes_released,
    unreadable_memory,
    wanted_slice_op,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import bound_event, hold_summary
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    RUNNING_CPUSET,
    cgroup_parent_of,
    limits_problem,
    narrowing,
    wanted_slice,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.records import replace

NODE_UNPRIVILEGED = (
    "bcd node runs without root and without [helper]: it cannot write /etc/cdi or create hold slices "
    "(run bcd node as root, or under bcd helper)"
)


def bind_new(ctx: Pass, live: Mapping[str, LiveHold], damaged: Mapping[str, LiveHold], claims: Claims) -> Tuple[Outcome, Claims]:
    """4. New holds, in spec order: checked, then bound (slice, spec, env file, event). Each bound hold's
    atoms and memory are claimed against the holds after it; a hold refused at any check claims nothing
    (the claims its checks would have taken are dropped with it). A bind that takes atoms or memory a
    release of this pass frees needs that release (``Bind.needs``)."""
    refused = set(refusal.allocation_id for refusal in ctx.parsed.refusals)
    decided = [Outcome(refusals=tuple(ctx.parsed.refusals))]  # joined once, at the end
    for assignment in ctx.parsed.assignments:
        if assignment.allocation_id in live or assignment.allocation_id in refused:
            continue
        outcome, claims = _bind_one(ctx, assignment, damaged, claims)
        decided.append(outcome)
    bound = Outcome.join(decided)
    # (allocation, locality note) of each hold bound off its GPUs' NUMA nodes: said in one warning
    remote = [(action.allocation_id, action.locality) for action in bound.actions
              if isinstance(action, Bind) and action.locality is not None]
    unreported = ctx.superseded & kubernetes_released(ctx.observed)
    return replace(bound, actions=tuple(in_need_order(bound.actions, unreported)),
                   warnings=bound.warnings + ((locality_warning(remote),) if remote else ())), claims


def _bind_one(ctx: Pass, assignment: Assignment, damaged: Mapping[str, LiveHold], claims: Claims) -> Tuple[Outcome, Claims]:
    """One new hold: checked, rendered and bound; returns ``claims`` with its atoms and memory, or as they
    were when it is refused (or cannot be rendered now)."""
    observed, generation, allocation_id = ctx.observed, ctx.generation, assignment.allocation_id
    final = _final_refusal(ctx, allocation_id, damaged)
    if final is not None:  # refused at this generation already (or in an earlier round): final
        return Outcome(refusals=(final,)), claims
    try:
        checked, atoms, admitted = _check_new(ctx, claims, assignment)
    except (AtomRefused, Exhausted) as exc:
        reason = exc.reason if isinstance(exc, AtomRefused) else Reason.RESOURCES_EXHAUSTED
        return _refused(ctx, Refusal(allocation_id, reason, str(exc)), damaged), claims
    notes: List[str] = []
    try:
        spec, env = render_hold(assignment, atoms, generation, observed.vendor, observed.mps, notes,
                                observed.runtimes)
    except RenderRefused as exc:
        return checked + _refused(ctx, Refusal(allocation_id, exc.reason, str(exc)), damaged), claims
    except RenderError as exc:
        return checked + Outcome(errors=(str(exc),)), claims
    rendered = Outcome(warnings=tuple(notes), renders={allocation_id: render_record(
        render_key(assignment, atoms, generation, observed.vendor, observed.mps, observed.runtimes), spec, env, notes)})
    needs = set(claims.needs(atoms))
    if needs_admission(assignment.limits):
        needs |= set(claims.memory_released())
    cgroup_parent = cgroup_parent_of(assignment, assignment.kubernetes)
    action = _bind_step(ctx, assignment, atoms, (spec, env), tuple(sorted(needs)), damaged.get(allocation_id))
    bound = Outcome(actions=(action,), sliced=frozenset([cgroup_parent]) if cgroup_parent is not None else frozenset(),
                    holds=(hold_summary(allocation_id, assignment.reservation_id, generation, atoms, assignment.kubernetes,
                                        cgroup_parent),))
    return checked + rendered + bound, admitted.hold(allocation_id, atoms)


def _final_refusal(ctx: Pass, allocation_id: str, damaged: Mapping[str, LiveHold]) -> Optional[Refusal]:
    """The refusal a new hold had at this generation already (the ledger's), or in an earlier round of this pass
    (but for a hold whose damaged spec is written again): a refusal is final at its generation."""
    found = ctx.observed.ledger.refusal_at(allocation_id, ctx.generation)
    if found is not None:
        return found
    return None if allocation_id in damaged else ctx.withheld.get(allocation_id)


def _refused(ctx: Pass, refusal: Refusal, damaged: Mapping[str, LiveHold]) -> Outcome:
    """A new hold refused: it claims nothing. One whose spec is damaged still has it set aside, and what was
    bound is released."""
    if refusal.allocation_id not in damaged:
        return Outcome(refusals=(refusal,))
    return Outcome(refusals=(refusal,), actions=(damaged_release(ctx, damaged[refusal.allocation_id], "refused"),))


def _bind_step(ctx: Pass, assignment: Assignment, atoms: Sequence[Atom], rendered: Tuple[bytes, bytes], needs: Tuple[str, ...],
               old: Optional[LiveHold]) -> Bind:
    """The step that binds a checked, rendered (``spec, env``) new hold: a ``Rebind`` over ``old``, its damaged
    spec set aside, when there is one."""
    observed, generation, allocation_id = ctx.observed, ctx.generation, assignment.allocation_id
    spec, env = rendered
    cgroup_parent = cgroup_parent_of(assignment, assignment.kubernetes)
    event: Optional[Dict[str, Any]] = bound_event(observed, allocation_id, generation, atoms, cgroup_parent)
    request = hold_request(assignment, generation, observed.runtimes)
    # the env file first: the spec makes the hold live, so a hold is never live without its env file
    stale = allocation_id in ctx.stale_env  # removed before the binds (remove_stale_env)
    files: Tuple[Union[FileChange, SpecAside], ...] = (
        FileChange("allocation-env", env_file_path(allocation_id), None if stale else observed.env_files.get(allocation_id),
                   env, request),
        FileChange("cdi", cdi_spec_path(allocation_id), None, spec, request))
    device_ids, limits = tuple(atom.id for atom in atoms), limits_record(assignment.limits)
    slice_apply = wanted_slice_op(assignment, observed.slices.get(cgroup_parent)) if cgroup_parent is not None else None
    note = _locality(observed, assignment, atoms)
    if old is None:
        return Bind(allocation_id, files, event, device_ids, generation, limits, slice_apply, needs, locality=note)
    # written again from its assignment: no AllocationBound when the node already reported it bound with these
    # devices and this cgroup parent
    was = observed.ledger.bound.get(allocation_id)
    if was is not None and was.reported_on(device_ids) and assignment.limits == was.limits:
        event = None
    return Rebind(allocation_id, (aside_of(observed, old),) + files, event, device_ids, generation, limits, slice_apply,
                  needs, locality=note)


def _locality(observed: Observed, assignment: Assignment, atoms: Sequence[Atom]) -> Optional[Dict[str, Any]]:
    """A new hold's note when its cpus or mems lie outside its GPUs' NUMA nodes (``admission.locality``)."""
    limits = assignment.limits
    if observed.cpus is None or limits is None or not (limits.cpus or limits.mems):
        return None
    return locality(limits, gpu_numa_nodes(atoms, observed.inventory), observed.cpus)


def in_need_order(actions: Sequence[Action], unreported: FrozenSet[str]) -> List[Action]:
    """``actions`` in their order, but each bind after the binds of the allocations it needs that are
    withdrawn ``unreported``: a Kubernetes hold moved unreported frees its old atoms only with its new
    ``AllocationBound``, so a hold that takes them is bound after it (and, through ``needs``, not at all if
    it fails). A release that is reported comes before every bind already."""
    binds = set(action.allocation_id for action in actions if isinstance(action, Bind)) & unreported
    ordered: List[Action] = []
    placed: Set[str] = set()
    left = list(actions)
    while left:
        ready = next((i for i, action in enumerate(left)
                      if all(needed in placed or needed not in binds or needed == action.allocation_id
                             for needed in _needs(action))), 0)  # a cycle: spec order
        action = left.pop(ready)
        ordered.append(action)
        placed.add(action.allocation_id)
    return ordered


def _needs(action: Action) -> Tuple[str, ...]:
    return action.needs if isinstance(action, Bind) else ()


def _check_new(ctx: Pass, claims: Claims, assignment: Assignment) -> Tuple[Outcome, List[Atom], Claims]:
    """The checks of a new hold in order: binding, privilege, atoms, conflicts, the slice, the host's CPUs and
    NUMA nodes, host admission. Returns what
    it says (a warning), its atoms and ``claims`` with its memory booked (kept by the caller only if the hold
    is bound)."""
    observed = ctx.observed
    if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
        raise AtomRefused(Reason.UNSUPPORTED_BINDING, unsupported_binding(assignment.binding))
    if not observed.privileged:
        raise AtomRefused(Reason.NODE_UNPRIVILEGED, NODE_UNPRIVILEGED)
    atoms = resolve_devices(assignment.devices, observed.inventory)
    sick: List[str] = []
    for atom in atoms:
        message = claims.unhealthy_of(atom.gpu_uuid)
        if message and message not in sick:
            sick.append(message)
    if sick:
        raise AtomRefused(Reason.DEVICE_MISSING, "; ".join(sick))
    found = conflicts(atoms, claims, assignment.allocation_id)
    if found:
        raise AtomRefused(Reason.OVERLAP, "; ".join(found))
    if cgroup_parent_of(assignment, assignment.kubernetes) is not None and observed.slices_unavailable:
        raise AtomRefused(Reason.INVALID_ASSIGNMENT, "limits: this node cannot create hold slices (%s)"
                          % observed.slices_unavailable)
    problem = limits_problem(assignment.limits) if cgroup_parent_of(assignment, assignment.kubernetes) else None
    if problem is not None:  # a quota that starves the workload (domain.slices.CPU_QUOTA_FLOOR)
        raise AtomRefused(Reason.INVALID_ASSIGNMENT, problem)
    problem = cpus_problem(assignment.limits, observed.cpus)
    if problem is not None:  # CPUs not online, NUMA nodes without memory: hardware this node does not have
        raise AtomRefused(Reason.INVALID_ASSIGNMENT, problem)
    problem = _narrows_its_running_slice(observed, assignment)
    if problem is not None:  # cpus or mems taken from the workload its earlier hold left running in its slice
        raise AtomRefused(Reason.RESOURCES_EXHAUSTED, problem)
    limits = assignment.limits
    if limits is not None and needs_admission(limits):
        if cgroup_parent_of(assignment, assignment.kubernetes) is not None:
            # its own slice may still run its old hold's workload: the new limits replace the slice's, admitted
            # once (the slice's change is held to the never-kill rules where it is made: check_slice_change)
            admitted = claims.admit_into_slice(assignment.allocation_id, limits)
        else:
            admitted = claims.admit(assignment.allocation_id, limits)
        return unreadable_memory(claims), atoms, admitted
    return Outcome(), atoms, claims


def _narrows_its_running_slice(observed: Observed, assignment: Assignment) -> Optional[str]:
    """Why a new hold bound again into its own slice (back after its release) is refused while that slice still
    runs its earlier hold's workload, or None: its ``cpus`` or ``mems`` would take CPUs or memory nodes from that
    workload (``_narrowing``). The slice step would refuse them (``check_slice_change``) and the bind be retried
    for as long as the workload runs, the section ``PROGRESSING`` with nothing said to the control plane; refused
    here (``resources-exhausted``, final at its generation), check mode plans the same. A hold moved to other
    devices whose old hold is live is refused before anything is released (``refused_move``). Widening, the same
    lists, or an empty slice bind as usual."""
    found = _narrowing(observed, assignment)
    if found is None:
        return None
    return "%s; %s, and the slice still runs the workload of %s's earlier hold" % (
        found, RUNNING_CPUSET, assignment.allocation_id)


def _narrowing(observed: Observed, assignment: Assignment) -> Optional[str]:
    """What the new hold's ``cpus`` or ``mems`` take from the workload running in its own slice
    (``slices.narrowing``; a list where the slice has none narrows it from every one), or None."""
    name = cgroup_parent_of(assignment, assignment.kubernetes)
    if name is None:
        return None
    wanted = wanted_slice(assignment.limits)
    return narrowing(observed.slices.get(name), wanted[0]) if wanted is not None else None


def refused_move(observed: Observed, assignment: Assignment) -> Optional[Refusal]:
    """The refusal of a plain hold moved to other devices (``assignment``) while its slice still runs the workload
    of its live hold, whose new ``cpus`` or ``mems`` would narrow that slice (``_narrowing``), or None. Decided
    when the pass is planned, before anything is released: the live hold is kept as it was bound (its devices
    stay its own, claimed against every other hold of the pass) and the refusal is said as ``HoldChangeRefused``,
    never as an ``AllocationFailed`` on which the control plane would let go devices the node still holds and
    its workload still uses (``planner._report_failures``). Not final at its generation: every pass judges it
    again, and the first whose slice is empty (or whose limits no longer narrow it) moves the hold. A damaged
    spec (set aside and written again) and a Kubernetes hold (no slice of its own) are not kept this way."""
    hold = observed.live.get(assignment.allocation_id)
    if hold is None or hold.problem is not None or hold.kubernetes or assignment.kubernetes \
            or assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES) \
            or sorted(hold.device_ids) == sorted(ref.id for ref in assignment.devices):
        return None
    found = _narrowing(observed, assignment)
    if found is None:
        return None
    return Refusal(assignment.allocation_id, Reason.RESOURCES_EXHAUSTED,
                   "%s; %s, and the slice still runs the workload of %s's hold on %s: it is kept there as bound, "
                   "and moves once the slice is empty" % (found, RUNNING_CPUSET, assignment.allocation_id,
                                                          ", ".join(hold.device_ids)))

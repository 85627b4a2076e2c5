# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Phase 3 of a pass (``planner.plan_pass``): the holds still wanted are kept. A missing slice is created
again (after a reboot), a changed rendering is written again, a missing env file rewritten, a hold never
reported is reported; limits that grow are admitted against the claims, or refused and the hold keeps what it
was bound with. Returns an ``decisions.Outcome`` and the claims with the kept holds' growth booked."""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    LiveHold,
    RenderError,
    RenderRefused,
    env_atoms,
    env_file_path,
    render_hold,
    render_key,
    render_record,
    unchanged,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment, Limits, hold_request, limits_record
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import Atom, resolve_atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import (
    ApplySlice,
    CreateSlice,
    FileChange,
    ReportBound,
    Rerender,
    RewriteFile,
    SliceApply,
    WriteEnv,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import Exhausted, cpus_problem
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import Outcome, Pass, needs_root
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.observed import Observed
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reading import unreadable_memory, wanted_slice_op
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import bound_event, hold_summary, in_report_order, summary_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    SliceState,
    cgroup_parent_of,
    cpuset_problem,
    limits_of_slice,
    limits_problem,
    same_properties,
    slice_name,
    wanted_slice,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.records import replace


def keep_wanted(ctx: Pass, live: Mapping[str, LiveHold], claims: Claims) -> Tuple[Outcome, Claims]:
    """3. Holds still wanted: recreate a missing slice, re-render, rewrite env, report if never reported.
    Returns what it decided and the claims with what kept holds' grown limits booked."""
    decided: List[Outcome] = []  # joined once, at the end
    for allocation_id in [a.allocation_id for a in ctx.parsed.assignments] + sorted(ctx.parsed.refused_ids):
        hold = live.get(allocation_id)
        if hold is None:
            continue
        assignment = ctx.wanted.get(allocation_id)
        if assignment is None:  # refused this pass: kept exactly as it is
            decided.append(Outcome.join([_resolved(ctx.observed, hold)[1], Outcome(
                sliced=frozenset([hold.cgroup_parent]) if hold.cgroup_parent else frozenset(),
                holds=(summary_of(hold),))]))
            continue
        kept, claims = _keep_one(ctx, hold, assignment, claims)
        decided.append(kept)
    kept = Outcome.join(decided)
    return replace(kept, actions=tuple(in_report_order(kept.actions))), claims


def _resolved(observed: Observed, hold: LiveHold) -> Tuple[List[Optional[Atom]], Outcome]:
    """A kept hold's atoms as the inventory has them now (None for one it has not), and what is said of those
    missing and of a spec that cannot be read back."""
    atoms: List[Optional[Atom]] = []
    said: List[str] = []
    for atom in hold.atoms:
        found, why = resolve_atom(atom, observed.inventory)
        atoms.append(found)
        if found is None:
            said.append("%s: %s; its spec is left as it is" % (hold.allocation_id, why))
    if hold.problem:
        said.append(hold.problem)
    return atoms, Outcome(warnings=tuple(said))


def _keep_one(ctx: Pass, hold: LiveHold, assignment: Assignment, claims: Claims) -> Tuple[Outcome, Claims]:
    """One hold still wanted with ``assignment``: its limits (admitted when they grow), slice, files and report."""
    atoms, said = _resolved(ctx.observed, hold)
    assignment, stays = _kept_in_its_slice(ctx, assignment, hold, _all_found(atoms))
    grown, assignment, claims = _admit_growth(ctx, claims, assignment, hold)
    cgroup_parent = cgroup_parent_of(assignment, hold.kubernetes)
    summary = hold_summary(hold.allocation_id, assignment.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                           cgroup_parent)
    return Outcome.join([said, stays, grown, _keep_slice(ctx, assignment, hold), _booked(ctx.observed, assignment, hold),
                         _kept_files(ctx, assignment, hold, atoms), Outcome(holds=(summary,)),
                         _report_again(ctx, assignment, hold, cgroup_parent)]), claims


def _all_found(atoms: Sequence[Optional[Atom]]) -> Optional[List[Atom]]:
    """A kept hold's atoms when the inventory has every one of them, else None (some of its devices are missing)."""
    found = [atom for atom in atoms if atom is not None]
    return found if len(found) == len(atoms) else None


def _kept_files(ctx: Pass, assignment: Assignment, hold: LiveHold, atoms: Sequence[Optional[Atom]]) -> Outcome:
    """A kept hold's spec and env file, written again where they no longer match (``_keep_files``); none for a
    spec that cannot be read back."""
    if hold.problem:
        return Outcome()
    found = _all_found(atoms)
    if found is not None:
        return _keep_files(ctx, assignment, hold, found)
    # /run is emptied by a reboot before mig-layout makes the MIG instances again: the env file is written from
    # what the spec on disk says, the spec itself left as it is
    known = env_atoms(hold, atoms)
    if known is not None:
        return _keep_files(ctx, assignment, hold, known, env_only=True)
    return Outcome(warnings=("%s: its env file waits until its devices are back (its spec does not name them)"
                             % hold.allocation_id,))


def _report_again(ctx: Pass, assignment: Assignment, hold: LiveHold, cgroup_parent: Optional[str]) -> Outcome:
    """A kept hold's ``AllocationBound`` again, when the node never journaled it, or last reported it on other
    devices or with another cgroup parent."""
    observed, allocation_id = ctx.observed, hold.allocation_id
    reported = observed.ledger.bound.get(allocation_id)
    if reported is None:
        why = ReportBound.NEVER_JOURNALED
    elif reported.device_ids and not reported.reported_on(hold.device_ids):
        # moved unreported (a Kubernetes hold's new devices), and the pass died before its AllocationBound
        why = ReportBound.MOVED
    elif cgroup_parent != reported.reported_parent(hold.cgroup_parent) and observed.privileged:
        # the control plane learns where the hold's workload now runs (a slice added or gone), also when
        # the pass that wrote its spec could not report it (an older ledger kept no parent: its spec's)
        why = ReportBound.REPARENTED
    else:
        return Outcome()
    return Outcome(actions=(ReportBound(
        allocation_id, event=bound_event(observed, allocation_id, ctx.generation, hold.atoms, cgroup_parent),
        device_ids=tuple(hold.device_ids), generation=ctx.generation, limits=limits_record(assignment.limits), why=why,
        reported_on=reported.device_ids if reported is not None else ()),))


def _booked(observed: Observed, assignment: Assignment, hold: LiveHold) -> Outcome:
    """A kept hold without a slice (a Kubernetes hold) whose limits changed: what it books now goes to the ledger
    at the end of the pass, as a slice's limits do when it is set, so admission counts it from the next pass on
    (its growth, admitted once, was admitted again by every pass, and refused once others took the room)."""
    reported = observed.ledger.bound.get(assignment.allocation_id)
    if reported is None or cgroup_parent_of(assignment, hold.kubernetes) is not None:
        return Outcome()
    limits = assignment.limits
    return Outcome() if limits == reported.limits else Outcome(booked={assignment.allocation_id: limits})


def grows(old: Optional[Limits], new: Optional[Limits]) -> bool:
    """Whether ``new`` limits book more memory or huge pages than ``old`` (None: nothing)."""
    def booked(limits: Optional[Limits], name: str) -> int:
        return (getattr(limits, name) if limits is not None else None) or 0

    return any(booked(new, name) > booked(old, name) for name in ("memory_bytes", "hugepages_2mi", "hugepages_1gi"))


def placed(limits: Optional[Limits]) -> Tuple[Optional[str], Optional[str]]:
    """Where limits place a hold: its ``cpus`` and ``mems`` (None for none)."""
    return (limits.cpus, limits.mems) if limits is not None else (None, None)


def _bound_limits(observed: Observed, hold: LiveHold) -> Optional[Limits]:
    """The limits a kept hold was bound with: the ledger's, or (a ledger that kept none) its slice's."""
    recorded = observed.ledger.limits_of(hold.allocation_id)
    current = observed.slices.get(hold.cgroup_parent) if hold.cgroup_parent else None
    if recorded is None and current is not None:
        recorded = limits_of_slice(current)
    return recorded


def _kept_in_its_slice(ctx: Pass, assignment: Assignment, hold: LiveHold, atoms: Optional[Sequence[Atom]]) -> Tuple[Assignment, Outcome]:
    """A kept hold whose new limits put it into a slice or take it out of one changes its cgroup parent, which
    its spec names: it moves only with its spec written again. When its spec is left as it is (some of its
    devices are missing: ``atoms`` None) or the node refuses to render it (``RenderRefused``: a runtime's
    cdiVersion ceiling, a device node the vendor spec names gone), the hold is kept as it is wholly, its slice
    and the limits it was bound with too: the slice its spec names is not stopped under it (nor one made that
    its spec does not name), and no AllocationBound reports a cgroup parent its spec does not have. The first
    pass that can write its spec moves it. Returns the assignment as kept and what is said."""
    if hold.problem or cgroup_parent_of(assignment, hold.kubernetes) == hold.cgroup_parent:
        return assignment, Outcome()
    observed = ctx.observed
    why = "some of its devices are missing"
    if atoms is not None:
        generation = hold.generation if hold.generation is not None else ctx.generation
        try:
            render_hold(assignment, atoms, generation, observed.vendor, observed.mps, [], observed.runtimes)
            return assignment, Outcome()
        except RenderRefused as exc:
            why = str(exc)
        except RenderError:  # not valid CDI: _keep_files says so, and the pass is retried
            return assignment, Outcome()
    kept = replace(assignment, limits=_bound_limits(observed, hold))
    if cgroup_parent_of(kept, hold.kubernetes) != hold.cgroup_parent:  # what it was bound with is not known
        return assignment, Outcome()
    return kept, Outcome(warnings=("%s keeps the limits it was bound with (cgroup parent %s) until its spec can be "
                                   "written again: %s" % (assignment.allocation_id, hold.cgroup_parent or "none", why),))


def _admit_growth(ctx: Pass, claims: Claims, assignment: Assignment, hold: LiveHold) -> Tuple[Outcome, Assignment, Claims]:
    """A kept hold whose limits grow gets them only if the host has room; otherwise it keeps what it was
    bound with and is refused (``resources-exhausted``) at this generation, finally. New limits no slice
    takes (a quota under the floor) are refused the same way (``invalid-assignment``). Returns what it
    decided, the assignment as kept and the claims with the growth booked."""
    if assignment.allocation_id not in ctx.observed.ledger.bound:  # never reported: bound with these limits already
        return Outcome(), assignment, claims
    recorded = _bound_limits(ctx.observed, hold)
    kept = replace(assignment, limits=recorded)
    refused = _limits_refused(ctx, assignment, hold, recorded)
    if refused is not None:
        return Outcome(refusals=(refused,)), kept, claims
    new = assignment.limits
    if new is None or not grows(recorded, new):
        return Outcome(), assignment, claims
    if claims.memory is None:
        return unreadable_memory(claims), assignment, claims
    try:
        claims = claims.admit(assignment.allocation_id, _growth(recorded, new))
    except Exhausted as exc:
        return Outcome(refusals=(_keeps_its_limits(assignment, Reason.RESOURCES_EXHAUSTED, exc),)), kept, claims
    return Outcome(), assignment, claims


def _limits_refused(ctx: Pass, assignment: Assignment, hold: LiveHold, recorded: Optional[Limits]) -> Optional[Refusal]:
    """Why a kept hold's new limits are refused whatever room the host has (it keeps those it was bound with,
    ``recorded``), or None: a refusal journaled at this generation, a quota no slice takes, CPUs or NUMA nodes
    the host does not have, cpus or mems taken from a running workload."""
    final = ctx.observed.ledger.refusal_at(assignment.allocation_id, ctx.generation)
    if final is not None:
        return final
    problem = limits_problem(assignment.limits) if cgroup_parent_of(assignment, hold.kubernetes) else None
    if problem is not None and limits_record(assignment.limits) != limits_record(recorded):
        # a quota that starves the workload is refused as for a new hold: no slice would ever take it
        return _keeps_its_limits(assignment, Reason.INVALID_ASSIGNMENT, problem)
    problem = cpus_problem(assignment.limits, ctx.observed.cpus) if placed(assignment.limits) != placed(recorded) else None
    if problem is not None:  # new cpus or mems the host does not have: refused as for a new hold
        return _keeps_its_limits(assignment, Reason.INVALID_ASSIGNMENT, problem)
    narrowing = _narrows_running_slice(ctx.observed, assignment, hold)
    if narrowing is not None:  # cpus or mems taken from a running workload: refused until its slice is empty
        return _keeps_its_limits(assignment, Reason.RESOURCES_EXHAUSTED, narrowing)
    return None


def _keeps_its_limits(assignment: Assignment, reason: str, why: object) -> Refusal:
    """A kept hold's new limits refused for ``reason`` (``why``): it keeps those it was bound with."""
    return Refusal(assignment.allocation_id, reason, "%s; the hold keeps its limits" % why)


def _growth(recorded: Optional[Limits], new: Limits) -> Limits:
    """What ``new`` limits book of memory and huge pages beyond ``recorded`` (on ``new``'s NUMA nodes)."""
    def grown(name: str) -> Optional[int]:
        return max(0, (getattr(new, name) or 0) - (getattr(recorded, name, None) or 0)) or None

    return Limits(mems=new.mems, memory_bytes=grown("memory_bytes"), hugepages_2mi=grown("hugepages_2mi"),
                  hugepages_1gi=grown("hugepages_1gi"))


def _narrows_running_slice(observed: Observed, assignment: Assignment, hold: LiveHold) -> Optional[str]:
    """Why a kept hold's new ``cpus``/``mems`` are refused on its populated slice (a narrowing), or None: the
    rule the helper and every slice backend apply (``slices.cpuset_problem``)."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return None
    current = observed.slices.get(slice_name(assignment.allocation_id))
    wanted = wanted_slice(assignment.limits)
    refused = cpuset_problem(current, wanted[0]) if current is not None and wanted is not None else None
    return refused[0] if refused is not None else None


def _keep_slice(ctx: Pass, assignment: Assignment, hold: LiveHold) -> Outcome:
    """A kept hold's slice: created again when missing (systemd forgets runtime properties on a reboot),
    set again when its properties (as the host shows them) or its recorded limits differ from the wanted ones."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return Outcome()
    observed = ctx.observed
    current = observed.slices.get(slice_name(assignment.allocation_id))
    op = wanted_slice_op(assignment, current)
    if op is None:  # limits that book nothing a slice enforces: no slice, as cgroup_parent_of said
        return Outcome()
    sliced = Outcome(sliced=frozenset([op.name]))
    limits = limits_record(assignment.limits)
    if current is None:
        action = CreateSlice(assignment.allocation_id, op, tuple(hold.device_ids), ctx.generation, limits)
    else:
        why = _slice_differs(current, op, observed.ledger.limits_of(assignment.allocation_id), assignment.limits)
        if why is None:
            return sliced
        action = ApplySlice(assignment.allocation_id, op, tuple(hold.device_ids), ctx.generation, limits, why)
    if not observed.privileged:
        return sliced + Outcome(errors=(needs_root(action.text),))
    return sliced + Outcome(actions=(action,))


def _slice_differs(current: SliceState, op: SliceApply, recorded: Optional[Limits], limits: Optional[Limits]) -> Optional[str]:
    """Why a kept hold's slice (``current``, as the host shows it) is set again to ``op``, or None."""
    if current.properties is not None and not same_properties(current.properties, op.properties):
        return "its properties differ"
    if current.hugetlb_exact and current.hugetlb_max != op.hugetlb_max:
        return "its huge page limits differ"
    if recorded is not None and recorded != limits:
        # where the host cannot show a property, the limits the hold was bound with are the ledger's
        return "its limits changed"
    return None


def _keep_files(ctx: Pass, assignment: Assignment, hold: LiveHold, atoms: Sequence[Atom], env_only: bool = False) -> Outcome:
    """A kept hold: write again what no longer matches what it would render to now (``env_only``: its
    env file alone, when some of its devices are missing and its spec is left as it is)."""
    observed = ctx.observed
    allocation_id = assignment.allocation_id
    bound_generation = hold.generation if hold.generation is not None else ctx.generation
    key = None
    if not env_only:  # what the last pass rendered for these very inputs is on disk: nothing to do
        key = render_key(assignment, atoms, bound_generation, observed.vendor, observed.mps, observed.runtimes)
        record = observed.ledger.renders.get(allocation_id)
        if record is not None and unchanged(record, key, hold.content, observed.env_files.get(allocation_id)):
            return Outcome(warnings=tuple(record.get("notes") or []), renders={allocation_id: record})
    notes: List[str] = []
    try:
        spec, env = render_hold(assignment, atoms, bound_generation, observed.vendor, observed.mps, notes,
                                observed.runtimes)
    except RenderRefused as exc:  # a kept hold is the control plane's to release: left as it is, said
        return Outcome(warnings=("%s is kept as it is: %s" % (allocation_id, exc),))
    except RenderError as exc:
        return Outcome(errors=(str(exc),))
    decided = Outcome()
    if key is not None:  # the spec too (not ``env_only``): its render record
        decided += Outcome(warnings=tuple(notes), renders={allocation_id: render_record(key, spec, env, notes)})
    changes: List[RewriteFile] = []
    request = hold_request(assignment, bound_generation, observed.runtimes)
    device_ids = tuple(hold.device_ids)
    if spec != hold.content and not env_only:
        if hold.reservation_id != assignment.reservation_id:
            why = "its reservation id changed"
        elif not assignment.reservation_id and hold.reservation_annotated:
            why = "it has no reservation id, and no empty bcd.dev/reservation-id annotation is written any more"
        else:
            why = "the vendor spec, the inventory or its limits changed"
        changes.append(Rerender(allocation_id, FileChange("cdi", hold.path, hold.content, spec, request), device_ids,
                                ctx.generation, why))
    current_env = observed.env_files.get(allocation_id)
    if env != current_env:
        changes.append(WriteEnv(allocation_id, FileChange("allocation-env", env_file_path(allocation_id), current_env,
                                                          env, request), device_ids, ctx.generation))
    for change in changes:
        decided += Outcome(actions=(change,)) if observed.privileged else Outcome(errors=(needs_root(change.text),))
    return decided

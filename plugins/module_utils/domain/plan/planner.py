# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: one pure function from the wanted assignments and the observed
host to the ordered plan of a pass (a list of ``actions.Action``).

Check mode is this plan without the apply; diff mode shows it; a real run
executes exactly it. ``plan_pass`` runs the phases of a pass in this order
(docs/architecture.md, "One pass"):

1. Kubernetes releases pending from earlier passes are reported once no pod
   holds them, or dropped unreported when the spec wants the allocation
   again (``kube_plan``); plain releases cut short by an earlier pass are
   finished;
2. holds no longer wanted are released (before any bind, so a GPU can move
   between allocations in one generation); a released hold's slice is
   stopped once empty; a Kubernetes hold is recorded and withdrawn, and
   reported once free; env files a bind that never finished left (no spec,
   report or release behind them) are removed, their GPUs claimed until
   then; then slices of holds gone earlier are stopped once empty;
3. holds still wanted are kept: a missing slice is created again (after a
   reboot), a changed rendering is written again, a missing env file
   rewritten, a hold never reported is reported;
4. new holds, in spec order, are checked — binding, privilege, atoms,
   conflicts, host admission — and bound, their slice first; each claims its
   atoms (and its memory) against the holds after it; one bound again into
   its own slice, still running a workload, replaces that slice's booking
   (admitted once). One refused at this generation by an earlier pass stays
   refused with the same reason: a refusal is final at its generation (an
   input that sends it with another assignment at that generation is refused
   before the pass: ``generations.pass_generation``);
5. every refusal not yet reported for this generation becomes one
   ``AllocationFailed``.
"""

from __future__ import annotations

from typing import AbstractSet, Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Type, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import (
    Action,
    ApplySlice,
    Bind,
    CreateSlice,
    FileChange,
    FinishRelease,
    KeepSlice,
    Rebind,
    Refuse,
    Release,
    ReleaseDamaged,
    RemoveEnv,
    ReportBound,
    Rerender,
    RewriteFile,
    SliceApply,
    SliceStop,
    SpecAside,
    StopSlice,
    WriteEnv,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import (
    UNREADABLE,
    Exhausted,
    cpus_problem,
    gpu_numa_nodes,
    locality,
    locality_warning,
    needs_admission,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    InvalidAssignment,
    Limits,
    hold_request,
    limits_record,
    parse_limits,
    unsupported_binding,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import (
    Atom,
    AtomRefused,
    atoms_of,
    resolve_atom,
    resolve_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    RenderError,
    RenderRefused,
    cdi_spec_path,
    damaged_spec_path,
    env_atoms,
    env_file_path,
    render_hold,
    render_key,
    render_record,
    unchanged,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import stale_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import PENDING, RELEASING, SLICE, Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.condition_events import condition_reports
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import (
    UNREADABLE_RELEASES,
    conflicts,
    env_file_atoms,
    env_file_claim,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.decisions import (
    Freed,
    Outcome,
    Pass,
    Pending,
    Refusal,
    Released,
    needs_root,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.diffs import plan_diffs
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import ALLOCATION_FAILED
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import gpu_health, unhealthy_condition, unhealthy_message
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.kube import (
    plan_kubernetes_releases,
    release_kubernetes,
    retained_atoms,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import DEFAULT_STATE_DIR, Releases, pending_summary, release_conditions
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record, replace
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import (
    bound_event,
    damaged_condition,
    hold_summary,
    released_event,
    summary_of,
    unknown_version_condition,
    withdraw_files,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    allocation_of,
    cgroup_parent_of,
    cpuset_problem,
    limits_of_slice,
    limits_problem,
    same_properties,
    settings_of,
    slice_name,
    wanted_slice,
)

NODE_UNPRIVILEGED = (
    "bcd node runs without root and without [helper]: it cannot write /etc/cdi or create hold slices "
    "(run bcd node as root, or under bcd helper)"
)


@record
class Observed:
    """What a pass saw on the host, read once before planning."""

    node_id: str
    boot_id: str
    inventory: Any
    vendor: Any
    live: Dict[str, Any]  # allocation id -> LiveHold, from /etc/cdi
    env_files: Dict[str, Optional[bytes]]  # allocation id -> current env file content
    ledger: Any
    privileged: bool = True
    mps: bool = False
    domains: List = field(default_factory=list)
    domains_error: Optional[str] = None
    slices: Dict[str, Any] = field(default_factory=dict)  # slice name -> SliceState
    slices_unavailable: Optional[str] = None  # why this host cannot make hold slices
    memory: Optional[Any] = None  # HostMemory, read only when a new hold needs admission
    # HostCpus: the online CPUs and NUMA nodes, read only when a new or changed hold books cpus or mems; None:
    # not read, or unreadable (``cpus_unreadable`` says why), and cpus and mems go unchecked
    cpus: Optional[Any] = None
    cpus_unreadable: Optional[str] = None
    releases: Releases = field(default_factory=Releases)  # pending Kubernetes releases
    kube: Optional[Any] = None  # KubeView: what pods hold, asked only when a Kubernetes release needs it
    now: float = 0.0
    state_dir: str = DEFAULT_STATE_DIR
    damaged_specs: List[str] = field(default_factory=list)  # node paths of damaged specs set aside earlier
    runtimes: List = field(default_factory=list)  # cdi_runtimes.Runtime: the node's container runtimes
    maintenance: Dict[str, dict] = field(default_factory=dict)  # GPU UUID -> {reason, since}: out of service
    health_cleared: Dict[str, float] = field(default_factory=dict)  # GPU UUID -> when it left maintenance
    spec_dir: bool = True  # /etc/cdi is a directory: a reported hold whose spec is not there is gone


@record
class Failure:
    allocation_id: str
    generation: int
    reason: str
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return {"allocation_id": self.allocation_id, "generation": self.generation,
                "reason": self.reason, "message": self.message}


@record
class Plan:
    generation: int
    actions: List = field(default_factory=list)
    failures: List[Failure] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # retryable: the pass cannot finish now
    holds: List[dict] = field(default_factory=list)  # the holds once the plan is applied
    conditions: List[dict] = field(default_factory=list)
    pending_releases: List[dict] = field(default_factory=list)  # Kubernetes releases still waiting for pods
    vfio: Dict[str, str] = field(default_factory=dict)  # GPUs running domains have now
    renders: Dict[str, dict] = field(default_factory=dict)  # allocation -> render_record, for the next pass
    booked: Dict[str, Optional[dict]] = field(default_factory=dict)  # allocation -> limits a kept hold without a slice books
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


def vfio_claims(instances: Any, observed: Observed) -> Tuple[Dict[str, str], Dict[str, str]]:
    """GPUs VMs have or are to have: the instance specs, the running domains, and
    what still-running domains had at the last pass (a GPU dropped from a running
    VM's spec stays the VM's until its next start)."""
    claims = {}  # type: Dict[str, str]
    for instance in instances or []:
        for gpu in instance.get("gpus") or []:
            claims.setdefault(gpu, instance.get("instance_id") or "?")
    now = {}  # type: Dict[str, str]
    for domain in observed.domains:
        for gpu in domain.gpus:
            now.setdefault(gpu, domain.instance_id)
    if observed.domains_error is None:
        running = set(domain.instance_id for domain in observed.domains)
        remembered = dict((gpu, inst) for gpu, inst in observed.ledger.vfio.items() if inst in running)
    else:
        remembered = dict(observed.ledger.vfio)
    for gpu, instance in list(now.items()) + list(remembered.items()):
        claims.setdefault(gpu, instance)
    merged = dict(remembered)
    merged.update(now)
    return claims, merged


def _release_action(kind: Type[Release], observed: Observed, allocation_id: str, generation: int,
                    device_ids: Sequence[str], why: str) -> Release:
    state = observed.slices.get(slice_name(allocation_id))
    return kind(allocation_id, tuple(withdraw_files(observed, allocation_id)),
                released_event(observed, allocation_id, generation, device_ids), tuple(device_ids), generation, why,
                slice=SliceStop(state.name, settings_of(state)) if state is not None and not state.populated else None,
                busy=state.name if state is not None and state.populated else None)


def limits_from_record(record: Any) -> Optional[Limits]:
    """The ``Limits`` a ledger record keeps (None when it keeps none, or none that pass the input's checks:
    the ledger is data like any other)."""
    try:
        return parse_limits(record)
    except InvalidAssignment:
        return None


def _slice_apply(assignment: Any, current: Any = None) -> SliceApply:
    properties, huge = wanted_slice(assignment.limits)
    return SliceApply(slice_name(assignment.allocation_id), properties, huge,
                      settings_of(current) if current is not None else None, limits_record(assignment.limits))


def _pass_of(generation: int, parsed: Any, observed: Observed, instances: Any,
             superseded: Optional[FrozenSet[str]], withheld: Mapping[str, Refusal]) -> Tuple[Pass, Tuple[Refusal, ...]]:
    """The pass's inputs, and the refusal of each live hold re-sent with a binding the node does not take:
    refused (unsupported-binding) and kept as it is, as for any refused input: the node never drops a hold
    on its own."""
    unsupported = frozenset(assignment.allocation_id for assignment in parsed.assignments
                            if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES)
                            and assignment.allocation_id in observed.live)
    refusals = tuple(Refusal(assignment.allocation_id, Reason.UNSUPPORTED_BINDING, unsupported_binding(assignment.binding))
                     for assignment in parsed.assignments if assignment.allocation_id in unsupported)
    wanted = dict((assignment.allocation_id, assignment) for assignment in parsed.assignments
                  if assignment.allocation_id not in unsupported)
    marker = bool(observed.releases.marker or observed.releases.unreadable is not None)
    ctx = Pass(generation, parsed, observed, instances, wanted, unsupported,
               frozenset(wanted) if superseded is None else superseded, marker, dict(withheld))
    return ctx, refusals


def plan_pass(generation: int, parsed: Any, observed: Observed, instances: Any = None) -> Plan:
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
    superseded = None  # type: Optional[FrozenSet[str]]
    withheld = {}  # type: Dict[str, Refusal]
    while True:
        ctx, plan, live_after = _plan_once(generation, parsed, observed, instances, superseded, withheld)
        unreported = ctx.superseded & _kubernetes_released(observed)
        unbound = (ctx.superseded - live_after) & unreported
        refused = dict((failure.allocation_id, Refusal(failure.allocation_id, failure.reason, failure.message))
                       for failure in plan.failures)
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
    needs = {}  # type: Dict[str, Set[str]]
    for action in actions:
        if isinstance(action, Bind) and action.allocation_id in unreported:
            needs[action.allocation_id] = set(action.needs) & unreported
    for start in sorted(needs, key=ctx.parsed.position):
        seen, path = set(), [start]  # type: Set[str], List[str]
        while path:
            current = path.pop()
            for needed in sorted(needs.get(current, set()) - {current}):
                if needed == start:
                    return frozenset([start])
                if needed not in seen:
                    seen.add(needed)
                    path.append(needed)
    return frozenset()


def _kubernetes_released(observed: Observed) -> Set[str]:
    """Allocations whose Kubernetes hold or pending release a pass may take back unreported, and those whose
    old hold a pass withdrew unreported before it died (``_reported_without_spec``)."""
    return set(observed.releases.pending) | set(
        allocation_id for allocation_id, hold in observed.live.items() if hold.kubernetes) | _reported_without_spec(observed)


def _reported_without_spec(observed: Observed) -> Set[str]:
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


def _bound_again(ctx: Pass, releasing: AbstractSet[str]) -> Released:
    """Allocations reported bound whose spec is gone, to be bound again in this pass (``ctx.superseded``): their
    old devices are freed only by their new AllocationBound (a hold that takes them waits for it), and those
    their new hold takes are theirs still (no hold before them in spec order gets them). One not bound again is
    reported released (``_release_spec_gone``, in the next round of ``plan_pass``)."""
    observed, decided = ctx.observed, []  # type: Observed, List[Released]
    for allocation_id in sorted(_reported_without_spec(observed) & ctx.superseded):
        assignment = ctx.wanted.get(allocation_id)
        if assignment is None or allocation_id in releasing:
            continue
        record = observed.ledger.bound[allocation_id]
        release = observed.releases.pending.get(allocation_id)  # taken back: the old devices pods held
        old = [device_id for device_id in record.get("device_ids") or []
               if release is None or device_id not in release.device_ids]
        taken = retained_atoms(old, assignment)
        decided.append(Released(freeing={allocation_id: Freed(tuple(atoms_of(old)), limits_from_record(record.get("limits")))},
                                retained={allocation_id: taken} if taken else {}))
    return Released.join(decided)


def _plan_once(generation: int, parsed: Any, observed: Observed, instances: Any, superseded: Optional[FrozenSet[str]],
               withheld: Mapping[str, Refusal]) -> Tuple[Pass, Plan, Set[str]]:
    """One round of the phases, in the spec's order, each a function of the observation and the claims;
    the plan is built once from what they returned. Returns the allocations live once it is applied too."""
    ctx, unsupported = _pass_of(generation, parsed, observed, instances, superseded, withheld)
    # 1. Kubernetes releases pending from earlier passes; plain releases cut short
    released = plan_kubernetes_releases(ctx) + _finish_releases(ctx)
    # 2. holds no longer wanted (those the phases above settled are no longer live)
    released += _release_unwanted(ctx, _live(observed, released), released.freeing.keys())
    released += _bound_again(ctx, released.freeing.keys())
    released += _remove_stale_env(ctx)
    live = _live(observed, released)
    vfio, now = vfio_claims(ctx.instances, observed)
    claims = _claims(ctx, live, released, vfio)
    # 3. holds still wanted; 4. new holds
    kept, claims = _keep_wanted(ctx, live, claims)
    bound, claims = _bind_new(ctx, live, released.damaged, claims)
    # slices of holds gone earlier: decided once the slices the kept and bound holds want are known,
    # placed after the releases, before anything is bound
    leftover = _leftover_slices(observed, _released_slices(released.actions + bound.actions) | kept.sliced | bound.sliced)
    decided = Outcome(warnings=released.warnings, errors=released.errors, holds=released.holds,
                      refusals=unsupported) + kept + bound + leftover
    # 5. refusals
    refusals, failures = _report_failures(ctx, decided.refusals)
    actions = list(released.actions + leftover.actions + kept.actions + bound.actions + refusals)
    asides = list(observed.damaged_specs) + [change.aside for action in actions for change in action.node_files()
                                             if isinstance(change, SpecAside)]
    conditions = _conditions(ctx, live, released) + ([damaged_condition(asides)] if asides else [])
    pending_releases = pending_summary([pending.release for pending in released.pending.values()], observed.now,
                                       dict((allocation_id, pending.holders)
                                            for allocation_id, pending in released.pending.items()))
    # 6. the conditions that appeared or cleared since the last pass, each one signed event
    actions.extend(condition_reports(observed, conditions, pending_releases, generation))
    plan = Plan(generation=generation, actions=actions, failures=failures, warnings=_said_once(decided.warnings, UNREADABLE),
                errors=list(decided.errors), holds=list(decided.holds), conditions=conditions,
                pending_releases=pending_releases, vfio=dict(sorted(now.items())), renders=dict(decided.renders),
                booked=dict(decided.booked), vendor_path=getattr(observed.vendor, "path", None))
    return ctx, plan, set(live) | set(action.allocation_id for action in actions if isinstance(action, Bind))


def _said_once(warnings: Sequence[str], warning: str) -> List[str]:
    """``warnings`` with ``warning`` said once a pass, where it first is."""
    if list(warnings).count(warning) < 2:
        return list(warnings)
    first = list(warnings).index(warning) + 1
    return list(warnings[:first]) + [said for said in warnings[first:] if said != warning]


def _live(observed: Observed, released: Released) -> Dict[str, Any]:
    """The live holds, but those ``released`` releases, withdraws or sets aside."""
    return dict((allocation_id, hold) for allocation_id, hold in observed.live.items()
                if allocation_id not in released.gone)


def _released_slices(actions: Sequence[Action]) -> FrozenSet[str]:
    """The slices the releases among ``actions`` handle: each stops its hold's slice once empty, or keeps it."""
    return frozenset(slice_name(action.allocation_id) for action in actions if isinstance(action, Release))


def _finish_releases(ctx: Pass) -> Released:
    """1. Releases an earlier pass recorded but did not finish."""
    observed, generation, decided = ctx.observed, ctx.generation, []  # type: Observed, int, List[Released]
    for allocation_id in sorted(observed.ledger.unfinished_releases):
        record = observed.ledger.unfinished_releases[allocation_id]
        action = _release_action(FinishRelease, observed, allocation_id, record.get("generation", generation),
                                 record.get("device_ids") or [], "cut short by an earlier pass")
        if (action.files or action.slice) and not observed.privileged:
            decided.append(Released(errors=(needs_root("finishing the release of %s" % allocation_id),)))
            continue
        decided.append(Released(actions=(action,), gone=frozenset([allocation_id])))
        decided.append(_releasing(observed, allocation_id, record.get("device_ids") or []))
    return Released.join(decided)


def _releasing(observed: Observed, allocation_id: str, device_ids: Sequence[str],
               atoms: Optional[Sequence[Atom]] = None) -> Released:
    """A release this pass makes: its atoms and what it booked stay claimed until it is made."""
    current = observed.slices.get(slice_name(allocation_id))
    booked = None
    if current is None or not current.populated:  # a slice still running a workload keeps what it booked
        booked = limits_from_record((observed.ledger.bound.get(allocation_id) or {}).get("limits"))
    return Released(freeing={allocation_id: Freed(tuple(atoms if atoms is not None else atoms_of(device_ids)), booked)})


def _release_unwanted(ctx: Pass, live: Mapping[str, Any], releasing: AbstractSet[str]) -> Released:
    """2. Holds no longer wanted, or wanted with other devices or another binding."""
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
            decided.append(release_kubernetes(ctx, hold, why, wanted=allocation_id in ctx.superseded))
        else:
            decided.append(Released(actions=(_release_action(Release, ctx.observed, allocation_id, ctx.generation,
                                                             hold.device_ids, why),), gone=frozenset([allocation_id])))
            decided.append(_releasing(ctx.observed, allocation_id, hold.device_ids, hold.atoms))
    return Released.join(decided)


def _set_aside(ctx: Pass, hold: Any, assignment: Any) -> Released:
    """A damaged spec (its devices cannot be read back) is never deleted: set aside, and the hold is written
    again from its assignment (``_bind_new``) or, no longer wanted (no ``assignment``), released."""
    observed = ctx.observed
    if not observed.privileged:
        return Released(errors=(needs_root("setting the damaged %s aside" % hold.path),))
    aside = Released(warnings=("%s; it is set aside as %s" % (hold.problem, _aside(observed, hold).aside),),
                     damaged={hold.allocation_id: hold}, gone=frozenset([hold.allocation_id]))
    return aside + _release_damaged(ctx, hold, "no longer wanted") if assignment is None else aside


def _release_spec_gone(ctx: Pass, keep: Set[str], releasing: AbstractSet[str]) -> Released:
    """Holds the node reported bound whose spec is gone (deleted by hand) and that are no longer wanted:
    released, so their env file goes with them and the control plane learns of it. One still wanted is
    bound again from its assignment (``_bind_new``)."""
    observed, decided = ctx.observed, []  # type: Observed, List[Released]
    if not observed.spec_dir:
        return Released()
    for allocation_id in sorted(observed.ledger.bound):
        # one still wanted is bound again (_bound_again), unless an earlier round found it is not (plan_pass)
        if (allocation_id in keep and (allocation_id not in ctx.wanted or allocation_id in ctx.superseded)) or \
                allocation_id in observed.live or allocation_id in releasing or \
                allocation_id in observed.releases.pending or allocation_id in observed.ledger.unfinished_releases:
            continue
        if not observed.privileged:
            decided.append(Released(errors=(needs_root("releasing %s" % allocation_id),)))
            continue
        device_ids = list(observed.ledger.bound[allocation_id].get("device_ids") or [])
        decided.append(Released(actions=(_release_action(Release, observed, allocation_id, ctx.generation, device_ids,
                                                         "its spec is gone"),)))
        decided.append(_releasing(observed, allocation_id, device_ids))
    return Released.join(decided)


def _stale_env_files(observed: Observed) -> Dict[str, bytes]:
    """Env files no hold stands behind: of an allocation without a spec in /etc/cdi (a damaged one counts as
    a spec), never reported bound, with no release unfinished or pending. Only a bind that never finished
    leaves one: its env file was written, and the pass died before its spec (on a fresh node, before there
    was an /etc/cdi). A hold the node reported is never among them, whether /etc/cdi is there or not; one
    written and not yet reported whose spec comes back gets its env file again (``_keep_files``)."""
    ledger, pending = observed.ledger, observed.releases.pending
    return dict((allocation_id, content) for allocation_id, content in observed.env_files.items()
                if content is not None and allocation_id not in observed.live and allocation_id not in ledger.bound
                and allocation_id not in ledger.unfinished_releases and allocation_id not in pending)


def _remove_stale_env(ctx: Pass) -> Released:
    """2. Env files a bind that never finished left (``_stale_env_files``), removed before anything is bound,
    also where the allocation is bound again in this pass (its bind writes its env file anew): the GPUs such
    a file names in ``NVIDIA_VISIBLE_DEVICES`` are claimed until it is gone, as the root helper claims them
    (``conflicts.env_file_claim``), so a bind that takes one of them waits for the removal, and no two env
    files ever name one GPU for two allocations."""
    observed, decided = ctx.observed, []  # type: Observed, List[Released]
    stale = _stale_env_files(observed)
    for number, allocation_id in enumerate(sorted(stale)):
        action = RemoveEnv(allocation_id, (FileChange("allocation-env", env_file_path(allocation_id),
                                                      stale[allocation_id], None),))
        if not observed.privileged:
            decided.append(Released(errors=(needs_root(action.text),)))
            continue
        atoms = env_file_claim(env_file_atoms(stale[allocation_id], observed.inventory), number)
        decided.append(Released(actions=(action,), freeing={allocation_id: Freed(tuple(atoms))}))
    return Released.join(decided)


def _aside(observed: Observed, hold: Any) -> SpecAside:
    return SpecAside(hold.path, hold.content, damaged_spec_path(hold.allocation_id, observed.now), observed.now)


def _release_damaged(ctx: Pass, hold: Any, why: str) -> Released:
    """A hold whose spec is damaged that goes: the spec set aside, the env file removed, and
    ``AllocationReleased`` with the devices the node last reported bound (nothing if it never did)."""
    observed, allocation_id = ctx.observed, hold.allocation_id
    aside = _aside(observed, hold)
    files = [aside] + [change for change in withdraw_files(observed, allocation_id) if change.kind != "cdi"]
    bound = observed.ledger.bound.get(allocation_id)
    device_ids = list((bound or {}).get("device_ids") or [])
    event = released_event(observed, allocation_id, ctx.generation, device_ids) if bound else None
    current = observed.slices.get(slice_name(allocation_id))
    stop = SliceStop(current.name, settings_of(current)) if current is not None and not current.populated else None
    return _releasing(observed, allocation_id, device_ids) + Released(actions=(
        ReleaseDamaged(allocation_id, tuple(files), event, tuple(device_ids), ctx.generation, why, slice=stop),))


def _marker(ctx: Pass, released: Released) -> bool:
    """Whether releasing.unreadable is there once the releases are made: every GPU is claimed."""
    return ctx.marker and not released.marker_cleared


def _claims(ctx: Pass, live: Mapping[str, Any], released: Released, vfio: Mapping[str, str]) -> Claims:
    """Who claims what once the releases are planned, as one value: VMs (``vfio``: GPU -> instance),
    maintenance, unhealthy GPUs, the holds that stay, the Kubernetes releases pending on pods, the releases
    this pass makes (claimed until made), and what they booked of the host's memory."""
    observed = ctx.observed
    claims = Claims()
    for gpu, instance in vfio.items():
        claims = claims.pass_through(instance, [gpu])
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
    if _marker(ctx, released):
        claims = claims.every_gpu(UNREADABLE_RELEASES, [gpu.uuid for gpu in observed.inventory.gpus])
    if observed.memory is not None:
        claims = claims.with_memory(observed.memory, observed.domains)
    return claims


def _live_claims(ctx: Pass, live: Mapping[str, Any], claims: Claims) -> Claims:
    """``claims`` with the live holds' atoms, and what each was bound with (a kept hold's growth is admitted
    on top: ``_admit_growth``)."""
    observed, bound = ctx.observed, ctx.observed.ledger.bound
    for allocation_id in sorted(live):
        claims = claims.hold(allocation_id, live[allocation_id].atoms)
        assignment = ctx.wanted.get(allocation_id)
        if allocation_id in bound or assignment is None:
            limits = limits_from_record((bound.get(allocation_id) or {}).get("limits"))
        else:
            limits = assignment.limits
        current = observed.slices.get(slice_name(allocation_id))
        claims = claims.book(allocation_id, limits, current.hugetlb_current if current is not None else None)
    return claims


def _pending_claims(ctx: Pass, live: Mapping[str, Any], pending: Mapping[str, Pending], claims: Claims) -> Claims:
    """``claims`` with the Kubernetes releases pending after this pass: their devices, and what they booked."""
    bound = ctx.observed.ledger.bound
    for allocation_id in sorted(pending):
        release = pending[allocation_id].release
        claims = claims.hold(allocation_id, atoms_of(release.device_ids), PENDING)
        if allocation_id not in live:  # a pending Kubernetes release keeps what it booked until reported
            booked = limits_from_record((bound.get(allocation_id) or {}).get("limits"))
            if release.taken_back and allocation_id in ctx.superseded:
                # taken back for the allocation's new hold, whose AllocationBound replaces the old booking:
                # what it booked is freed by this pass, not counted against the new hold (or any other)
                claims = claims.book(allocation_id, booked, kind=RELEASING)
            else:
                claims = claims.book(allocation_id, booked)
    return claims


def _conditions(ctx: Pass, live: Mapping[str, Any], released: Released) -> List[dict]:
    """The pass's conditions: Kubernetes releases stuck on pods or unreadable, a stale or unsupported vendor
    spec, unhealthy GPUs (with the holds on them)."""
    observed = ctx.observed
    # the pass that sets an unreadable file aside raises the condition even when it clears the marker too
    unreadable = _marker(ctx, released) or observed.releases.unreadable is not None
    conditions = list(release_conditions([pending.release for pending in released.pending.values()], unreadable,
                                         observed.now, observed.state_dir))
    conditions.extend(condition for condition in (stale_condition(observed.vendor),
                                                  unknown_version_condition(observed.vendor)) if condition is not None)
    by_gpu = {}  # type: Dict[str, List[str]]
    for allocation_id in sorted(live):
        for atom in live[allocation_id].atoms:
            if allocation_id not in by_gpu.setdefault(atom.gpu_uuid, []):
                by_gpu[atom.gpu_uuid].append(allocation_id)
    sick = unhealthy_condition(observed.inventory, by_gpu, observed.health_cleared)
    if sick is not None:
        conditions.append(sick)
    return conditions


def _unreadable_memory(claims: Claims) -> Outcome:
    """Admission cannot be checked (the host's memory was not read): said (once a pass, ``_plan_once``)."""
    return Outcome(warnings=(UNREADABLE,)) if claims.memory is None else Outcome()


def _keep_wanted(ctx: Pass, live: Mapping[str, Any], claims: Claims) -> Tuple[Outcome, Claims]:
    """3. Holds still wanted: recreate a missing slice, re-render, rewrite env, report if never reported.
    Returns what it decided and the claims with what kept holds' grown limits booked."""
    observed, generation = ctx.observed, ctx.generation
    decided = []  # type: List[Outcome]  # joined once, at the end
    for allocation_id in [a.allocation_id for a in ctx.parsed.assignments] + sorted(ctx.parsed.refused_ids):
        hold = live.get(allocation_id)
        if hold is None:
            continue
        assignment = ctx.wanted.get(allocation_id)
        atoms, missing = [], False
        for atom in hold.atoms:
            found, why = resolve_atom(atom, observed.inventory)
            atoms.append(found)
            if found is None:
                missing = True
                decided.append(Outcome(warnings=("%s: %s; its spec is left as it is" % (allocation_id, why),)))
        if hold.problem:
            decided.append(Outcome(warnings=(hold.problem,)))
        if assignment is None:  # refused this pass: kept exactly as it is
            if hold.cgroup_parent:
                decided.append(Outcome(sliced=frozenset([hold.cgroup_parent])))
        else:
            assignment, stays = _kept_in_its_slice(ctx, assignment, hold, None if missing else atoms)
            grown, assignment, claims = _admit_growth(ctx, claims, assignment, hold)
            decided.append(stays + grown + _keep_slice(ctx, assignment, hold) + _booked(observed, assignment, hold))
            if not hold.problem and not missing:
                decided.append(_keep_files(ctx, assignment, hold, atoms))
            elif not hold.problem:
                # /run is emptied by a reboot before mig-layout makes the MIG instances again: the env
                # file is written from what the spec on disk says, the spec itself left as it is
                known = env_atoms(hold, atoms)
                if known is not None:
                    decided.append(_keep_files(ctx, assignment, hold, known, env_only=True))
                else:
                    decided.append(Outcome(warnings=("%s: its env file waits until its devices are back (its spec "
                                                     "does not name them)" % allocation_id,)))
        cgroup_parent = cgroup_parent_of(assignment, hold.kubernetes) if assignment is not None else hold.cgroup_parent
        decided.append(Outcome(holds=(hold_summary(allocation_id, hold.reservation_id if assignment is None else
                                                   assignment.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                                                   cgroup_parent),)))
        if assignment is None:
            continue
        reported = observed.ledger.bound.get(allocation_id)
        if reported is None:
            why = ReportBound.NEVER_JOURNALED
        elif reported.get("device_ids") and sorted(reported["device_ids"]) != sorted(hold.device_ids):
            # moved unreported (a Kubernetes hold's new devices), and the pass died before its AllocationBound
            why = ReportBound.MOVED
        elif cgroup_parent != reported.get("cgroup_parent", hold.cgroup_parent) and observed.privileged:
            # the control plane learns where the hold's workload now runs (a slice added or gone), also when
            # the pass that wrote its spec could not report it (an older ledger kept no parent: its spec's)
            why = ReportBound.REPARENTED
        else:
            continue
        decided.append(Outcome(actions=(ReportBound(
            allocation_id, event=bound_event(observed, allocation_id, generation, hold.atoms, cgroup_parent),
            device_ids=tuple(hold.device_ids), generation=generation, limits=limits_record(assignment.limits), why=why,
            reported_on=tuple((reported or {}).get("device_ids") or ())),)))
    return Outcome.join(decided), claims


def _booked(observed: Observed, assignment: Any, hold: Any) -> Outcome:
    """A kept hold without a slice (a Kubernetes hold) whose limits changed: what it books now goes to the ledger
    at the end of the pass, as a slice's limits do when it is set, so admission counts it from the next pass on
    (its growth, admitted once, was admitted again by every pass, and refused once others took the room)."""
    record = observed.ledger.bound.get(assignment.allocation_id)
    if record is None or cgroup_parent_of(assignment, hold.kubernetes) is not None:
        return Outcome()
    limits = limits_record(assignment.limits)
    return Outcome() if limits == record.get("limits") else Outcome(booked={assignment.allocation_id: limits})


def grows(old: Any, new: Any) -> bool:
    """Whether ``new`` limits book more memory or huge pages than ``old``."""
    return any((getattr(new, name, None) or 0) > (getattr(old, name, None) or 0)
               for name in ("memory_bytes", "hugepages_2mi", "hugepages_1gi"))


def placed(limits: Any) -> Tuple[Optional[str], Optional[str]]:
    """Where limits place a hold: its ``cpus`` and ``mems`` (None for none)."""
    return (getattr(limits, "cpus", None), getattr(limits, "mems", None))


def _bound_limits(observed: Observed, hold: Any) -> Optional[Limits]:
    """The limits a kept hold was bound with: the ledger's, or (a ledger that kept none) its slice's."""
    recorded = limits_from_record((observed.ledger.bound.get(hold.allocation_id) or {}).get("limits"))
    current = observed.slices.get(hold.cgroup_parent) if hold.cgroup_parent else None
    if recorded is None and current is not None:
        recorded = limits_of_slice(current)
    return recorded


def _kept_in_its_slice(ctx: Pass, assignment: Any, hold: Any, atoms: Optional[Sequence[Any]]) -> Tuple[Any, Outcome]:
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


def _admit_growth(ctx: Pass, claims: Claims, assignment: Any, hold: Any) -> Tuple[Outcome, Any, Claims]:
    """A kept hold whose limits grow gets them only if the host has room; otherwise it keeps what it was
    bound with and is refused (``resources-exhausted``) at this generation, finally. New limits no slice
    takes (a quota under the floor) are refused the same way (``invalid-assignment``). Returns what it
    decided, the assignment as kept and the claims with the growth booked."""
    observed, allocation_id = ctx.observed, assignment.allocation_id
    if allocation_id not in observed.ledger.bound:  # never reported: bound with these limits already
        return Outcome(), assignment, claims
    recorded = _bound_limits(observed, hold)
    kept = replace(assignment, limits=recorded)
    final = _journaled_refusal(ctx, allocation_id)
    if final is not None:
        return Outcome(refusals=(final,)), kept, claims
    problem = limits_problem(assignment.limits) if cgroup_parent_of(assignment, hold.kubernetes) else None
    if problem is not None and limits_record(assignment.limits) != limits_record(recorded):
        # a quota that starves the workload is refused as for a new hold: no slice would ever take it
        return Outcome(refusals=(Refusal(allocation_id, Reason.INVALID_ASSIGNMENT, "%s; the hold keeps its limits" % problem),)), \
            kept, claims
    problem = cpus_problem(assignment.limits, observed.cpus) if placed(assignment.limits) != placed(recorded) else None
    if problem is not None:  # new cpus or mems the host does not have: refused as for a new hold
        return Outcome(refusals=(Refusal(allocation_id, Reason.INVALID_ASSIGNMENT, "%s; the hold keeps its limits" % problem),)), \
            kept, claims
    narrowing = _narrows_running_slice(observed, assignment, hold)
    if narrowing is not None:  # cpus or mems taken from a running workload: refused until its slice is empty
        return Outcome(refusals=(Refusal(allocation_id, Reason.RESOURCES_EXHAUSTED, "%s; the hold keeps its limits" % narrowing),)), \
            kept, claims
    if not grows(recorded, assignment.limits):
        return Outcome(), assignment, claims
    if claims.memory is None:
        return _unreadable_memory(claims), assignment, claims
    new = assignment.limits

    def grown(name: str) -> Optional[int]:
        return max(0, (getattr(new, name) or 0) - (getattr(recorded, name, None) or 0)) or None

    growth = Limits(mems=new.mems, memory_bytes=grown("memory_bytes"), hugepages_2mi=grown("hugepages_2mi"),
                    hugepages_1gi=grown("hugepages_1gi"))
    try:
        claims = claims.admit(allocation_id, growth)
    except Exhausted as exc:
        return Outcome(refusals=(Refusal(allocation_id, Reason.RESOURCES_EXHAUSTED, "%s; the hold keeps its limits" % exc),)), \
            kept, claims
    return Outcome(), assignment, claims


def _narrows_running_slice(observed: Observed, assignment: Any, hold: Any) -> Optional[str]:
    """Why a kept hold's new ``cpus``/``mems`` are refused on its populated slice (a narrowing), or None: the
    rule the helper and every slice backend apply (``slices.cpuset_problem``)."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return None
    current = observed.slices.get(slice_name(assignment.allocation_id))
    refused = cpuset_problem(current, wanted_slice(assignment.limits)[0]) if current is not None else None
    return refused[0] if refused is not None else None


def _keep_slice(ctx: Pass, assignment: Any, hold: Any) -> Outcome:
    """A kept hold's slice: created again when missing (systemd forgets runtime properties on a reboot),
    set again when its properties (as the host shows them) or its recorded limits differ from the wanted ones."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return Outcome()
    observed = ctx.observed
    current = observed.slices.get(slice_name(assignment.allocation_id))
    op = _slice_apply(assignment, current)
    sliced = Outcome(sliced=frozenset([op.name]))
    limits = limits_record(assignment.limits)
    if current is None:
        action = CreateSlice(assignment.allocation_id, op, tuple(hold.device_ids), ctx.generation, limits)
    else:
        recorded = (observed.ledger.bound.get(assignment.allocation_id) or {}).get("limits")
        why = _slice_differs(current, op, recorded, limits)
        if why is None:
            return sliced
        action = ApplySlice(assignment.allocation_id, op, tuple(hold.device_ids), ctx.generation, limits, why)
    if not observed.privileged:
        return sliced + Outcome(errors=(needs_root(action.text),))
    return sliced + Outcome(actions=(action,))


def _slice_differs(current: Any, op: SliceApply, recorded: Optional[dict], limits: Optional[dict]) -> Optional[str]:
    """Why a kept hold's slice (``current``, as the host shows it) is set again to ``op``, or None."""
    if current.properties is not None and not same_properties(current.properties, op.properties):
        return "its properties differ"
    if current.hugetlb_exact and current.hugetlb_max != op.hugetlb_max:
        return "its huge page limits differ"
    if recorded is not None and recorded != limits:
        # where the host cannot show a property, the limits the hold was bound with are the ledger's
        return "its limits changed"
    return None


def _keep_files(ctx: Pass, assignment: Any, hold: Any, atoms: Sequence[Any], env_only: bool = False) -> Outcome:
    """A kept hold: write again what no longer matches what it would render to now (``env_only``: its
    env file alone, when some of its devices are missing and its spec is left as it is)."""
    observed = ctx.observed
    allocation_id = assignment.allocation_id
    bound_generation = hold.generation if hold.generation is not None else ctx.generation
    key = None
    if not env_only:  # what the last pass rendered for these very inputs is on disk: nothing to do
        key = render_key(assignment, atoms, bound_generation, observed.vendor, observed.mps, observed.runtimes)
        record = observed.ledger.renders.get(allocation_id)
        if unchanged(record, key, hold.content, observed.env_files.get(allocation_id)):
            return Outcome(warnings=tuple(record.get("notes") or []), renders={allocation_id: record})
    notes = []  # type: List[str]
    try:
        spec, env = render_hold(assignment, atoms, bound_generation, observed.vendor, observed.mps, notes,
                                observed.runtimes)
    except RenderRefused as exc:  # a kept hold is the control plane's to release: left as it is, said
        return Outcome(warnings=("%s is kept as it is: %s" % (allocation_id, exc),))
    except RenderError as exc:
        return Outcome(errors=(str(exc),))
    decided = Outcome()
    if not env_only:
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


def _bind_new(ctx: Pass, live: Mapping[str, Any], damaged: Mapping[str, Any], claims: Claims) -> Tuple[Outcome, Claims]:
    """4. New holds, in spec order: checked, then bound (slice, spec, env file, event). Each bound hold's
    atoms and memory are claimed against the holds after it; a hold refused at any check claims nothing
    (the claims its checks would have taken are dropped with it). A bind that takes atoms or memory a
    release of this pass frees needs that release (``Bind.needs``)."""
    refused = set(refusal.allocation_id for refusal in ctx.parsed.refusals)
    decided = [Outcome(refusals=tuple(Refusal(refusal.allocation_id, refusal.reason, refusal.message)
                                      for refusal in ctx.parsed.refusals))]  # joined once, at the end
    for assignment in ctx.parsed.assignments:
        if assignment.allocation_id in live or assignment.allocation_id in refused:
            continue
        outcome, claims = _bind_one(ctx, assignment, damaged, claims)
        decided.append(outcome)
    bound = Outcome.join(decided)
    # (allocation, locality note) of each hold bound off its GPUs' NUMA nodes: said in one warning
    remote = [(action.allocation_id, action.locality) for action in bound.actions
              if isinstance(action, Bind) and action.locality is not None]
    unreported = ctx.superseded & _kubernetes_released(ctx.observed)
    return replace(bound, actions=tuple(in_need_order(bound.actions, unreported)),
                   warnings=bound.warnings + ((locality_warning(remote),) if remote else ())), claims


def _bind_one(ctx: Pass, assignment: Any, damaged: Mapping[str, Any], claims: Claims) -> Tuple[Outcome, Claims]:
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
    notes = []  # type: List[str]
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


def _final_refusal(ctx: Pass, allocation_id: str, damaged: Mapping[str, Any]) -> Optional[Refusal]:
    """The refusal a new hold had at this generation already (the ledger's), or in an earlier round of this pass
    (but for a hold whose damaged spec is written again): a refusal is final at its generation."""
    found = _journaled_refusal(ctx, allocation_id)
    if found is not None:
        return found
    return None if allocation_id in damaged else ctx.withheld.get(allocation_id)


def _journaled_refusal(ctx: Pass, allocation_id: str) -> Optional[Refusal]:
    """The refusal of the allocation the ledger has journaled at this generation, or None."""
    found = ctx.observed.ledger.refusal_at(allocation_id, ctx.generation)
    if not found:
        return None
    reason, message = found
    return Refusal(allocation_id, reason, message)


def _refused(ctx: Pass, refusal: Refusal, damaged: Mapping[str, Any]) -> Outcome:
    """A new hold refused: it claims nothing. One whose spec is damaged still has it set aside, and what was
    bound is released."""
    if refusal.allocation_id not in damaged:
        return Outcome(refusals=(refusal,))
    released = _release_damaged(ctx, damaged[refusal.allocation_id], "refused")
    return Outcome(refusals=(refusal,), actions=released.actions)


def _bind_step(ctx: Pass, assignment: Any, atoms: Sequence[Atom], rendered: Tuple[bytes, bytes], needs: Tuple[str, ...],
               old: Any) -> Bind:
    """The step that binds a checked, rendered (``spec, env``) new hold: a ``Rebind`` over ``old``, its damaged
    spec set aside, when there is one."""
    observed, generation, allocation_id = ctx.observed, ctx.generation, assignment.allocation_id
    spec, env = rendered
    cgroup_parent = cgroup_parent_of(assignment, assignment.kubernetes)
    event = bound_event(observed, allocation_id, generation, atoms, cgroup_parent)  # type: Optional[dict]
    request = hold_request(assignment, generation, observed.runtimes)
    # the env file first: the spec makes the hold live, so a hold is never live without its env file
    stale = allocation_id in _stale_env_files(observed)  # removed before the binds (_remove_stale_env)
    files = (FileChange("allocation-env", env_file_path(allocation_id),
                        None if stale else observed.env_files.get(allocation_id), env, request),
             FileChange("cdi", cdi_spec_path(allocation_id), None, spec, request))  # type: Tuple[Union[FileChange, SpecAside], ...]
    device_ids, limits = tuple(atom.id for atom in atoms), limits_record(assignment.limits)
    slice_apply = _slice_apply(assignment, observed.slices.get(cgroup_parent)) if cgroup_parent is not None else None
    note = _locality(observed, assignment, atoms)
    if old is None:
        return Bind(allocation_id, files, event, device_ids, generation, limits, slice_apply, needs, locality=note)
    # written again from its assignment: no AllocationBound when the node already reported it bound with these
    # devices and this cgroup parent
    was = observed.ledger.bound.get(allocation_id) or {}
    if sorted(was.get("device_ids") or []) == sorted(device_ids) and limits == was.get("limits"):
        event = None
    return Rebind(allocation_id, (_aside(observed, old),) + files, event, device_ids, generation, limits, slice_apply,
                  needs, locality=note)


def _locality(observed: Observed, assignment: Any, atoms: Sequence[Atom]) -> Optional[dict]:
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
    ordered, placed, left = [], set(), list(actions)  # type: List[Action], Set[str], List[Action]
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


def _check_new(ctx: Pass, claims: Claims, assignment: Any) -> Tuple[Outcome, List[Atom], Claims]:
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
    sick = []  # type: List[str]
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
    if needs_admission(assignment.limits):
        if cgroup_parent_of(assignment, assignment.kubernetes) is not None:
            # its own slice may still run its old hold's workload: the new limits replace the slice's, admitted
            # once (the slice's change is held to the never-kill rules where it is made: check_slice_change)
            admitted = claims.admit_into_slice(assignment.allocation_id, assignment.limits)
        else:
            admitted = claims.admit(assignment.allocation_id, assignment.limits)
        return _unreadable_memory(claims), atoms, admitted
    return Outcome(), atoms, claims


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


def _report_failures(ctx: Pass, refusals: Sequence[Refusal]) -> Tuple[Tuple[Action, ...], List[Failure]]:
    """5. Failures, in spec order: one AllocationFailed per allocation and generation."""
    observed, generation = ctx.observed, ctx.generation
    actions, failures, reported = [], [], set()  # type: List[Action], List[Failure], Set[str]
    for refusal in sorted(refusals, key=lambda refusal: ctx.parsed.position(refusal.allocation_id)):
        allocation_id = refusal.allocation_id
        if allocation_id in reported:  # an allocation sent twice: its first refusal stands
            continue
        reported.add(allocation_id)
        failures.append(Failure(allocation_id, generation, refusal.reason, refusal.message))
        if observed.ledger.refused_at(allocation_id) == generation:
            continue
        body = {"node_id": observed.node_id, "allocation_id": allocation_id, "generation": generation,
                "reason": refusal.reason, "message": refusal.message}
        actions.append(Refuse(allocation_id, {"type": ALLOCATION_FAILED, "body": body}, generation))
    return tuple(actions), failures

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
   reported once free; then slices of holds gone earlier are stopped once
   empty;
3. holds still wanted are kept: a missing slice is created again (after a
   reboot), a changed rendering is written again, a missing env file
   rewritten, a hold never reported is reported;
4. new holds, in spec order, are checked — binding, privilege, atoms,
   conflicts, host admission — and bound, their slice first; each claims its
   atoms (and its memory) against the holds after it. One refused at this
   generation by an earlier pass stays refused with the same reason: a
   refusal is final at its generation;
5. every refusal not yet reported for this generation becomes one
   ``AllocationFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Set, Tuple, Type

from ansible_collections.bcd.devices.plugins.module_utils.domain.actions import (
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
    ReportBound,
    Rerender,
    RewriteFile,
    SliceApply,
    SliceStop,
    SpecAside,
    StopSlice,
    WriteEnv,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.admission import UNREADABLE, Exhausted, needs_admission
from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    InvalidAssignment,
    Limits,
    hold_request,
    limits_record,
    parse_limits,
    unsupported_binding,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import (
    AtomRefused,
    atoms_of,
    resolve_atom,
    resolve_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import (
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
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_staleness import stale_condition
from ansible_collections.bcd.devices.plugins.module_utils.domain.claims import PENDING, RELEASING, Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.conflicts import UNREADABLE_RELEASES, conflicts
from ansible_collections.bcd.devices.plugins.module_utils.domain.diffs import plan_diffs
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import gpu_health, unhealthy_condition, unhealthy_message
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_plan import plan_kubernetes_releases, release_kubernetes
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import DEFAULT_STATE_DIR, Releases, pending_summary, release_conditions
from ansible_collections.bcd.devices.plugins.module_utils.domain.reports import (
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


@dataclass
class Observed:
    """What a pass saw on the host, read once before planning."""

    node_id: str
    boot_id: str
    inventory: object
    vendor: object
    live: Dict[str, object]  # allocation id -> LiveHold, from /etc/cdi
    env_files: Dict[str, Optional[bytes]]  # allocation id -> current env file content
    ledger: object
    privileged: bool = True
    mps: bool = False
    domains: List = field(default_factory=list)
    domains_error: Optional[str] = None
    slices: Dict[str, object] = field(default_factory=dict)  # slice name -> SliceState
    slices_unavailable: Optional[str] = None  # why this host cannot make hold slices
    memory: Optional[object] = None  # HostMemory, read only when a new hold needs admission
    releases: Releases = field(default_factory=Releases)  # pending Kubernetes releases
    kube: Optional[object] = None  # KubeView: what pods hold, asked only when a Kubernetes release needs it
    now: float = 0.0
    state_dir: str = DEFAULT_STATE_DIR
    damaged_specs: List[str] = field(default_factory=list)  # node paths of damaged specs set aside earlier
    runtimes: List = field(default_factory=list)  # cdi_runtimes.Runtime: the node's container runtimes
    maintenance: Dict[str, dict] = field(default_factory=dict)  # GPU UUID -> {reason, since}: out of service
    health_cleared: Dict[str, float] = field(default_factory=dict)  # GPU UUID -> when it left maintenance
    spec_dir: bool = True  # /etc/cdi is a directory: a reported hold whose spec is not there is gone


@dataclass
class Failure:
    allocation_id: str
    generation: int
    reason: str
    message: str

    def to_dict(self):
        return {"allocation_id": self.allocation_id, "generation": self.generation,
                "reason": self.reason, "message": self.message}


@dataclass
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

    @property
    def changes(self):
        return [action for action in self.actions if action.changes]

    def text(self):
        lines = [action.text for action in self.actions] or ["nothing to do"]
        lines.extend("warning: %s" % warning for warning in self.warnings)
        lines.extend("retry: %s" % error for error in self.errors)
        return "\n".join(lines)

    def diffs(self):
        """Ansible ``--diff`` output: the plan as text first (what a reader scans), then each file (and
        slice) the actions change, one diff each (``domain/diffs.py``)."""
        entries = [{"prepared": "plan:\n" + "\n".join("  " + line for line in self.text().splitlines()) + "\n"}]
        entries.extend(plan_diffs(self.actions))
        return entries


def vfio_claims(instances, observed):
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


def _release_action(kind, observed, allocation_id, generation, device_ids, why):
    files = withdraw_files(observed, allocation_id)
    removed = " and ".join(change.path for change in files) or "no files left"
    text = "%s %s (%s): remove %s, report AllocationReleased" % (kind.kind, allocation_id, why, removed)
    action = kind(allocation_id, text, files, released_event(observed, allocation_id, generation, device_ids),
                  list(device_ids), generation)
    state = observed.slices.get(slice_name(allocation_id))
    if state is not None and not state.populated:
        action.slice = SliceStop(state.name, settings_of(state))
        action.text += ", then stop %s (empty)" % state.name
    elif state is not None:
        action.text += "; %s still runs a workload and is kept with its limits" % state.name
    return action


def limits_from_record(record):
    """The ``Limits`` a ledger record keeps (None when it keeps none, or none that pass the input's checks:
    the ledger is data like any other)."""
    try:
        return parse_limits(record)
    except InvalidAssignment:
        return None


def _slice_apply(assignment, current=None):
    properties, huge = wanted_slice(assignment.limits)
    return SliceApply(slice_name(assignment.allocation_id), properties, huge,
                      settings_of(current) if current is not None else None, limits_record(assignment.limits))


class PassState:
    """What one planning pass has decided so far: the holds that stay, what is claimed and committed,
    the Kubernetes releases still pending, and the refusals to report."""

    def __init__(self, generation, parsed, observed, instances):
        self.plan = Plan(generation=generation)
        self.generation = generation
        self.parsed = parsed
        self.observed = observed
        self.instances = instances
        self.live = dict(observed.live)
        self.failures = []  # (allocation_id, reason, message)
        # A live hold re-sent with a binding the node does not take is refused (unsupported-binding) and kept
        # as it is, as for any refused input: the node never drops a hold on its own.
        self.unsupported = set()  # type: Set[str]
        for assignment in parsed.assignments:
            if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES) and assignment.allocation_id in self.live:
                self.unsupported.add(assignment.allocation_id)
                self.failures.append((assignment.allocation_id, "unsupported-binding",
                                      unsupported_binding(assignment.binding)))
        self.wanted = dict((assignment.allocation_id, assignment) for assignment in parsed.assignments
                           if assignment.allocation_id not in self.unsupported)
        # releases this pass makes: allocation -> (the atoms it frees, the limits it booked, or None when its
        # slice still runs a workload and keeps them): claimed until made; what takes them waits for them
        self.releasing = {}  # type: Dict[str, Tuple[list, Optional[Limits]]]
        self.memory_warned = False
        self.sliced = set()  # slices wanted after this pass
        self.released_slices = set()  # slices whose release this pass handles
        self.pending = {}  # Kubernetes releases still pending after this pass: allocation -> PendingRelease
        self.holders = {}  # allocation -> who holds its devices (None: the kube side cannot be asked)
        self.damaged = {}  # allocation -> its LiveHold whose spec is damaged: set aside, never deleted
        self.marker = observed.releases.marker or observed.releases.unreadable is not None

    def needs_root(self, what):
        self.plan.errors.append("%s needs root or the helper; this pass is unprivileged" % what)


def plan_pass(generation, parsed, observed, instances=None):
    """The ordered plan for one pass. Pure: reads only its arguments."""
    state = PassState(generation, parsed, observed, instances)
    releases = plan_kubernetes_releases(state) + _finish_releases(state) + _release_unwanted(state)
    claims = _claims(state)
    keeps, claims = _keep_wanted(state, claims)
    binds, claims = _bind_new(state, claims)
    # slices of holds gone earlier: after the releases, before anything is bound
    state.plan.actions = releases + _leftover_slices(state) + keeps + binds + _report_failures(state)
    asides = observed.damaged_specs + [change.aside for action in state.plan.actions for change in action.files
                                       if isinstance(change, SpecAside)]
    if asides:
        state.plan.conditions.append(damaged_condition(asides))
    return state.plan


def _finish_releases(state):
    """1. Releases an earlier pass recorded but did not finish."""
    observed, generation, actions = state.observed, state.generation, []
    for allocation_id in sorted(observed.ledger.unfinished_releases):
        record = observed.ledger.unfinished_releases[allocation_id]
        action = _release_action(FinishRelease, observed, allocation_id, record.get("generation", generation),
                                 record.get("device_ids") or [], "cut short by an earlier pass")
        if (action.files or action.slice) and not observed.privileged:
            state.needs_root("finishing the release of %s" % allocation_id)
            continue
        actions.append(action)
        state.released_slices.add(slice_name(allocation_id))
        state.live.pop(allocation_id, None)
        _releasing(state, allocation_id, record.get("device_ids") or [])
    return actions


def _releasing(state, allocation_id, device_ids, atoms=None):
    """Record a release this pass makes: its atoms and what it booked stay claimed until it is made."""
    current = state.observed.slices.get(slice_name(allocation_id))
    booked = None
    if current is None or not current.populated:  # a slice still running a workload keeps what it booked
        booked = limits_from_record((state.observed.ledger.bound.get(allocation_id) or {}).get("limits"))
    state.releasing[allocation_id] = (list(atoms if atoms is not None else atoms_of(device_ids)), booked)


def _release_unwanted(state):
    """2. Holds no longer wanted, or wanted with other devices or another binding."""
    observed, actions = state.observed, []
    keep = set(state.wanted) | set(state.parsed.refused_ids) | state.unsupported
    actions.extend(_release_spec_gone(state, keep))
    for allocation_id in sorted(state.live):
        hold = state.live[allocation_id]
        assignment = state.wanted.get(allocation_id)
        if hold.problem is not None and (assignment is not None or allocation_id not in keep):
            # A damaged spec (its devices cannot be read back) is never deleted: set aside, and the hold is
            # written again from its assignment (_bind_new) or, no longer wanted, released
            if not observed.privileged:
                state.needs_root("setting the damaged %s aside" % hold.path)
                continue
            state.plan.warnings.append("%s; it is set aside as %s" % (hold.problem, _aside(state, hold).aside))
            state.damaged[allocation_id] = hold
            state.live.pop(allocation_id)
            if assignment is None:
                actions.append(_release_damaged(state, hold, "no longer wanted"))
            continue
        rebind = assignment is not None and (
            sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices)
            or hold.kubernetes != assignment.kubernetes)
        if allocation_id in keep and not rebind:
            continue
        if not observed.privileged:
            state.needs_root("releasing %s" % allocation_id)
            state.plan.holds.append(summary_of(hold))
            continue
        why = "wanted with other devices" if rebind else "no longer wanted"
        device_ids = hold.device_ids
        if hold.kubernetes:
            actions.append(release_kubernetes(state, hold, why, wanted=assignment is not None))
        else:
            actions.append(_release_action(Release, observed, allocation_id, state.generation, device_ids, why))
            state.released_slices.add(slice_name(allocation_id))
            _releasing(state, allocation_id, device_ids, hold.atoms)
        state.live.pop(allocation_id)
    return actions


def _release_spec_gone(state, keep):
    """Holds the node reported bound whose spec is gone (deleted by hand) and that are no longer wanted:
    released, so their env file goes with them and the control plane learns of it. One still wanted is
    bound again from its assignment (``_bind_new``)."""
    observed = state.observed
    actions: List[Action] = []
    if not observed.spec_dir:
        return actions
    for allocation_id in sorted(observed.ledger.bound):
        if allocation_id in keep or allocation_id in observed.live or allocation_id in state.releasing or \
                allocation_id in observed.releases.pending or allocation_id in observed.ledger.unfinished_releases:
            continue
        if not observed.privileged:
            state.needs_root("releasing %s" % allocation_id)
            continue
        device_ids = list(observed.ledger.bound[allocation_id].get("device_ids") or [])
        actions.append(_release_action(Release, observed, allocation_id, state.generation, device_ids,
                                       "its spec is gone"))
        state.released_slices.add(slice_name(allocation_id))
        _releasing(state, allocation_id, device_ids)
    return actions


def _aside(state, hold):
    return SpecAside(hold.path, hold.content, damaged_spec_path(hold.allocation_id, state.observed.now),
                     state.observed.now)


def _release_damaged(state, hold, why):
    """A hold whose spec is damaged that goes: the spec set aside, the env file removed, and
    ``AllocationReleased`` with the devices the node last reported bound (nothing if it never did)."""
    observed, allocation_id = state.observed, hold.allocation_id
    aside = _aside(state, hold)
    files = [aside] + [change for change in withdraw_files(observed, allocation_id) if change.kind != "cdi"]
    bound = observed.ledger.bound.get(allocation_id)
    device_ids = list((bound or {}).get("device_ids") or [])
    event = released_event(observed, allocation_id, state.generation, device_ids) if bound else None
    text = "release %s (%s; its spec is damaged): set %s aside as %s" % (allocation_id, why, hold.path, aside.aside)
    text += "".join(", remove %s" % change.path for change in files[1:])
    text += ", report AllocationReleased" if event else " (never reported bound: nothing to report)"
    action = Release(allocation_id, text, files, event, device_ids, state.generation)
    _releasing(state, allocation_id, device_ids)
    current = observed.slices.get(slice_name(allocation_id))
    if current is not None and not current.populated:
        action.slice = SliceStop(current.name, settings_of(current))
        action.text += ", then stop %s (empty)" % current.name
    state.released_slices.add(slice_name(allocation_id))
    return action


def _claims(state):
    """Who claims what once the releases are planned, as one value: VMs, maintenance, unhealthy GPUs,
    the holds that stay, the Kubernetes releases pending on pods, the releases this pass makes (claimed
    until made), and what they booked of the host's memory. Also the pass's conditions."""
    observed = state.observed
    claims = Claims()
    vfio, state.plan.vfio = vfio_claims(state.instances, observed)
    for gpu, instance in vfio.items():
        claims = claims.pass_through(instance, [gpu])
    claims = claims.out_of_service(observed.maintenance)
    for gpu in observed.inventory.gpus:
        health = gpu_health(gpu, observed.health_cleared)
        if health:
            claims = claims.sick(gpu.uuid, unhealthy_message(gpu.uuid, health))
    bound = observed.ledger.bound
    for allocation_id in sorted(state.live):
        claims = claims.hold(allocation_id, state.live[allocation_id].atoms)
        # what the hold was bound with; a kept hold's growth is admitted on top (_admit_growth)
        assignment = state.wanted.get(allocation_id)
        if allocation_id in bound or assignment is None:
            limits = limits_from_record((bound.get(allocation_id) or {}).get("limits"))
        else:
            limits = assignment.limits
        current = observed.slices.get(slice_name(allocation_id))
        claims = claims.book(allocation_id, limits, current.hugetlb_current if current is not None else None)
    for allocation_id in sorted(state.pending):
        claims = claims.hold(allocation_id, atoms_of(state.pending[allocation_id].device_ids), PENDING)
        if allocation_id not in state.live:  # a pending Kubernetes release keeps what it booked until reported
            claims = claims.book(allocation_id, limits_from_record((bound.get(allocation_id) or {}).get("limits")))
    for allocation_id in sorted(state.releasing):
        atoms, booked = state.releasing[allocation_id]
        claims = claims.hold(allocation_id, atoms, RELEASING).book(allocation_id, booked, kind=RELEASING)
    for name in sorted(observed.slices):
        # A slice whose hold is gone but whose workload still runs keeps what it was promised.
        current = observed.slices[name]
        if current.populated and allocation_of(name) not in state.live:
            claims = claims.book(allocation_of(name), limits_of_slice(current), current.hugetlb_current)
    if state.marker:
        claims = claims.every_gpu(UNREADABLE_RELEASES, [gpu.uuid for gpu in observed.inventory.gpus])
    if observed.memory is not None:
        claims = claims.with_memory(observed.memory, observed.domains)
    # the pass that sets an unreadable file aside raises the condition even when it clears the marker too
    unreadable = state.marker or observed.releases.unreadable is not None
    state.plan.conditions = release_conditions(state.pending.values(), unreadable, observed.now, observed.state_dir)
    for condition in (stale_condition(observed.vendor), unknown_version_condition(observed.vendor)):
        if condition is not None:
            state.plan.conditions.append(condition)
    holders = {}  # type: Dict[str, List[str]]
    for allocation_id in sorted(state.live):
        for atom in state.live[allocation_id].atoms:
            if allocation_id not in holders.setdefault(atom.gpu_uuid, []):
                holders[atom.gpu_uuid].append(allocation_id)
    sick = unhealthy_condition(observed.inventory, holders, observed.health_cleared)
    if sick is not None:
        state.plan.conditions.append(sick)
    state.plan.pending_releases = pending_summary(state.pending.values(), observed.now, state.holders)
    return claims


def _unreadable_memory(state, claims):
    """Whether admission cannot be checked (the host's memory was not read): said once a pass."""
    if claims.memory is not None:
        return False
    if not state.memory_warned:
        state.plan.warnings.append(UNREADABLE)
        state.memory_warned = True
    return True


def _keep_wanted(state, claims):
    """3. Holds still wanted: recreate a missing slice, re-render, rewrite env, report if never reported.
    Returns the actions and the claims with what kept holds' grown limits booked."""
    plan, observed, generation, actions = state.plan, state.observed, state.generation, []
    for allocation_id in [a.allocation_id for a in state.parsed.assignments] + sorted(state.parsed.refused_ids):
        hold = state.live.get(allocation_id)
        if hold is None:
            continue
        assignment = state.wanted.get(allocation_id)
        atoms, missing = [], False
        for atom in hold.atoms:
            found, why = resolve_atom(atom, observed.inventory)
            atoms.append(found)
            if found is None:
                missing = True
                plan.warnings.append("%s: %s; its spec is left as it is" % (allocation_id, why))
        if hold.problem:
            plan.warnings.append(hold.problem)
        if assignment is None:  # refused this pass: kept exactly as it is
            if hold.cgroup_parent:
                state.sliced.add(hold.cgroup_parent)
        else:
            assignment, claims = _admit_growth(state, claims, assignment, hold)
            actions.extend(_keep_slice(state, assignment, hold))
            if not hold.problem and not missing:
                actions.extend(_keep_files(state, assignment, hold, atoms))
            elif not hold.problem:
                # /run is emptied by a reboot before mig-layout makes the MIG instances again: the env
                # file is written from what the spec on disk says, the spec itself left as it is
                known = env_atoms(hold, atoms)
                if known is not None:
                    actions.extend(_keep_files(state, assignment, hold, known, env_only=True))
                else:
                    plan.warnings.append("%s: its env file waits until its devices are back (its spec does "
                                         "not name them)" % allocation_id)
        cgroup_parent = cgroup_parent_of(assignment, hold.kubernetes) if assignment is not None else hold.cgroup_parent
        plan.holds.append(hold_summary(allocation_id, hold.reservation_id if assignment is None else
                                       assignment.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                                       cgroup_parent))
        if assignment is None:
            continue
        if allocation_id not in observed.ledger.bound:
            why = "its AllocationBound was never journaled"
        elif cgroup_parent != hold.cgroup_parent and observed.privileged:
            # the control plane learns where the hold's workload now runs (a slice added or gone)
            why = "again: its cgroup parent is now %s" % (cgroup_parent or "none (its slice is gone)")
        else:
            continue
        actions.append(ReportBound(allocation_id, "report %s bound (%s)" % (allocation_id, why),
                                   event=bound_event(observed, allocation_id, generation, hold.atoms, cgroup_parent),
                                   device_ids=list(hold.device_ids), generation=generation,
                                   limits=limits_record(assignment.limits)))
    return actions, claims


def grows(old, new):
    """Whether ``new`` limits book more memory or huge pages than ``old``."""
    return any((getattr(new, name, None) or 0) > (getattr(old, name, None) or 0)
               for name in ("memory_bytes", "hugepages_2mi", "hugepages_1gi"))


def _admit_growth(state, claims, assignment, hold):
    """A kept hold whose limits grow gets them only if the host has room; otherwise it keeps what it was
    bound with and is refused (``resources-exhausted``) at this generation, finally. Returns the
    assignment as kept and the claims with the growth booked."""
    observed, allocation_id = state.observed, assignment.allocation_id
    if allocation_id not in observed.ledger.bound:  # never reported: bound with these limits already
        return assignment, claims
    recorded = limits_from_record(observed.ledger.bound[allocation_id].get("limits"))
    current = observed.slices.get(hold.cgroup_parent) if hold.cgroup_parent else None
    if recorded is None and current is not None:  # a ledger that kept no limits: the slice says
        recorded = limits_of_slice(current)
    kept = replace(assignment, limits=recorded)
    final = observed.ledger.refusal_at(allocation_id, state.generation)
    if final is not None:
        state.failures.append((allocation_id,) + final)
        return kept, claims
    if not grows(recorded, assignment.limits):
        return assignment, claims
    if _unreadable_memory(state, claims):
        return assignment, claims
    new = assignment.limits

    def grown(name):
        return max(0, (getattr(new, name) or 0) - (getattr(recorded, name, None) or 0)) or None

    growth = Limits(mems=new.mems, memory_bytes=grown("memory_bytes"), hugepages_2mi=grown("hugepages_2mi"),
                    hugepages_1gi=grown("hugepages_1gi"))
    try:
        claims = claims.admit(allocation_id, growth)
    except Exhausted as exc:
        state.failures.append((allocation_id, "resources-exhausted", "%s; the hold keeps its limits" % exc))
        return kept, claims
    return assignment, claims


def _keep_slice(state, assignment, hold):
    """A kept hold's slice: created again when missing (systemd forgets runtime properties on a reboot),
    set again when its properties (as the host shows them) or its recorded limits differ from the wanted ones."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return []
    current = state.observed.slices.get(slice_name(assignment.allocation_id))
    op = _slice_apply(assignment, current)
    state.sliced.add(op.name)
    recorded = (state.observed.ledger.bound.get(assignment.allocation_id) or {}).get("limits")
    if current is None:
        kind, text = CreateSlice, "create %s again: the hold is kept but its slice is gone" % op.describe()
    elif current.properties is not None and not same_properties(current.properties, op.properties):
        kind, text = ApplySlice, "set %s: its properties differ" % op.describe()
    elif current.hugetlb_exact and current.hugetlb_max != op.hugetlb_max:
        kind, text = ApplySlice, "set %s: its huge page limits differ" % op.describe()
    elif recorded is not None and recorded != limits_record(assignment.limits):
        # where the host cannot show a property, the limits the hold was bound with are the ledger's
        kind, text = ApplySlice, "set %s: its limits changed" % op.describe()
    else:
        return []
    if not state.observed.privileged:
        state.needs_root(text)
        return []
    return [kind(assignment.allocation_id, text, slice=op, device_ids=list(hold.device_ids),
                 generation=state.generation, limits=limits_record(assignment.limits))]


def _keep_files(state, assignment, hold, atoms, env_only=False):
    """A kept hold: write again what no longer matches what it would render to now (``env_only``: its
    env file alone, when some of its devices are missing and its spec is left as it is)."""
    plan, observed = state.plan, state.observed
    allocation_id = assignment.allocation_id
    bound_generation = hold.generation if hold.generation is not None else state.generation
    key = None
    if not env_only:  # what the last pass rendered for these very inputs is on disk: nothing to do
        key = render_key(assignment, atoms, bound_generation, observed.vendor, observed.mps, observed.runtimes)
        record = observed.ledger.renders.get(allocation_id)
        if unchanged(record, key, hold.content, observed.env_files.get(allocation_id)):
            plan.warnings.extend(record.get("notes") or [])
            plan.renders[allocation_id] = record
            return []
    notes = []  # type: List[str]
    try:
        spec, env = render_hold(assignment, atoms, bound_generation, observed.vendor, observed.mps, notes,
                                observed.runtimes)
    except RenderRefused as exc:  # a kept hold is the control plane's to release: left as it is, said
        plan.warnings.append("%s is kept as it is: %s" % (allocation_id, exc))
        return []
    except RenderError as exc:
        plan.errors.append(str(exc))
        return []
    if not env_only:
        plan.warnings.extend(notes)
        plan.renders[allocation_id] = render_record(key, spec, env, notes)
    changes: List[Tuple[Type[RewriteFile], FileChange, str]] = []
    request = hold_request(assignment, bound_generation, observed.runtimes)
    if spec != hold.content and not env_only:
        why = "its reservation id changed" if hold.reservation_id != assignment.reservation_id \
            else "the vendor spec, the inventory or its limits changed"
        changes.append((Rerender, FileChange("cdi", hold.path, hold.content, spec, request),
                        "re-render %s (%s)" % (hold.path, why)))
    current_env = observed.env_files.get(allocation_id)
    if env != current_env:
        why = "missing" if current_env is None else "out of date"
        changes.append((WriteEnv, FileChange("allocation-env", env_file_path(allocation_id), current_env, env, request),
                        "rewrite %s (%s)" % (env_file_path(allocation_id), why)))
    actions = []
    for kind, change, text in changes:
        if not observed.privileged:
            state.needs_root(text)
            continue
        actions.append(kind(allocation_id, text, [change], device_ids=list(hold.device_ids),
                            generation=state.generation))
    return actions


def _bind_new(state, claims):
    """4. New holds, in spec order: checked, then bound (slice, spec, env file, event). Each bound hold's
    atoms and memory are claimed against the holds after it; a hold refused at any check claims nothing
    (the claims its checks would have taken are dropped with it). A bind that takes atoms or memory a
    release of this pass frees needs that release (``Bind.needs``)."""
    plan, observed, generation, actions = state.plan, state.observed, state.generation, []
    refused = set(refusal.allocation_id for refusal in state.parsed.refusals)
    for refusal in state.parsed.refusals:
        state.failures.append((refusal.allocation_id, refusal.reason, refusal.message))
    for assignment in state.parsed.assignments:
        allocation_id = assignment.allocation_id
        if allocation_id in state.live or allocation_id in refused:
            continue
        final = observed.ledger.refusal_at(allocation_id, generation)
        if final is not None:  # refused at this generation already: final, whatever has changed since
            state.failures.append((allocation_id,) + final)
            continue
        try:
            atoms, admitted = _check_new(state, claims, assignment)
        except (AtomRefused, Exhausted) as exc:
            reason = exc.reason if isinstance(exc, AtomRefused) else "resources-exhausted"
            state.failures.append((allocation_id, reason, str(exc)))
            if allocation_id in state.damaged:  # its spec still goes aside, and what was bound is released
                actions.append(_release_damaged(state, state.damaged[allocation_id], "refused"))
            continue
        notes = []  # type: List[str]
        try:
            spec, env = render_hold(assignment, atoms, generation, observed.vendor, observed.mps, notes,
                                    observed.runtimes)
        except RenderRefused as exc:
            state.failures.append((allocation_id, exc.reason, str(exc)))
            if allocation_id in state.damaged:
                actions.append(_release_damaged(state, state.damaged[allocation_id], "refused"))
            continue
        except RenderError as exc:
            plan.errors.append(str(exc))
            continue
        plan.warnings.extend(notes)
        plan.renders[allocation_id] = render_record(
            render_key(assignment, atoms, generation, observed.vendor, observed.mps, observed.runtimes),
            spec, env, notes)
        needs = claims.needs(atoms)
        if needs_admission(assignment.limits):
            needs += [owner for owner in claims.memory_released() if owner not in needs]
        claims = admitted.hold(allocation_id, atoms)
        cgroup_parent = cgroup_parent_of(assignment, assignment.kubernetes)
        event = bound_event(observed, allocation_id, generation, atoms, cgroup_parent)
        body = event["body"]
        request = hold_request(assignment, generation, observed.runtimes)
        # the env file first: the spec makes the hold live, so a hold is never live without its env file
        files = [FileChange("allocation-env", env_file_path(allocation_id),
                            observed.env_files.get(allocation_id), env, request),
                 FileChange("cdi", cdi_spec_path(allocation_id), None, spec, request)]
        text = "bind %s: %s -> %s, %s" % (allocation_id, ", ".join(body["cdi_devices"]),
                                          body["cdi_spec_path"], body["env_file"])
        kind: Type[Bind] = Bind
        damaged = state.damaged.get(allocation_id)
        if damaged is not None:
            # written again from its assignment: no AllocationBound when the node already reported it
            # bound with these devices and this cgroup parent
            aside = _aside(state, damaged)
            files.insert(0, aside)
            bound = observed.ledger.bound.get(allocation_id) or {}
            if sorted(bound.get("device_ids") or []) == sorted(atom.id for atom in atoms) and \
                    limits_record(assignment.limits) == bound.get("limits"):
                event = None
            kind = Rebind
            text = "rebind %s from its assignment (its spec is damaged): set %s aside as %s, write %s, %s%s" % (
                allocation_id, damaged.path, aside.aside, body["cdi_spec_path"], body["env_file"],
                ", report AllocationBound" if event else " (already reported bound: nothing to report)")
        action = kind(allocation_id, text, files, event, [atom.id for atom in atoms], generation,
                      limits=limits_record(assignment.limits), needs=tuple(sorted(needs)))
        if cgroup_parent is not None:
            slice_apply = _slice_apply(assignment, observed.slices.get(cgroup_parent))
            action.slice = slice_apply
            action.text += ", in %s" % slice_apply.describe()
            state.sliced.add(cgroup_parent)
        actions.append(action)
        plan.holds.append(hold_summary(allocation_id, assignment.reservation_id, generation, atoms,
                                       assignment.kubernetes, cgroup_parent))
    return actions, claims


def _check_new(state, claims, assignment):
    """The checks of a new hold in order: binding, privilege, atoms, conflicts, host admission. Returns its
    atoms and ``claims`` with its memory booked (kept by the caller only if the hold is bound)."""
    observed = state.observed
    if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
        raise AtomRefused("unsupported-binding", unsupported_binding(assignment.binding))
    if not observed.privileged:
        raise AtomRefused("node-unprivileged", NODE_UNPRIVILEGED)
    atoms = resolve_devices(assignment.devices, observed.inventory)
    sick = []  # type: List[str]
    for atom in atoms:
        message = claims.unhealthy_of(atom.gpu_uuid)
        if message and message not in sick:
            sick.append(message)
    if sick:
        raise AtomRefused("device-missing", "; ".join(sick))
    found = conflicts(atoms, claims, assignment.allocation_id)
    if found:
        raise AtomRefused("overlap", "; ".join(found))
    if cgroup_parent_of(assignment, assignment.kubernetes) is not None and observed.slices_unavailable:
        raise AtomRefused("invalid-assignment", "limits: this node cannot create hold slices (%s)"
                          % observed.slices_unavailable)
    problem = limits_problem(assignment.limits) if cgroup_parent_of(assignment, assignment.kubernetes) else None
    if problem is not None:  # a quota that starves the workload (domain.slices.CPU_QUOTA_FLOOR)
        raise AtomRefused("invalid-assignment", problem)
    if needs_admission(assignment.limits):
        _unreadable_memory(state, claims)
        return atoms, claims.admit(assignment.allocation_id, assignment.limits)
    return atoms, claims


def _leftover_slices(state):
    """Slices whose hold is neither wanted nor released in this pass: stopped again once empty,
    so a slice whose workload outlived its release goes when that workload exits."""
    observed = state.observed
    actions: List[Action] = []
    for name in sorted(observed.slices):
        if name in state.sliced or name in state.released_slices:
            continue
        current = observed.slices[name]
        allocation_id = allocation_of(name)
        if current.populated:
            actions.append(KeepSlice(allocation_id, "keep %s: its hold is gone but it still runs a workload; it "
                                     "is stopped once empty" % name))
        elif not observed.privileged:
            state.needs_root("stopping %s" % name)
        else:
            actions.append(StopSlice(allocation_id, "stop %s: its hold is gone and it is empty" % name,
                                     slice=SliceStop(name, settings_of(current))))
    return actions


def _report_failures(state):
    """5. Failures, in spec order: one AllocationFailed per allocation and generation."""
    observed, generation, actions = state.observed, state.generation, []
    state.failures.sort(key=lambda failure: state.parsed.position(failure[0]))
    reported = set()
    for allocation_id, reason, message in state.failures:
        if allocation_id in reported:  # an allocation sent twice: its first refusal stands
            continue
        reported.add(allocation_id)
        state.plan.failures.append(Failure(allocation_id, generation, reason, message))
        if observed.ledger.refused_at(allocation_id) == generation:
            continue
        body = {"node_id": observed.node_id, "allocation_id": allocation_id, "generation": generation,
                "reason": reason, "message": message}
        actions.append(Refuse(allocation_id, "refuse %s (%s): %s" % (allocation_id, reason, message),
                              event={"type": "AllocationFailed", "body": body}, generation=generation))
    return actions

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: one pure function from the wanted assignments and the observed
host to the ordered plan of a pass.

Check mode is this plan without the apply; diff mode shows it; a real run
executes exactly it. The order is the spec page's "One pass":

1. Kubernetes releases pending from earlier passes are reported once no pod
   holds them, or dropped unreported when the spec wants the allocation
   again; plain releases cut short by an earlier pass are finished;
2. holds no longer wanted are released (before any bind, so a GPU can move
   between allocations in one generation); a released hold's slice is
   stopped once empty, and leftover slices of holds gone earlier too; a
   Kubernetes hold is recorded and withdrawn, and reported once free;
3. holds still wanted are kept: a missing slice is created again (after a
   reboot), a changed rendering is written again, a missing env file
   rewritten, a hold never reported is reported;
4. new holds, in spec order, are checked — binding, privilege, atoms,
   conflicts, host admission — and bound, their slice first; each claims its
   atoms (and its memory) against the holds after it;
5. every refusal not yet reported for this generation becomes one
   ``AllocationFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    Limits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import (
    AtomRefused,
    atom_from_id,
    resolve_atom,
    resolve_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import (
    HoldRender,
    RenderError,
    cdi_device,
    cdi_spec_path,
    env_file_path,
    render_env,
    render_spec,
    spec_bytes,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.admission import (
    UNREADABLE,
    Admission,
    Exhausted,
    needs_admission,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.conflicts import UNREADABLE_RELEASES, Claims, conflicts
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import (
    PendingRelease,
    Releases,
    device_names,
    pending_summary,
    pods_holding,
    release_conditions,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import (
    allocation_of,
    limits_of_slice,
    same_properties,
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
    state_dir: str = "/var/lib/bcd"


@dataclass
class FileChange:
    kind: str  # "cdi" or "allocation-env"
    path: str  # node path, for diffs and messages
    before: Optional[bytes]
    after: Optional[bytes]  # None: remove


@dataclass
class Action:
    action: str
    allocation_id: str
    text: str
    files: List[FileChange] = field(default_factory=list)
    event: Optional[dict] = None  # {"type": ..., "body": {...}}
    device_ids: List[str] = field(default_factory=list)
    generation: Optional[int] = None
    # {"op": "apply" | "remove", "name": ..., "properties": {...}, "hugetlb_max": {...}}
    slice: Optional[dict] = None
    limits: Optional[dict] = None  # recorded in the ledger with a bind
    release: Optional[PendingRelease] = None  # a Kubernetes release to record before its files go
    changes: bool = True  # False: shown in the plan, changes nothing (a busy slice kept)

    def to_dict(self):
        data = {"action": self.action, "allocation_id": self.allocation_id, "text": self.text}
        if self.slice:
            data["slice"] = dict(self.slice)
        if self.device_ids:
            data["device_ids"] = list(self.device_ids)
        if self.files:
            data["files"] = [{"path": change.path, "change": "remove" if change.after is None else
                              ("create" if change.before is None else "update")} for change in self.files]
        if self.event:
            data["event"] = self.event["type"]
        return data


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
    actions: List[Action] = field(default_factory=list)
    failures: List[Failure] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # retryable: the pass cannot finish now
    holds: List[dict] = field(default_factory=list)  # the holds once the plan is applied
    conditions: List[dict] = field(default_factory=list)
    pending_releases: List[dict] = field(default_factory=list)  # Kubernetes releases still waiting for pods
    vfio: Dict[str, str] = field(default_factory=dict)  # GPUs running domains have now

    @property
    def changes(self):
        return [action for action in self.actions if action.changes]

    def text(self):
        lines = [action.text for action in self.actions] or ["nothing to do"]
        lines.extend("warning: %s" % warning for warning in self.warnings)
        lines.extend("retry: %s" % error for error in self.errors)
        return "\n".join(lines)


def _base_body(observed, allocation_id, generation, device_ids):
    return {"node_id": observed.node_id, "boot_id": observed.boot_id, "allocation_id": allocation_id,
            "generation": generation, "device_ids": list(device_ids)}


def bound_body(observed, allocation_id, generation, atoms, cgroup_parent=None):
    body = _base_body(observed, allocation_id, generation, [atom.id for atom in atoms])
    body["cdi_devices"] = [cdi_device(atom.id) for atom in atoms]
    body["cdi_spec_path"] = cdi_spec_path(allocation_id)
    body["env_file"] = env_file_path(allocation_id)
    if cgroup_parent:
        body["cgroup_parent"] = cgroup_parent
    return body


def hold_summary(allocation_id, reservation_id, generation, atoms, kubernetes, cgroup_parent=None):
    summary = {
        "allocation_id": allocation_id,
        "reservation_id": reservation_id,
        "generation": generation,
        "binding": BINDING_KUBERNETES if kubernetes else BINDING_HOLD,
        "device_ids": [atom.id for atom in atoms],
        "cdi_devices": [cdi_device(atom.id) for atom in atoms],
        "cdi_spec_path": cdi_spec_path(allocation_id),
        "env_file": env_file_path(allocation_id),
    }
    if cgroup_parent:
        summary["cgroup_parent"] = cgroup_parent
    return summary


def vfio_claims(instances, observed):
    """GPUs VMs have or are to have: the instance specs, the running domains, and
    what still-running domains had at the last pass (a GPU dropped from a running
    VM's spec stays the VM's until its next start)."""
    claims = {}
    for instance in instances or []:
        for gpu in instance.get("gpus") or []:
            claims.setdefault(gpu, instance.get("instance_id") or "?")
    now = {}
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


def _withdraw_files(observed, allocation_id):
    """The removals that withdraw a hold: its spec and env file, where present."""
    hold = observed.live.get(allocation_id)
    present = (("cdi", cdi_spec_path(allocation_id), hold.content if hold is not None else None),
               ("allocation-env", env_file_path(allocation_id), observed.env_files.get(allocation_id)))
    return [FileChange(kind, path, before, None) for kind, path, before in present if before is not None]


def _release_action(observed, allocation_id, generation, device_ids, verb, why):
    files = _withdraw_files(observed, allocation_id)
    event = {"type": "AllocationReleased", "body": _base_body(observed, allocation_id, generation, device_ids)}
    removed = " and ".join(change.path for change in files) or "no files left"
    text = "%s %s (%s): remove %s, report AllocationReleased" % (verb, allocation_id, why, removed)
    action = Action(verb, allocation_id, text, files, event, list(device_ids), generation)
    state = observed.slices.get(slice_name(allocation_id))
    if state is not None and not state.populated:
        action.slice = {"op": "remove", "name": state.name}
        action.text += ", then stop %s (empty)" % state.name
    elif state is not None:
        action.text += "; %s still runs a workload and is kept with its limits" % state.name
    return action


def cgroup_parent_of(assignment, kubernetes):
    """The slice a hold's spec names: plain holds with limits only (a Kubernetes hold lives in kubepods.slice)."""
    if kubernetes or assignment is None or wanted_slice(assignment.limits) is None:
        return None
    return slice_name(assignment.allocation_id)


def _render(assignment, atoms, generation, observed, kubernetes, notes=None):
    hold = HoldRender(
        allocation_id=assignment.allocation_id,
        reservation_id=assignment.reservation_id,
        generation=generation,
        atoms=tuple(atoms),
        kubernetes=kubernetes,
        cgroup_parent=cgroup_parent_of(assignment, kubernetes),
        mps=observed.mps,
        env=tuple(assignment.env),
    )
    return spec_bytes(render_spec(hold, observed.vendor, notes)), render_env(hold)


def _limits_record(limits):
    if limits is None:
        return None
    return dict((key, value) for key, value in vars(limits).items() if value is not None)


def _slice_op(assignment):
    properties, huge = wanted_slice(assignment.limits)
    return {"op": "apply", "name": slice_name(assignment.allocation_id), "properties": properties,
            "hugetlb_max": huge}


def _describe_slice(op):
    settings = ["%s=%s" % item for item in op["properties"].items()]
    settings.extend("hugetlb.%s.max=%d" % item for item in sorted(op["hugetlb_max"].items()))
    return "%s (%s)" % (op["name"], ", ".join(settings) or "no limits")


class _Pass(object):
    """The state of one planning pass: what is claimed, committed and planned so far."""

    def __init__(self, generation, parsed, observed, instances):
        self.plan = Plan(generation=generation)
        self.generation = generation
        self.parsed = parsed
        self.observed = observed
        self.instances = instances
        self.wanted = dict((assignment.allocation_id, assignment) for assignment in parsed.assignments)
        self.live = dict(observed.live)
        self.failures = []  # (allocation_id, reason, message)
        self.claims = Claims()
        self.admission = None
        self.memory_warned = False
        self.sliced = set()  # slices wanted after this pass
        self.released_slices = set()  # slices whose release this pass handles
        self.pending = {}  # Kubernetes releases still pending after this pass: allocation -> PendingRelease
        self.holders = {}  # allocation -> who holds its devices (None: the kube side cannot be asked)
        self.marker = observed.releases.marker or observed.releases.unreadable is not None

    def needs_root(self, what):
        self.plan.errors.append("%s needs root or the helper; this pass is unprivileged" % what)

    def add(self, action):
        self.plan.actions.append(action)


def plan_pass(generation, parsed, observed, instances=None):
    """The ordered plan for one pass. Pure: reads only its arguments."""
    state = _Pass(generation, parsed, observed, instances)
    _kubernetes_releases(state)
    _finish_releases(state)
    _release_unwanted(state)
    after_releases = len(state.plan.actions)
    _claim_everything(state)
    _keep_wanted(state)
    _bind_new(state)
    _leftover_slices(state, after_releases)
    _report_failures(state)
    return state.plan


def _release_kubernetes(state, hold, why):
    """Steps 1 to 3 for a Kubernetes hold: record, withdraw, and report only if no pod holds its devices."""
    observed = state.observed
    release = PendingRelease(hold.allocation_id, list(hold.device_ids), state.generation, observed.now)
    action = Action("release-kube", hold.allocation_id, "", _withdraw_files(observed, hold.allocation_id),
                    device_ids=list(hold.device_ids), generation=state.generation, release=release)
    holders = pods_holding(observed.kube, hold.device_ids, observed.inventory)
    removed = " and ".join(change.path for change in action.files)
    if holders == []:
        action.event = {"type": "AllocationReleased",
                        "body": _base_body(observed, hold.allocation_id, state.generation, hold.device_ids)}
        action.text = "release %s (%s, Kubernetes): record it, remove %s; no pod holds its devices: report " \
                      "AllocationReleased" % (hold.allocation_id, why, removed)
    else:
        state.pending[hold.allocation_id] = release
        state.holders[hold.allocation_id] = holders
        action.text = "release %s (%s, Kubernetes): record it in releasing.json, remove %s; report it once no " \
                      "pod holds its devices (%s)" % (hold.allocation_id, why, removed, _held_by(holders))
    state.add(action)


def _held_by(holders):
    if holders is None:
        return "the kubelet cannot be asked: counted as held"
    return "held by " + ", ".join(holders)


def _kubernetes_releases(state):
    """Kubernetes releases pending from earlier passes: set an unreadable file aside, clear the marker
    once the kube side allows, drop releases the spec takes back, report those no pod holds."""
    observed = state.observed
    releases = observed.releases
    if releases.unreadable is not None:
        state.add(Action("quarantine-releases", "", "set %s/releasing.json aside (%s) and claim every GPU "
                         "until the kube side is known" % (observed.state_dir, releases.unreadable)))
    if state.marker and observed.kube is not None and observed.kube.error is None:
        known = set()  # what pods may hold of allocations the node knows: their devices and parent GPUs
        for device_ids in [hold.device_ids for hold in observed.live.values()] + \
                [release.device_ids for release in releases.pending.values()]:
            known |= device_names(device_ids, observed.inventory)
            known |= set(atom.gpu_uuid for atom in atoms_of(device_ids))
        unknown = sorted(observed.kube.held - known)
        gpus = set(gpu.uuid for gpu in observed.inventory.gpus)
        gpus |= set(inst.uuid for gpu in observed.inventory.gpus for inst in gpu.mig)
        if not [name for name in unknown if name in gpus]:
            state.add(Action("clear-marker", "", "remove %s/releasing.unreadable: no pod holds a GPU of an "
                             "allocation this node does not know" % observed.state_dir))
            state.marker = False
    for allocation_id in sorted(releases.pending):
        release = releases.pending[allocation_id]
        assignment = state.wanted.get(allocation_id)
        if assignment is not None and assignment.kubernetes and \
                sorted(ref.id for ref in assignment.devices) == sorted(release.device_ids):
            state.add(Action("drop-release", allocation_id, "drop the pending Kubernetes release of %s: the spec "
                             "wants it again (not reported)" % allocation_id, generation=release.generation))
            continue
        files = []
        if assignment is None:  # its files, if a crash left them, are withdrawn; a new hold of the same id is not
            files = _withdraw_files(observed, allocation_id)
            state.live.pop(allocation_id, None)
        holders = pods_holding(observed.kube, release.device_ids, observed.inventory)
        if holders == []:
            event = {"type": "AllocationReleased",
                     "body": _base_body(observed, allocation_id, release.generation, release.device_ids)}
            state.add(Action("report-release", allocation_id, "report %s released: no pod holds its devices any "
                             "more" % allocation_id, files, event, list(release.device_ids), release.generation))
            continue
        state.pending[allocation_id] = release
        state.holders[allocation_id] = holders
        if files:
            state.add(Action("withdraw", allocation_id, "remove %s: %s is being released" % (
                " and ".join(change.path for change in files), allocation_id), files,
                device_ids=list(release.device_ids), generation=release.generation))


def _finish_releases(state):
    """1. Releases an earlier pass recorded but did not finish."""
    observed, generation = state.observed, state.generation
    for allocation_id in sorted(observed.ledger.releasing):
        record = observed.ledger.releasing[allocation_id]
        action = _release_action(observed, allocation_id, record.get("generation", generation),
                                 record.get("device_ids") or [], "finish-release", "cut short by an earlier pass")
        if (action.files or action.slice) and not observed.privileged:
            state.needs_root("finishing the release of %s" % allocation_id)
            continue
        state.add(action)
        state.released_slices.add(slice_name(allocation_id))
        state.live.pop(allocation_id, None)


def _release_unwanted(state):
    """2. Holds no longer wanted, or wanted with other devices or another binding."""
    observed = state.observed
    keep = set(state.wanted) | set(state.parsed.refused_ids)
    for allocation_id in sorted(state.live):
        hold = state.live[allocation_id]
        assignment = state.wanted.get(allocation_id)
        # A damaged spec (its devices cannot be read back) is released and bound again from the assignment.
        rebind = assignment is not None and (hold.problem is not None or (
            sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices)
            or hold.kubernetes != assignment.kubernetes))
        if allocation_id in keep and not rebind:
            continue
        if not observed.privileged:
            state.needs_root("releasing %s" % allocation_id)
            state.plan.holds.append(hold_summary(allocation_id, hold.reservation_id, hold.generation, hold.atoms,
                                                 hold.kubernetes, hold.cgroup_parent))
            continue
        why = "no longer wanted"
        if rebind:
            why = "its spec is damaged" if hold.problem else "wanted with other devices"
        device_ids = hold.device_ids
        if hold.problem:  # what was reported bound, when the file no longer says
            device_ids = (observed.ledger.bound.get(allocation_id) or {}).get("device_ids") or hold.device_ids
        if hold.kubernetes:
            _release_kubernetes(state, hold, why)
        else:
            state.add(_release_action(observed, allocation_id, state.generation, device_ids, "release", why))
            state.released_slices.add(slice_name(allocation_id))
        state.live.pop(allocation_id)


def _claim_everything(state):
    """Everything that claims GPUs and memory from here on: VMs and the holds that stay."""
    observed = state.observed
    vfio, state.plan.vfio = vfio_claims(state.instances, observed)
    for gpu, instance in vfio.items():
        state.claims.pass_through(instance, [gpu])
    for allocation_id in sorted(state.live):
        state.claims.claim(allocation_id, state.live[allocation_id].atoms)
    for allocation_id in sorted(state.pending):
        state.claims.claim(allocation_id, atoms_of(state.pending[allocation_id].device_ids))
    if state.marker:
        state.claims.claim_every_gpu(UNREADABLE_RELEASES, [gpu.uuid for gpu in observed.inventory.gpus])
    state.plan.conditions = release_conditions(state.pending.values(), state.marker, observed.now, observed.state_dir)
    state.plan.pending_releases = pending_summary(state.pending.values(), observed.now, state.holders)


def atoms_of(device_ids):
    """Atoms of device ids read back from a file; ids that do not parse are skipped."""
    atoms = []
    for device_id in device_ids:
        try:
            atoms.append(atom_from_id(device_id))
        except AtomRefused:
            continue
    return atoms


def _admission(state):
    """The pass's admission ledger, built when the first new hold needs it."""
    if state.admission is None and state.observed.memory is not None:
        admission = Admission(state.observed.memory, state.observed.domains)
        for allocation_id in sorted(state.live):
            assignment = state.wanted.get(allocation_id)
            limits = assignment.limits if assignment is not None else None
            if assignment is None:
                record = state.observed.ledger.bound.get(allocation_id) or {}
                limits = _limits_from_record(record.get("limits"))
            current = state.observed.slices.get(slice_name(allocation_id))
            admission.count(limits, current.hugetlb_current if current is not None else None)
        for name in sorted(state.observed.slices):
            # A slice whose hold is gone but whose workload still runs keeps what it was promised.
            current = state.observed.slices[name]
            if current.populated and allocation_of(name) not in state.live:
                admission.count(limits_of_slice(current), current.hugetlb_current)
        state.admission = admission
    return state.admission


def _limits_from_record(record):
    if not isinstance(record, dict):
        return None
    try:
        return Limits(**record)
    except TypeError:
        return None


def _keep_wanted(state):
    """3. Holds still wanted: recreate a missing slice, re-render, rewrite env, report if never reported."""
    plan, observed, generation = state.plan, state.observed, state.generation
    for allocation_id in [a.allocation_id for a in state.parsed.assignments] + sorted(state.parsed.refused_ids):
        hold = state.live.get(allocation_id)
        if hold is None:
            continue
        assignment = state.wanted.get(allocation_id)
        atoms = []
        for atom in hold.atoms:
            found, why = resolve_atom(atom, observed.inventory)
            atoms.append(found)
            if found is None:
                plan.warnings.append("%s: %s; its spec is left as it is" % (allocation_id, why))
        if hold.problem:
            plan.warnings.append(hold.problem)
        if assignment is None:  # refused this pass: kept exactly as it is
            if hold.cgroup_parent:
                state.sliced.add(hold.cgroup_parent)
        else:
            _keep_slice(state, assignment, hold)
            if all(atom is not None for atom in atoms) and not hold.problem:
                _keep_files(state, assignment, hold, atoms)
        cgroup_parent = cgroup_parent_of(assignment, hold.kubernetes) if assignment is not None else hold.cgroup_parent
        plan.holds.append(hold_summary(allocation_id, hold.reservation_id if assignment is None else
                                       assignment.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                                       cgroup_parent))
        if allocation_id not in observed.ledger.bound and assignment is not None:
            body = bound_body(observed, allocation_id, generation, hold.atoms, cgroup_parent)
            state.add(Action("report-bound", allocation_id,
                             "report %s bound (its AllocationBound was never journaled)" % allocation_id,
                             event={"type": "AllocationBound", "body": body}, device_ids=list(hold.device_ids),
                             generation=generation, limits=_limits_record(assignment.limits)))


def _keep_slice(state, assignment, hold):
    """A kept hold's slice: created again when missing (systemd forgets runtime properties on a reboot),
    set again when its recorded limits differ from the wanted ones."""
    if cgroup_parent_of(assignment, hold.kubernetes) is None:
        return
    op = _slice_op(assignment)
    state.sliced.add(op["name"])
    current = state.observed.slices.get(op["name"])
    recorded = (state.observed.ledger.bound.get(assignment.allocation_id) or {}).get("limits")
    if current is None:
        verb, text = "create-slice", "create %s again: the hold is kept but its slice is gone" % _describe_slice(op)
    elif current.properties is not None and not same_properties(current.properties, op["properties"]):
        verb, text = "apply-slice", "set %s: its properties differ" % _describe_slice(op)
    elif current.hugetlb_exact and current.hugetlb_max != op["hugetlb_max"]:
        verb, text = "apply-slice", "set %s: its huge page limits differ" % _describe_slice(op)
    elif recorded is not None and recorded != _limits_record(assignment.limits):
        # systemd's properties are not read back: the limits the hold was bound with are the ledger's
        verb, text = "apply-slice", "set %s: its limits changed" % _describe_slice(op)
    else:
        return
    if not state.observed.privileged:
        state.needs_root(text)
        return
    state.add(Action(verb, assignment.allocation_id, text, slice=op, device_ids=list(hold.device_ids),
                     generation=state.generation, limits=_limits_record(assignment.limits)))


def _keep_files(state, assignment, hold, atoms):
    """A kept hold: write again what no longer matches what it would render to now."""
    plan, observed = state.plan, state.observed
    allocation_id = assignment.allocation_id
    bound_generation = hold.generation if hold.generation is not None else state.generation
    try:
        spec, env = _render(assignment, atoms, bound_generation, observed, hold.kubernetes, plan.warnings)
    except RenderError as exc:
        plan.errors.append(str(exc))
        return
    changes = []
    if spec != hold.content:
        why = "its reservation id changed" if hold.reservation_id != assignment.reservation_id \
            else "the vendor spec, the inventory or its limits changed"
        changes.append(("rerender", FileChange("cdi", hold.path, hold.content, spec),
                        "re-render %s (%s)" % (hold.path, why)))
    current_env = observed.env_files.get(allocation_id)
    if env != current_env:
        why = "missing" if current_env is None else "out of date"
        changes.append(("write-env", FileChange("allocation-env", env_file_path(allocation_id), current_env, env),
                        "rewrite %s (%s)" % (env_file_path(allocation_id), why)))
    for verb, change, text in changes:
        if not observed.privileged:
            state.needs_root(text)
            continue
        state.add(Action(verb, allocation_id, text, [change], device_ids=list(hold.device_ids),
                         generation=state.generation))


def _bind_new(state):
    """4. New holds, in spec order: checked, then bound (slice, spec, env file, event)."""
    plan, observed, generation = state.plan, state.observed, state.generation
    refused = set(refusal.allocation_id for refusal in state.parsed.refusals)
    for refusal in state.parsed.refusals:
        state.failures.append((refusal.allocation_id, refusal.reason, refusal.message))
    for assignment in state.parsed.assignments:
        allocation_id = assignment.allocation_id
        if allocation_id in state.live or allocation_id in refused:
            continue
        try:
            atoms = _check_new(state, assignment)
        except (AtomRefused, Exhausted) as exc:
            reason = exc.reason if isinstance(exc, AtomRefused) else "resources-exhausted"
            state.failures.append((allocation_id, reason, str(exc)))
            continue
        try:
            spec, env = _render(assignment, atoms, generation, observed, assignment.kubernetes, plan.warnings)
        except RenderError as exc:
            plan.errors.append(str(exc))
            continue
        state.claims.claim(allocation_id, atoms)
        cgroup_parent = cgroup_parent_of(assignment, assignment.kubernetes)
        body = bound_body(observed, allocation_id, generation, atoms, cgroup_parent)
        files = [FileChange("cdi", cdi_spec_path(allocation_id), None, spec),
                 FileChange("allocation-env", env_file_path(allocation_id),
                            observed.env_files.get(allocation_id), env)]
        text = "bind %s: %s -> %s, %s" % (allocation_id, ", ".join(body["cdi_devices"]),
                                          body["cdi_spec_path"], body["env_file"])
        action = Action("bind", allocation_id, text, files, {"type": "AllocationBound", "body": body},
                        [atom.id for atom in atoms], generation, limits=_limits_record(assignment.limits))
        if cgroup_parent is not None:
            action.slice = _slice_op(assignment)
            action.text += ", in %s" % _describe_slice(action.slice)
            state.sliced.add(cgroup_parent)
        state.add(action)
        plan.holds.append(hold_summary(allocation_id, assignment.reservation_id, generation, atoms,
                                       assignment.kubernetes, cgroup_parent))


def _check_new(state, assignment):
    """The checks of a new hold in order: binding, privilege, atoms, conflicts, host admission."""
    observed = state.observed
    if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
        raise AtomRefused("unsupported-binding", "binding %s is not supported" % assignment.binding)
    if not observed.privileged:
        raise AtomRefused("node-unprivileged", NODE_UNPRIVILEGED)
    atoms = resolve_devices(assignment.devices, observed.inventory)
    found = conflicts(atoms, state.claims)
    if found:
        raise AtomRefused("overlap", "; ".join(found))
    if cgroup_parent_of(assignment, assignment.kubernetes) is not None and observed.slices_unavailable:
        raise AtomRefused("invalid-assignment", "limits: this node cannot create hold slices (%s)"
                          % observed.slices_unavailable)
    if needs_admission(assignment.limits):
        admission = _admission(state)
        if admission is None:
            if not state.memory_warned:
                state.plan.warnings.append(UNREADABLE)
                state.memory_warned = True
        else:
            admission.check(assignment.limits)
    return atoms


def _leftover_slices(state, position):
    """Slices whose hold is neither wanted nor released in this pass: stopped again once empty,
    so a slice whose workload outlived its release goes when that workload exits. Planned right
    after the releases, before anything is bound."""
    observed = state.observed
    leftovers = []
    for name in sorted(observed.slices):
        if name in state.sliced or name in state.released_slices:
            continue
        current = observed.slices[name]
        allocation_id = allocation_of(name)
        if current.populated:
            leftovers.append(Action("keep-slice", allocation_id, "keep %s: its hold is gone but it still runs a "
                                    "workload; it is stopped once empty" % name, changes=False))
        elif not observed.privileged:
            state.needs_root("stopping %s" % name)
        else:
            leftovers.append(Action("stop-slice", allocation_id, "stop %s: its hold is gone and it is empty" % name,
                                    slice={"op": "remove", "name": name}))
    state.plan.actions[position:position] = leftovers


def _report_failures(state):
    """5. Failures, in spec order: one AllocationFailed per allocation and generation."""
    observed, generation = state.observed, state.generation
    state.failures.sort(key=lambda failure: state.parsed.position(failure[0]))
    reported = set()
    for allocation_id, reason, message in state.failures:
        if allocation_id in reported:  # an allocation sent twice: its first refusal stands
            continue
        reported.add(allocation_id)
        state.plan.failures.append(Failure(allocation_id, generation, reason, message))
        if observed.ledger.failures.get(allocation_id) == generation:
            continue
        body = {"node_id": observed.node_id, "allocation_id": allocation_id, "generation": generation,
                "reason": reason, "message": message}
        state.add(Action("refuse", allocation_id, "refuse %s (%s): %s" % (allocation_id, reason, message),
                         event={"type": "AllocationFailed", "body": body}, generation=generation))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: one pure function from the wanted assignments and the observed
host to the ordered plan of a pass.

Check mode is this plan without the apply; diff mode shows it; a real run
executes exactly it. The order is the spec page's "One pass":

1. releases cut short by an earlier pass are finished;
2. holds no longer wanted are released (before any bind, so a GPU can move
   between allocations in one generation);
3. holds still wanted are kept: a changed rendering is written again, a
   missing env file rewritten, a hold never reported is reported;
4. new holds, in spec order, are checked — binding, privilege, atoms,
   conflicts — and bound; each claims its atoms against the holds after it;
5. every refusal not yet reported for this generation becomes one
   ``AllocationFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.bcd.devices.plugins.module_utils._assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
)
from ansible_collections.bcd.devices.plugins.module_utils._atoms import (
    AtomRefused,
    resolve_atom,
    resolve_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils._cdi import (
    HoldRender,
    RenderError,
    cdi_device,
    cdi_spec_path,
    env_file_path,
    render_env,
    render_spec,
    spec_bytes,
)
from ansible_collections.bcd.devices.plugins.module_utils._conflicts import Claims, conflicts

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

    def to_dict(self):
        data = {"action": self.action, "allocation_id": self.allocation_id, "text": self.text}
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
    vfio: Dict[str, str] = field(default_factory=dict)  # GPUs running domains have now

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


def _release_action(observed, allocation_id, generation, device_ids, verb, why):
    files = []
    for kind, path in (("cdi", cdi_spec_path(allocation_id)), ("allocation-env", env_file_path(allocation_id))):
        before = observed.live[allocation_id].content if (kind == "cdi" and allocation_id in observed.live) \
            else observed.env_files.get(allocation_id)
        if before is not None:
            files.append(FileChange(kind, path, before, None))
    event = {"type": "AllocationReleased", "body": _base_body(observed, allocation_id, generation, device_ids)}
    removed = " and ".join(change.path for change in files) or "no files left"
    text = "%s %s (%s): remove %s, report AllocationReleased" % (verb, allocation_id, why, removed)
    return Action(verb, allocation_id, text, files, event, list(device_ids), generation)


def _render(assignment_or_live, atoms, generation, observed, kubernetes, env=(), notes=None):
    hold = HoldRender(
        allocation_id=assignment_or_live.allocation_id,
        reservation_id=assignment_or_live.reservation_id,
        generation=generation,
        atoms=tuple(atoms),
        kubernetes=kubernetes,
        cgroup_parent=None,
        mps=observed.mps,
        env=tuple(env),
    )
    return spec_bytes(render_spec(hold, observed.vendor, notes)), render_env(hold)


def plan_pass(generation, parsed, observed, instances=None):
    """The ordered plan for one pass. Pure: reads only its arguments."""
    plan = Plan(generation=generation)
    ledger = observed.ledger
    wanted = dict((assignment.allocation_id, assignment) for assignment in parsed.assignments)
    live = dict(observed.live)
    failures = []  # (allocation_id, reason, message)

    def needs_root(what):
        plan.errors.append("%s needs root or the helper; this pass is unprivileged" % what)

    # 1. Releases an earlier pass recorded but did not finish.
    for allocation_id in sorted(ledger.releasing):
        record = ledger.releasing[allocation_id]
        action = _release_action(observed, allocation_id, record.get("generation", generation),
                                 record.get("device_ids") or [], "finish-release", "cut short by an earlier pass")
        if action.files and not observed.privileged:
            needs_root("finishing the release of %s" % allocation_id)
            continue
        plan.actions.append(action)
        live.pop(allocation_id, None)

    # 2. Holds no longer wanted, or wanted with other devices or another binding.
    keep = set(wanted) | set(parsed.refused_ids)
    rebind = set()
    for allocation_id in sorted(live):
        hold = live[allocation_id]
        assignment = wanted.get(allocation_id)
        if assignment is not None and not hold.problem and (
                sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices)
                or hold.kubernetes != assignment.kubernetes):
            rebind.add(allocation_id)
        if allocation_id in keep and allocation_id not in rebind:
            continue
        why = "wanted with other devices" if allocation_id in rebind else "no longer wanted"
        if not observed.privileged:
            needs_root("releasing %s" % allocation_id)
            continue
        plan.actions.append(_release_action(observed, allocation_id, generation, hold.device_ids, "release", why))
        live.pop(allocation_id)

    # Everything that claims GPUs from here on.
    claims = Claims()
    vfio, plan.vfio = vfio_claims(instances, observed)
    for gpu, instance in vfio.items():
        claims.pass_through(instance, [gpu])
    for allocation_id in sorted(live):
        claims.claim(allocation_id, live[allocation_id].atoms)

    # 3. Holds still wanted.
    for allocation_id in [a.allocation_id for a in parsed.assignments] + sorted(parsed.refused_ids):
        hold = live.get(allocation_id)
        if hold is None:
            continue
        assignment = wanted.get(allocation_id)
        atoms = []
        for atom in hold.atoms:
            found, why = resolve_atom(atom, observed.inventory)
            atoms.append(found)
            if found is None:
                plan.warnings.append("%s: %s; its spec is left as it is" % (allocation_id, why))
        if hold.problem:
            plan.warnings.append(hold.problem)
        resolvable = all(atom is not None for atom in atoms) and not hold.problem
        if assignment is not None and resolvable:
            _plan_kept(plan, observed, assignment, hold, atoms, generation, needs_root)
        plan.holds.append(hold_summary(allocation_id, hold.reservation_id if assignment is None else
                                       assignment.reservation_id, hold.generation, hold.atoms, hold.kubernetes,
                                       hold.cgroup_parent))
        if allocation_id not in ledger.bound and allocation_id in wanted:
            body = bound_body(observed, allocation_id, generation, hold.atoms, hold.cgroup_parent)
            plan.actions.append(Action("report-bound", allocation_id,
                                       "report %s bound (its AllocationBound was never journaled)" % allocation_id,
                                       event={"type": "AllocationBound", "body": body},
                                       device_ids=list(hold.device_ids), generation=generation))

    # 4. New holds, in spec order.
    refusals = dict((refusal.allocation_id, refusal) for refusal in parsed.refusals)
    for refusal in parsed.refusals:
        failures.append((refusal.allocation_id, refusal.reason, refusal.message))
    for assignment in parsed.assignments:
        allocation_id = assignment.allocation_id
        if allocation_id in live or allocation_id in refusals:
            continue
        try:
            atoms = _check_new(assignment, observed, claims)
        except AtomRefused as exc:
            failures.append((allocation_id, exc.reason, exc.message))
            continue
        try:
            spec, env = _render(assignment, atoms, generation, observed, assignment.kubernetes, assignment.env,
                                plan.warnings)
        except RenderError as exc:
            plan.errors.append(str(exc))
            continue
        if assignment.limits is not None:
            plan.warnings.append("%s: limits are not applied yet (hold slices come in a later release); "
                                 "bound with devices only" % allocation_id)
        claims.claim(allocation_id, atoms)
        body = bound_body(observed, allocation_id, generation, atoms)
        files = [FileChange("cdi", cdi_spec_path(allocation_id), None, spec),
                 FileChange("allocation-env", env_file_path(allocation_id),
                            observed.env_files.get(allocation_id), env)]
        text = "bind %s: %s -> %s, %s" % (allocation_id, ", ".join(body["cdi_devices"]),
                                          body["cdi_spec_path"], body["env_file"])
        plan.actions.append(Action("bind", allocation_id, text, files, {"type": "AllocationBound", "body": body},
                                   [atom.id for atom in atoms], generation))
        plan.holds.append(hold_summary(allocation_id, assignment.reservation_id, generation, atoms,
                                       assignment.kubernetes))

    # 5. Failures, in spec order: one AllocationFailed per allocation and generation.
    failures.sort(key=lambda failure: parsed.position(failure[0]))
    for allocation_id, reason, message in failures:
        plan.failures.append(Failure(allocation_id, generation, reason, message))
        if ledger.failures.get(allocation_id) == generation:
            continue
        body = {"node_id": observed.node_id, "allocation_id": allocation_id, "generation": generation,
                "reason": reason, "message": message}
        plan.actions.append(Action("refuse", allocation_id, "refuse %s (%s): %s" % (allocation_id, reason, message),
                                   event={"type": "AllocationFailed", "body": body}, generation=generation))
    return plan


def _check_new(assignment, observed, claims):
    """The checks of a new hold in order: binding, privilege, atoms, conflicts."""
    if assignment.binding not in (BINDING_HOLD, BINDING_KUBERNETES):
        raise AtomRefused("unsupported-binding", "binding %s is not supported" % assignment.binding)
    if not observed.privileged:
        raise AtomRefused("node-unprivileged", NODE_UNPRIVILEGED)
    atoms = resolve_devices(assignment.devices, observed.inventory)
    found = conflicts(atoms, claims)
    if found:
        raise AtomRefused("overlap", "; ".join(found))
    return atoms


def _plan_kept(plan, observed, assignment, hold, atoms, generation, needs_root):
    """A kept hold: write again what no longer matches what it would render to now."""
    allocation_id = assignment.allocation_id
    bound_generation = hold.generation if hold.generation is not None else generation
    try:
        spec, env = _render(assignment, atoms, bound_generation, observed, hold.kubernetes, assignment.env,
                            plan.warnings)
    except RenderError as exc:
        plan.errors.append(str(exc))
        return
    changes = []
    if spec != hold.content:
        why = "its reservation id changed" if hold.reservation_id != assignment.reservation_id \
            else "the vendor spec or the inventory changed"
        changes.append(("rerender", FileChange("cdi", hold.path, hold.content, spec),
                        "re-render %s (%s)" % (hold.path, why)))
    current_env = observed.env_files.get(allocation_id)
    if env != current_env:
        why = "missing" if current_env is None else "out of date"
        changes.append(("write-env", FileChange("allocation-env", env_file_path(allocation_id), current_env, env),
                        "rewrite %s (%s)" % (env_file_path(allocation_id), why)))
    for verb, change, text in changes:
        if not observed.privileged:
            needs_root(text)
            continue
        plan.actions.append(Action(verb, allocation_id, text, [change], device_ids=list(hold.device_ids),
                                   generation=generation))

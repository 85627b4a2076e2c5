# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One pass of the converger: lock, observe, plan, apply, report.

The module ``bcd.devices.holds`` and the node command ``bcd-holds converge``
both call ``run_pass``; nothing else decides what a pass does.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Dict, Final, List, Literal, NamedTuple, Optional, Sequence, Tuple, TypedDict

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import MPS_PIPE_DIRECTORY, SPEC_DIR, env_file_path, read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import parse_runtimes_option
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_INTEGER, InvalidAssignment
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.env_policy import parse_env_allow
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.generations import GenerationConflict, pass_generation
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.hints import refusal_hint
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import reason_shown
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import check_instances, parse_assignments
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import Releases
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import needs_admission
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.apply import apply_plan
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.planner import (
    Observed,
    Plan,
    grows,
    placed,
    plan_pass,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import summary_of
from ansible_collections.bcd.devices.plugins.module_utils.state.events import journal_full, journal_near
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, StateFileError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import fewer_collections

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment, ParsedInput
    from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import Ledger
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus, HostMemory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.seams import PodView
    from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host
    from ansible_collections.bcd.devices.plugins.module_utils.state.nodespec import Nodespec

CONVERGED: Final = "CONVERGED"
PROGRESSING: Final = "PROGRESSING"
FAILED: Final = "FAILED"
PassState = Literal["CONVERGED", "PROGRESSING", "FAILED"]


class Section(TypedDict):
    """The pass's section of the result (and ``bcd-holds converge``'s last line): how far the node got."""

    state: PassState
    generation: int
    observed_generation: Optional[int]  # before a pass that must be retried; the generation's own otherwise
    message: str


class PassError(BcdError):
    """A pass that cannot run at all (stale generation, unusable state directory)."""


@record
class PassResult:
    """What a pass did and says: ``plan`` as the planner made it, ``holds`` the node's holds after it (read back
    from the node when the pass wrote, whatever failed on the way; the plan's own otherwise)."""

    plan: Plan
    section: Section
    changed: bool = False
    events: List[Dict[str, Any]] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    capabilities: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    inventory: Inventory = field(default_factory=Inventory)
    events_not_shown: int = 0
    holds: List[Dict[str, Any]] = field(default_factory=list)
    events_older: int = 0  # how many of ``events``, the first ones, are older than the pass

    def refusal_texts(self) -> List[str]:
        """One line per refusal for a person: ``<allocation> refused (<reason>): <message><hint>``, the reason
        said once where the message already names it (``a1 refused: ResourcesExhausted: …``)."""
        return ["%s refused%s: %s%s" % (f.allocation_id, reason_shown(f.reason, f.message), f.message,
                                        refusal_hint(f.reason, f.message, self.inventory))
                for f in self.plan.failures]

    def refusal_hints(self) -> List[str]:
        """What would help with each refusal (``domain/input/hints.py``), "" where nothing would."""
        return [refusal_hint(f.reason, f.message, self.inventory) for f in self.plan.failures]

    @property
    def retry(self) -> bool:
        return self.section["state"] == PROGRESSING

    def failed_events(self) -> Dict[str, Any]:
        """What a failed task's result carries of the journal, in place of ``to_dict``'s ``events`` and
        ``events_not_shown``: only the events this pass journaled (none in check mode), every older unacknowledged
        one counted instead, and ``events_elsewhere`` saying how many and where to read them. A refusal's printed
        result thus shows the refusal, whatever the journal holds (docs/events.md, "Reading and acknowledging")."""
        older = self.events_older + self.events_not_shown
        shown: Dict[str, Any] = {"events": self.events[self.events_older:], "events_not_shown": older}
        if older:
            shown["events_elsewhere"] = events_elsewhere(older)
        return shown

    def to_dict(self) -> Dict[str, Any]:
        return {
            "changed": self.changed,
            "plan": [action.to_dict() for action in self.plan.actions],
            "section": self.section,
            "failures": [failure.to_dict(self.plan.generation) for failure in self.plan.failures],
            "events": self.events,
            "events_not_shown": self.events_not_shown,
            "holds": self.holds,
            "conditions": self.plan.conditions,
            "pending_releases": self.plan.pending_releases,
            "capabilities": self.capabilities,
        }


def capabilities(host: Host, inventory: Inventory) -> List[str]:
    """What the node can honour: nothing that needs root on an unprivileged node."""
    caps = []
    if host.privileged:
        caps.append("cdi")
        if host.slices_unavailable() is None:
            caps.append("devices.limits")
        caps.append("binding.kubernetes")
    if inventory.error is None and inventory.gpus:
        caps.append("nvml")
    return caps


def node_runtimes(host: Host, option: object = "auto") -> Tuple[List[Runtime], List[str]]:
    """``(runtimes, warnings)``: the runtimes ``cdi_runtimes`` names, or those found on the node under
    ``auto``. ``PassError`` for an option that is not ``auto`` or a list of ``{name, version}``."""
    try:
        runtimes = parse_runtimes_option(option)
    except ValueError as exc:
        raise PassError(str(exc))
    if runtimes == "auto":
        return host.cdi_runtimes()
    return runtimes, []


def observe(host: Host, ledger: Ledger, wanted: Sequence[Assignment] = (), releases: Optional[Releases] = None,
            now: float = 0.0, state_dir: str = DEFAULT_STATE_DIR, runtimes: Optional[Sequence[Runtime]] = None,
            maintenance: Optional[Dict[str, Dict[str, Any]]] = None,
            health_cleared: Optional[Dict[str, float]] = None) -> Observed:
    """Read everything a plan needs from the host, once: host memory only when a new hold needs
    admission, the kube side only when a Kubernetes release needs it."""
    releases = releases if releases is not None else Releases()
    live = live_holds(host)
    kube = _kube_look(host, live, wanted, releases)
    env_files = _env_files(host, live, ledger, wanted, releases)
    domains, domains_error = host.domains()
    slices = host.slice_states()
    memory, cpus, cpus_unreadable = _admission_reads(host, live, ledger, wanted)
    return Observed(
        node_id=host.node_id(),
        boot_id=host.boot_id(),
        inventory=host.inventory(),
        vendor=host.vendor_spec(),
        live=live,
        env_files=env_files,
        ledger=ledger,
        privileged=host.privileged,
        mps=host.exists(MPS_PIPE_DIRECTORY),
        domains=list(domains),
        domains_error=domains_error,
        slices=slices,
        slices_unavailable=host.slices_unavailable(),
        memory=memory,
        cpus=cpus,
        cpus_unreadable=cpus_unreadable,
        releases=releases,
        kube=kube,
        now=now,
        state_dir=state_dir,
        damaged_specs=host.damaged_specs(),
        # /etc/cdi missing or not a directory reads as no holds: a spec is gone only from a directory that is
        # there (holds are never released because the directory was moved away)
        spec_dir=os.path.isdir(host.path(SPEC_DIR)),
        runtimes=list(runtimes if runtimes is not None else host.cdi_runtimes()[0]),
        maintenance=dict(maintenance or {}),
        health_cleared=dict(health_cleared or {}),
    )


def live_holds(host: Host) -> Dict[str, LiveHold]:
    """``{allocation_id: LiveHold}`` of every hold spec on the node, as read now."""
    return dict((allocation_id, read_hold(allocation_id, path, content))
                for allocation_id, (path, content) in host.hold_files().items())


def _kube_look(host: Host, live: Dict[str, LiveHold], wanted: Sequence[Assignment],
               releases: Releases) -> Optional[PodView]:
    """What the kubelet says of the pods' devices, asked only when a Kubernetes release needs it (one pending,
    a marker, an unreadable record, or a live Kubernetes hold that goes or moves to other devices); else None."""
    wanted_devices = dict((a.allocation_id, (a.kubernetes, sorted(ref.id for ref in a.devices))) for a in wanted)
    if releases.pending or releases.marker or releases.unreadable is not None or any(
            hold.kubernetes and wanted_devices.get(allocation_id) != (True, sorted(hold.device_ids))
            for allocation_id, hold in live.items()):  # a Kubernetes hold goes, or moves to other devices
        return host.kube_side().look(host.inventory())
    return None


def _env_files(host: Host, live: Dict[str, LiveHold], ledger: Ledger, wanted: Sequence[Assignment],
               releases: Releases) -> Dict[str, Optional[bytes]]:
    """``{allocation_id: bytes or None}``: the env file of every allocation the pass may touch. A reported hold
    whose spec is gone: its env file goes with its release; an env file of an allocation the node knows nothing
    of: a bind that never finished left it (reading.stale_env_files)."""
    env_files: Dict[str, Optional[bytes]] = {}
    for allocation_id in set(live) | set(ledger.unfinished_releases) | set(a.allocation_id for a in wanted) | \
            set(releases.pending) | set(ledger.bound) | set(host.env_file_ids()):
        try:
            env_files[allocation_id] = host.read(env_file_path(allocation_id))
        except OSError:  # a directory in its place: planned as missing; writing it fails for that hold alone
            env_files[allocation_id] = None
    return env_files


def _admission_reads(host: Host, live: Dict[str, LiveHold], ledger: Ledger, wanted: Sequence[Assignment]
                     ) -> Tuple[Optional[HostMemory], Optional[HostCpus], Optional[str]]:
    """``(memory, cpus, cpus_unreadable)``: host memory when a new or rebound hold, or a kept one whose limits
    grow, is admitted; the host's CPUs and NUMA nodes when a hold's cpus or mems are bound anew (checked against
    the host, and its locality said). None where nothing needs them."""
    memory = None
    if any(needs_admission(a.limits) and (_bound_anew(a, live.get(a.allocation_id)) or _may_grow(a, ledger))
           for a in wanted):
        memory = host.memory()
    cpus: Optional[HostCpus] = None
    cpus_unreadable: Optional[str] = None
    if any(a.limits is not None and (a.limits.cpus or a.limits.mems) and
           (_bound_anew(a, live.get(a.allocation_id)) or _placed_anew(a, ledger)) for a in wanted):
        cpus, cpus_unreadable = host.cpus()
    return memory, cpus, cpus_unreadable


def _bound_anew(assignment: Assignment, hold: Optional[LiveHold]) -> bool:
    """Whether the pass binds ``assignment`` anew: no live hold, one on other devices or of another binding
    (released and bound again), or one whose spec is damaged (written again). Each is admitted."""
    return hold is None or hold.problem is not None or hold.kubernetes != assignment.kubernetes or \
        sorted(hold.device_ids) != sorted(ref.id for ref in assignment.devices)


def _may_grow(assignment: Assignment, ledger: Ledger) -> bool:
    """Whether a kept hold's limits book more memory or huge pages than it was bound with."""
    return grows(ledger.limits_of(assignment.allocation_id), assignment.limits)


def _placed_anew(assignment: Assignment, ledger: Ledger) -> bool:
    """Whether a kept hold's cpus or mems differ from those it was bound with (the ledger's)."""
    return placed(ledger.limits_of(assignment.allocation_id)) != placed(assignment.limits)


def section_of(generation: int, plan: Plan, errors: Sequence[str], previous_observed: Optional[int]) -> Section:
    if errors:
        return {"state": PROGRESSING, "generation": generation, "observed_generation": previous_observed,
                "message": "; ".join(errors)}
    if plan.failures:
        return {"state": FAILED, "generation": generation, "observed_generation": generation,
                "message": "; ".join("%s: %s" % (f.allocation_id, f.message) for f in plan.failures)}
    return {"state": CONVERGED, "generation": generation, "observed_generation": generation, "message": ""}


def run_pass(host: Host, generation: Optional[int], devices: List[Any], instances: Optional[List[Dict[str, Any]]] = None,
             state_dir: str = DEFAULT_STATE_DIR, check_mode: bool = False, lock_timeout: float = 120.0,
             store_input: bool = True, cdi_runtimes: object = "auto", env_allow: object = None) -> PassResult:
    """One pass over ``devices`` at ``generation``; ``check_mode`` plans and writes nothing.
    ``generation`` None: the node numbers the input (``domain/input/generations.py``); one given that the node
    applied with another input is a ``PassError`` before anything is written.
    A real pass stores its input for the node's timers unless ``store_input`` is false.
    ``cdi_runtimes``: ``auto`` (find them) or the node's container runtimes as ``{name, version}``.
    ``env_allow``: None, or the only env keys a hold may set (``domain/input/env_policy.py``)."""
    with fewer_collections():
        return _run_pass(host, generation, devices, instances, state_dir=state_dir, check_mode=check_mode,
                         lock_timeout=lock_timeout, store_input=store_input, cdi_runtimes=cdi_runtimes,
                         env_allow=env_allow)


# Of the unacknowledged events older than a pass, at most this many ride in its result (docs/events.md); none in a
# failed one (``PassResult.failed_events``).
OLDER_EVENTS_SHOWN = 16


def events_elsewhere(count: int) -> str:
    """A failed result's ``events_elsewhere``: how many older unacknowledged events it leaves out, and where they are."""
    return ("%d unacknowledged event%s of earlier passes not shown: bcd.devices.events lists %s (bcd-holds events "
            "on the node)" % (count, "" if count == 1 else "s", "it" if count == 1 else "them all"))


def _run_pass(host: Host, generation: Optional[int], devices: List[Any], instances: Optional[List[Dict[str, Any]]], *,
              state_dir: str, check_mode: bool, lock_timeout: float, store_input: bool, cdi_runtimes: object,
              env_allow: object) -> PassResult:
    if generation is not None:
        _check_generation(generation)
    parsed, allow = _parsed_input(devices, instances, env_allow)
    runtimes, runtime_warnings = node_runtimes(host, cdi_runtimes)
    state = NodeState(host.path(state_dir), state_dir)
    # Without root and without the helper (become forgotten), a real pass is check mode's pass: it refuses
    # every new hold just the same and writes nothing, not even a state file or its refusals' events (a
    # state directory it could write is the role's, whose passes run beside the helper), and says so
    # instead of failing on the first write. Check mode says the same.
    unrecorded = None if host.privileged else state.unwritable()
    writes = not check_mode and host.privileged
    with state.lock(lock_timeout, create=writes):
        generation, previous = _generation_under_lock(state, generation, devices, instances, writes)
        now = time.time()
        observed = observe(host, state.ledger, parsed.assignments, state.releases, now, state_dir, runtimes,
                           state.maintenance, state.health_cleared)
        plan = plan_pass(generation, parsed, observed, instances)
        warnings = _observation_warnings(observed) + runtime_warnings + parsed.warnings + plan.warnings
        errors = list(plan.errors)
        backlog, journal_bytes = state.backlog()
        full = journal_full(len(backlog), journal_bytes,
                            sum(1 for action in plan.changes if action.event_type()) if host.privileged else 0)
        if full:  # nothing is done that it could not journal: the pass waits, retried (check mode says so too)
            errors.append(full)
        changed = bool(plan.changes) and host.privileged and not full
        if unrecorded:
            warnings.append("%s: this pass wrote nothing and journaled no event" % unrecorded)
        if writes and not full:
            stored = StoredInput(devices, instances or [], cdi_runtimes, allow) if store_input else None
            changed, section, holds = _apply(host, state, plan, parsed=parsed, errors=errors, generation=generation,
                                             previous=previous, started=now, stored=stored)
        else:
            section, holds = section_of(generation, plan, errors, previous), plan.holds
        events, not_shown, older = _events_shown(state, backlog, journal_bytes,
                                                 writes and not full and bool(plan.changes), full, warnings,
                                                 clean=not errors)
    return PassResult(plan=plan, section=section, changed=changed, events=events, warnings=warnings,
                      capabilities=capabilities(host, observed.inventory), errors=errors,
                      inventory=observed.inventory, events_not_shown=not_shown, holds=holds, events_older=older)


def _parsed_input(devices: List[Any], instances: object, env_allow: object
                  ) -> Tuple[ParsedInput, Optional[Tuple[str, ...]]]:
    """``(parsed, allow)``: the pass's assignments and the env keys a hold may set, checked (``PassError``)."""
    try:
        allow = parse_env_allow(env_allow)
    except ValueError as exc:
        raise PassError(str(exc))
    try:
        parsed = parse_assignments(devices, allow)
        check_instances(instances)
    except InvalidAssignment as exc:
        raise PassError(str(exc))
    return parsed, allow


def _generation_under_lock(state: NodeState, generation: Optional[int], devices: List[Any],
                           instances: Optional[List[Dict[str, Any]]], writes: bool) -> Tuple[int, Optional[int]]:
    """``(generation, previous)``: the pass's generation, numbered (or refused) against the stored input and the
    state before anything is written, and the observed generation before the pass. Loads the state (for writing
    when the pass writes); ``PassError`` for a generation older than the observed one."""
    try:
        stored = state.load_nodespec()
    except StateFileError:  # unreadable: replaced by this pass's input; a generation is new to it
        stored = None
    state.load(write=False)  # numbered (or refused) before anything is written, the journal's catch-up too
    generation = _numbered(generation, stored, state.ledger, devices, instances)
    if writes:
        state.load(write=True)
    ledger = state.ledger
    if ledger.observed_generation is not None and generation < ledger.observed_generation:
        raise PassError("generation %d is older than the observed generation %s; refusing to go back"
                        % (generation, ledger.observed_generation))
    return generation, ledger.observed_generation


class StoredInput(NamedTuple):
    """A real pass's input as the node's timers run it again (``NodeState.store_nodespec``), the options their
    passes must pass the same way included."""

    devices: List[Any]
    instances: List[Dict[str, Any]]
    cdi_runtimes: object
    env_allow: Optional[Tuple[str, ...]]


def _apply(host: Host, state: NodeState, plan: Plan, *, parsed: ParsedInput, errors: List[str], generation: int,
           previous: Optional[int], started: float, stored: Optional[StoredInput]
           ) -> Tuple[bool, Section, List[Dict[str, Any]]]:
    """Apply ``plan`` through the host's writer, the state taking its reports, and record the pass (begun at
    ``started``, over ``parsed``): ``(changed, section, holds)``. ``errors`` gets what failed, the section is said
    from them (``previous``: the observed generation before the pass), the state records the pass (and the input
    ``stored`` for the node's timers, unless None), and the holds are those on the node now: the plan's when every
    step was done (what check mode says), read again when one failed."""
    done, apply_errors, changed = apply_plan(plan, host.writer, state)  # what was done, failed or not
    errors.extend(apply_errors)
    section = section_of(generation, plan, errors, previous)
    if stored is not None:
        state.store_nodespec(generation, stored.devices, stored.instances, stored.cdi_runtimes, stored.env_allow)
    state.finish(generation, section["state"], plan.vfio,
                 set(a.allocation_id for a in parsed.assignments) | set(r.allocation_id for r in parsed.refusals),
                 finished=not errors, renders=plan.renders, started=started, booked=plan.booked)
    if not apply_errors:  # every step done: the node holds what the plan said it would (check mode's answer)
        return changed, section, list(plan.holds)
    live = live_holds(host)  # something failed on the way: what the node holds now, read again
    return changed, section, _holds_in_order(live, parsed)


def _holds_in_order(live: Dict[str, LiveHold], parsed: ParsedInput) -> List[Dict[str, Any]]:
    """The summaries of ``live``'s holds, in the input's order (then by id)."""
    return [summary_of(live[allocation_id]) for allocation_id in sorted(live, key=lambda a: (parsed.position(a), a))]


def _events_shown(state: NodeState, backlog: List[Dict[str, Any]], journal_bytes: int, journaled: bool,
                  full: Optional[str], warnings: List[str], clean: bool = False
                  ) -> Tuple[List[Dict[str, Any]], int, int]:
    """``(events, not_shown, older)``: what a pass's result carries of the journal after it (``clean``: nothing
    failed, so the backlog and what the pass appended; else read again where the pass may have journaled): every
    event the pass journaled, after at most ``OLDER_EVENTS_SHOWN`` of the older unacknowledged ones (the oldest,
    the next a gateway takes); how many older ones it leaves out; and how many of ``events`` are older (a failed
    task shows none of them: ``PassResult.failed_events``). A result thus does not grow with the journal's age;
    ``bcd.devices.events`` returns them all. The journal's and the state's warnings go to ``warnings``."""
    known = set(event["seq"] for event in backlog)
    if not journaled:
        after = backlog
    elif clean:  # every write went through: the journal is the backlog and what this pass appended (under the lock)
        after = backlog + [event for event in state.journaled if event["seq"] not in known]
    else:  # something failed on the way, the journal's append maybe: as the journal reads now
        after = state.unacked()
    older = [event for event in after if event["seq"] in known]
    shown = older[:OLDER_EVENTS_SHOWN]
    near = journal_near(len(after), journal_bytes)
    if near and not full:
        warnings.append(near)
    warnings.extend(state.journal.warnings)
    if state.maintenance_problem:
        warnings.append(state.maintenance_problem)
    return shown + [event for event in after if event["seq"] not in known], len(older) - len(shown), len(shown)


def _numbered(generation: Optional[int], stored: Optional[Nodespec], ledger: Ledger, devices: List[Any],
              instances: Optional[List[Dict[str, Any]]]) -> int:
    refused = [] if generation is None else [allocation_id for allocation_id in ledger.failures
                                             if ledger.refused_at(allocation_id) == generation]
    try:
        generation = pass_generation(generation, stored, ledger.observed_generation, devices, instances, refused)
    except GenerationConflict as exc:
        raise PassError(str(exc))
    _check_generation(generation)
    return generation


def _check_generation(generation: object) -> None:
    # the stored input's reader (state.store.nodespec_from_data) takes back a 64-bit generation only: a larger
    # one, stored, would stop every timer pass after this one (found by make fuzz)
    if isinstance(generation, bool) or not isinstance(generation, int) or \
            not -MAX_INTEGER - 1 <= generation <= MAX_INTEGER:
        raise PassError("generation must be a 64-bit integer (at most %d)" % MAX_INTEGER)


def _observation_warnings(observed: Observed) -> List[str]:
    warnings = []
    if not observed.privileged:
        warnings.append("this pass runs without root and without the root helper: it refuses every new hold "
                        "(node-unprivileged), writes nothing, and advertises no cdi, devices.limits or "
                        "binding.kubernetes capability")
    if observed.inventory.error:
        warnings.append("GPU inventory: %s" % observed.inventory.error)
    warnings.extend(getattr(observed.vendor, "warnings", None) or [])
    if observed.domains_error:
        warnings.append("VMs: %s; using the GPUs they had at the last pass" % observed.domains_error)
    if observed.cpus_unreadable:
        warnings.append("host CPUs and NUMA nodes unreadable (%s); cpus and mems are bound without checking "
                        "them against the host" % observed.cpus_unreadable)
    if observed.ledger.problem:
        warnings.append(observed.ledger.problem)
    if observed.kube is not None and observed.kube.error is not None:
        warnings.append("the kube side cannot be asked (%s): Kubernetes releases count as held" % observed.kube.error)
    return warnings

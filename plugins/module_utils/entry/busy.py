# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds busy`` and ``bcd.devices.gpu_busy``; ``bcd.devices.maintenance``; ``bcd.devices.gpu_reset``.

A busy check reads under the pass lock, shared: a pass and a busy check never see half a
change, and several checks run at once. Maintenance and a reset change the node under the pass
lock, exclusive, recorded in the state directory as its owner (``state/store.py``), and each GPU
taken out of service, put back or reset is one signed event in the node's journal
(``GPUMaintenanceStarted``, ``GPUMaintenanceEnded``, ``GPUReset``), journaled before the record
changes; a full journal changes nothing (the call fails, to be run again once events are delivered).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import busy_entry, claims_on, health_fields, reset_argv
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import read_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    GPU_CONDITION_REASONS,
    GPU_MAINTENANCE_ENDED,
    GPU_MAINTENANCE_STARTED,
    GPU_RESET,
    GPU_RESET_INEFFECTIVE,
    MAINTENANCE_ENDED,
    MAINTENANCE_STARTED,
    RESET_FAILED,
    RESET_HEALTHY,
    RESET_INEFFECTIVE,
    condition_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.health import PUT_BACK, gpu_health, ineffective_resets
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_RERAISE_AFTER,
    MAX_LEASE_SECONDS,
    MAX_RERAISE_AFTER,
    MaintenanceError,
    Records,
    change,
    check_gpus,
    check_lease,
    check_reason,
    check_seconds,
    iso_utc,
    lease_ended,
    lease_holder,
    listing,
    live_lease,
    one_line,
    with_lease,
    with_reset,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.commands import failure_text, run_tool
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import reset_fakehw_gpus
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost, Host, RealHost
from ansible_collections.bcd.devices.plugins.module_utils.state.events import MAX_JOURNAL_BYTES, MAX_UNACKED, journal_full
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import LiveHold

# A GPU's entry of a busy check (``domain.busy.busy_entry`` with ``health_fields``): uuid, busy, claimed_by, healthy,
# problems, reset_ineffective, recoverable.
BusyEntry = Dict[str, Any]


class BusyError(BcdError):
    """Bad input to a busy check, a maintenance change or a reset, or a node state that refuses it; the message is
    fit for a user."""


def _holds(host: Host) -> List[LiveHold]:
    return [read_hold(allocation_id, path, content)
            for allocation_id, (path, content) in sorted(host.hold_files().items())]


def _known(host: Host, uuids: Sequence[str], holds: Sequence[LiveHold], extra: Iterable[str] = ()) -> None:
    """Every UUID must be a GPU of this node (in its inventory, or named by a hold or a record)."""
    known = set(gpu.uuid for gpu in host.inventory().gpus) | set(extra)
    known |= set(atom.gpu_uuid for hold in holds for atom in hold.atoms)
    unknown = [uuid for uuid in uuids if uuid not in known]
    if unknown:
        raise BusyError("%s %s not on this node" % (", ".join(unknown), "is" if len(unknown) == 1 else "are"))


def _entries(host: Host, state: NodeState, uuids: Sequence[str], holds: Sequence[LiveHold]) -> List[BusyEntry]:
    """``[{uuid, busy, claimed_by, healthy, problems, reset_ineffective, recoverable}]`` of ``uuids``, read now."""
    domains, _error = host.domains()
    seen = dict((gpu.uuid, gpu) for gpu in host.inventory().gpus)
    entries = []
    for uuid in uuids:
        entry = busy_entry(uuid, claims_on(uuid, holds, state.releases, domains, state.ledger.vfio, state.maintenance))
        gpu = seen.get(uuid)
        health: Tuple[str, ...] = gpu_health(gpu, state.health_cleared) if gpu is not None else ()
        entry.update(health_fields(gpu is not None, health, state.maintenance.get(uuid)))
        entries.append(entry)
    return entries


def busy_check(host: Host, gpus: Optional[Sequence[str]] = None, state_dir: str = DEFAULT_STATE_DIR,
               lock_timeout: float = 120.0) -> List[BusyEntry]:
    """``[{uuid, busy, claimed_by, healthy, problems, reset_ineffective, recoverable}]`` for each GPU of ``gpus``
    (None: every GPU the node lists); ``BusyError`` for bad input."""
    try:
        uuids = check_gpus(gpus) if gpus is not None else None
    except MaintenanceError as exc:
        raise BusyError(str(exc))
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=False, shared=True):
        state.load(write=False)
        holds = _holds(host)
        if uuids is None:
            uuids = [gpu.uuid for gpu in host.inventory().gpus]
        else:
            _known(host, uuids, holds, list(state.maintenance) + list(state.ledger.vfio))
        return _entries(host, state, uuids, holds)


# -- events ------------------------------------------------------------------------------------------

def _gpu_event(host: Host, state: NodeState, kind: str, uuid: str, reason: str, message: str) -> Dict[str, Any]:
    """One signed event of a GPU's recovery: its body names its type, as a condition's does; its generation is the
    node's last observed one (0 before the first finished pass)."""
    generation = state.ledger.observed_generation
    return {"type": kind, "body": {
        "type": kind, "node_id": host.node_id(), "boot_id": host.boot_id(),
        "generation": generation if generation is not None else 0, "device_ids": [uuid], "reason": reason,
        "message": message}}


def _room(state: NodeState, adding: int, what: str) -> None:
    """Fail (changing nothing) when the journal cannot take ``adding`` more events: the call is run again once the
    node's events are delivered and acknowledged, as a pass is retried."""
    events, size = state.backlog()
    if journal_full(len(events), size, adding):
        raise BusyError(
            "the event journal is full: it holds %d unacknowledged events in %d bytes, and its bound is %d events or %d "
            "bytes; %s would journal %d more, so it changed nothing: deliver and acknowledge the events (bcd.devices."
            "events with ack_through, or the role's bcd_holds_gateway_url), then run it again"
            % (len(events), size, MAX_UNACKED, MAX_JOURNAL_BYTES, what, adding))


def _journal_and_save(state: NodeState, events: Sequence[Dict[str, Any]], records: Records,
                      back_in_service: Sequence[str] = (), now: Optional[float] = None) -> None:
    """Journal ``events`` (signed), then record ``records`` (and the GPUs whose faults before ``now`` stop
    counting): the event comes first, as for every report (``state/store.py``)."""
    for event in events:
        state.report(event)
    with state.change():
        state.save_maintenance(records, back_in_service, now)


# -- maintenance -------------------------------------------------------------------------------------

def set_maintenance(host: Host, gpus: Sequence[str], present: bool, reason: Optional[str] = None,
                    state_dir: str = DEFAULT_STATE_DIR, check_mode: bool = False, lock_timeout: float = 120.0,
                    lease: Optional[str] = None, lease_seconds: float = DEFAULT_LEASE_SECONDS,
                    reraise_after: float = DEFAULT_RERAISE_AFTER) -> Dict[str, Any]:
    """Put ``gpus`` in maintenance (``present``) or take them out, under a recovery's ``lease`` when one is named.
    Returns ``{changed, before, after, lease_holder, lease_until, gpus, msg}`` (the records as ``listing`` gives
    them; ``gpus``, the busy entries of ``gpus``, only with a lease and ``present``). Check mode computes the same
    and writes nothing.

    With ``lease`` and ``present``: when another recovery's lease is live on the node, nothing changes and
    ``lease_holder`` names it; else the GPUs are in maintenance under this lease until ``lease_seconds`` from now
    (taken, or refreshed: a refresh alone is no change). With ``lease`` and absent: the GPUs leave maintenance
    (``gpus`` may be empty) and the lease ends on every GPU it covers; a GPU under another recovery's live lease is
    refused. Without ``lease``, an operator's change: leases are left as they are."""
    try:
        uuids = check_gpus(gpus) if not (lease is not None and not present and gpus == []) else []
        reason = check_reason(reason) if present else None
        if lease is not None:
            lease = check_lease(lease)
            lease_seconds = check_seconds(lease_seconds, "lease_seconds", 1, MAX_LEASE_SECONDS)
            reraise_after = check_seconds(reraise_after, "reraise_after", 0, MAX_RERAISE_AFTER)
    except MaintenanceError as exc:
        raise BusyError(str(exc))
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=not check_mode):
        state.load(write=not check_mode)
        if state.maintenance_problem and not check_mode:
            raise BusyError("%s: remove or fix it first" % state.maintenance_problem)
        holds = _holds(host) if present else []
        if present:
            _known(host, uuids, holds)
        before = state.maintenance
        now = time.time()
        result: Dict[str, Any] = {"changed": False, "before": listing(before, now), "after": listing(before, now),
                                  "lease_holder": None, "lease_until": None}
        if lease is not None:
            holder = lease_holder(dict((u, r) for u, r in before.items() if present or u in uuids), lease, now)
            if holder is not None:
                if not present:
                    raise BusyError("%s %s under the lease of recovery %s until %s; not put back in service"
                                    % (", ".join(holder["gpus"]), "is" if len(holder["gpus"]) == 1 else "are",
                                       holder["id"], holder["until"]))
                result["lease_holder"] = holder
                result["msg"] = ("recovery %s of this node is in progress (its lease on %s runs until %s); this one "
                                 "changes nothing and ends here" % (holder["id"], ", ".join(holder["gpus"]),
                                                                    holder["until"]))
                return result
        after, changed = change(before, uuids, present, reason, now)
        taken = False
        if lease is not None and present:
            until = now + lease_seconds
            taken = any((live_lease(before.get(uuid), now) or {}).get("id") != lease for uuid in uuids)
            after = with_lease(after, uuids, lease, until, reraise_after)
            result["lease_until"] = iso_utc(until)
        elif lease is not None:
            ended = lease_ended(after, lease, now)
            taken = ended != after
            after = ended
        started = [uuid for uuid in uuids if present and uuid not in before]
        back = [uuid for uuid in uuids if not present and uuid in before]
        events = [_gpu_event(host, state, GPU_MAINTENANCE_STARTED, uuid, MAINTENANCE_STARTED,
                             "%s is out of service%s: new holds on it are refused (overlap)"
                             % (uuid, " for recovery %s" % lease if lease else "")) for uuid in started]
        events += [_gpu_event(host, state, GPU_MAINTENANCE_ENDED, uuid, MAINTENANCE_ENDED,
                              "%s is back in service: faults logged before now no longer count" % uuid)
                   for uuid in back]
        if events:
            _room(state, len(events), "bcd.devices.maintenance")
        if after != before and not check_mode:
            _journal_and_save(state, events, after, back, now)
        result.update(changed=bool(changed) or taken, after=listing(after, now))
        if lease is not None and present:
            result["gpus"] = _entries(host, state, uuids, holds)
            result["msg"] = busy_message(result["gpus"])
        return result


# -- a reset -----------------------------------------------------------------------------------------

def reset_gpus(host: Host, gpus: Sequence[str], state_dir: str = DEFAULT_STATE_DIR, check_mode: bool = False,
               lock_timeout: float = 120.0) -> Dict[str, Any]:
    """Reset ``gpus``, each in maintenance and free, and read their health again:
    ``{changed, gpus: [{uuid, reset, healthy, problems, error}], failed, msg}``.

    A real node runs ``nvidia-smi --gpu-reset -i <UUID>`` per GPU; a fakehw node clears the GPU's faults in its
    hardware file, unless the file says a reset does not help (``health.reset_clears: false``). The time of each
    reset is recorded (``health.json``: XIDs logged before it no longer count), with the outcome, in the GPU's
    maintenance record; the GPU stays in maintenance either way. Each GPU's reset is a signed ``GPUReset`` event
    (``ResetHealthy``, ``ResetIneffective``, ``ResetFailed``), and a GPU still unhealthy raises
    ``GPUResetIneffective``. Refused, with nothing reset, when a GPU is not on the node, not in maintenance or busy.
    Check mode says which GPUs would be reset, as they read now, and resets nothing."""
    try:
        uuids = check_gpus(gpus)
    except MaintenanceError as exc:
        raise BusyError(str(exc))
    state = NodeState(host.path(state_dir), state_dir)
    with state.lock(lock_timeout, create=not check_mode):
        state.load(write=not check_mode)
        if state.maintenance_problem:
            raise BusyError("%s: remove or fix it first" % state.maintenance_problem)
        seen = dict((gpu.uuid, gpu) for gpu in host.inventory().gpus)
        missing = [uuid for uuid in uuids if uuid not in seen]
        if missing:
            raise BusyError("%s %s not listed by the node's inventory; nothing was reset"
                            % (", ".join(missing), "is" if len(missing) == 1 else "are"))
        out = [uuid for uuid in uuids if uuid not in state.maintenance]
        if out:
            raise BusyError("%s %s not in maintenance: take %s out of service first (bcd.devices.maintenance), so that "
                            "no new hold takes %s while %s reset; nothing was reset"
                            % (", ".join(out), "is" if len(out) == 1 else "are", "it" if len(out) == 1 else "them",
                               "it" if len(out) == 1 else "them", "it is" if len(out) == 1 else "they are"))
        entries = _entries(host, state, uuids, _holds(host))
        if any(entry["busy"] for entry in entries):
            raise BusyError("%s; nothing was reset" % busy_message(entries))
        _room(state, 2 * len(uuids), "bcd.devices.gpu_reset")
        before = dict((uuid, gpu_health(seen[uuid], state.health_cleared)) for uuid in uuids)
        if check_mode:
            return {"changed": True, "failed": False, "before": before, "after": None,
                    "gpus": [{"uuid": uuid, "reset": False, "healthy": not before[uuid], "problems": list(before[uuid]),
                              "error": None} for uuid in uuids],
                    "msg": "%s would be reset" % ", ".join(uuids)}
        done, errors = _reset(host, uuids)
        cleared = dict(state.health_cleared)
        cleared.update(done)
        again = host.fresh().inventory()  # read again: the reset changed the GPUs
        fresh = dict((gpu.uuid, gpu) for gpu in again.gpus)
        outcomes, events, results, ineffective = {}, [], [], []
        for uuid in uuids:
            if uuid in errors:
                results.append({"uuid": uuid, "reset": False, "healthy": not before[uuid],
                                "problems": list(before[uuid]), "error": errors[uuid]})
                events.append(_gpu_event(host, state, GPU_RESET, uuid, RESET_FAILED, "%s could not be reset: %s"
                                         % (uuid, one_line(errors[uuid], 400))))
                continue
            gpu = fresh.get(uuid)
            health = gpu_health(gpu, cleared) if gpu is not None else ("not listed by the node's inventory after the reset",)
            outcomes[uuid] = (done[uuid], not health, health)
            results.append({"uuid": uuid, "reset": True, "healthy": not health, "problems": list(health), "error": None})
            if health:
                message = ("%s was reset and is still unhealthy: %s; it stays in maintenance: reboot the node or replace "
                           "the GPU, then %s" % (uuid, "; ".join(health), PUT_BACK))
                events.append(_gpu_event(host, state, GPU_RESET, uuid, RESET_INEFFECTIVE, message))
                ineffective.append(uuid)
            else:
                events.append(_gpu_event(host, state, GPU_RESET, uuid, RESET_HEALTHY,
                                         "%s was reset and reads healthy" % uuid))
        records = with_reset(state.maintenance, outcomes)
        # the condition at once, as the next pass would raise it (and, the ledger recording it, will not again)
        for uuid, message in ineffective_resets(again, records, cleared):
            if uuid in ineffective and condition_key(GPU_RESET_INEFFECTIVE, [uuid]) not in state.ledger.conditions:
                events.append(_gpu_event(host, state, GPU_RESET_INEFFECTIVE, uuid,
                                         GPU_CONDITION_REASONS[GPU_RESET_INEFFECTIVE], message))
        for event in events:
            state.report(event)
        with state.change():
            for uuid in sorted(done, key=lambda u: done[u]):  # each GPU's faults stop counting at its own reset
                state.save_maintenance(records, [uuid], done[uuid])
            if not done:
                state.save_maintenance(records)
        return {"changed": bool(done) or bool(errors), "failed": bool(errors), "before": before,
                "after": dict((r["uuid"], r) for r in results), "gpus": results, "msg": reset_message(results)}


def _reset(host: Host, uuids: List[str]) -> Tuple[Dict[str, float], Dict[str, str]]:
    """``({uuid: when it was reset}, {uuid: why it was not})``: each GPU reset in turn, in the fakehw file of a
    fakehw node, by ``nvidia-smi`` (``reset_argv``) on a real one."""
    if isinstance(host, FakeHwHost):
        try:
            reset_fakehw_gpus(host.fakehw_path, uuids)
        except (BcdError, OSError) as exc:
            return {}, dict((uuid, "the fakehw file could not be rewritten: %s" % exc) for uuid in uuids)
        now = time.time()
        return dict((uuid, now) for uuid in uuids), {}
    if not isinstance(host, RealHost):  # a host is one or the other (node/hosts.py)
        raise BusyError("a %s cannot reset GPUs" % type(host).__name__)
    done: Dict[str, float] = {}
    errors: Dict[str, str] = {}
    for uuid in uuids:
        argv = reset_argv(uuid)
        rc, out, err = run_tool(host.runner, argv)
        if rc == 0:
            done[uuid] = time.time()
        else:
            errors[uuid] = failure_text(argv, rc, out, err)
    return done, errors


def reset_message(results: Sequence[Dict[str, Any]]) -> str:
    """The reset module's ``msg``: what became of each GPU."""
    parts = []
    for result in results:
        uuid = printable(result["uuid"])
        if result["error"]:
            parts.append("%s could not be reset: %s" % (uuid, printable(result["error"])))
        elif result["healthy"]:
            parts.append("%s was reset and reads healthy" % uuid)
        else:
            parts.append("%s was reset and is still unhealthy: %s; it stays in maintenance (GPUResetIneffective): "
                         "reboot the node or replace the GPU" % (uuid, printable("; ".join(result["problems"]))))
    return "; ".join(parts)


def busy_message(entries: Sequence[BusyEntry]) -> str:
    """The module's ``msg``: each busy GPU and what claims it (maintenance left out: it makes no GPU busy), or
    that none of them is busy. Escaped like ``busy_lines``."""
    busy = ["%s is busy: %s" % (printable(entry["uuid"]), "; ".join(
        printable(claim["text"]) for claim in entry["claimed_by"] if claim["kind"] != "maintenance"))
        for entry in entries if entry["busy"]]
    if busy:
        return "; ".join(busy)
    if not entries:
        return "the node lists no GPU"
    return "%s %s free" % (", ".join(printable(entry["uuid"]) for entry in entries), "is" if len(entries) == 1 else "are")


def busy_lines(entries: Sequence[BusyEntry]) -> List[str]:
    """What ``bcd-holds busy`` prints: one line per GPU. A claim's text names what the state directory, a
    hold spec or the VMs say (an allocation id, a path, a reason): each is escaped (``support/text.py``), so
    nothing in it can redraw the line, and a busy GPU is never shown free."""
    lines = []
    for entry in entries:
        texts = [printable(claim["text"]) for claim in entry["claimed_by"]]
        state = "busy" if entry["busy"] else "free"
        lines.append("%s: %s%s" % (printable(entry["uuid"]), state, (": " + "; ".join(texts)) if texts else ""))
    return lines

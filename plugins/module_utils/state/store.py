# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``NodeState``: the one owner of every file under ``<state_dir>``.

========================  ====================================================
file                      what it holds
========================  ====================================================
``lock``                  the pass lock (two passes never interleave)
``ledger.json``           what was reported (``state/ledger.py``)
``releasing.json``        pending Kubernetes releases (``state/releases.py``)
``releasing.unreadable``  the marker while releases could not be read
``nodespec.json``         the last input, for the timers' passes (``state/nodespec.py``)
``events.jsonl``          the event journal, ``events.seq`` its high-water mark
``node.key``              the node's Ed25519 key (``state/node_key.py``)
========================  ====================================================

(with ``maintenance.json``, ``health.json`` and ``last-pass.json``: every name, and the most of each
file that is read, is ``node/state_files.py``'s table). The ``.json`` files are compact JSON
(``support/json_bytes``); the journal's lines are its own (``state/events.py``).

Root never acts through a path the state directory's owner controls: when this
process is root and the directory belongs to another account (the ``bcd``
account of the role's deployment), every state operation runs with that
account's uid, gid and group list (``as_owner``, ``state/owner.py``), so a link
it planted there leads nowhere root can reach.

A pass opens the state (``load``), which brings the ledger and the pending
releases up to the journal: a pass that died between journaling an event and
recording it is finished here, so nothing is reported twice. Every report goes
through ``report``, which queues it.

The state changes in one way only, ``with state.change() as change:``, which does
what the crash rules need in their one order:

1. the queued reports are journaled (one fsynced append, attested ones signed) and
   settled in memory, as the catch-up settles them: journal before report;
2. the block changes ``change.ledger`` and ``change.releases`` (and may write other
   state files): a caller records a release here *before* it removes any file;
3. the pending releases are saved when they changed, then the ledger when it
   changed: the releases first, because the ledger's ``journal_seq`` tells the
   catch-up which events are settled. Every save is ``write_atomic`` (a temporary
   file, fsynced, renamed, the directory fsynced).

A block that raises saves nothing; a crash anywhere costs nothing the next pass
does not make again: before 1, the reports are made again (a hold on disk never
journaled bound, a release recorded and not reported); between 1 and 3, ``load``
settles what the journal has; within 3, a ledger older than the releases file is
caught up the same way. ``flush``, ``finish`` and the methods the plan's actions call
(``begin_releases``, ``set_hold_limits``, ``record_kube_release`` ...) are each one
such block.

Nothing else opens these files, and this class opens them only through the bounded reader,
``node/state_files.py`` (``self.files``): no link followed, no FIFO waited on, a regular
file owned by the directory's owner or root, a size cap per file, JSON within
``support/bounded_json``'s bounds. A file past any of these is a ``StateFileError`` naming it,
which every command reports on one line (``docs/node.md``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import Any, Callable, Collection, ContextManager, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.health import parse_cleared
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease, Releases
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import Ledger, UnfinishedRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import Records, parse_maintenance, render_maintenance
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import PassLock, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import (
    DEFAULT_STATE_DIR,
    HEALTH_NAME,
    KEY_NAME,
    LAST_PASS_NAME,
    LEDGER_NAME,
    MAINTENANCE_NAME,
    MIG_LAYOUT_NAME,
    NODESPEC_NAME,
    StateFiles,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.events import (
    ALLOCATION_RELEASED,
    HAS_CRYPTOGRAPHY,
    SIGNED_TYPES,
    EventsError,
    Journal,
    NodeKey,
    import_cryptography,
    is_sealed,
    sealed,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import Json, ledger_bytes, limits_from_record, parse_ledger, record_event, settles
from ansible_collections.bcd.devices.plugins.module_utils.state.mig_record import MigRecord, parse_record, render_record
from ansible_collections.bcd.devices.plugins.module_utils.state.nodespec import Nodespec, nodespec_bytes, nodespec_from_data
from ansible_collections.bcd.devices.plugins.module_utils.state.owner import StateOwner
from ansible_collections.bcd.devices.plugins.module_utils.state.releases import (
    clear_marker,
    load_releases,
    quarantine,
    releases_bytes,
    save_releases,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

# What the entry points import from here: the state, and the state directory's default node path
# (``node/state_files.py``'s, the default of ``NodeState``'s too).
__all__ = ["DEFAULT_STATE_DIR", "Change", "NodeState", "StateError"]

STATE_FILE_MODE = 0o600
STATE_DIR_MODE = 0o700


StateError = StateFileError  # the name 0.2.0 gave it
Event = Dict[str, Any]  # a journaled event: {seq, type, body, ...} (state/events.py)


@record
class Change:
    """What a ``NodeState.change`` block changes: the ledger and the pending releases (the state's own,
    saved when the block ends), and the events journaled as it began."""

    ledger: Ledger
    releases: Releases
    journaled: List[Event] = field(default_factory=list)


def _as_owner(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a ``NodeState`` method as the state directory's owner (see the module docstring)."""
    @functools.wraps(method)
    def run(self: NodeState, *args: Any, **kwargs: Any) -> Any:
        with self.as_owner():
            return method(self, *args, **kwargs)
    return run


class NodeState:
    """The state directory of one node: ``path`` is its real path, ``node_path`` the one messages name."""

    def __init__(self, path: str, node_path: str = DEFAULT_STATE_DIR) -> None:
        self.path = path
        self.node_path = node_path
        self.files = StateFiles(path, node_path)
        self.owner = StateOwner(path, node_path, self.files)
        self.journal = Journal(path, node_path)
        self.ledger = Ledger()
        self.releases = Releases()
        self._key: Optional[NodeKey] = None
        self._queued: List[Tuple[Event, Optional[Json]]] = []  # reported, not yet journaled
        self.journaled: List[Event] = []  # every event journaled through this state, in order
        self.maintenance: Records = {}  # GPU UUID -> {reason, since}: GPUs out of service
        self.maintenance_problem: Optional[str] = None
        self.health_cleared: Dict[str, float] = {}  # GPU UUID -> when it last left maintenance (domain/health.gpu_health)

    # -- root acts as the owner ------------------------------------------------------
    def as_owner(self) -> ContextManager[None]:
        """Within this block, a root process has the state directory owner's uid, gid and groups
        (``state/owner.py``)."""
        return self.owner.acting()

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _stored(self, name: str) -> Optional[bytes]:
        """What ``name`` holds, to compare before replacing it: a file the reader refuses compares
        unequal, and is replaced (by a rename, which never opens it)."""
        try:
            return self.files.read(name)
        except StateFileError:
            return None

    def _write(self, name: str, content: bytes) -> None:
        """State files take the state directory's owner, so root's passes and the bcd account's share them."""
        write_atomic(self._file(name), content, STATE_FILE_MODE, STATE_DIR_MODE, owner_from_dir=True)

    # -- a pass ----------------------------------------------------------------------
    def unwritable(self) -> Optional[str]:
        """Why this process cannot keep the state directory, or None: it is not writable, or it is
        missing and its nearest existing parent is not (a pass without root on a node the role never
        set up). Only asked of a process without root, for which the permission bits are the truth."""
        path = self.path
        while not os.path.lexists(path):
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        if os.path.isdir(path) and not os.path.islink(path) and os.access(path, os.W_OK | os.X_OK):
            return None
        if path == self.path:
            return "state_dir %s is not writable by uid %d" % (self.node_path, os.geteuid())
        return "state_dir %s does not exist and uid %d cannot create it" % (self.node_path, os.geteuid())

    @contextlib.contextmanager
    def lock(self, timeout: float = 120.0, create: bool = True, shared: bool = False) -> Iterator[PassLock]:
        """The pass lock; ``create=False`` (check mode, listing) creates nothing; ``shared`` for readers."""
        pass_lock = PassLock(self.path, timeout=timeout, create=create, shared=shared, node_path=self.node_path)
        with self.as_owner():
            pass_lock.acquire()
        try:
            yield pass_lock
        finally:
            pass_lock.release()

    @_as_owner
    def load(self, write: bool = True) -> NodeState:
        """Read the ledger and the pending releases, and catch them up with the journal: every event
        journaled after the ledger's ``journal_seq`` is settled now (saved unless ``write`` is false)."""
        files = self.files
        self.releases = load_releases(files)
        self.maintenance, self.maintenance_problem = parse_maintenance(
            files.read(MAINTENANCE_NAME), files.where(MAINTENANCE_NAME))
        self.health_cleared = parse_cleared(files.read(HEALTH_NAME), files.where(HEALTH_NAME))
        self.ledger = parse_ledger(files.read(LEDGER_NAME), files.where(LEDGER_NAME))
        self._queued = []
        replayed = [event for event in sorted(self.journal.unacked(), key=lambda e: e.get("seq") or 0)
                    if (event.get("seq") or 0) > self.ledger.journal_seq and settles(event)]
        if write and replayed:
            with self.change():
                for event in replayed:
                    self._settle(event)
        else:
            for event in replayed:
                self._settle(event)
        return self

    def _settle(self, event: Event, limits: Optional[Json] = None) -> None:
        """What a journaled event means for the ledger and the pending releases (in memory): a pending
        release is settled once its ``AllocationReleased`` is out."""
        record_event(self.ledger, event, limits)
        body = event.get("body") or {}
        allocation_id = body.get("allocation_id")
        pending = self.releases.pending.get(allocation_id) if allocation_id is not None else None
        if event.get("type") == ALLOCATION_RELEASED and pending is not None \
                and pending.generation == body.get("generation"):
            del self.releases.pending[pending.allocation_id]

    # -- the one way the state changes -----------------------------------------------
    @contextlib.contextmanager
    def change(self, save_ledger: bool = True) -> Iterator[Change]:
        """Journal the queued reports and settle them, let the block change the ledger and the pending
        releases, then save the releases and the ledger where they changed (the module docstring's order).
        ``save_ledger=False`` leaves the ledger to the caller's next change (a pass's last reports, saved
        with its end by ``finish``). A journal that cannot be written raises ``EventsError`` before the
        block runs, and the reports are made again next pass; a block that raises saves nothing."""
        if any(event["type"] in SIGNED_TYPES for event, _limits in self._queued):
            import_cryptography()  # as root, before acting as the owner (see key)
        with self.as_owner():
            releases_before = releases_bytes(self.releases.pending)
            queued, self._queued = self._queued, []
            journaled = self._journal(queued)
            yield Change(self.ledger, self.releases, journaled)
            if releases_bytes(self.releases.pending) != releases_before:
                save_releases(self.path, self.releases.pending)
            if save_ledger:
                self._save_ledger()

    def _save_ledger(self) -> None:
        """Write the ledger when it changed (a pass that changes nothing rewrites nothing); ``change`` only."""
        content = ledger_bytes(self.ledger)
        if self._stored(LEDGER_NAME) != content:
            self._write(LEDGER_NAME, content)

    def _journal(self, queued: Sequence[Tuple[Event, Optional[Json]]]) -> List[Event]:
        """Append ``queued`` ``[(event, limits)]`` to the journal (one fsynced write) and settle them in
        memory; the journaled events."""
        if not queued:
            return []
        # Every event is sealed when the node can sign (format 2, docs/events.md "Seals"): a refusal too, so the
        # gateway knows which node sent it at which seq. Without cryptography only the unsigned refusals can be
        # journaled, unsealed, as before (the signed types need the key and fail the pass with the reason).
        key: Optional[NodeKey] = None
        if any(event["type"] in SIGNED_TYPES for event, _limits in queued):
            key = self.key()
        elif HAS_CRYPTOGRAPHY:
            try:
                key = self.key()
            except EventsError:  # cryptography is there but cannot be imported, or the key cannot be made now
                key = None
        journaled = self.journal.append_many([(event["type"], event["body"],
                                               key if event["type"] in SIGNED_TYPES else None)
                                              for event, _limits in queued], seal_with=key)
        self.journaled.extend(journaled)
        for event, (_queued_event, limits) in zip(journaled, queued):
            self._settle(event, limits)
        return journaled

    def finish(self, generation: int, state: str, vfio: Dict[str, str], kept_failures: Collection[str], finished: bool,
               renders: Optional[Dict[str, Json]] = None, started: Optional[float] = None,
               booked: Optional[Mapping[str, Optional[Limits]]] = None) -> None:
        """Record the end of a real pass: its section state, the VMs' GPUs, the refusals still relevant,
        the holds' render records, what kept holds without a slice book now (``booked``), and
        (``finished``: nothing left to retry) the generation it observed; with ``started`` (when it took
        the lock), its time and result for ``bcd-holds metrics``."""
        with self.change() as change:
            if started is not None:
                ended = time.time()
                self._write(LAST_PASS_NAME, json_bytes({
                    "generation": generation, "state": state, "started": started, "finished": ended,
                    "duration_seconds": round(max(0.0, ended - started), 6)}))
            ledger = change.ledger
            if finished:
                ledger.observed_generation = generation
            ledger.vfio = vfio
            if renders is not None:
                ledger.renders = renders
            for allocation_id in sorted(booked or {}):
                ledger.book(allocation_id, (booked or {})[allocation_id])
            ledger.last_state = state
            ledger.failures = dict((k, v) for k, v in ledger.failures.items() if k in kept_failures)

    # -- what the actions of a plan do to the state -----------------------------------
    def key(self) -> NodeKey:
        """The node key, created on first use (only when an attested event is due). cryptography is imported
        first, by root itself: nothing is imported while root acts as the owner, whose rights may not reach
        root's own Python (a venv under /root), and whose files are nothing root imports from anyway."""
        if self._key is None:
            import_cryptography()
            with self.as_owner():
                self._key = NodeKey.load_or_create(self._file(KEY_NAME))
        return self._key

    def report(self, event: Event, limits: Optional[Json] = None) -> None:
        """Queue ``event`` for the next ``flush``; nothing counts as reported before it is journaled."""
        self._queued.append((event, limits))

    def flush(self, save: bool = True) -> List[Event]:
        """Journal the queued reports and settle them (a change that changes nothing else); ``save=False``
        leaves the ledger to the caller's next change. Returns the journaled events."""
        with self.change(save_ledger=save) as change:
            pass
        return change.journaled

    # The changes a plan's actions make (domain/plan/actions/), each one ``change`` block.
    def begin_releases(self, releases: Sequence[Tuple[str, Optional[int], List[str]]]) -> None:
        """Record plain releases ``[(allocation_id, generation, device_ids)]`` before any of their files
        is removed (kept until each is reported): one ledger save for all of a pass's releases."""
        new = [release for release in releases if release[0] not in self.ledger.unfinished_releases]
        if not new:
            return
        with self.change() as change:
            for allocation_id, generation, device_ids in new:
                change.ledger.unfinished_releases[allocation_id] = UnfinishedRelease(generation, tuple(device_ids))

    def set_hold_limits(self, allocation_id: str, limits: Optional[Json]) -> None:
        """The limits a kept hold's slice now has."""
        with self.change() as change:
            change.ledger.book(allocation_id, limits_from_record(limits))

    def record_kube_release(self, release: PendingRelease) -> None:
        """A Kubernetes release, pending until no pod holds its devices (recorded before its files go)."""
        with self.change() as change:
            change.releases.pending[release.allocation_id] = release

    def drop_kube_release(self, allocation_id: str) -> None:
        with self.change() as change:
            change.releases.pending.pop(allocation_id, None)

    def quarantine_releases(self, now: float) -> None:
        """Set an unreadable releases file aside and write the marker."""
        with self.change() as change:
            quarantine(self.path, now)
            change.releases.unreadable, change.releases.marker = None, True

    def clear_releases_marker(self) -> None:
        with self.change() as change:
            clear_marker(self.path)
            change.releases.marker = False

    @_as_owner
    def last_pass(self) -> Optional[Dict[str, Any]]:
        """``{generation, state, started, finished, duration_seconds}`` of the last real pass, or None
        (none yet, or a file that is not that: the unprivileged account writes this directory)."""
        try:
            data = self.files.read_json(LAST_PASS_NAME)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("state"), str) or not all(
                isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool)
                for key in ("finished", "duration_seconds")):
            return None
        return data

    # -- maintenance -------------------------------------------------------------------
    @_as_owner
    def save_maintenance(self, records: Records, back_in_service: Sequence[str] = (), now: Optional[float] = None) -> None:
        """Record the GPUs in maintenance (under the pass lock); the GPUs ``back_in_service`` were reset and
        checked, so the faults logged for them before ``now`` stop counting (``health.json``)."""
        if back_in_service and now is not None:
            cleared = dict(self.health_cleared)
            cleared.update((uuid, now) for uuid in back_in_service)
            self._write(HEALTH_NAME, json_bytes(cleared))
            self.health_cleared = cleared
        self._write(MAINTENANCE_NAME, render_maintenance(records))
        self.maintenance = records

    # -- the MIG layout as last seen (state/mig_record.py) -----------------------------------
    @_as_owner
    def load_mig_record(self) -> Tuple[MigRecord, Optional[str]]:
        """``(record, problem)``: the MIG layout as last seen, or an empty one and why it could not be read."""
        try:
            return parse_record(self.files.read(MIG_LAYOUT_NAME), self.files.where(MIG_LAYOUT_NAME))
        except StateFileError as exc:
            return MigRecord(), str(exc)

    @_as_owner
    def save_mig_record(self, rec: MigRecord) -> None:
        """Record the MIG layout as it is now (under the pass lock), where it changed."""
        if self._stored(MIG_LAYOUT_NAME) != render_record(rec):
            self._write(MIG_LAYOUT_NAME, render_record(rec))

    # -- the stored input --------------------------------------------------------------
    @_as_owner
    def store_nodespec(self, generation: int, devices: Sequence[object], instances: Optional[Sequence[Mapping[str, Any]]],
                       cdi_runtimes: object = "auto", env_allow: Optional[Sequence[str]] = None) -> None:
        """Keep the last input for the timers' passes (the options they must pass the same way included,
        ``state/nodespec.py``); rewritten only when it changed."""
        content = nodespec_bytes(generation, devices, instances, cdi_runtimes, env_allow)
        if self._stored(NODESPEC_NAME) != content:
            self._write(NODESPEC_NAME, content)

    @_as_owner
    def load_nodespec(self) -> Optional[Nodespec]:
        """The stored input as ``(generation, devices, instances, cdi_runtimes, env_allow)``, or None when there is none."""
        content = self.files.read(NODESPEC_NAME)
        if content is None:
            return None
        where = self.files.where(NODESPEC_NAME)
        try:
            data = self.files.loads(content, NODESPEC_NAME)
        except ValueError as exc:
            raise StateFileError(where, "is unreadable: %s" % exc)
        return nodespec_from_data(data, where)

    # -- reading without a pass --------------------------------------------------------
    @_as_owner
    def public_key(self) -> Optional[str]:
        """The node's public key (base64), or None before the first attested event created it."""
        if not self.files.exists(KEY_NAME):
            return None
        try:
            return NodeKey.load(self._file(KEY_NAME)).public_key_b64()
        except EventsError:
            return None

    @_as_owner
    def unacked(self) -> List[Event]:
        """Every journaled event not yet acknowledged, oldest first."""
        return self.journal.unacked()

    @_as_owner
    def backlog(self) -> Tuple[List[Event], int]:
        """``(events, size)``: every journaled event not yet acknowledged, oldest first, and the journal's bytes."""
        return self.journal.backlog()

    def warnings(self) -> List[str]:
        """What the reads of this state found wrong, once each."""
        return ([self.ledger.problem] if self.ledger.problem else []) + list(self.journal.warnings) + (
            [self.maintenance_problem] if self.maintenance_problem else [])

    @_as_owner
    def list_and_acknowledge(self, ack_through: Optional[int] = None, check_mode: bool = False,
                             lock_timeout: float = 120.0) -> Tuple[List[Event], int]:
        """The unacknowledged events after acknowledging through ``ack_through``: ``(events, acknowledged)``.

        Only an acknowledgement writes; listing and check mode create nothing, not even the lock (and
        no state directory means nothing to acknowledge). The ledger is caught up with the journal
        before any event is dropped (a pass may have died between journaling and recording).
        """
        if ack_through is not None and ack_through < 0:
            raise EventsError("ack_through must not be negative, got %d" % ack_through)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise EventsError("state_dir %s is not a directory" % self.node_path)
        acknowledged = 0
        writes = ack_through is not None and not check_mode and os.path.isdir(self.path)
        with self.lock(lock_timeout, create=writes):
            if writes:
                self.load(write=True)
            if ack_through is not None:
                acknowledged = self.journal.ack_through(ack_through, dry_run=check_mode)
            events = self.journal.unacked()
        if check_mode and ack_through is not None:
            events = [event for event in events if event["seq"] > ack_through]
        return self._sealed_for_delivery(events), acknowledged

    def _sealed_for_delivery(self, events: List[Event]) -> List[Event]:
        """``events`` with each one journaled before format 2 sealed now by the node key, in memory (the journal is
        left as it is), so a node upgraded with events still unacknowledged delivers them to a gateway that takes
        sealed events only. Without the key or ``cryptography`` they are listed as they are."""
        if not HAS_CRYPTOGRAPHY or all(is_sealed(event) for event in events) or not self.files.exists(KEY_NAME):
            return events
        try:
            key = NodeKey.load(self._file(KEY_NAME))
        except EventsError:
            return events
        return [event if is_sealed(event) else sealed(event, key) for event in events]

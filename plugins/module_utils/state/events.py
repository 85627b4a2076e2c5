# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node-signed events: the event journal, and the checks of a signature and a seal.

Every bind and release is reported as an attested event, signed with the
node's Ed25519 key over ``b"attested-report\\n" + canonical(body)`` so that no
gateway can forge one; so is each appearing and clearing of a node condition
(its body names its type); failures are plain events.  Each event is journaled
(and fsynced) under ``<state_dir>`` before it is returned, and it is returned
by every pass until acknowledged.  Sequence numbers grow by one per event and
are never reused, across runs, acknowledgements and crashes.

Files (all 0600, the state directory 0700):

- ``events.jsonl``: one event a line, oldest first;
- ``events.seq``: the highest seq ever issued, written before acknowledged
  events are dropped from the journal (so the journal and this file together
  always know the last seq);
- ``node.key``: the node's private key, PEM (PKCS8, unencrypted): ``node_key.py``, which also holds
  the payloads the key signs, and the errors of both modules.

The journal does not lock: ``state.store.NodeState`` holds the pass lock around it. Every one of
these files is opened by the bounded reader (``node/state_files.py``): the journal whole, at
most 16 MiB and ``bounded_json.MAX_ITEMS`` values in all, each line bounded JSON (a line past
the bounds refuses the journal, a line that is merely not an event is kept and skipped);
``events.seq`` at most 64 bytes; the key 16 KiB.

This module is the events' one door: what callers sign and check with, and the event types, are
exported here beside the journal (``__all__``), wherever they are defined.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import (
    ALLOCATION_BOUND,
    ALLOCATION_FAILED,
    ALLOCATION_RELEASED,
    ATTESTED_TYPES,
    CONDITION_EVENT_TYPES,
    EVENT_TYPES,
    SIGNED_TYPES,
    TYPED_BODY_TYPES,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import ensure_dir, fsync_dir, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import JOURNAL_NAME, SEQ_NAME, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.state.node_key import (
    CRYPTOGRAPHY_IMPORT_ERROR,
    FILE_MODE,
    HAS_CRYPTOGRAPHY,
    PURPOSE,
    SEAL_FORMAT,
    STATE_DIR_MODE,
    EventsError,
    JournalUnwritable,
    NodeKey,
    NodeKeyMissing,
    b64decode_strict,
    decode_public_key,
    import_cryptography,
    public_key,
    seal_payload,
    signed_payload,
)
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError, type_name

if TYPE_CHECKING:  # pragma: no cover - type checkers only (typing has TypeGuard from Python 3.10)
    from typing_extensions import TypeGuard

__all__ = [
    # the journal and its bounds
    "MAX_JOURNAL_BYTES", "MAX_SEQ", "MAX_UNACKED", "NEAR_FULL", "Journal", "journal_full", "journal_near",
    # the checks of a signature and a seal, and the seal a journaled event gets
    "is_sealed", "sealed", "verify_report", "verify_seal",
    # the node key (node_key.py)
    "CRYPTOGRAPHY_IMPORT_ERROR", "HAS_CRYPTOGRAPHY", "PURPOSE", "SEAL_FORMAT", "EventsError", "JournalUnwritable",
    "NodeKey", "NodeKeyMissing", "decode_public_key", "import_cryptography",
    # the event types (domain/event_types.py)
    "ALLOCATION_BOUND", "ALLOCATION_FAILED", "ALLOCATION_RELEASED", "ATTESTED_TYPES", "CONDITION_EVENT_TYPES",
    "EVENT_TYPES", "SIGNED_TYPES", "TYPED_BODY_TYPES",
]

_DELIVER = "deliver and acknowledge them (bcd.devices.events with ack_through, or the role's bcd_holds_gateway_url)"


def journal_full(count: int, size: int, adding: int) -> Optional[str]:
    """Why a journal of ``count`` unacknowledged events in ``size`` bytes may not take a pass's ``adding``
    more, or None when it may."""
    if adding and (count + adding > MAX_UNACKED or size > MAX_JOURNAL_BYTES):
        return ("the event journal is full: it holds %d unacknowledged events in %d bytes, and its bound is %d "
                "events or %d bytes; this pass would journal %d more, so it changed nothing and is retried: %s"
                % (count, size, MAX_UNACKED, MAX_JOURNAL_BYTES, adding, _DELIVER))
    return None


def journal_near(count: int, size: int) -> Optional[str]:
    """A warning for a journal near its bound, else None."""
    if count >= NEAR_FULL * MAX_UNACKED or size >= NEAR_FULL * MAX_JOURNAL_BYTES:
        return ("the event journal holds %d unacknowledged events, near its bound of %d events or %d bytes, past "
                "which binds and releases wait: %s" % (count, MAX_UNACKED, MAX_JOURNAL_BYTES, _DELIVER))
    return None


MAX_SEQ = (1 << 63) - 1  # int64, as the control plane carries it
# The journal's bound (docs/events.md, "The journal's bound"): a pass journals nothing, and so binds and
# releases nothing, that would take the journal past this many unacknowledged events or bytes; it waits,
# retried, until they are delivered and acknowledged. Both lie well inside what the bounded reader takes
# (16 MiB, bounded_json.MAX_ITEMS values), so a full journal is always read, delivered and acknowledged,
# and no unacknowledged event is ever dropped to make room.
MAX_UNACKED = 10000
MAX_JOURNAL_BYTES = 12 * 1024 * 1024
# Past this share of either bound every pass warns.
NEAR_FULL = 0.8

# Body fields that only a bind carries.  The signature covers the body, not
# the event type, so a bind must never be passable as a release or back:
# verify_report() checks the type against these.
_BIND_ONLY_FIELDS = ("cdi_spec_path", "cdi_devices", "env_file", "cgroup_parent")


def is_sealed(event: object) -> TypeGuard[Dict[str, Any]]:
    """Whether ``event`` is of format 2 and carries a seal (not whether the seal is valid: ``verify_seal``)."""
    return (isinstance(event, dict) and event.get("format") == SEAL_FORMAT and not isinstance(event.get("format"), bool)
            and isinstance(event.get("seal"), str))


def verify_seal(event: object, public_key_b64: object) -> bool:
    """True only for a format-2 event whose seal is a valid Ed25519 signature by ``public_key_b64`` over its
    ``seq``, ``type`` and ``body``. Anything else (malformed input, no ``cryptography``) is False; never raises."""
    try:
        if not HAS_CRYPTOGRAPHY or not is_sealed(event):
            return False
        seq, event_type, body = event.get("seq"), event.get("type"), event.get("body")
        if (not isinstance(seq, int) or isinstance(seq, bool) or not 0 < seq <= MAX_SEQ
                or not isinstance(event_type, str) or not isinstance(body, dict)):
            return False
        seal = b64decode_strict(event.get("seal"))
        if seal is None or len(seal) != 64:
            return False
        try:
            raw_key = decode_public_key(public_key_b64)
        except EventsError:
            return False
        public_key(raw_key).verify(seal, seal_payload(seq, event_type, body))
        return True
    except Exception:  # InvalidSignature, or malformed input of any kind: not a valid seal
        return False


def sealed(event: Dict[str, Any], key: NodeKey) -> Dict[str, Any]:
    """``event`` with ``format`` 2 and its seal by ``key`` (a copy; ``event`` itself is left as it is). What the
    journal writes, and what a listing makes of an event journaled before format 2 when the node key is there."""
    copy = dict(event)
    copy["format"] = SEAL_FORMAT
    copy["seal"] = key.seal(event["seq"], event["type"], event["body"])
    return copy


def _type_matches_body(event_type: str, body: Dict[str, Any]) -> bool:
    if event_type in TYPED_BODY_TYPES:
        return body.get("type") == event_type
    if event_type == ALLOCATION_BOUND:
        return "cdi_spec_path" in body
    if event_type == ALLOCATION_RELEASED:
        return not any(k in body for k in _BIND_ONLY_FIELDS)
    return False


def verify_report(event: object, public_key_b64: object) -> bool:
    """True only for an untampered signed event signed by ``public_key_b64``.

    The event must be an ``AllocationBound`` or ``AllocationReleased`` (or a
    condition's event, whose body names its type) with
    purpose ``attested-report``, a body whose fields fit its type, and a valid
    Ed25519 signature over ``b"attested-report\\n" + canonical(body)``.  Anything
    else (malformed input, no ``cryptography``) is False; this never raises.
    """
    try:
        if not HAS_CRYPTOGRAPHY or not isinstance(event, dict):
            return False
        event_type = event.get("type")
        body = event.get("body")
        if event_type not in SIGNED_TYPES or event.get("purpose") != PURPOSE:
            return False
        if not isinstance(body, dict) or not _type_matches_body(event_type, body):
            return False
        signature = b64decode_strict(event.get("signature"))
        if signature is None or len(signature) != 64:
            return False
        try:
            raw_key = decode_public_key(public_key_b64)
        except EventsError:
            return False
        public_key(raw_key).verify(signature, signed_payload(body))
        return True
    except Exception:  # InvalidSignature, or malformed input of any kind: not a valid report
        return False


def _normalise_body(body: object) -> Dict[str, Any]:
    """``body`` as it will read back from the journal (so its signature stays valid)."""
    if not isinstance(body, dict):
        raise EventsError("an event body must be a mapping, got %s" % type_name(body))
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False)
        normalised: Dict[str, Any] = bounded_json.loads(text.encode("utf-8"), "an event body")  # a mapping's JSON
    except (TypeError, ValueError, StateFileError) as exc:
        raise EventsError("an event body must be plain JSON data: %s" % exc)
    return normalised


def _valid_event(obj: object) -> bool:
    return (isinstance(obj, dict)
            and isinstance(obj.get("seq"), int) and not isinstance(obj.get("seq"), bool)
            and obj["seq"] > 0
            and isinstance(obj.get("type"), str)
            and isinstance(obj.get("body"), dict))


class _Parsed:
    """One read of the journal."""

    def __init__(self) -> None:
        self.events: List[Dict[str, Any]] = []
        self.kept_lines: List[bytes] = []  # complete lines, events and unreadable ones, in order
        self.line_seqs: List[Optional[int]] = []  # seq of each kept line, None if unreadable
        self.max_seq = 0
        self.size = 0
        self.tail_offset = 0  # where a torn tail starts (== size when there is none)
        self.tail_is_event = False


class Journal:
    """The event journal of one node, ``<state_dir>/events.jsonl``.

    ``warnings`` lists, once each, what the reads of this object found wrong
    (a torn last line, an unreadable line); such lines are skipped, never fatal.
    """

    def __init__(self, state_dir: str, node_path: Optional[str] = None):
        self.state_dir = os.path.abspath(state_dir)
        self.files = StateFiles(self.state_dir, node_path)
        self.path = os.path.join(self.state_dir, JOURNAL_NAME)
        self.seq_path = os.path.join(self.state_dir, SEQ_NAME)
        self.where, self.seq_where = self.files.where(JOURNAL_NAME), self.files.where(SEQ_NAME)
        self.warnings: List[str] = []

    # -- reading ---------------------------------------------------------

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _read(self) -> _Parsed:
        p = _Parsed()
        data = self.files.read(JOURNAL_NAME)
        if data is None:
            return p
        bounded_json.check_items(data, self.where)
        p.size = len(data)
        p.tail_offset = len(data)
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        offset = 0
        for number, line in enumerate(lines, 1):
            offset += len(line) + 1
            if not line.strip():
                continue
            event = self._parse_line(line, "%s line %d" % (self.where, number))
            if event is None:
                self._warn(
                    "%s line %d is not a readable event and is ignored (kept in the file for inspection)"
                    % (self.where, number))
                p.kept_lines.append(line)
                p.line_seqs.append(None)
                continue
            self._add(p, event, line)
        if tail:
            p.tail_offset = offset
            event = self._parse_line(tail, "%s line %d" % (self.where, len(lines) + 1))
            if event is not None:
                # the whole event is there, only its newline is missing: keep it
                p.tail_is_event = True
                self._add(p, event, tail)
            else:
                self._warn(
                    "%s ends in an incomplete line (a crash while journaling); it is ignored and "
                    "dropped at the next write" % self.where)
        return p

    @staticmethod
    def _parse_line(line: bytes, where: str) -> Optional[Dict[str, Any]]:
        """The event on ``line``; None when it is not one, ``StateFileError`` past the parser's bounds."""
        try:
            obj = bounded_json.loads(line, where)
        except ValueError:
            return None
        return obj if _valid_event(obj) else None

    def _add(self, p: _Parsed, event: Dict[str, Any], line: bytes) -> None:
        if event["seq"] <= p.max_seq:
            self._warn("%s: event seq %d follows seq %d (out of order)" % (self.where, event["seq"], p.max_seq))
        p.max_seq = max(p.max_seq, event["seq"])
        p.events.append(event)
        p.kept_lines.append(line)
        p.line_seqs.append(event["seq"])

    def _stored_seq(self) -> int:
        data = self.files.read(SEQ_NAME)
        if data is None:
            return 0
        try:
            value = int(data.decode("ascii").strip())
            if not 0 <= value <= MAX_SEQ:
                raise ValueError(value)
        except (UnicodeDecodeError, ValueError):
            raise EventsError(
                "%s does not hold a sequence number (0 to 2^63-1), so the next event's seq is unknown; write the "
                "highest seq this node has reported (e.g. the last one the control plane saw) into it"
                % self.seq_where)
        return value

    def unacked(self) -> List[Dict[str, Any]]:
        """Every journaled event not yet acknowledged, oldest first."""
        return self._read().events

    def backlog(self) -> Tuple[List[Dict[str, Any]], int]:
        """``(events, size)``: the unacknowledged events, oldest first, and the journal's size in bytes."""
        parsed = self._read()
        return parsed.events, parsed.size

    # -- writing ---------------------------------------------------------

    def _ensure_state_dir(self) -> None:
        try:
            ensure_dir(self.state_dir, STATE_DIR_MODE)
        except OSError as exc:
            raise JournalUnwritable("cannot create the state directory %s: %s"
                                    % (self.state_dir, exc.strerror or exc))

    def append(self, event_type: str, body: Dict[str, Any], key: Optional[NodeKey] = None) -> Dict[str, Any]:
        """Journal one event (fsynced before returning) and return it with its seq.

        ``AllocationBound``/``AllocationReleased`` and the conditions' events are
        signed with ``key`` (required); ``AllocationFailed`` is not.
        """
        return self.append_many([(event_type, body, key)])[0]

    def append_many(self, items: List[Tuple[str, Dict[str, Any], Optional[NodeKey]]],
                    seal_with: Optional[NodeKey] = None) -> List[Dict[str, Any]]:
        """Journal ``(type, body, key)`` events in order with one write and one fsync (a pass's reports
        cost one append, not one each); return them with their seqs. All or none are checked before
        anything is written; a crash mid-write leaves a torn last line, dropped at the next write.
        With ``seal_with`` (the node key) every event is sealed (format 2: ``sealed``), AllocationFailed too."""
        prepared = [(event_type, self._checked_body(event_type, body, key), key) for event_type, body, key in items]
        if not prepared:
            return []
        self._ensure_state_dir()
        parsed = self._read()
        seq = max(self._stored_seq(), parsed.max_seq)
        lines, events = [], []
        for event_type, body, key in prepared:
            seq += 1
            event: Dict[str, Any] = {"seq": seq, "type": event_type, "body": body}
            if event_type in SIGNED_TYPES:
                if key is None:  # _checked_body refused this already; kept for the type checker
                    raise NodeKeyMissing("%s needs the node key to be signed" % event_type)
                event["purpose"] = PURPOSE
                event["signature"] = key.sign(body)
            if seal_with is not None:
                event = sealed(event, seal_with)
            lines.append(json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
            events.append(event)  # plain JSON data already (the body is normalised): as it reads back
        self._append_line(parsed, b"".join(lines))
        return events

    @staticmethod
    def _checked_body(event_type: str, body: Dict[str, Any], key: Optional[NodeKey]) -> Dict[str, Any]:
        if event_type not in EVENT_TYPES:
            raise EventsError("unknown event type %r (expected one of %s)" % (event_type, ", ".join(EVENT_TYPES)))
        body = _normalise_body(body)
        if event_type in SIGNED_TYPES:
            if key is None:
                raise EventsError("%s is a signed event and needs the node key" % event_type)
            if event_type in TYPED_BODY_TYPES and not _type_matches_body(event_type, body):
                raise EventsError("a %s body must name its type (body.type %r); the signature does not cover the type"
                                  % (event_type, event_type))
            if not _type_matches_body(event_type, body):
                raise EventsError(
                    "an %s body %s; the signature does not cover the type, so the body must tell "
                    "a bind from a release" % (event_type, "needs cdi_spec_path" if event_type == ALLOCATION_BOUND
                                               else "must not carry %s" % "/".join(_BIND_ONLY_FIELDS)))
        return body

    def _append_line(self, parsed: _Parsed, line: bytes) -> None:
        existed = self.files.exists(JOURNAL_NAME)
        try:
            fd = self.files.open(JOURNAL_NAME, os.O_WRONLY | os.O_CREAT, FILE_MODE)  # a new one: mode and owner set
            if fd is None:  # with O_CREAT, StateFiles.open opens the file or raises: never, said all the same
                raise JournalUnwritable("cannot journal an event in %s: it could not be created" % self.path)
            try:
                if parsed.tail_offset < parsed.size:
                    if parsed.tail_is_event:
                        line = b"\n" + line  # finish the complete event that lacked its newline
                        os.lseek(fd, parsed.size, os.SEEK_SET)
                    else:
                        os.ftruncate(fd, parsed.tail_offset)  # drop the torn line
                        os.lseek(fd, parsed.tail_offset, os.SEEK_SET)
                else:
                    os.lseek(fd, 0, os.SEEK_END)
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise JournalUnwritable("cannot journal an event in %s: %s" % (self.path, exc.strerror or exc))
        if not existed:
            fsync_dir(self.state_dir)

    def ack_through(self, seq: int, dry_run: bool = False) -> int:
        """Acknowledge (drop) every event with a seq up to ``seq``; return how many.

        With ``dry_run`` nothing is written; the count is what would be
        acknowledged.  The highest issued seq is recorded before events are
        dropped, so a crash at any point neither reuses a seq nor loses an
        unacknowledged event.
        """
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise EventsError("ack_through must be a non-negative integer, got %r" % (seq,))
        parsed = self._read()
        count = sum(1 for s in parsed.line_seqs if s is not None and s <= seq)
        if count == 0 or dry_run:
            return count
        stored = self._stored_seq()
        high = max(stored, parsed.max_seq)
        try:
            if high > stored:
                write_atomic(self.seq_path, b"%d\n" % high, FILE_MODE, STATE_DIR_MODE, owner_from_dir=True)
            kept = [line for line, s in zip(parsed.kept_lines, parsed.line_seqs) if s is None or s > seq]
            data = b"".join(line + b"\n" for line in kept)
            write_atomic(self.path, data, FILE_MODE, STATE_DIR_MODE, owner_from_dir=True)
        except OSError as exc:
            raise JournalUnwritable("cannot acknowledge events in %s: %s" % (self.path, exc.strerror or exc))
        return count

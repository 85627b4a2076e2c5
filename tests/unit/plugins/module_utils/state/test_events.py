# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for node-signed events: the journal and the signature check (the node key: test_node_key.py)."""

from __future__ import annotations

import base64
import copy
import json
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ansible_collections.bcd.devices.plugins.module_utils.state import events as _events
from ansible_collections.bcd.devices.plugins.module_utils.state.events import (
    EventsError,
    Journal,
    NodeKey,
    verify_report,
)

BOUND_BODY = {
    "node_id": "node-a",
    "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
    "allocation_id": "alloc_01jz8k2v",
    "generation": 42,
    "device_ids": ["GPU-5f1c2a90-0000-4000-8000-000000000001"],
    "cdi_devices": ["bcd.dev/gpu=GPU-5f1c2a90-0000-4000-8000-000000000001"],
    "cdi_spec_path": "/etc/cdi/bcd-alloc_01jz8k2v.json",
    "env_file": "/run/bcd/allocations/alloc_01jz8k2v.env",
    "cgroup_parent": "bcd-alloc-alloc_01jz8k2v.slice",
}
RELEASED_BODY = {
    "node_id": "node-a",
    "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
    "allocation_id": "alloc_01jz8k2v",
    "generation": 43,
    "device_ids": ["GPU-5f1c2a90-0000-4000-8000-000000000001"],
}
FAILED_BODY = {
    "node_id": "node-a",
    "allocation_id": "alloc_x",
    "generation": 42,
    "reason": "overlap",
    "message": "GPU-5f1c2a90-0000-4000-8000-000000000001 is assigned to alloc_01jz8k2v",
}


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def state(tmp_path):
    return str(tmp_path / "var" / "lib" / "bcd")


@pytest.fixture
def key(tmp_path):
    return NodeKey.load_or_create(str(tmp_path / "keys" / "node.key"))


def journal_lines(state):
    with open(os.path.join(state, "events.jsonl"), "rb") as f:
        return f.read().split(b"\n")


# -- signatures -----------------------------------------------------------------

def signed(key, event_type, body, seq=1):
    return {"seq": seq, "type": event_type, "body": copy.deepcopy(body),
            "purpose": "attested-report", "signature": key.sign(body)}


def test_signature_is_over_the_contract_bytes(key):
    body = dict(BOUND_BODY, message="Grüße")  # non-ASCII stays UTF-8 (ensure_ascii=False)
    expected = b"attested-report\n" + json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert "Grüße".encode() in expected
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key.public_key_b64()))
    public.verify(base64.b64decode(key.sign(body)), expected)  # raises if not


def test_untampered_reports_verify(key):
    assert verify_report(signed(key, "AllocationBound", BOUND_BODY), key.public_key_b64()) is True
    assert verify_report(signed(key, "AllocationReleased", RELEASED_BODY), key.public_key_b64()) is True


@pytest.mark.parametrize("field,value", [
    ("node_id", "node-b"),
    ("boot_id", "00000000-0000-0000-0000-000000000000"),
    ("allocation_id", "alloc_other"),
    ("generation", 41),
    ("generation", "42"),
    ("device_ids", ["GPU-5f1c2a90-0000-4000-8000-000000000002"]),
    ("cdi_devices", []),
    ("cdi_spec_path", "/etc/cdi/bcd-evil.json"),
    ("env_file", "/tmp/evil.env"),
    ("cgroup_parent", "other.slice"),
    ("extra", "added"),
])
def test_any_changed_body_field_fails(key, field, value):
    event = signed(key, "AllocationBound", BOUND_BODY)
    event["body"][field] = value
    assert verify_report(event, key.public_key_b64()) is False


def test_removed_body_field_fails(key):
    event = signed(key, "AllocationBound", BOUND_BODY)
    del event["body"]["cgroup_parent"]
    assert verify_report(event, key.public_key_b64()) is False


def test_changed_envelope_fails(key):
    pub = key.public_key_b64()
    bound = signed(key, "AllocationBound", BOUND_BODY)
    released = signed(key, "AllocationReleased", RELEASED_BODY)
    # a bind passed off as a release, and back: the type is not signed, the body tells them apart
    assert verify_report(dict(bound, type="AllocationReleased"), pub) is False
    assert verify_report(dict(released, type="AllocationBound"), pub) is False
    assert verify_report(dict(bound, type="AllocationFailed"), pub) is False
    assert verify_report(dict(bound, purpose="other"), pub) is False
    no_purpose = dict(bound)
    del no_purpose["purpose"]
    assert verify_report(no_purpose, pub) is False
    raw = bytearray(base64.b64decode(bound["signature"]))
    raw[0] ^= 1
    assert verify_report(dict(bound, signature=base64.b64encode(bytes(raw)).decode()), pub) is False
    # another node's signature over the very same body
    other = NodeKey(Ed25519PrivateKey.generate())
    assert verify_report(dict(bound, signature=other.sign(BOUND_BODY)), pub) is False
    assert verify_report(bound, other.public_key_b64()) is False


def test_seq_is_not_signed(key):
    assert verify_report(signed(key, "AllocationBound", BOUND_BODY, seq=99), key.public_key_b64()) is True


@pytest.mark.parametrize("event", [
    None, [], "AllocationBound", 7, {},
    {"type": "AllocationFailed", "body": FAILED_BODY},
    {"type": "AllocationBound", "body": None, "purpose": "attested-report", "signature": "AAAA"},
    {"type": "AllocationBound", "body": [1], "purpose": "attested-report", "signature": "AAAA"},
    {"type": "AllocationBound", "body": BOUND_BODY, "purpose": "attested-report", "signature": "not base64!"},
    {"type": "AllocationBound", "body": BOUND_BODY, "purpose": "attested-report", "signature": None},
    {"type": "AllocationBound", "body": {"x": float("nan"), "cdi_spec_path": "/"},
     "purpose": "attested-report", "signature": base64.b64encode(b"\0" * 64).decode()},
    {"type": ["AllocationBound"], "body": BOUND_BODY, "purpose": "attested-report", "signature": ""},
])
def test_malformed_events_are_false_never_an_exception(key, event):
    assert verify_report(event, key.public_key_b64()) is False


@pytest.mark.parametrize("public_key", [None, "", "short", "A" * 44 + "!", 12, base64.b64encode(b"\0" * 31).decode()])
def test_malformed_public_keys_are_false(key, public_key):
    assert verify_report(signed(key, "AllocationBound", BOUND_BODY), public_key) is False


def test_verify_without_cryptography_is_false(key, monkeypatch):
    event = signed(key, "AllocationBound", BOUND_BODY)
    monkeypatch.setattr(_events, "HAS_CRYPTOGRAPHY", False)
    assert verify_report(event, key.public_key_b64()) is False


# -- the journal ----------------------------------------------------------------

def test_append_returns_journaled_events_with_growing_seq(state, key):
    journal = Journal(state)
    bound = journal.append("AllocationBound", BOUND_BODY, key)
    failed = journal.append("AllocationFailed", FAILED_BODY)
    released = journal.append("AllocationReleased", RELEASED_BODY, key)
    assert [e["seq"] for e in (bound, failed, released)] == [1, 2, 3]
    assert bound["purpose"] == "attested-report"
    assert "purpose" not in failed and "signature" not in failed
    assert verify_report(bound, key.public_key_b64())
    assert verify_report(released, key.public_key_b64())
    # what append returned is exactly what every later read returns
    assert Journal(state).unacked() == [bound, failed, released]
    lines = journal_lines(state)
    assert lines[-1] == b""
    assert [json.loads(line)["seq"] for line in lines[:-1]] == [1, 2, 3]
    assert mode_of(os.path.join(state, "events.jsonl")) == 0o600
    assert mode_of(state) == 0o700


def test_journal_line_has_the_documented_shape(state, key):
    Journal(state).append("AllocationBound", BOUND_BODY, key)
    event = json.loads(journal_lines(state)[0])
    assert list(event) == ["seq", "type", "body", "purpose", "signature"]
    assert event["body"] == BOUND_BODY


def test_seq_continues_across_reopen_and_acknowledgement(state, key):
    Journal(state).append("AllocationBound", BOUND_BODY, key)
    Journal(state).append("AllocationFailed", FAILED_BODY)
    journal = Journal(state)
    assert journal.ack_through(1) == 1
    assert [e["seq"] for e in Journal(state).unacked()] == [2]
    assert Journal(state).append("AllocationReleased", RELEASED_BODY, key)["seq"] == 3
    # acknowledging everything empties the journal but never resets the count
    assert Journal(state).ack_through(3) == 2
    assert Journal(state).unacked() == []
    assert Journal(state).append("AllocationFailed", FAILED_BODY)["seq"] == 4
    assert mode_of(os.path.join(state, "events.seq")) == 0o600
    assert mode_of(os.path.join(state, "events.jsonl")) == 0o600


def test_ack_is_idempotent_and_keeps_later_events(state, key):
    journal = Journal(state)
    for _count in range(3):
        journal.append("AllocationFailed", FAILED_BODY)
    assert journal.ack_through(2) == 2
    assert journal.ack_through(2) == 0
    assert journal.ack_through(0) == 0
    assert [e["seq"] for e in journal.unacked()] == [3]
    assert journal.ack_through(100) == 1
    assert journal.append("AllocationFailed", FAILED_BODY)["seq"] == 4


def test_dry_run_ack_writes_nothing(state, key):
    journal = Journal(state)
    journal.append("AllocationBound", BOUND_BODY, key)
    journal.append("AllocationFailed", FAILED_BODY)
    before = {name: open(os.path.join(state, name), "rb").read() for name in os.listdir(state)}
    assert journal.ack_through(2, dry_run=True) == 2
    after = {name: open(os.path.join(state, name), "rb").read() for name in os.listdir(state)}
    assert after == before
    assert len(journal.unacked()) == 2


@pytest.mark.parametrize("bad", [-1, True, "3", 1.5, None])
def test_ack_through_wants_a_non_negative_integer(state, bad):
    with pytest.raises(EventsError, match="non-negative integer"):
        Journal(state).ack_through(bad)


def test_missing_journal_reads_empty_and_creates_nothing(state):
    journal = Journal(state)
    assert journal.unacked() == []
    assert journal.ack_through(5) == 0
    assert not os.path.exists(state)


def test_torn_last_line_is_skipped_with_a_warning_and_dropped_at_the_next_write(state, key):
    journal = Journal(state)
    journal.append("AllocationBound", BOUND_BODY, key)
    journal.append("AllocationFailed", FAILED_BODY)
    path = os.path.join(state, "events.jsonl")
    with open(path, "ab") as f:
        # crash mid-append, the torn part longer than the next event
        f.write(b'{"seq": 3, "type": "AllocationReleased", "body": {"message": "' + b"x" * 2000)
    journal = Journal(state)
    assert [e["seq"] for e in journal.unacked()] == [1, 2]
    assert len(journal.warnings) == 1
    assert "incomplete line" in journal.warnings[0]
    event = journal.append("AllocationReleased", RELEASED_BODY, key)
    assert event["seq"] == 3  # the torn event was never returned, so its seq was never seen
    assert [json.loads(line)["seq"] for line in journal_lines(state)[:-1]] == [1, 2, 3]
    assert journal.unacked()[-1] == event
    assert len(journal.warnings) == 1  # this object still tells what it repaired, once
    fresh = Journal(state)
    assert fresh.unacked()[-1] == event
    assert fresh.warnings == []


def test_complete_last_event_missing_only_its_newline_is_kept(state, key):
    journal = Journal(state)
    journal.append("AllocationFailed", FAILED_BODY)
    path = os.path.join(state, "events.jsonl")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data.rstrip(b"\n"))
    assert [e["seq"] for e in journal.unacked()] == [1]
    assert journal.append("AllocationFailed", FAILED_BODY)["seq"] == 2
    assert [json.loads(line)["seq"] for line in journal_lines(state)[:-1]] == [1, 2]


def test_unreadable_line_in_the_middle_is_skipped_and_kept_for_inspection(state, key):
    journal = Journal(state)
    journal.append("AllocationFailed", FAILED_BODY)
    path = os.path.join(state, "events.jsonl")
    with open(path, "ab") as f:
        f.write(b"\xff not json\n")
    journal.append("AllocationFailed", FAILED_BODY)
    assert [e["seq"] for e in journal.unacked()] == [1, 2]
    assert any("line 2 is not a readable event" in w for w in journal.warnings)
    assert journal.ack_through(2) == 2
    assert journal.unacked() == []
    assert journal.warnings  # still there: nothing is thrown away unread
    assert b"\xff not json" in open(path, "rb").read()


def test_crash_during_acknowledgement_loses_nothing_and_reuses_no_seq(state, key, monkeypatch):
    journal = Journal(state)
    for _count in range(3):
        journal.append("AllocationFailed", FAILED_BODY)
    real = _events.write_atomic
    calls = []

    def crash_on_journal_rewrite(path, *args, **kwargs):
        calls.append(path)
        if path.endswith("events.jsonl"):
            raise OSError(5, "Input/output error")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_events, "write_atomic", crash_on_journal_rewrite)
    with pytest.raises(EventsError, match="cannot acknowledge"):
        journal.ack_through(3)
    assert calls[0].endswith("events.seq")  # the count is safe before anything is dropped
    monkeypatch.setattr(_events, "write_atomic", real)
    assert [e["seq"] for e in Journal(state).unacked()] == [1, 2, 3]
    assert Journal(state).ack_through(3) == 3
    assert Journal(state).append("AllocationFailed", FAILED_BODY)["seq"] == 4


def test_crash_before_the_count_is_saved_changes_nothing(state, monkeypatch):
    journal = Journal(state)
    journal.append("AllocationFailed", FAILED_BODY)

    def crash(path, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_events, "write_atomic", crash)
    with pytest.raises(EventsError):
        journal.ack_through(1)
    monkeypatch.undo()
    assert [e["seq"] for e in Journal(state).unacked()] == [1]
    assert Journal(state).append("AllocationFailed", FAILED_BODY)["seq"] == 2


def test_corrupt_seq_file_refuses_rather_than_reuses(state, key):
    journal = Journal(state)
    journal.append("AllocationFailed", FAILED_BODY)
    journal.ack_through(1)
    with open(os.path.join(state, "events.seq"), "w") as f:
        f.write("oops")
    with pytest.raises(EventsError, match="events.seq"):
        journal.append("AllocationFailed", FAILED_BODY)
    assert journal.unacked() == []


def test_append_refuses_what_would_not_verify(state, key):
    journal = Journal(state)
    with pytest.raises(EventsError, match="needs the node key"):
        journal.append("AllocationBound", BOUND_BODY)
    with pytest.raises(EventsError, match="unknown event type"):
        journal.append("AllocationExploded", {}, key)
    with pytest.raises(EventsError, match="mapping"):
        journal.append("AllocationFailed", ["x"])
    with pytest.raises(EventsError, match="plain JSON"):
        journal.append("AllocationFailed", {"x": {1, 2}})
    with pytest.raises(EventsError, match="plain JSON"):
        journal.append("AllocationFailed", {"x": float("inf")})
    with pytest.raises(EventsError, match="cdi_spec_path"):
        journal.append("AllocationBound", RELEASED_BODY, key)
    with pytest.raises(EventsError, match="must not carry"):
        journal.append("AllocationReleased", BOUND_BODY, key)
    assert journal.unacked() == []
    assert journal.append("AllocationFailed", FAILED_BODY)["seq"] == 1  # nothing refused took a seq


def test_body_is_journaled_as_json_reads_it_back(state, key):
    body = dict(BOUND_BODY, device_ids=("GPU-a",), extra={1: "int key"})
    event = Journal(state).append("AllocationBound", body, key)
    assert event["body"]["device_ids"] == ["GPU-a"]
    assert event["body"]["extra"] == {"1": "int key"}
    assert verify_report(Journal(state).unacked()[0], key.public_key_b64())


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_root_keeps_state_files_owned_by_the_state_dirs_owner(state, key):
    os.makedirs(state, mode=0o700)
    os.chown(state, 4242, 4242)
    journal = Journal(state)
    journal.append("AllocationFailed", FAILED_BODY)
    journal.append("AllocationFailed", FAILED_BODY)
    journal.ack_through(1)
    NodeKey.load_or_create(os.path.join(state, "node.key"))
    for name in ("events.jsonl", "events.seq", "node.key"):
        st = os.stat(os.path.join(state, name))
        assert (st.st_uid, st.st_gid) == (4242, 4242), name

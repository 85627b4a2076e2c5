# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Seals (event format 2, docs/events.md "Seals"): every event a pass journals, a refusal too, is sealed by the node
key over its seq, type and body, so a gateway knows which node sent it at which seq and cannot be fed the same event
under another seq; events journaled before format 2 are sealed when the events module lists them."""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.state import events as _events
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey, verify_report, verify_seal
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_events import run as events_run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run as holds_run

GPU_0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"


def journaled(node):
    path = os.path.join(node.root, "var", "lib", "bcd", "events.jsonl")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def public_key(node):
    return NodeKey.load(os.path.join(node.root, "var", "lib", "bcd", "node.key")).public_key_b64()


def test_every_event_a_pass_journals_is_sealed_by_the_node_key_a_refusal_too(capsys, make_node):
    node = make_node()
    result = holds_run(capsys, node, generation=1, on_refusal="report",
                       devices=[hold("alloc_a", GPU_0), hold("alloc_b", GPU_0)])
    assert [e["type"] for e in result["events"]] == ["AllocationBound", "AllocationFailed"]
    key = public_key(node)
    events = journaled(node)
    assert [(e["type"], e["format"]) for e in events] == [("AllocationBound", 2), ("AllocationFailed", 2)]
    assert all(verify_seal(event, key) for event in events)
    assert result["events"] == events  # what the module returns is what the journal holds, seals and all
    failed = events[1]
    assert "signature" not in failed and "purpose" not in failed  # a refusal is still a plain report
    assert verify_report(events[0], key)  # and a bind still carries the attested signature the contract asks


def test_a_seal_binds_the_seq_the_type_the_body_and_the_node(capsys, make_node):
    node = make_node()
    holds_run(capsys, node, generation=1, on_refusal="report", devices=[hold("alloc_a", GPU_0), hold("alloc_b", GPU_0)])
    bound, failed = journaled(node)
    key = public_key(node)
    other = NodeKey.load_or_create(os.path.join(node.root, "other.key")).public_key_b64()
    assert not verify_seal(dict(failed, seq=failed["seq"] + 7), key)  # the same refusal posted under another seq
    assert not verify_seal(dict(bound, type="AllocationReleased"), key)
    assert not verify_seal(dict(failed, body=dict(failed["body"], node_id="node-b")), key)
    assert not verify_seal(dict(failed, body=dict(failed["body"], generation=2)), key)
    assert not verify_seal(failed, other)  # another node's key
    unsealed = dict(failed)
    del unsealed["format"]
    assert not verify_seal(unsealed, key)  # a format-1 event has no seal to check
    assert not verify_seal(dict(failed, format=True), key)
    for junk in (None, [], "event", {"seq": "1"}, dict(failed, seal="not base64!"), dict(failed, seal=failed["seal"][:-4])):
        assert verify_seal(junk, key) is False


def test_events_journaled_before_format_2_are_sealed_when_listed_and_left_as_they_are_on_disk(capsys, tmp_path):
    root = tmp_path / "node-a"
    state = str(root / "var" / "lib" / "bcd")
    key = NodeKey.load_or_create(os.path.join(state, "node.key"))
    journal = Journal(state)
    journal.append("AllocationFailed", {"node_id": "node-a", "allocation_id": "alloc_2", "generation": 3,
                                        "reason": "overlap", "message": "GPU-1 is assigned to alloc_1"})
    before = open(journal.path, "rb").read()
    assert b'"seal"' not in before
    result = events_run(capsys, root=str(root))
    (listed,) = result["events"]
    assert listed["format"] == 2 and verify_seal(listed, key.public_key_b64())
    assert open(journal.path, "rb").read() == before


def test_without_the_node_key_a_format_1_event_is_listed_as_it_is(capsys, tmp_path):
    root = tmp_path / "node-a"
    journal = Journal(str(root / "var" / "lib" / "bcd"))
    journal.append("AllocationFailed", {"node_id": "node-a", "allocation_id": "alloc_2", "generation": 3,
                                        "reason": "overlap", "message": "GPU-1 is assigned to alloc_1"})
    (listed,) = events_run(capsys, root=str(root))["events"]
    assert "seal" not in listed and "format" not in listed


def test_without_cryptography_a_refusal_is_journaled_unsealed_as_before(capsys, make_node, monkeypatch):
    node = make_node()
    monkeypatch.setattr(_events, "HAS_CRYPTOGRAPHY", False)
    monkeypatch.setattr("ansible_collections.bcd.devices.plugins.module_utils.state.store.HAS_CRYPTOGRAPHY", False)
    holds_run(capsys, node, generation=1, on_refusal="report",
              devices=[hold("alloc_b", "GPU-5f1c2a90-0000-4000-8000-0000000000ff")])
    (failed,) = journaled(node)
    assert failed["type"] == "AllocationFailed" and "seal" not in failed

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The source bcd.devices.gateway trusts no node (issue 45): each attack that was reproduced against it, now
refused, with the events of real node journals (fakehw passes of bcd.devices.holds, the node's own key).

1. a compromised node signs and seals a GPUUnhealthy whose device_ids hold a template: rejected, not queued;
2. an unsigned AllocationFailed naming node-a at seq N, then node-a's real sealed event at N: the real one is queued;
3. a sealed event posted again under another seq: rejected (bad seal);
4. the same sealed event posted again after a restart of the source with state_dir: not queued again;
5. a node's event naming another node, sealed with its own key: rejected.
(The connection flood is in test_gateway_limits.py.)"""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A
from ansible_collections.bcd.devices.tests.unit.extensions.test_gateway_source import fixture_start  # noqa: F401  pylint: disable=unused-import
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_gpu_health import sick

INJECTED = "{{ lookup('pipe', 'touch /tmp/bcd-gateway-pwned') }}"
SEAL_REASON = ("bad seal: the %s at seq %d is not sealed by the key of node %s (its seq, type or body was changed, or "
               "another key sealed it)")


class RealNode:
    """A fakehw node (tests/unit/conftest.py) whose passes journal real events, and its own key."""

    def __init__(self, node):
        self.node = node

    @property
    def key(self):
        return NodeKey.load_or_create(self.node.state("node.key"))  # a node's identity, made at its first signed event

    @property
    def public_key(self):
        return self.key.public_key_b64()

    def journal(self):
        """The events as the role delivers them (bcd.devices.events lists the journal)."""
        return Journal(self.node.state()).unacked()

    def reseal(self, event, key=None):
        """``event`` signed (when it is a signed type) and sealed anew by ``key`` (the node's own by default):
        what a compromised node account can make."""
        key = key or self.key
        event = copy.deepcopy(event)
        if "signature" in event:
            event["signature"] = key.sign(event["body"])
        event["format"] = 2
        event["seal"] = key.seal(event["seq"], event["type"], event["body"])
        return event


@pytest.fixture(name="node_a")
def fixture_node_a(make_node):
    return RealNode(make_node(vendor="mig", node_id="node-a"))


@pytest.fixture(name="node_b")
def fixture_node_b(make_node):
    return RealNode(make_node(vendor="mig", node_id="node-b"))


def unhealthy(real):
    """A pass on ``real`` whose GPU B logged Xid 79: its GPUUnhealthy, as journaled."""
    real.node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    real.node.run(1, [hold("a1", GPU_A)])
    [event] = [e for e in real.journal() if e["type"] == "GPUUnhealthy"]
    return event


def refusal(real, generation=1):
    """A pass on ``real`` that binds a1 and refuses a2 (overlap); the events as journaled."""
    real.node.run(generation, [hold("a1", GPU_A), hold("a2", GPU_A)])
    return real.journal()


def test_a_template_in_a_field_is_rejected_though_the_nodes_own_key_signed_and_sealed_it(start, node_a):
    """The event reaches a playbook's extra vars, which ansible-core renders: the source hands on no field that holds
    a template delimiter, whoever signed it."""
    event = unhealthy(node_a)
    source = start(node_keys={"node-a": node_a.public_key})
    forged = []
    for path, value in ((("device_ids",), [INJECTED]), (("message",), "reset me " + INJECTED),
                        (("reason",), INJECTED), (("allocation_id",), INJECTED)):
        body = dict(event["body"])
        body[path[0]] = value
        forged.append(node_a.reseal(dict(event, seq=event["seq"] + len(forged) + 1, body=body)))

    status, answer = source.deliver(forged)

    assert status == 200 and answer["accepted"] == []
    reasons = [(r["seq"], r["node"], r["reason"].split(":")[0]) for r in answer["rejected"]]
    assert reasons == [(event["seq"] + 1, "node-a", "body.device_ids[0]"), (event["seq"] + 2, "node-a", "body.message"),
                       (event["seq"] + 3, "node-a", "body.reason"), (event["seq"] + 4, "node-a", "body.allocation_id")]
    assert not any("{" in r["reason"] for r in answer["rejected"])  # nor does the answer quote it
    assert source.queued() == []
    # the node's genuine event still goes through
    assert source.deliver([event]) == (200, {"accepted": [event["seq"]], "rejected": []})
    [queued] = source.queued()
    assert queued["bcd"]["devices"] == [event["body"]["device_ids"][0]] and queued["bcd"]["sealed"] is True


@pytest.mark.parametrize("accept_unsealed", [False, True])
def test_an_unsigned_refusal_at_a_seq_does_not_take_the_slot_of_the_real_event(start, node_a, accept_unsealed):
    events = refusal(node_a)
    [real] = [e for e in events if e["type"] == "AllocationFailed"]
    # someone with the token, without the node's key, posts an unsealed refusal naming node-a at the same seq
    fake = {"seq": real["seq"], "type": "AllocationFailed", "body": dict(real["body"], allocation_id="a_other")}
    source = start(node_keys={"node-a": node_a.public_key}, accept_unsealed=accept_unsealed)

    status, answer = source.deliver([fake])
    assert status == 200
    if accept_unsealed:  # taken as an unsealed report, remembered by its digest, never by the seq
        assert answer == {"accepted": [real["seq"]], "rejected": []}
        [queued] = source.queued()
        assert (queued["bcd"]["allocation"], queued["bcd"]["sealed"], queued["bcd"]["signed"], queued["bcd"]["format"]) == (
            "a_other", False, False, 1)
    else:
        assert answer == {"accepted": [], "rejected": [{"seq": real["seq"], "node": "node-a", "reason": (
            "unsealed: the AllocationFailed at seq %d has no seal (event format 1, from a node whose collection "
            "predates sealed events); upgrade the node's collection, or set accept_unsealed while the fleet "
            "upgrades" % real["seq"])}]}
        assert source.queued() == []

    # node-a's real delivery: every event is queued, the real refusal at that seq included
    assert source.deliver(events) == (200, {"accepted": [e["seq"] for e in events], "rejected": []})
    queued = source.queued()
    assert [(e["bcd"]["seq"], e["bcd"]["type"], e["bcd"]["sealed"]) for e in queued] == [
        (e["seq"], e["type"], True) for e in events]
    assert queued[-1]["bcd"]["allocation"] == "a2" and queued[-1]["bcd"]["signed"] is True


def test_a_sealed_event_posted_again_under_another_seq_is_rejected_and_a_second_occurrence_is_not(start, node_a):
    events = refusal(node_a)
    source = start(node_keys={"node-a": node_a.public_key})
    assert source.deliver(events)[1]["accepted"] == [e["seq"] for e in events]
    assert len(source.queued()) == len(events)
    bound = events[0]
    replayed = [dict(bound, seq=bound["seq"] + 100), dict(bound, seq=bound["seq"] + 101, type="AllocationReleased")]

    status, answer = source.deliver(replayed)

    assert status == 200 and answer["accepted"] == []
    assert [r["reason"] for r in answer["rejected"]][0] == SEAL_REASON % ("AllocationBound", bound["seq"] + 100, "node-a")
    assert source.queued() == []
    # the node binds the same allocation again later (released in between): a new seq, a new seal, queued
    node_a.node.run(2, [])
    node_a.node.run(3, [hold("a1", GPU_A)])
    again = [e for e in node_a.journal() if e["seq"] > events[-1]["seq"]]
    assert [e["type"] for e in again] == ["AllocationReleased", "AllocationBound"]
    assert source.deliver(again)[1]["accepted"] == [e["seq"] for e in again]
    assert [e["bcd"]["type"] for e in source.queued()] == ["AllocationReleased", "AllocationBound"]


def test_an_unsealed_signed_event_posted_again_under_another_seq_is_not_queued_twice(start, tmp_path):
    """Mid-upgrade (accept_unsealed), a format-1 event's signature has no seq: it is remembered by its node, type
    and body, so the same bind posted under any other seq is answered accepted and queued once."""
    key = NodeKey.load_or_create(str(tmp_path / "node.key"))
    journal = Journal(str(tmp_path))
    body = {"node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": "a1",
            "generation": 1, "device_ids": [GPU_A], "cdi_devices": ["bcd.dev/gpu=" + GPU_A],
            "cdi_spec_path": "/etc/cdi/bcd-a1.json", "env_file": "/run/bcd/allocations/a1.env"}
    [event] = journal.append_many([("AllocationBound", body, key)])  # format 1: no seal
    assert "seal" not in event
    source = start(node_keys={"node-a": key.public_key_b64()}, accept_unsealed=True)
    assert source.deliver([event]) == (200, {"accepted": [1], "rejected": []})
    assert [(e["bcd"]["signed"], e["bcd"]["sealed"], e["bcd"]["format"]) for e in source.queued()] == [(True, False, 1)]
    assert source.deliver([dict(event, seq=7)]) == (200, {"accepted": [7], "rejected": []})
    assert source.queued() == []


def test_the_same_sealed_events_after_a_restart_with_state_dir_are_not_queued_again(start, tmp_path, node_a):
    events = refusal(node_a)
    state = tmp_path / "gateway-state"
    args = {"node_keys": {"node-a": node_a.public_key}, "state_dir": str(state)}
    first = start(**args)
    assert first.deliver(events)[1]["accepted"] == [e["seq"] for e in events]
    assert len(first.queued()) == len(events)
    first.stop()
    assert sorted(p.name for p in state.iterdir()) == ["node-a.json"]
    assert oct(state.stat().st_mode & 0o777) == "0o700" and oct((state / "node-a.json").stat().st_mode & 0o777) == "0o600"

    second = start(**args)  # the engine restarted before the node's acknowledgement arrived
    assert second.deliver(events) == (200, {"accepted": [e["seq"] for e in events], "rejected": []})
    assert second.queued() == []
    assert second.deliver([events[-1]]) == (200, {"accepted": [events[-1]["seq"]], "rejected": []})  # one alone
    assert second.queued() == []
    # what the node journals next is queued, and remembered across the next restart too
    node_a.node.run(2, [hold("a1", GPU_A)])
    later = node_a.journal()
    assert second.deliver(later)[1]["accepted"] == [e["seq"] for e in later]
    assert [e["bcd"]["seq"] for e in second.queued()] == [e["seq"] for e in later if e not in events]
    second.stop()
    third = start(**args)
    assert third.deliver(later)[1]["accepted"] == [e["seq"] for e in later]
    assert third.queued() == []


def test_without_state_dir_a_restarted_source_queues_a_delivery_again(start, node_a):
    """What the documentation says of the memory-only source: it lasts as long as the source runs."""
    events = refusal(node_a)
    first = start(node_keys={"node-a": node_a.public_key})
    assert first.deliver(events)[1]["accepted"] == [e["seq"] for e in events]
    first.stop()
    second = start(node_keys={"node-a": node_a.public_key})
    assert second.deliver(events)[1]["accepted"] == [e["seq"] for e in events]
    assert len(second.queued()) == len(events)


def test_a_damaged_state_file_is_logged_and_read_as_empty(start, tmp_path, node_a, caplog):
    events = refusal(node_a)
    state = tmp_path / "gateway-state"
    state.mkdir()
    (state / "node-a.json").write_bytes(b'{"version": 1, "node": "node-a", "through": "x"')
    source = start(node_keys={"node-a": node_a.public_key}, state_dir=str(state))
    assert source.deliver(events) == (200, {"accepted": [e["seq"] for e in events], "rejected": []})
    assert len(source.queued()) == len(events)
    assert any("node-a.json is damaged and read as empty" in r.getMessage() for r in caplog.records)
    assert json.loads((state / "node-a.json").read_text())["through"] == events[-1]["seq"]  # written whole again


def test_a_node_with_a_new_key_is_remembered_anew(start, tmp_path, node_a):
    """A node whose key file was removed is a new identity (docs/events.md): what was queued under its old key does
    not hide what it sends under the new one, and an event of the old key no longer verifies."""
    events = refusal(node_a)
    state = tmp_path / "gateway-state"
    first = start(node_keys={"node-a": node_a.public_key}, state_dir=str(state))
    assert first.deliver(events)[1]["accepted"] == [e["seq"] for e in events]
    first.stop()
    new_key = NodeKey.load_or_create(str(tmp_path / "new.key"))
    resealed = [node_a.reseal(e, new_key) for e in events]
    second = start(node_keys={"node-a": new_key.public_key_b64()}, state_dir=str(state))
    assert second.deliver(resealed)[1]["accepted"] == [e["seq"] for e in events]
    assert len(second.queued()) == len(events)
    assert second.deliver(events)[1]["rejected"][0]["reason"].startswith("bad seal")


def test_a_nodes_event_naming_another_node_sealed_with_its_own_key_is_rejected(start, node_a, node_b):
    events = refusal(node_b)
    source = start(node_keys={"node-a": node_a.public_key, "node-b": node_b.public_key})
    speaking_for_a = []
    for event in events:
        body = dict(event["body"], node_id="node-a")
        speaking_for_a.append(node_b.reseal(dict(event, body=body)))  # node-b's key, signature and seal

    status, answer = source.deliver(speaking_for_a)

    assert status == 200 and answer["accepted"] == []
    assert answer["rejected"] == [{"seq": e["seq"], "node": "node-a", "reason": SEAL_REASON % (e["type"], e["seq"], "node-a")}
                                  for e in events]
    assert source.queued() == []


def test_an_event_whose_node_id_is_a_path_names_no_file(start, tmp_path, node_a):
    """A node id becomes a file name in state_dir only after the grammar: ``../x`` is refused first."""
    events = refusal(node_a)
    state = tmp_path / "gateway-state"
    source = start(node_keys={"node-a": node_a.public_key, "../x": node_a.public_key}, state_dir=str(state))
    escaped = node_a.reseal(dict(events[0], body=dict(events[0]["body"], node_id="../x")))
    status, answer = source.deliver([escaped])
    assert status == 200 and answer["accepted"] == []
    assert answer["rejected"][0]["node"] is None
    assert answer["rejected"][0]["reason"].startswith('body.node_id: "../x" is not a host name')
    assert not (tmp_path / "x.json").exists() and list(state.iterdir()) == []

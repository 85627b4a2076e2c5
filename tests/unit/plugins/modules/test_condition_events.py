# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Conditions are events too (issue 36, item 2): a condition that appears or clears is journaled once, signed,
through ``bcd.devices.holds`` on a fakehw node; ``bcd.devices.events``, the delivery filter and ``verify_report``
carry it unchanged (docs/events.md, "Conditions")."""

from __future__ import annotations

import json

from ansible_collections.bcd.devices.plugins.filter import delivery as delivery_filter
from ansible_collections.bcd.devices.plugins.module_utils.state import events as events_lib
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, verify_report
from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import parse_ledger
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.modules import test_events
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_busy_and_maintenance import service
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_gpu_health import sick
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info

FALLEN_OFF = "Xid 79: GPU has fallen off the bus (reboot the node)"


def journal(node):
    return Journal(node.state()).unacked()


def conditions_reported(result):
    return [(p["action"], p["event"], p["device_ids"]) for p in result["plan"] if p["action"] == "report-condition"]


def test_an_unhealthy_gpu_is_one_signed_event_when_it_appears_and_one_when_it_clears(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    before = len(journal(node))

    sick_pass = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])

    assert sick_pass["changed"] is True
    assert conditions_reported(sick_pass) == [("report-condition", "GPUUnhealthy", [GPU_B])]
    [event] = journal(node)[before:]
    assert event == sick_pass["events"][-1]  # the pass returns what it journaled, unchanged
    assert event["type"] == "GPUUnhealthy" and event["purpose"] == "attested-report"
    assert event["body"] == {"type": "GPUUnhealthy", "node_id": "node-a", "boot_id": event["body"]["boot_id"],
                             "generation": 1, "device_ids": [GPU_B], "reason": "GPUFaulted",
                             "message": "%s is unhealthy: %s" % (GPU_B, FALLEN_OFF)}
    key = info(capsys, node)["node_public_key"]
    assert verify_report(event, key) is True
    assert verify_report(dict(event, type="GPUUnhealthyCleared"), key) is False  # the body names its type
    assert verify_report(dict(event, body=dict(event["body"], device_ids=[GPU_C])), key) is False

    # the same pass again: the condition is still there, nothing new is journaled, nothing changed
    again = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert again["changed"] is False and conditions_reported(again) == []
    assert len(journal(node)) == before + 1
    assert [c["type"] for c in again["conditions"]] == ["GPUUnhealthy"]

    # reset: healthy again, one clearing event for that GPU, then nothing
    node.set_hardware(gpus=DEFAULT_GPUS)
    healthy = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert healthy["changed"] is True and healthy["conditions"] == []
    [cleared] = journal(node)[before + 1:]
    assert cleared["type"] == "GPUUnhealthyCleared" and verify_report(cleared, key) is True
    assert (cleared["body"]["type"], cleared["body"]["device_ids"], cleared["body"]["reason"]) == (
        "GPUUnhealthyCleared", [GPU_B], "ConditionCleared")
    assert run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])["changed"] is False
    assert len(journal(node)) == before + 2


def test_each_gpu_is_its_own_condition(capsys, node):
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    run(capsys, node, generation=1, devices=[])
    # a second GPU faults while the first still is unhealthy: one event, for the new one
    gpus = sick(sick(DEFAULT_GPUS, 1, xids=[79]), 2, retired_pages_pending=True)
    node.set_hardware(gpus=gpus)
    second = run(capsys, node, generation=1, devices=[])
    assert conditions_reported(second) == [("report-condition", "GPUUnhealthy", [GPU_C])]
    # the first comes back: its clearing alone
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, retired_pages_pending=True))
    back = run(capsys, node, generation=1, devices=[])
    assert conditions_reported(back) == [("report-condition", "GPUUnhealthyCleared", [GPU_B])]
    assert [(e["type"], e["body"]["device_ids"]) for e in journal(node)] == [
        ("GPUUnhealthy", [GPU_B]), ("GPUUnhealthy", [GPU_C]), ("GPUUnhealthyCleared", [GPU_B])]


def test_a_gpu_taken_out_of_maintenance_after_its_reset_clears_its_condition(capsys, node):
    """The loop a rulebook runs on GPUUnhealthy: maintenance, reset, back in service; the node says it cleared."""
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, xids=[95]))
    run(capsys, node, generation=1, devices=[])
    service(capsys, node, gpus=[GPU_C], reason="reset after Xid 95")
    service(capsys, node, gpus=[GPU_C], state="absent")  # reset and checked: the Xid logged before stops counting
    back = run(capsys, node, generation=2, devices=[])
    assert conditions_reported(back) == [("report-condition", "GPUUnhealthyCleared", [GPU_C])]


def test_check_mode_plans_the_event_and_writes_nothing(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    listing, ledger = node.listing(), node.read("/var/lib/bcd/ledger.json")
    checked = run(capsys, node, check=True, diff=True, generation=1, devices=[hold("a1", GPU_A)])
    assert checked["changed"] is True
    assert conditions_reported(checked) == [("report-condition", "GPUUnhealthy", [GPU_B])]
    assert "report GPUUnhealthy: %s is unhealthy: %s" % (GPU_B, FALLEN_OFF) in checked["diff"][0]["prepared"]
    assert node.listing() == listing and node.read("/var/lib/bcd/ledger.json") == ledger
    assert [e["type"] for e in journal(node)] == ["AllocationBound"]
    # the real pass then journals it
    real = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert [e["type"] for e in real["events"]] == ["AllocationBound", "GPUUnhealthy"]


def test_a_pass_that_died_after_journaling_does_not_report_the_condition_again(capsys, node):
    """The event is journaled before the ledger records it; a ledger saved without it is caught up from the
    journal, as a bind's is, so the next pass journals nothing."""
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 0, xids=[79]))
    run(capsys, node, generation=1, devices=[])
    ledger = json.loads(node.read("/var/lib/bcd/ledger.json"))
    assert ledger["conditions"] == {"GPUUnhealthy/" + GPU_A: {"device_ids": [GPU_A]}}
    del ledger["conditions"]
    ledger["journal_seq"] = 0  # as it was before the pass's last change
    node.write("/var/lib/bcd/ledger.json", json.dumps(ledger).encode())
    after = run(capsys, node, generation=1, devices=[])
    assert conditions_reported(after) == [] and [e["type"] for e in journal(node)] == ["GPUUnhealthy"]


def test_a_ledger_keeps_only_condition_records_a_pass_writes():
    content = json.dumps({"conditions": {
        "GPUUnhealthy/GPU-1": {"device_ids": ["GPU-1"]},
        "GPUUnhealthy/GPU-2": {"device_ids": ["GPU-9"]},  # key and device disagree
        "KubernetesReleaseStuck/k1": {"device_ids": ["GPU-1"], "allocation_id": "k1"},
        "VendorSpecStale": {"device_ids": []},
        "NotACondition": {"device_ids": []},
        "HoldSpecDamaged": {"device_ids": "GPU-1"},
        # the message a kept hold's refusal was raised with (bcd-holds status shows it); one too long or not text
        # is dropped, the record kept
        "HoldChangeRefused/a1": {"device_ids": ["GPU-1"], "allocation_id": "a1", "message": "a1 is held as bound"},
        "HoldChangeRefused/a2": {"device_ids": ["GPU-2"], "allocation_id": "a2", "message": "x" * 4097},
        "HoldChangeRefused/a3": {"device_ids": ["GPU-3"], "allocation_id": "a3", "message": ["a", "list"]},
    }}).encode()
    assert parse_ledger(content, "ledger.json").conditions == {
        "GPUUnhealthy/GPU-1": {"device_ids": ["GPU-1"]},
        "KubernetesReleaseStuck/k1": {"device_ids": ["GPU-1"], "allocation_id": "k1"},
        "VendorSpecStale": {"device_ids": []},
        "HoldChangeRefused/a1": {"device_ids": ["GPU-1"], "allocation_id": "a1", "message": "a1 is held as bound"},
        "HoldChangeRefused/a2": {"device_ids": ["GPU-2"], "allocation_id": "a2"},
        "HoldChangeRefused/a3": {"device_ids": ["GPU-3"], "allocation_id": "a3"}}


def test_the_events_module_and_the_delivery_carry_condition_events_unchanged(capsys, node):
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    run(capsys, node, generation=1, devices=[])
    journaled = journal(node)
    listed = test_events.run(capsys, root=node.root, fakehw=node.fakehw)
    assert listed["events"] == journaled and listed["events"][0]["type"] == "GPUUnhealthy"
    deliver = delivery_filter.FilterModule().filters()["delivery"]
    posted = {"status": 200, "json": {"accepted": [journaled[0]["seq"]]}, "changed": False}
    assert deliver(listed["events"], posted, "http://gw/events")["ack_through"] == journaled[0]["seq"]
    acked = test_events.run(capsys, root=node.root, fakehw=node.fakehw, ack_through=journaled[0]["seq"])
    assert acked["events"] == [] and journal(node) == []
    # acknowledged, the condition is still known: the next pass does not report it again
    assert run(capsys, node, generation=1, devices=[])["changed"] is False


def test_a_full_journal_holds_the_condition_event_back_until_there_is_room(capsys, node, monkeypatch):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    monkeypatch.setattr(events_lib, "MAX_UNACKED", 1)
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 1, xids=[79]))
    full = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert full["section"]["state"] == "PROGRESSING" and "the event journal is full" in full["section"]["message"]
    assert [e["type"] for e in journal(node)] == ["AllocationBound"]
    monkeypatch.setattr(events_lib, "MAX_UNACKED", 10000)
    later = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert [e["type"] for e in later["events"]] == ["AllocationBound", "GPUUnhealthy"]


def test_a_gpu_the_inventory_no_longer_lists_does_not_clear(capsys, node):
    """Off the bus, a GPU may vanish from the inventory: that is not a GPU back in health."""
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 2, xids=[79]))
    run(capsys, node, generation=1, devices=[])
    node.set_hardware(gpus=DEFAULT_GPUS[:2])
    gone = run(capsys, node, generation=1, devices=[])
    assert conditions_reported(gone) == [] and gone["changed"] is False
    node.set_hardware(gpus=DEFAULT_GPUS)  # back, and healthy
    back = run(capsys, node, generation=1, devices=[])
    assert conditions_reported(back) == [("report-condition", "GPUUnhealthyCleared", [GPU_C])]

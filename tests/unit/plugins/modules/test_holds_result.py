# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the holds module prints: every documented return value, and a no-op's result small (issue 24):
Ansible's echo of the task's options names the assignments by count and digest instead of all of them."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json

import pytest
import yaml
from ansible.module_utils import basic

from ansible_collections.bcd.devices.plugins.module_utils.state import events as journal_module
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.modules import holds
from ansible_collections.bcd.devices.tests.unit.module_args import run_main
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run as holds_run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import warnings

# What Ansible itself may add to any result; ran_from is the action plugin's (tests/unit/plugins/action).
ANSIBLE_KEYS = {"changed", "failed", "msg", "invocation", "warnings", "deprecations", "diff"}
GPUS = 8


def documented_returns():
    """The top-level keys of the holds module's RETURN, each with its ``returned``."""
    with open(holds.__file__) as handle:
        tree = ast.parse(handle.read())
    text = next(node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN")
    return dict((key, value.get("returned")) for key, value in yaml.safe_load(text).items())


def gpus():
    return [{"uuid": "GPU-5f1c2a90-0000-4000-8000-%012x" % (i + 1), "index": i, "minor": i} for i in range(GPUS)]


def assignments(count):
    return [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
             "devices": [{"id": "GPU-5f1c2a90-0000-4000-8000-%012x/s%d" % (i % GPUS + 1, i // GPUS),
                          "device_class": "gpu.slot"}]}
            for i in range(count)]


# ansible-core 2.19 returns the echo always; later releases only when the controller asks (verbose runs)
INJECT_INVOCATION = "_ansible_inject_invocation" in inspect.getsource(basic.AnsibleModule)


def run(capsys, node, **args):
    """The module's main(): ``(bytes it printed, its result)``."""
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    args.setdefault("lock_timeout", 5)
    if INJECT_INVOCATION:
        args.setdefault("_ansible_inject_invocation", True)  # what the controller asks at -vvv, from 2.20 on
    out, _err = run_main(capsys, holds.main, args)
    return out.encode("utf-8"), json.loads(out)


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_every_documented_return_value_is_in_a_bind_and_a_no_op(capsys, make_node, check):
    node = make_node(gpus=gpus())
    documented = documented_returns()
    always = set(key for key, returned in documented.items() if returned == "always") - {"ran_from"}
    for what in ("bind", "no-op"):
        _out, result = run(capsys, node, generation=1, devices=assignments(4), _ansible_check_mode=check)
        assert not result.get("failed"), result
        assert always <= set(result), "%s lacks %s" % (what, sorted(always - set(result)))
        assert set(result) <= set(documented) | ANSIBLE_KEYS, "%s returns undocumented %s" % (
            what, sorted(set(result) - set(documented) - ANSIBLE_KEYS))
        if check:
            break


def test_the_echo_of_the_task_names_the_assignments_by_count_and_digest(capsys, make_node):
    node = make_node(gpus=gpus())
    devices = assignments(3)
    _out, result = run(capsys, node, generation=1, devices=devices)
    echo = result["invocation"]["module_args"]
    digest = hashlib.sha256(json.dumps(devices, sort_keys=True).encode("utf-8")).hexdigest()
    assert echo["devices"] == "3 assignments, sha256 %s (not echoed)" % digest
    # every other option as the module read it, defaults included
    assert echo["generation"] == 1 and echo["root"] == node.root and echo["on_refusal"] is None  # not given: fail (see on_refusal in the docs)


def test_a_refused_input_echoes_the_same_way(capsys, make_node):
    node = make_node(gpus=gpus())
    _out, result = run(capsys, node, generation=1, devices=assignments(1), cdi_runtimes="neither-auto-nor-a-list")
    assert result.get("failed")
    assert result["invocation"]["module_args"]["devices"].startswith("1 assignment, sha256 ")


def test_a_no_op_of_256_holds_prints_under_100_kb(capsys, make_node):
    node = make_node(gpus=gpus())
    devices = assignments(256)
    _out, bound = run(capsys, node, generation=1, devices=devices)
    assert len(bound["holds"]) == 256 and len(bound["events"]) == 256
    out, result = run(capsys, node, generation=1, devices=devices)
    # journaled by the bind, not yet acknowledged: the oldest 16 ride along, the rest are counted
    assert result["changed"] is False and [e["seq"] for e in result["events"]] == list(range(1, 17))
    assert result["events_not_shown"] == 240
    # The task's 256 assignments are not echoed back: the echo is under 1 KB (it was 46 KB), and the
    # result is the holds and events the module documents (each hold ~330 bytes, each event ~530).
    assert len(json.dumps(result["invocation"])) < 1024
    assert len(out) < 100 * 1024
    # once acknowledged (the role's delivery does), the events leave the result: the holds are most of it
    _events, acknowledged = NodeState(node.state()).list_and_acknowledge(2 ** 62)
    assert acknowledged == 256
    out, result = run(capsys, node, generation=1, devices=devices)
    assert result["changed"] is False and result["events"] == [] and result["events_not_shown"] == 0
    assert len(out) < 100 * 1024


# -- the journal's bound (docs/events.md, "The journal's bound") -------------------------------------------

def test_at_the_journals_bound_a_pass_changes_nothing_and_says_what_to_do_and_no_event_is_lost(
        capsys, make_node, monkeypatch):
    """A node whose events nobody acknowledges: near the bound every pass warns; at it, a pass that would journal
    more binds and releases nothing (check mode says the same) and is retried; the events are all kept, and once
    they are acknowledged the same input binds."""
    monkeypatch.setattr(journal_module, "MAX_UNACKED", 10)
    node = make_node(gpus=gpus())
    first = holds_run(capsys, node, generation=1, devices=assignments(8))
    assert len(first["events"]) == 8
    assert [text for text in warnings(first) if "near its bound of 10 events" in text] == [
        "the event journal holds 8 unacknowledged events, near its bound of 10 events or 12582912 bytes, past which "
        "binds and releases wait: deliver and acknowledge them (bcd.devices.events with ack_through, or the role's "
        "bcd_holds_gateway_url)"]
    for check in (True, False):
        _out, full = run(capsys, node, generation=2, devices=assignments(12), _ansible_check_mode=check)
        assert full["failed"] is True and full["changed"] is False
        assert full["section"]["state"] == "PROGRESSING"
        assert "the event journal is full: it holds 8 unacknowledged events" in full["msg"]
        assert "this pass would journal 4 more, so it changed nothing and is retried" in full["msg"]
        assert "ack_through" in full["msg"]
        # failed: none of the 8 it waits on is printed again, each counted, and where to read them said
        assert full["events"] == [] and full["events_not_shown"] == 8
        assert full["events_elsewhere"] == ("8 unacknowledged events of earlier passes not shown: bcd.devices.events "
                                            "lists them all (bcd-holds events on the node)")
        assert not node.exists("/etc/cdi/bcd-a8.json")
    assert [e["seq"] for e in NodeState(node.state()).unacked()] == list(range(1, 9))  # nothing dropped
    NodeState(node.state()).list_and_acknowledge(8)
    _out, after = run(capsys, node, generation=2, devices=assignments(12))
    assert after["changed"] is True and [e["seq"] for e in after["events"]] == [9, 10, 11, 12]
    assert node.exists("/etc/cdi/bcd-a11.json")


def test_a_result_carries_this_passs_events_after_the_16_oldest_older_ones(capsys, make_node):
    node = make_node(gpus=gpus())
    for generation in range(1, 5):  # 4 passes of 8 new holds each: 32 events, none acknowledged
        run(capsys, node, generation=generation, devices=assignments(8 * generation))
    _out, result = run(capsys, node, generation=5, devices=assignments(34))
    assert [e["seq"] for e in result["events"]] == list(range(1, 17)) + [33, 34]
    assert result["events_not_shown"] == 16
    assert len(NodeState(node.state()).unacked()) == 34  # bcd.devices.events still lists them all


def test_a_failed_result_shows_this_passs_events_and_counts_the_older_ones_and_a_report_keeps_them(capsys, make_node):
    """Issue 46, item 3: a refusal that fails the task shows its own events, not the 16 oldest of the journal;
    ``on_refusal: report`` keeps them (tests/unit/plugins/modules/test_failure_output_play.py prints both through
    ansible-playbook)."""
    node = make_node(gpus=gpus())
    for generation in range(1, 5):  # 32 events nobody acknowledged
        run(capsys, node, generation=generation, devices=assignments(8 * generation))
    refused = assignments(33) + [dict(assignments(1)[0], allocation_id="bad", devices=[
        {"id": "GPU-00000000-dead-4000-8000-000000000000", "device_class": "gpu"}])]
    for check in (True, False):
        _out, failed = run(capsys, node, generation=5, devices=refused, _ansible_check_mode=check)
        assert failed["failed"] is True and "bad: device-missing" in failed["msg"]
        if check:  # check mode journals nothing: no event of its own
            assert failed["events"] == [] and failed["events_not_shown"] == 32
        else:
            assert [(e["seq"], e["type"], e["body"]["allocation_id"]) for e in failed["events"]] == [
                (33, "AllocationBound", "a32"), (34, "AllocationFailed", "bad")]
            assert failed["events_not_shown"] == 32
        assert failed["events_elsewhere"] == ("32 unacknowledged events of earlier passes not shown: "
                                              "bcd.devices.events lists them all (bcd-holds events on the node)")
    # one older event: said in the singular
    NodeState(node.state()).list_and_acknowledge(33)
    _out, again = run(capsys, node, generation=6, devices=refused[:33] + [dict(refused[33], allocation_id="bad2")])
    assert [e["body"]["allocation_id"] for e in again["events"]] == ["bad2"] and again["events_not_shown"] == 1
    assert again["events_elsewhere"] == ("1 unacknowledged event of earlier passes not shown: bcd.devices.events "
                                         "lists it (bcd-holds events on the node)")
    # on_refusal: report does not fail: the oldest unacknowledged events ride along as before, none is elsewhere
    _out, reported = run(capsys, node, generation=7, on_refusal="report",
                         devices=refused[:33] + [dict(refused[33], allocation_id="bad3")])
    assert not reported.get("failed") and "events_elsewhere" not in reported
    assert [e["seq"] for e in reported["events"]] == [34, 35, 36] and reported["events_not_shown"] == 0
    assert len(NodeState(node.state()).unacked()) == 3  # bcd.devices.events still lists them all

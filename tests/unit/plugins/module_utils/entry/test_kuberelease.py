# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes releases (spec page, "Kubernetes releases"), over whole passes on a
fakehw node whose hardware file's ``kubelet`` section says which pods hold
which devices: recorded before anything is removed, withdrawn at once, reported
once no pod holds the devices, claimed meanwhile, taken back unreported, stuck
after five minutes, an unreadable releases file set aside with every GPU
claimed, what ``holds_info`` and ``bcd-holds status`` show, and a pass killed at
every step of a release losing nothing and reporting once."""

from __future__ import annotations

import calendar
import json
import os
import re
import time
import types

import pytest
from ansible_collections.bcd.devices.tests.unit.module_args import patch_module_args

from ansible_collections.bcd.devices.plugins.module_utils.entry import cli as _cli, converge as _converge
from ansible_collections.bcd.devices.plugins.module_utils.state import store as _store
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter
from ansible_collections.bcd.devices.plugins.modules import holds_info

from ansible_collections.bcd.devices.tests.unit.builders import hold, kube
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, MIG_A1, MIG_A2

MIG = GPU_A + "/gi1/ci0"
UNREADABLE_OWNER = "(pending Kubernetes releases that could not be read)"
RELEASES = "/var/lib/bcd/releasing.json"
MARKER = "/var/lib/bcd/releasing.unreadable"


K1 = kube("k1", GPU_A)


def pods(node, *device_ids, **kwargs):
    """The kubelet section: one pod per device id (none: no pod holds anything)."""
    node.set_hardware(kubelet={"reachable": kwargs.get("reachable", True), "pods": [
        {"namespace": "default", "name": "train-%d" % n, "container": "main", "device_ids": [device_id]}
        for n, device_id in enumerate(device_ids)]})


def steps(result):
    return [(a.kind, a.allocation_id) for a in result.plan.actions]


def journal(node):
    return Journal(node.state()).unacked()


def released(node, allocation_id="k1"):
    return [e for e in journal(node) if e["type"] == "AllocationReleased" and e["body"]["allocation_id"] == allocation_id]


def releases_file(node):
    content = node.read(RELEASES)
    return None if content is None else json.loads(content)


def hold_files(node, allocation_id="k1"):
    return [path for path in ("/etc/cdi/bcd-%s.json" % allocation_id, "/run/bcd/allocations/%s.env" % allocation_id)
            if node.exists(path)]


def set_since(node, allocation_id, seconds_ago):
    data = releases_file(node)
    data["releases"][allocation_id]["since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime(time.time() - seconds_ago))
    node.write(RELEASES, json.dumps(data))


def condition(result_or_list, kind):
    conditions = result_or_list if isinstance(result_or_list, list) else result_or_list.plan.conditions
    found = [c for c in conditions if c["type"] == kind]
    return found[0] if found else None


@pytest.fixture
def bound(node):
    """k1 (Kubernetes, GPU_A) bound at generation 1, and a pod holding GPU_A."""
    first = node.run(1, [K1])
    assert first.section["state"] == "CONVERGED"
    pods(node, GPU_A)
    return node


# --- the four steps --------------------------------------------------------------------------------------------------


def test_a_release_is_recorded_withdrawn_and_reported_once_no_pod_holds_the_devices(bound):
    node = bound
    before = time.time()
    result = node.run(2, [])
    assert steps(result) == [("release-kube", "k1")]
    assert "held by default/train-0 (main)" in result.plan.actions[0].text
    # 1. recorded: 0600, with the device ids, the generation and the time
    assert node.mode(RELEASES) == 0o600
    record = releases_file(node)["releases"]["k1"]
    assert record["device_ids"] == [GPU_A]
    assert record["generation"] == 2
    since = calendar.timegm(time.strptime(record["since"], "%Y-%m-%dT%H:%M:%SZ"))
    assert int(before) - 1 <= since <= time.time() + 1
    # 2. withdrawn: the spec and the env file at once, although a pod still holds the GPU
    assert hold_files(node) == []
    # 3. not reported while a pod holds it
    assert released(node) == []
    assert result.section["state"] == "CONVERGED"
    assert result.plan.pending_releases == [{"allocation_id": "k1", "device_ids": [GPU_A], "generation": 2,
                                             "age_seconds": 0, "taken_back": False, "held_by": ["default/train-0 (main)"]}]
    waiting = node.run(2, [])
    assert waiting.changed is False
    assert waiting.plan.pending_releases[0]["allocation_id"] == "k1"
    assert released(node) == []
    # the pod is gone: reported, once, with the generation it was released at
    pods(node)
    freed = node.run(2, [])
    assert steps(freed) == [("report-release", "k1")]
    (event,) = released(node)
    assert event["body"]["generation"] == 2
    assert event["body"]["device_ids"] == [GPU_A]
    assert "signature" in event
    assert not node.exists(RELEASES)
    assert freed.plan.pending_releases == []
    after = node.run(2, [])
    assert after.changed is False
    assert len(released(node)) == 1


def test_a_release_no_pod_holds_is_reported_in_the_same_pass(node):
    node.run(1, [K1])
    pods(node, GPU_B)  # a pod on another GPU does not hold k1's
    result = node.run(2, [])
    assert steps(result) == [("release-kube", "k1")]
    assert len(released(node)) == 1
    assert hold_files(node) == []
    assert not node.exists(RELEASES)


def test_the_release_is_recorded_before_anything_is_removed(bound, monkeypatch):
    node = bound
    order = []
    real_save, real_remove = _store.save_releases, DirectWriter.remove_node_file

    def save_releases(state_path, pending):
        order.append(("record", sorted(pending)))
        return real_save(state_path, pending)

    def remove_node_file(self, kind, allocation_id, path=None):
        order.append(("remove", kind))
        return real_remove(self, kind, allocation_id, path=path)

    monkeypatch.setattr(_store, "save_releases", save_releases)
    monkeypatch.setattr(DirectWriter, "remove_node_file", remove_node_file)
    node.run(2, [])
    assert order == [("record", ["k1"]), ("remove", "cdi"), ("remove", "allocation-env")]


def test_a_spec_that_cannot_be_removed_finds_the_release_recorded(bound, monkeypatch):
    node = bound

    def refuse(self, kind, allocation_id, path=None):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(DirectWriter, "remove_node_file", refuse)
    result = node.run(2, [])
    assert result.section["state"] == "PROGRESSING"
    assert "Permission denied" in result.section["message"]
    assert list(releases_file(node)["releases"]) == ["k1"]  # recorded first
    assert len(hold_files(node)) == 2
    monkeypatch.undo()
    again = node.run(2, [])
    assert steps(again) == [("withdraw", "k1")]
    assert hold_files(node) == []
    assert released(node) == []  # the pod still holds GPU_A
    assert again.section["state"] == "CONVERGED"


def test_devices_stay_claimed_while_the_release_is_pending(bound):
    node = bound
    node.run(2, [])
    result = node.run(3, [hold("a2", GPU_A), hold("a3", MIG), kube("a4", GPU_B)])
    assert [(f.allocation_id, f.reason, f.message) for f in result.plan.failures] == [
        ("a2", "overlap", "%s is assigned to k1" % GPU_A),
        ("a3", "overlap", "%s is assigned to k1" % GPU_A)]
    assert [h["allocation_id"] for h in result.holds] == ["a4"]
    pods(node)
    later = node.run(4, [hold("a2", GPU_A), kube("a4", GPU_B)])
    assert steps(later) == [("report-release", "k1"), ("bind", "a2")]  # the release first, then the GPU is free
    assert later.section["state"] == "CONVERGED"


def test_a_spec_that_wants_the_allocation_again_drops_the_release_unreported(bound):
    node = bound
    node.run(2, [])
    result = node.run(3, [K1])
    assert steps(result)[0] == ("drop-release", "k1")
    assert "not reported" in result.plan.actions[0].text
    assert not node.exists(RELEASES)
    assert result.plan.pending_releases == []
    assert result.section["state"] == "CONVERGED"
    assert len(hold_files(node)) == 2  # held again
    pods(node)
    node.run(3, [K1])
    assert released(node) == []  # never reported


def test_an_unreachable_kubelet_counts_as_holding_everything(node):
    node.run(1, [K1])
    pods(node, reachable=False)
    result = node.run(2, [])
    assert "the kubelet cannot be asked" in result.plan.actions[0].text
    assert released(node) == []
    assert list(releases_file(node)["releases"]) == ["k1"]
    assert node.run(2, []).changed is False
    assert released(node) == []
    pods(node)
    node.run(2, [])
    assert len(released(node)) == 1


def test_a_mig_instance_is_held_by_its_mig_uuid(node):
    node.run(1, [kube("k1", MIG)])
    pods(node, MIG_A1)
    node.run(2, [])
    assert released(node) == []
    pods(node, MIG_A2)  # the other instance of the same GPU does not hold k1's
    node.run(2, [])
    assert len(released(node)) == 1


def test_a_plain_hold_is_released_at_once_whatever_the_pods(node):
    node.run(1, [hold("a1", GPU_A)])
    pods(node, GPU_A)
    result = node.run(2, [])
    assert steps(result) == [("release", "a1")]
    assert len(released(node, "a1")) == 1
    assert not node.exists(RELEASES)


# --- stuck ---------------------------------------------------------------------------------------------------------


def test_a_release_pending_over_five_minutes_is_stuck(bound):
    node = bound
    first = node.run(2, [])
    assert condition(first, "KubernetesReleaseStuck") is None
    set_since(node, "k1", 4 * 60)
    assert condition(node.run(2, []), "KubernetesReleaseStuck") is None
    set_since(node, "k1", 6 * 60)
    stuck = condition(node.run(2, []), "KubernetesReleaseStuck")
    assert stuck["status"] == "True"
    assert stuck["reason"] == "PodsHoldDevices"
    assert "k1" in stuck["message"]
    pods(node)
    done = node.run(2, [])
    assert condition(done, "KubernetesReleaseStuck") is None
    assert len(released(node)) == 1


def test_stuck_follows_the_clock_of_the_pass(bound, monkeypatch):
    node = bound
    node.run(2, [])
    since = calendar.timegm(time.strptime(releases_file(node)["releases"]["k1"]["since"], "%Y-%m-%dT%H:%M:%SZ"))
    monkeypatch.setattr(_converge, "time", types.SimpleNamespace(time=lambda: since + 299))
    assert node.run(2, []).plan.conditions == []
    monkeypatch.setattr(_converge, "time", types.SimpleNamespace(time=lambda: since + 301))
    result = node.run(2, [])
    assert [(c["type"], c["reason"]) for c in result.plan.conditions] == [("KubernetesReleaseStuck", "PodsHoldDevices")]
    assert result.plan.pending_releases[0]["age_seconds"] == 301


# --- an unreadable releases file --------------------------------------------------------------------------------------


def asides(node):
    return sorted(name for name in os.listdir(node.state()) if name.startswith("releasing.json.unreadable-"))


def test_an_unreadable_releases_file_is_set_aside_and_every_gpu_stays_claimed(node):
    pods(node, GPU_C)  # a pod holds a GPU of an allocation this node does not know
    node.run(1, [])
    node.write(RELEASES, "{ this is not json")
    before = time.gmtime()
    result = node.run(2, [hold("a1", GPU_B), hold("a2", MIG)])
    assert steps(result)[0] == ("quarantine-releases", "")
    (aside,) = asides(node)
    match = re.fullmatch(r"releasing\.json\.unreadable-(\d{8}T\d{6}Z)", aside)
    assert match
    stamp = calendar.timegm(time.strptime(match.group(1), "%Y%m%dT%H%M%SZ"))
    assert calendar.timegm(before) - 1 <= stamp <= time.time() + 1
    assert node.read(node.state_dir + "/" + aside) == b"{ this is not json"  # kept as it was
    assert not node.exists(RELEASES)
    assert node.exists(MARKER)
    assert [(f.allocation_id, f.reason, f.message) for f in result.plan.failures] == [
        ("a1", "overlap", "%s is assigned to %s" % (GPU_B, UNREADABLE_OWNER)),
        ("a2", "overlap", "%s is assigned to %s" % (GPU_A, UNREADABLE_OWNER))]
    unreadable = condition(result, "KubernetesReleasesUnreadable")
    assert unreadable["status"] == "True"
    assert unreadable["reason"] == "ReleasesFileUnreadable"
    # the pod is still there: the marker stays, and so do the claims
    again = node.run(3, [hold("a1", GPU_B)])
    assert node.exists(MARKER)
    assert [f.reason for f in again.plan.failures] == ["overlap"]
    assert condition(again, "KubernetesReleasesUnreadable") is not None
    # no pod on a GPU of an unknown allocation: the marker goes and the GPUs are free
    pods(node)
    freed = node.run(4, [hold("a1", GPU_B)])
    assert steps(freed) == [("clear-marker", ""), ("bind", "a1"), ("report-condition", "")]
    assert not node.exists(MARKER)
    assert condition(freed, "KubernetesReleasesUnreadable") is None
    assert freed.section["state"] == "CONVERGED"
    assert asides(node) == [aside]  # never deleted


def test_the_marker_stays_while_the_kubelet_cannot_be_asked_until_an_operator_removes_it(node):
    node.run(1, [])
    pods(node, reachable=False)
    node.write(RELEASES, "[]")
    result = node.run(2, [hold("a1", GPU_C)])
    assert [f.message for f in result.plan.failures] == ["%s is assigned to %s" % (GPU_C, UNREADABLE_OWNER)]
    assert node.exists(MARKER)
    assert node.run(2, [hold("a1", GPU_C)]).changed is False
    os.unlink(node.path(MARKER))  # the operator checked the node by hand
    freed = node.run(3, [hold("a1", GPU_C)])
    assert freed.section["state"] == "CONVERGED"
    assert condition(freed, "KubernetesReleasesUnreadable") is None


def test_pods_on_gpus_of_allocations_the_node_knows_do_not_keep_the_marker(node):
    node.run(1, [K1])
    pods(node, GPU_A)  # k1's own pod
    node.write(RELEASES, "{\"releases\": {\"k9\": {\"device_ids\": [1]}}}")
    result = node.run(2, [K1])
    assert steps(result)[:2] == [("quarantine-releases", ""), ("clear-marker", "")]
    assert not node.exists(MARKER)
    assert len(asides(node)) == 1
    # releases were lost: the pass that set the file aside says so, though it could clear the marker at once
    assert condition(result, "KubernetesReleasesUnreadable")["reason"] == "ReleasesFileUnreadable"
    assert any(warning.startswith("/var/lib/bcd/releasing.json is unreadable (") and
               warning.endswith("): it is set aside, never deleted; the Kubernetes releases it held cannot be "
                                "reported") for warning in result.plan.warnings), result.plan.warnings
    # it appeared and cleared in that pass: the next pass has nothing left to say
    journaled = [event["type"] for event in journal(node)[-2:]]
    assert journaled == ["KubernetesReleasesUnreadable", "KubernetesReleasesUnreadableCleared"]
    again = node.run(2, [K1])
    assert condition(again, "KubernetesReleasesUnreadable") is None
    assert steps(again) == [] and again.changed is False


def test_an_unreadable_file_in_check_mode_is_left_where_it_is(node):
    node.run(1, [])
    pods(node, GPU_C)
    node.write(RELEASES, "{ bad")
    before = node.listing()
    result = node.run(2, [hold("a1", GPU_B)], check_mode=True)
    assert node.listing() == before
    assert steps(result)[0] == ("quarantine-releases", "")
    assert [f.reason for f in result.plan.failures] == ["overlap"]


def test_a_second_unreadable_file_in_the_same_second_does_not_replace_the_first(node, monkeypatch):
    monkeypatch.setattr(_converge, "time", types.SimpleNamespace(time=lambda: 1767225600.0))  # one fixed second
    pods(node, GPU_C)
    node.run(1, [])
    node.write(RELEASES, "first damaged file")
    node.run(2, [])
    node.write(RELEASES, "second damaged file")
    node.run(3, [])
    kept = sorted(node.read(node.state_dir + "/" + name) for name in asides(node))
    assert kept == [b"first damaged file", b"second damaged file"]  # kept, never deleted


# --- what an operator sees -----------------------------------------------------------------------------------------------


def info(capsys, node):
    with patch_module_args({"root": node.root, "fakehw": node.fakehw}):
        with pytest.raises(SystemExit):
            holds_info.main()
    out, _unused = capsys.readouterr()
    return json.loads(out)


def status(capsys, node, *extra):
    code = _cli.main(["status", "--root", node.root, "--fakehw", node.fakehw] + list(extra))
    out, _unused = capsys.readouterr()
    assert code == 0
    return out


def test_holds_info_and_bcd_holds_status_show_pending_releases_with_their_age(bound, capsys):
    node = bound
    node.run(2, [K1, kube("k2", GPU_B)])
    node.run(3, [])
    set_since(node, "k1", 10 * 60)
    result = info(capsys, node)
    pending = dict((p["allocation_id"], p) for p in result["pending_releases"])
    assert sorted(pending) == ["k1"]  # k2 had no pod: it was reported at once
    assert pending["k1"]["device_ids"] == [GPU_A]
    assert pending["k1"]["generation"] == 3
    assert 600 <= pending["k1"]["age_seconds"] <= 660
    stuck = condition(result["conditions"], "KubernetesReleaseStuck")
    assert stuck["reason"] == "PodsHoldDevices"
    text = status(capsys, node)
    assert re.search(r"pending Kubernetes releases: k1 \(6\d\ds\)", text)
    assert "KubernetesReleaseStuck (PodsHoldDevices)" in text
    as_json = json.loads(status(capsys, node, "--json"))
    assert [p["allocation_id"] for p in as_json["pending_releases"]] == ["k1"]
    assert [c["type"] for c in as_json["conditions"]] == ["KubernetesReleaseStuck"]


def test_holds_info_and_bcd_holds_status_show_an_unreadable_releases_file(node, capsys):
    pods(node, GPU_C)
    node.run(1, [])
    node.write(RELEASES, "{ bad")
    node.run(2, [])
    result = info(capsys, node)
    unreadable = condition(result["conditions"], "KubernetesReleasesUnreadable")
    assert unreadable["reason"] == "ReleasesFileUnreadable"
    text = status(capsys, node)
    assert "KubernetesReleasesUnreadable (ReleasesFileUnreadable)" in text
    assert "pending Kubernetes releases: none" in text


def test_nothing_pending_shows_nothing(node, capsys):
    node.run(1, [K1])
    result = info(capsys, node)
    assert result["pending_releases"] == []
    assert result["conditions"] == []
    text = status(capsys, node)
    assert "pending Kubernetes releases: none" in text
    assert "conditions: none" in text


# --- crash safety -------------------------------------------------------------------------------------------------------


def crash_at(monkeypatch, owner, name, at, after):
    """``owner.name`` raises KeyboardInterrupt on its ``at``-th call, before or after doing its work, once."""
    real = getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] - 1 == at and not after:
            raise KeyboardInterrupt()
        result = real(*args, **kwargs)
        if calls[0] - 1 == at and after:
            raise KeyboardInterrupt()
        return result

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def assert_released_once_and_nothing_left(node, generation=2):
    events = released(node)
    assert len(events) == 1, [e["seq"] for e in events]
    assert events[0]["body"]["generation"] == 2
    assert events[0]["body"]["device_ids"] == [GPU_A]
    assert hold_files(node) == []
    assert not node.exists(RELEASES)
    assert not node.exists(MARKER)
    result = node.run(generation, [])
    assert result.changed is False
    assert result.plan.pending_releases == []
    assert len(released(node)) == 1


def owners():
    return {"save_releases": (_store, "save_releases"), "remove": (DirectWriter, "remove_node_file"),
            "append": (Journal, "append_many"), "ledger": (NodeState, "_save_ledger")}


BOTH = [False, True]
# A release no pod holds: record, remove the spec, remove the env file, journal (the pass's one append), drop
# the record, the pass's ledger.
AT_ONCE = [("save_releases", 0), ("remove", 0), ("remove", 1), ("append", 0), ("save_releases", 1), ("ledger", 0)]
# A release a pod holds: record, remove the spec, remove the env file, the pass's ledger.
WAITING = [("save_releases", 0), ("remove", 0), ("remove", 1), ("ledger", 0)]
# The pod goes: journal, drop the record, the pass's ledger.
REPORTING = [("append", 0), ("save_releases", 0), ("ledger", 0)]


def ids(cases):
    return ["%s%d-%s" % (name, at, "after" if after else "before") for name, at in cases for after in BOTH]


def cases(points):
    return [(name, at, after) for name, at in points for after in BOTH]


@pytest.mark.parametrize("name, at, after", cases(AT_ONCE), ids=ids(AT_ONCE))
def test_a_pass_killed_while_releasing_at_once_loses_nothing(node, monkeypatch, name, at, after):
    node.run(1, [K1])
    owner, attribute = owners()[name]
    crash_at(monkeypatch, owner, attribute, at, after)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, [])
    monkeypatch.undo()
    node.run(2, [])
    assert_released_once_and_nothing_left(node)


@pytest.mark.parametrize("name, at, after", cases(WAITING), ids=ids(WAITING))
def test_a_pass_killed_while_recording_a_release_pods_hold_loses_nothing(bound, monkeypatch, name, at, after):
    node = bound
    owner, attribute = owners()[name]
    crash_at(monkeypatch, owner, attribute, at, after)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, [])
    monkeypatch.undo()
    # the pod still holds GPU_A: the next pass finishes the withdrawal and waits
    waiting = node.run(2, [])
    assert waiting.section["state"] == "CONVERGED"
    assert hold_files(node) == []
    assert list(releases_file(node)["releases"]) == ["k1"]
    assert released(node) == []
    # and a GPU claimed by the pending release stays claimed
    assert [f.reason for f in node.run(3, [hold("a2", GPU_A)]).plan.failures] == ["overlap"]
    pods(node)
    node.run(4, [])
    assert_released_once_and_nothing_left(node, 4)


@pytest.mark.parametrize("name, at, after", cases(REPORTING), ids=ids(REPORTING))
def test_a_pass_killed_while_reporting_a_release_reports_it_once(bound, monkeypatch, name, at, after):
    node = bound
    node.run(2, [])
    pods(node)
    owner, attribute = owners()[name]
    crash_at(monkeypatch, owner, attribute, at, after)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, [])
    monkeypatch.undo()
    node.run(2, [])
    assert_released_once_and_nothing_left(node)


def test_a_kubernetes_hold_moved_to_other_devices_keeps_its_old_ones_claimed_and_is_never_reported_released(node):
    node.run(1, [K1])
    pods(node, GPU_A)
    moved = node.run(2, [kube("k1", GPU_B)])
    assert steps(moved) == [("release-kube", "k1"), ("bind", "k1")]
    assert "its old devices stay claimed until free (held by default/train-0 (main)), never reported" \
        in moved.plan.actions[0].text
    assert [(r["device_ids"], r["taken_back"]) for r in moved.plan.pending_releases] == [([GPU_A], True)]
    taken = node.run(3, [kube("k1", GPU_B), hold("p1", GPU_A)])
    assert [(f.allocation_id, f.message) for f in taken.plan.failures] == [("p1", "%s is assigned to k1" % GPU_A)]
    pods(node)
    freed = node.run(4, [kube("k1", GPU_B)])
    assert steps(freed) == [("drop-release", "k1")]
    assert released(node) == []  # k1 is live: never reported released
    again = node.run(4, [kube("k1", GPU_B)])
    assert steps(again) == []
    assert hold_files(node) == ["/etc/cdi/bcd-k1.json", "/run/bcd/allocations/k1.env"]


def test_a_moved_kubernetes_hold_whose_old_devices_are_free_is_withdrawn_unreported(node):
    node.run(1, [K1])
    pods(node)
    moved = node.run(2, [kube("k1", GPU_B)])
    assert steps(moved) == [("withdraw", "k1"), ("bind", "k1")]
    assert moved.plan.pending_releases == []
    assert released(node) == []


def test_a_release_taken_back_on_other_devices_is_never_reported_and_its_old_devices_stay_claimed(bound):
    node = bound  # k1 on GPU_A, its pod still running
    node.run(2, [])
    result = node.run(3, [kube("k1", GPU_B), hold("p1", GPU_A)])
    assert steps(result)[0] == ("take-back-release", "k1")
    assert [(f.allocation_id, f.message) for f in result.plan.failures] == [("p1", "%s is assigned to k1" % GPU_A)]
    assert releases_file(node)["releases"]["k1"]["taken_back"] is True
    pods(node)
    freed = node.run(4, [kube("k1", GPU_B), hold("p1", GPU_A)])
    assert steps(freed) == [("drop-release", "k1"), ("bind", "p1")]
    assert released(node) == []
    assert not node.exists(RELEASES)


def test_a_release_taken_back_as_a_plain_hold_on_the_same_gpu_binds_and_is_never_reported(bound):
    node = bound
    node.run(2, [])
    result = node.run(3, [hold("k1", GPU_A)])
    assert steps(result) == [("drop-release", "k1"), ("bind", "k1")]  # never in conflict with itself
    assert result.plan.failures == []
    assert released(node) == []


def test_the_unreadable_marker_clears_while_a_pod_uses_a_mig_instance_of_a_known_hold(node):
    node.run(1, [kube("k2", MIG)])
    node.write(RELEASES, "{not json")
    pods(node, MIG_A1)  # the kube side reports the MIG device (and so its parent GPU) as held
    result = node.run(2, [kube("k2", MIG)])
    assert ("clear-marker", "") in steps(result)
    assert not node.exists(MARKER)

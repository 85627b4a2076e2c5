# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``NodeState.change``, the one way the state changes: the queued reports journaled first, then the
block, then the pending releases and the ledger saved where they changed; a block that raises saves
nothing, and a crash between any two steps leaves a state the next ``load`` converges."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import UnfinishedRelease
from ansible_collections.bcd.devices.plugins.module_utils.state import store as _store
from ansible_collections.bcd.devices.plugins.module_utils.state.events import EventsError, Journal
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"


class Crash(BaseException):
    """A process killed between two writes (not an Exception: nothing may catch it)."""


def body(allocation_id, generation=2):
    return {"allocation_id": allocation_id, "generation": generation, "device_ids": [GPU]}


def released(allocation_id, generation=2):
    return {"type": "AllocationReleased", "body": body(allocation_id, generation)}


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "state")


def opened(path):
    state = NodeState(path, "/var/lib/bcd")
    with state.lock(5):
        state.load()
    return state


def ledger_file(path):
    with open(os.path.join(path, "ledger.json")) as handle:
        return json.load(handle)


def releases_file(path):
    name = os.path.join(path, "releasing.json")
    if not os.path.exists(name):
        return None
    with open(name) as handle:
        return sorted(json.load(handle)["releases"])


def journaled(path):
    return [(event["type"], event["body"]["allocation_id"]) for event in Journal(path, "/var/lib/bcd").unacked()]


def with_pending(path, allocation_id="k1"):
    """A state whose Kubernetes release of ``allocation_id`` (generation 2) is recorded and not reported."""
    state = opened(path)
    state.record_kube_release(PendingRelease(allocation_id, [GPU], 2, 1.0e9))
    return state


def recorded_writes(monkeypatch):
    """Every state write in order: the journal's append, the releases' save, the ledger's."""
    calls = []
    for owner, name, label in ((Journal, "append_many", "journal"), (_store, "save_releases", "releases"),
                               (NodeState, "_save_ledger", "ledger")):
        real = getattr(owner, name)

        def wrapper(*args, _real=real, _label=label, **kwargs):
            calls.append(_label)
            return _real(*args, **kwargs)
        monkeypatch.setattr(owner, name, wrapper)
    return calls


def test_a_change_journals_first_then_saves_the_releases_then_the_ledger(path, monkeypatch):
    state = with_pending(path)
    calls = recorded_writes(monkeypatch)
    state.report(released("k1"))
    with state.change() as change:
        assert journaled(path) == [("AllocationReleased", "k1")]  # journaled before the block runs
        assert change.journaled[0]["type"] == "AllocationReleased"
        assert "k1" not in change.releases.pending  # and settled in memory
        assert releases_file(path) == ["k1"]  # nothing saved yet
        change.ledger.unfinished_releases["p1"] = UnfinishedRelease(2, (GPU,))
    assert calls == ["journal", "releases", "ledger"]
    assert releases_file(path) is None
    assert ledger_file(path)["unfinished_releases"] == {"p1": {"generation": 2, "device_ids": [GPU]}}
    assert ledger_file(path)["journal_seq"] == 1


def test_a_change_that_changes_nothing_writes_nothing(path, monkeypatch):
    state = with_pending(path)
    state.set_hold_limits("a1", {"cpus": "0"})  # a hold the ledger does not have: no change
    stamp = os.stat(os.path.join(path, "ledger.json")).st_mtime_ns
    calls = recorded_writes(monkeypatch)
    with state.change():
        pass
    state.drop_kube_release("nobody")
    assert calls == ["ledger", "ledger"]  # asked, and it found the file as it is
    assert os.stat(os.path.join(path, "ledger.json")).st_mtime_ns == stamp
    assert releases_file(path) == ["k1"]


def test_a_block_that_raises_saves_nothing(path):
    state = with_pending(path)
    before = ledger_file(path)
    with pytest.raises(ValueError):
        with state.change() as change:
            change.releases.pending.pop("k1")
            change.ledger.unfinished_releases["p1"] = UnfinishedRelease(2, (GPU,))
            raise ValueError("the removal failed")
    assert releases_file(path) == ["k1"] and ledger_file(path) == before


def test_a_journal_that_cannot_be_written_runs_no_block_and_the_reports_are_made_again(path, monkeypatch):
    state = with_pending(path)

    def refuse(*_args, **_kwargs):
        raise EventsError("No space left on device")
    monkeypatch.setattr(Journal, "append_many", refuse)
    state.report(released("k1"))
    ran = []
    with pytest.raises(EventsError):
        with state.change():
            ran.append(True)
    monkeypatch.undo()
    assert ran == [] and journaled(path) == [] and releases_file(path) == ["k1"]
    assert state.flush() == []  # the report is not queued twice: the next pass makes it again


@pytest.mark.parametrize("point", ["releases", "ledger"])
def test_a_crash_between_the_journal_and_the_saves_is_converged_by_the_next_load(path, monkeypatch, point):
    state = with_pending(path)
    owner, name = (_store, "save_releases") if point == "releases" else (NodeState, "_save_ledger")

    def crash(*args, **kwargs):
        raise Crash()
    monkeypatch.setattr(owner, name, crash)
    state.report(released("k1"))
    with pytest.raises(Crash):
        state.flush()
    monkeypatch.undo()
    assert journaled(path) == [("AllocationReleased", "k1")]
    # the next pass: the journal says k1 is released, so its record goes and it is never reported again
    again = opened(path)
    assert again.releases.pending == {}
    assert releases_file(path) is None and ledger_file(path)["journal_seq"] == 1
    assert again.flush() == [] and journaled(path) == [("AllocationReleased", "k1")]
    stamp = os.stat(os.path.join(path, "ledger.json")).st_mtime_ns
    opened(path)
    assert os.stat(os.path.join(path, "ledger.json")).st_mtime_ns == stamp  # converged: a third load writes nothing


def test_a_crash_before_the_journal_loses_only_the_report_and_keeps_the_record(path, monkeypatch):
    state = with_pending(path)

    def crash(*_args, **_kwargs):
        raise Crash()
    monkeypatch.setattr(Journal, "append_many", crash)
    state.report(released("k1"))
    with pytest.raises(Crash):
        state.flush()
    monkeypatch.undo()
    again = opened(path)
    assert list(again.releases.pending) == ["k1"] and journaled(path) == []  # still pending: reported next pass


def test_a_plain_release_is_recorded_before_anything_else_and_settled_by_its_report(path):
    state = opened(path)
    state.begin_releases([("p1", 2, [GPU])])
    assert ledger_file(path)["unfinished_releases"] == {"p1": {"generation": 2, "device_ids": [GPU]}}
    state.report(released("p1"))
    state.flush(save=False)
    assert ledger_file(path)["unfinished_releases"] != {}  # left to the pass's end ...
    state.finish(2, "CONVERGED", {}, (), True)
    data = ledger_file(path)  # ... which saves it with the rest
    assert data["unfinished_releases"] == {} and data["observed_generation"] == 2 and data["last_state"] == "CONVERGED"


@pytest.mark.parametrize("hostile", [
    {"allocation_id": ["k1"], "generation": 1, "device_ids": [GPU]},        # a list as a key: a traceback
    {"allocation_id": 7, "generation": 1, "device_ids": [GPU]},             # an int among str keys: a failed sort
    {"allocation_id": "k1", "generation": "1", "device_ids": [GPU]},
    {"allocation_id": "k1", "generation": 1, "device_ids": [GPU, {"a": 1}]},
    {"allocation_id": "../k1", "generation": 1, "device_ids": [GPU]},
    {"allocation_id": "k1", "generation": 1, "device_ids": [GPU], "reason": ["overlap"]},
])
@pytest.mark.parametrize("event_type", ["AllocationBound", "AllocationReleased", "AllocationFailed"])
def test_a_journaled_event_the_pass_never_wrote_is_passed_over_when_the_ledger_replays(path, hostile, event_type):
    """Found by make fuzz (seed 1028612149, events.jsonl): the journal is the account's file, and the events
    a crash kept from being recorded are replayed into the ledger from it. Such an event of another shape
    ended root's pass in a traceback, or in 200 MB of ledger; it now changes nothing."""
    opened(path)
    with open(os.path.join(path, "events.jsonl"), "a") as handle:  # as a crash after the journal leaves it
        handle.write(json.dumps({"seq": 1, "type": "AllocationBound", "body": body("k2", 1)}) + "\n")
        handle.write(json.dumps({"seq": 2, "type": event_type, "body": hostile}) + "\n")
    again = opened(path)
    assert sorted(again.ledger.bound) == ["k2"] and again.ledger.failures == {}
    assert list(ledger_file(path)["bound"]) == ["k2"]
    assert again.flush() == []

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""domain/plan/actions/ and apply.py on their own: each step is a frozen value, and ``apply_plan`` carries a plan out in the
order the crash rules need (releases recorded before anything is touched, files before the report, every
directory durable before the journal), holds up a failed allocation's later steps, and never applies a bind
whose needed release failed: one atom is never in two live specs. A recording writer and state stand in for
the node, so the order of every call is what is asserted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.support import records
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Bind, FileChange, Release
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.apply import apply_plan
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"


class Recorder:
    """The writer and the state at once: every call in one list, and the failures asked for."""

    def __init__(self, fail=()):
        self.calls = []
        self.fail = set(fail)

    def _call(self, *call):
        self.calls.append(call)
        if call in self.fail or call[:1] in self.fail:
            raise OSError(30, "Read-only file system")

    # writer
    def batch(self):
        self._call("batch")

    def flush(self, save=True):
        self._call("flush" if save else "journal")

    def write_node_file(self, kind, allocation_id, _content, _hold, path=None):
        assert path == "/%s/%s" % (kind, allocation_id)  # the planner's path, handed on
        self._call("write", kind, allocation_id)

    def remove_node_file(self, kind, allocation_id, path=None):
        assert path == "/%s/%s" % (kind, allocation_id)
        self._call("remove", kind, allocation_id)

    # state
    def begin_releases(self, releases):
        self._call("record", tuple(r[0] for r in releases))

    def report(self, event, _limits=None):
        self._call("report", event["type"], event["body"]["allocation_id"])


def event(kind, allocation_id):
    return {"type": kind, "body": {"allocation_id": allocation_id}}


def files(allocation_id, remove=False):
    return tuple(FileChange(kind, "/%s/%s" % (kind, allocation_id), b"old" if remove else None,
                            None if remove else b"new") for kind in ("cdi", "allocation-env"))


def release(allocation_id):
    return Release(allocation_id, files(allocation_id, remove=True), event("AllocationReleased", allocation_id), (GPU,), 1,
                   "no longer wanted")


def bind(allocation_id, needs=()):
    return Bind(allocation_id, files(allocation_id), event("AllocationBound", allocation_id), (GPU,), 2, None,
                waits_for=tuple(needs))


def plan(*actions):
    return SimpleNamespace(actions=list(actions))


def test_a_move_records_the_release_removes_before_it_binds_and_journals_last():
    """The release is recorded once, with the plan's others, before anything is touched."""
    node = Recorder()
    done, errors, changed = apply_plan(plan(release("old"), bind("new", needs=["old"])), node, node)
    assert errors == [] and [a.allocation_id for a in done] == ["old", "new"] and changed is True
    assert node.calls == [
        ("record", ("old",)), ("batch",),
        ("remove", "cdi", "old"), ("remove", "allocation-env", "old"),
        ("report", "AllocationReleased", "old"),
        ("write", "cdi", "new"), ("write", "allocation-env", "new"), ("report", "AllocationBound", "new"),
        ("flush",), ("journal",)]


def test_a_bind_whose_release_failed_is_not_applied_and_is_retried():
    node = Recorder(fail=[("remove", "cdi", "old")])
    done, errors, _changed = apply_plan(plan(release("old"), bind("new", needs=["old"]), bind("other")), node, node)
    assert [a.allocation_id for a in done] == ["other"]
    assert errors == ["old: cannot remove /cdi/old: Read-only file system",
                      "new: waits for the release of old, which failed; retried next pass"]
    assert not [call for call in node.calls if call[-1] == "new"]  # not a file written, not a report
    assert ("report", "AllocationReleased", "old") not in node.calls


def test_a_failed_step_holds_up_its_allocations_later_steps_only():
    node = Recorder(fail=[("write", "allocation-env", "a1")])
    done, errors, _changed = apply_plan(plan(bind("a1"), bind("a2")), node, node)
    assert [a.allocation_id for a in done] == ["a2"]
    assert errors == ["a1: cannot write /allocation-env/a1: Read-only file system"]
    assert ("report", "AllocationBound", "a1") not in node.calls  # its spec alone is not a hold


def test_nothing_is_touched_when_the_releases_cannot_be_recorded():
    node = Recorder(fail=[("record",)])
    done, errors, changed = apply_plan(plan(release("old"), bind("new")), node, node)
    assert done == [] and errors[0].startswith("cannot record this pass's releases") and changed is False
    assert node.calls == [("record", ("old",))]


def test_a_journal_that_cannot_be_written_is_a_retryable_error_after_the_files():
    class JournalDown(Recorder):
        def flush(self, save=True):
            if not save:
                raise RetryableError("cannot journal: disk full")
            super().flush(save)

    node = JournalDown()
    done, errors, _changed = apply_plan(plan(bind("a1")), node, node)
    assert [a.allocation_id for a in done] == ["a1"]
    assert errors == ["cannot journal this pass's events: cannot journal: disk full"]


def env_first(allocation_id):
    """A bind's files as the planner orders them: the env file, then the spec that makes the hold live."""
    return tuple(reversed(files(allocation_id)))


def test_a_bind_whose_spec_cannot_be_written_removes_the_env_file_it_wrote():
    node = Recorder(fail=[("write", "cdi", "a1")])
    step = Bind("a1", env_first("a1"), event("AllocationBound", "a1"), (GPU,), 2, None)
    done, errors, changed = apply_plan(plan(step), node, node)
    assert done == [] and errors == ["a1: cannot write /cdi/a1: Read-only file system"]
    assert node.calls[2:] == [("write", "allocation-env", "a1"), ("write", "cdi", "a1"),
                              ("remove", "allocation-env", "a1"), ("flush",), ("journal",)]
    assert changed is True  # an env file was written (and removed): the node was touched


def test_changed_counts_what_a_failed_step_did_before_it_failed():
    # the release removed the spec, then its env file could not be removed: the node changed all the same
    node = Recorder(fail=[("remove", "allocation-env", "old")])
    done, errors, changed = apply_plan(plan(release("old")), node, node)
    assert done == [] and errors == ["old: cannot remove /allocation-env/old: Read-only file system"]
    assert ("remove", "cdi", "old") in node.calls and changed is True
    # a step that failed at its first call changed nothing
    node = Recorder(fail=[("write", "allocation-env", "a1")])
    step = Bind("a1", env_first("a1"), event("AllocationBound", "a1"), (GPU,), 2, None)
    done, errors, changed = apply_plan(plan(step), node, node)
    assert done == [] and changed is False


def test_a_step_is_a_frozen_value_carrying_only_its_own_fields():
    step = bind("a1", needs=["old"])
    with pytest.raises(records.FrozenInstanceError):
        step.text = "patched"  # type: ignore[misc]
    assert step.to_dict() == {
        "action": "bind", "allocation_id": "a1", "text": "bind a1: bcd.dev/gpu=%s -> /cdi/a1, /allocation-env/a1" % GPU,
        "device_ids": [GPU],
        "files": [{"path": "/cdi/a1", "change": "create"}, {"path": "/allocation-env/a1", "change": "create"}],
        "event": "AllocationBound", "needs": ["old"]}
    assert "needs" not in release("old").to_dict() and not hasattr(release("old"), "waits_for")

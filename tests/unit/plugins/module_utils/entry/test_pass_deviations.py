# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The four ways a pass strayed from the spec page (issue 33, "The pass, against the spec page"), each
reproduced through ``entry.converge.run_pass`` (the module's pass) on a fakehw node and asserted by what
a user sees: the files on the node, ``changed``, refusals and events.

1. A hold bound again into its own running slice (moved to other GPUs, or bound again after a release)
   is admitted once: the slice's limits are replaced by the new hold's, not counted twice.
2. An env file whose bind did not finish does not outlive it: the failed bind removes it, and a pass
   that finds an env file with no live spec (a pass died in between) removes it, its GPUs claimed until
   then.
3. A fixed input at a generation left ``PROGRESSING`` never gets a refusal made for the input it
   replaces: an allocation refused at that generation and sent with another assignment fails the pass
   before anything is written, as after a finished generation.
4. ``changed`` is true whenever the pass changed the node, also when an action failed half-way.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import TransientSliceError
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import PassError, run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter, HelperWriter
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.plan.test_admission import write_memory
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.test_kube import (  # noqa: F401  # pylint: disable=unused-import
    helper_for,
)

GIB = 1 << 30
MIB = 1 << 20
SLICE = "bcd-alloc-a1.slice"


def events(node, event_type=None, allocation_id=None):
    return [(e["type"], e["body"]["allocation_id"], e["body"].get("generation"), e["body"].get("device_ids"))
            for e in Journal(node.state()).unacked()
            if (event_type is None or e["type"] == event_type)
            and (allocation_id is None or e["body"]["allocation_id"] == allocation_id)]


def steps(result):
    return [(a.kind, a.allocation_id) for a in result.plan.actions]


def failures(result):
    return dict((f.allocation_id, (f.reason, f.message)) for f in result.plan.failures)


def slice_record(node, name=SLICE):
    content = node.read("/run/bcd/slices/%s.json" % name)
    return None if content is None else json.loads(content)


def run_workload(node, name=SLICE, **use):
    """A workload in the slice, as the host shows it: populated, using ``use`` (memory_current, hugetlb_current)."""
    data = slice_record(node, name)
    data["populated"] = True
    data.update(use)
    node.write("/run/bcd/slices/%s.json" % name, json.dumps(data))


def env_names(node):
    """The GPUs each env file on the node names in NVIDIA_VISIBLE_DEVICES."""
    found = {}
    directory = node.path("/run/bcd/allocations")
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        for line in node.read("/run/bcd/allocations/" + name).decode().splitlines():
            if line.startswith("NVIDIA_VISIBLE_DEVICES="):
                found[name] = line.split("=", 1)[1]
    return found


def spec_devices(node, allocation_id):
    content = node.read("/etc/cdi/bcd-%s.json" % allocation_id)
    return None if content is None else sorted(d["name"] for d in json.loads(content)["devices"])


# --- 1. a hold bound again into its own running slice is admitted once ---------------------------------------

# 16 GiB of memory: 15 360 MiB for holds once the host's 1 GiB of headroom is kept.
EIGHT = {"memory_bytes": 8 * GIB}


def test_a_hold_moved_while_its_slice_runs_a_workload_is_admitted_once(node):
    write_memory(node, 16 * GIB)
    node.run(1, [hold("a1", GPU_A, limits=EIGHT)])
    run_workload(node, memory_current=GIB)
    moved = node.run(2, [hold("a1", GPU_B, limits=EIGHT)])
    assert failures(moved) == {}  # was: "8192 MiB of memory needed, 7168 MiB left on this host"
    assert moved.section["state"] == "CONVERGED"
    assert steps(moved) == [("release", "a1"), ("bind", "a1")]
    assert moved.changed is True
    assert spec_devices(node, "a1") == ["GPU-5f1c2a90-0000-4000-8000-000000000002"]
    assert env_names(node) == {"a1.env": GPU_B}
    kept = slice_record(node)
    assert kept["populated"] is True and kept["properties"]["MemoryMax"] == str(8 * GIB)  # the workload ran on
    assert events(node, allocation_id="a1")[1:] == [("AllocationReleased", "a1", 2, [GPU_A]),
                                                    ("AllocationBound", "a1", 2, [GPU_B])]
    assert node.run(2, [hold("a1", GPU_B, limits=EIGHT)]).changed is False


def test_a_hold_bound_again_after_its_release_into_its_running_slice_is_admitted_once(node):
    write_memory(node, 16 * GIB)
    node.run(1, [hold("a1", GPU_A, limits=EIGHT)])
    run_workload(node, memory_current=GIB)
    released = node.run(2, [])
    assert slice_record(node)["populated"] is True  # the release keeps the slice its workload runs in
    again = node.run(3, [hold("a1", GPU_B, limits=EIGHT)])
    assert failures(again) == {}
    assert steps(again) == [("bind", "a1")]
    assert "in %s" % SLICE in again.plan.actions[0].text
    assert spec_devices(node, "a1") == ["GPU-5f1c2a90-0000-4000-8000-000000000002"]
    assert released.changed is True and again.changed is True


def test_the_running_slice_is_still_counted_once_against_every_other_hold(node):
    # admitted once, not zero times: the 8 GiB the slice has are not given to a2 as well
    write_memory(node, 16 * GIB)
    node.run(1, [hold("a1", GPU_A, limits=EIGHT)])
    run_workload(node, memory_current=GIB)
    result = node.run(2, [hold("a1", GPU_B, limits=EIGHT), hold("a2", GPU_C, limits=EIGHT)])
    assert failures(result) == {
        "a2": ("resources-exhausted", "ResourcesExhausted: 8192 MiB of memory needed, 7168 MiB left on this host")}
    assert spec_devices(node, "a1") == ["GPU-5f1c2a90-0000-4000-8000-000000000002"]


def test_a_hold_that_shrinks_into_its_running_slice_keeps_what_the_slice_has_until_it_is_set(node):
    # a1 moves with 4 GiB while its slice has 8: until the pass has set the slice, it may keep 8, so a hold
    # after it in the same pass gets what 8 leave (as for a kept hold whose limits shrink)
    write_memory(node, 16 * GIB)
    node.run(1, [hold("a1", GPU_A, limits=EIGHT)])
    run_workload(node, memory_current=GIB)
    result = node.run(2, [hold("a1", GPU_B, limits={"memory_bytes": 4 * GIB}),
                          hold("a2", GPU_C, limits={"memory_bytes": 8 * GIB})])
    assert failures(result)["a2"][1] == "ResourcesExhausted: 8192 MiB of memory needed, 7168 MiB left on this host"
    assert slice_record(node)["properties"]["MemoryMax"] == str(4 * GIB)
    later = node.run(3, [hold("a1", GPU_B, limits={"memory_bytes": 4 * GIB}),
                         hold("a2", GPU_C, limits={"memory_bytes": 8 * GIB})])
    assert failures(later) == {}


def test_huge_pages_of_a_hold_moved_while_its_slice_runs_are_admitted_once(node):
    # 4 pages of 1 GiB; a1 booked 3, and its workload faulted in 2 of them: 2 are free
    write_memory(node, 16 * GIB, hugetlb=4 * GIB, pages={"1GB": (4, 0), "2MB": (0, 0)})
    node.run(1, [hold("a1", GPU_A, limits={"hugepages_1gi": 3})])
    run_workload(node, hugetlb_current={"1GB": 2 * GIB})
    write_memory(node, 16 * GIB, hugetlb=4 * GIB, pages={"1GB": (2, 0), "2MB": (0, 0)})
    moved = node.run(2, [hold("a1", GPU_B, limits={"hugepages_1gi": 3}), hold("a2", GPU_C, limits={"hugepages_1gi": 2})])
    # a1 needs the one page it has not faulted in yet; a2's two are more than the one left after it
    assert failures(moved) == {"a2": ("resources-exhausted", "ResourcesExhausted: 2 hugepages of 1048576 KiB needed, 1 free")}
    assert spec_devices(node, "a1") == ["GPU-5f1c2a90-0000-4000-8000-000000000002"]
    assert slice_record(node)["hugetlb_max"]["1GB"] == 3 * GIB


@pytest.mark.parametrize("limits, words", [
    ({"cpus": "0-3", "memory_bytes": 512 * MIB}, "leaves no headroom over the slice's current use %d" % GIB),
], ids=["headroom"])
def test_a_hold_bound_again_into_its_running_slice_never_takes_from_its_workload(node, limits, words):
    # admitted once, and still held to the never-kill rules: a bind into a running slice is retried until
    # its workload leaves it room, and the slice keeps what it has meanwhile (cpus or mems that narrow it are
    # refused when the pass is planned instead: test_pass_truth.py, issue 46)
    write_memory(node, 16 * GIB)
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3", "memory_bytes": 8 * GIB})])
    run_workload(node, memory_current=GIB)
    node.run(2, [])
    before = slice_record(node)
    result = node.run(3, [hold("a1", GPU_B, limits=limits)])
    assert failures(result) == {}
    assert result.section["state"] == "PROGRESSING"
    assert words in result.section["message"]
    assert slice_record(node) == before
    assert not node.exists("/etc/cdi/bcd-a1.json") and not node.exists("/run/bcd/allocations/a1.env")
    run_workload(node, populated=False)  # the workload exits: the same input binds
    done = node.run(3, [hold("a1", GPU_B, limits=limits)])
    assert done.section["state"] == "CONVERGED"
    assert spec_devices(node, "a1") == ["GPU-5f1c2a90-0000-4000-8000-000000000002"]


# --- 2. an env file whose bind did not finish --------------------------------------------------------------------


def failing_spec_write(monkeypatch, exc=None):
    real = DirectWriter.write_node_file

    def write(self, kind, allocation_id, content, hold=None, path=None):
        if kind == "cdi":
            raise exc if exc is not None else OSError(errno.ENOSPC, "No space left on device")
        return real(self, kind, allocation_id, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "write_node_file", write)


def test_a_bind_whose_spec_cannot_be_written_removes_its_env_file(node, monkeypatch):
    failing_spec_write(monkeypatch)
    failed = node.run(1, [hold("a1", GPU_A)])
    assert failed.section["state"] == "PROGRESSING"
    assert "No space left on device" in failed.section["message"]
    assert not node.exists("/run/bcd/allocations/a1.env")  # was: left naming GPU_A for good
    assert not node.exists("/etc/cdi/bcd-a1.json")
    monkeypatch.undo()
    dropped = node.run(2, [hold("a2", GPU_A)])  # the allocation is dropped; another takes its GPU
    assert dropped.section["state"] == "CONVERGED"
    assert env_names(node) == {"a2.env": GPU_A}
    assert [e[:2] for e in events(node)] == [("AllocationBound", "a2")]


class Died(BaseException):
    """The pass dies (killed, the machine stops) between two writes."""


def test_a_pass_removes_the_env_file_a_pass_that_died_mid_bind_left(node, monkeypatch):
    failing_spec_write(monkeypatch, Died())
    with pytest.raises(Died):
        node.run(1, [hold("a1", GPU_A)])
    monkeypatch.undo()
    assert env_names(node) == {"a1.env": GPU_A}  # what the dead pass left: an env file, no spec
    checked = node.run(2, [hold("a2", GPU_A)], check_mode=True)
    assert checked.changed is True
    result = node.run(2, [hold("a2", GPU_A)])
    assert steps(result) == steps(checked) == [("remove-env", "a1"), ("bind", "a2")]
    assert result.plan.actions[0].text == (
        "remove /run/bcd/allocations/a1.env: a1 has no live spec (a bind that never finished)")
    assert result.plan.actions[1].needs == ("a1",)  # its GPU is a1's until the file is gone
    assert result.changed is True and result.section["state"] == "CONVERGED"
    assert env_names(node) == {"a2.env": GPU_A}  # was: a1.env and a2.env both naming GPU_A, CONVERGED, unchanged
    assert [e[:2] for e in events(node)] == [("AllocationBound", "a2")]  # a1 was never reported: nothing to report
    assert node.run(2, [hold("a2", GPU_A)]).changed is False


def test_a_stale_env_file_that_cannot_be_removed_holds_up_the_bind_on_its_gpu(node, monkeypatch):
    failing_spec_write(monkeypatch, Died())
    with pytest.raises(Died):
        node.run(1, [hold("a1", GPU_A)])
    monkeypatch.undo()
    real = DirectWriter.remove_node_file

    def busy(self, kind, allocation_id, path=None):
        if allocation_id == "a1":
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(self, kind, allocation_id, path=path)

    monkeypatch.setattr(DirectWriter, "remove_node_file", busy)
    result = node.run(2, [hold("a2", GPU_A), hold("a3", GPU_B)])
    assert result.section["state"] == "PROGRESSING"
    assert "a2: waits for the release of a1" in result.section["message"]
    assert env_names(node) == {"a1.env": GPU_A, "a3.env": GPU_B}  # never two env files naming one GPU
    monkeypatch.undo()
    done = node.run(2, [hold("a2", GPU_A), hold("a3", GPU_B)])
    assert done.section["state"] == "CONVERGED"
    assert env_names(node) == {"a2.env": GPU_A, "a3.env": GPU_B}


def test_through_the_root_helper_the_stale_env_file_goes_before_the_bind_root_checks(node, helper_for, monkeypatch):  # noqa: F811  # pylint: disable=redefined-outer-name
    # root refuses a whole-GPU hold where another allocation's env file without a spec names the GPU: the stale
    # file kept the GPU from every other allocation, every pass PROGRESSING; removed first, a2 binds
    failing_spec_write(monkeypatch, Died())
    with pytest.raises(Died):
        node.run(1, [hold("a1", GPU_A)])
    monkeypatch.undo()
    socket_path = helper_for(node)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the pass runs as the account, root's writes through the helper
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(socket_path)))
    result = run_pass(host, 2, [hold("a2", GPU_A)], state_dir=node.state_dir, lock_timeout=5)
    assert result.errors == [] and result.section["state"] == "CONVERGED"
    assert steps(result) == [("remove-env", "a1"), ("bind", "a2")]
    assert env_names(node) == {"a2.env": GPU_A}


def test_an_env_file_left_by_a_dead_bind_of_a_still_wanted_hold_is_written_by_its_bind(node, monkeypatch):
    failing_spec_write(monkeypatch, Died())
    with pytest.raises(Died):
        node.run(1, [hold("a1", GPU_A)])
    monkeypatch.undo()
    result = node.run(1, [hold("a1", GPU_A)])
    assert result.section["state"] == "CONVERGED"
    assert env_names(node) == {"a1.env": GPU_A} and spec_devices(node, "a1") is not None
    assert [e[:2] for e in events(node)] == [("AllocationBound", "a1")]


# --- 3. a fixed input at a generation left PROGRESSING --------------------------------------------------------


def full_for(monkeypatch, allocation_id):
    """/etc/cdi has no room for ``allocation_id``'s spec: its bind fails, retryable, and the pass stays
    PROGRESSING (its generation unfinished)."""
    real = DirectWriter.write_node_file

    def full(self, kind, allocation, content, hold=None, path=None):
        if allocation == allocation_id and kind == "cdi":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, kind, allocation, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "write_node_file", full)


REFUSED = {"a1": ("overlap", "%s is assigned to a0" % GPU_B)}


def test_a_fixed_input_at_an_unfinished_generation_never_gets_the_refusal_of_the_input_it_replaces(node, monkeypatch):
    node.run(1, [hold("a0", GPU_B)])
    full_for(monkeypatch, "a2")
    first = node.run(2, [hold("a0", GPU_B), hold("a1", GPU_B), hold("a2", GPU_A)])
    assert first.section["state"] == "PROGRESSING"  # generation 2 is not finished
    assert failures(first) == REFUSED
    # the same input may be sent again at 2 (the retry timer does): its refusal stands, final
    again = node.run(2, [hold("a0", GPU_B), hold("a1", GPU_B), hold("a2", GPU_A)])
    assert failures(again) == REFUSED and again.section["state"] == "PROGRESSING"
    before = node.listing()
    # a1 now asks for the free GPU_C: was refused "GPU_B is assigned to a0" word for word, never checked
    for check_mode in (True, False):
        with pytest.raises(PassError) as caught:
            node.run(2, [hold("a0", GPU_B), hold("a1", GPU_C), hold("a2", GPU_A)], check_mode=check_mode)
        assert str(caught.value) == (
            "generation 2 refused a1 for the assignment it was sent then, and a refusal is final at its generation: "
            "a1 sent with another assignment would be judged by it; raise generation, or leave it out to let the "
            "node number its inputs")
    assert node.listing() == before
    monkeypatch.undo()
    raised = node.run(3, [hold("a0", GPU_B), hold("a1", GPU_C), hold("a2", GPU_A)])
    assert failures(raised) == {} and raised.section["state"] == "CONVERGED"
    assert spec_devices(node, "a1") is not None


def test_a_fixed_input_at_an_unfinished_generation_that_keeps_its_refusals_is_taken(node, monkeypatch):
    node.run(1, [hold("a0", GPU_B)])
    full_for(monkeypatch, "a2")
    first = node.run(2, [hold("a0", GPU_B), hold("a1", GPU_B), hold("a2", GPU_A)])
    assert first.section["state"] == "PROGRESSING"
    monkeypatch.undo()
    # a2 fixed (another GPU), a1 sent as it was refused: the docs' fixed input at an unfinished generation
    fixed = node.run(2, [hold("a0", GPU_B), hold("a1", GPU_B), hold("a2", GPU_C)])
    assert failures(fixed) == REFUSED and fixed.section["state"] == "FAILED"
    assert spec_devices(node, "a2") is not None
    assert events(node, "AllocationFailed") == [("AllocationFailed", "a1", 2, None)]  # once a generation


def test_a_fixed_input_at_an_unfinished_generation_that_drops_the_refused_allocation_is_taken(node, monkeypatch):
    node.run(1, [hold("a0", GPU_B)])
    full_for(monkeypatch, "a2")
    node.run(2, [hold("a0", GPU_B), hold("a1", GPU_B), hold("a2", GPU_A)])
    monkeypatch.undo()
    fixed = node.run(2, [hold("a0", GPU_B), hold("a2", GPU_A)])
    assert failures(fixed) == {} and fixed.section["state"] == "CONVERGED"


# --- 4. changed is true whenever the pass changed the node ----------------------------------------------------------


def test_a_release_whose_env_file_cannot_be_removed_says_changed(node, monkeypatch):
    node.run(1, [hold("a1", GPU_A)])
    real = DirectWriter.remove_node_file

    def stuck(self, kind, allocation_id, path=None):
        if kind == "allocation-env":
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(self, kind, allocation_id, path=path)

    monkeypatch.setattr(DirectWriter, "remove_node_file", stuck)
    checked = node.run(2, [], check_mode=True)
    result = node.run(2, [])
    assert checked.changed is True
    assert not node.exists("/etc/cdi/bcd-a1.json")  # the spec went...
    assert node.exists("/run/bcd/allocations/a1.env")  # ...the env file could not
    assert result.section["state"] == "PROGRESSING"
    assert result.changed is True  # was: false, though the hold is gone
    assert result.holds == []
    monkeypatch.undo()
    finished = node.run(2, [])
    assert steps(finished) == [("finish-release", "a1")] and finished.changed is True
    assert not node.exists("/run/bcd/allocations/a1.env")
    assert events(node, "AllocationReleased") == [("AllocationReleased", "a1", 2, [GPU_A])]


def test_a_release_whose_slice_cannot_be_stopped_says_changed(node, monkeypatch):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-1"})])

    def refuse(self, name):
        raise TransientSliceError("systemctl stop %s failed (1): Access denied" % name)

    monkeypatch.setattr(RecordSlices, "remove", refuse)
    result = node.run(2, [])
    assert result.section["state"] == "PROGRESSING"
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert events(node, "AllocationReleased") == [("AllocationReleased", "a1", 2, [GPU_A])]  # signed and journaled
    assert result.changed is True  # was: false
    assert [e["type"] for e in result.events if e["body"]["generation"] == 2] == ["AllocationReleased"]


def test_a_pass_whose_every_action_fails_before_touching_the_node_says_unchanged(node, monkeypatch):
    # the other side of it: changed is what was done, not what was planned
    failing = OSError(errno.EROFS, "Read-only file system")

    def nothing(self, kind, allocation_id, content, hold=None, path=None):
        raise failing

    monkeypatch.setattr(DirectWriter, "write_node_file", nothing)
    result = node.run(1, [hold("a1", GPU_A)])
    assert result.section["state"] == "PROGRESSING"
    assert result.changed is False
    assert env_names(node) == {} and not node.exists("/etc/cdi/bcd-a1.json")

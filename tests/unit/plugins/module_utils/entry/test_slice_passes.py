# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hold slices across whole passes on a fakehw node (spec page, "Hold slices" and
"One pass"): the slice exists before the spec names it, the spec, env file and
event name it, a Kubernetes hold gets none, a release never stops a slice that
still runs a workload, a leftover slice goes once empty, a kept hold's slice
comes back after a reboot, and check mode shows every step without writing."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceError, TransientSliceError
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter

from ansible_collections.bcd.devices.tests.unit.builders import hold, kube
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C

GIB = 1 << 30
MIB = 1 << 20
LIMITS = {"cpus": "0-3", "mems": "0", "cpu_millis": 1500, "memory_bytes": 4 * GIB, "hugepages_2mi": 2}
SLICE = "bcd-alloc-a1.slice"
RECORD = "/run/bcd/slices/%s.json" % SLICE


A1 = hold("a1", GPU_A, limits=LIMITS)


def steps(result):
    return [(a.kind, a.allocation_id) for a in result.plan.actions]


def events(node, event_type=None, allocation_id=None):
    return [e for e in Journal(node.state()).unacked()
            if (event_type is None or e["type"] == event_type)
            and (allocation_id is None or e["body"]["allocation_id"] == allocation_id)]


def record(node, name=SLICE):
    content = node.read("/run/bcd/slices/%s.json" % name)
    return None if content is None else json.loads(content)


def set_populated(node, populated, name=SLICE):
    data = record(node, name)
    data["populated"] = populated
    node.write("/run/bcd/slices/%s.json" % name, json.dumps(data))


def contents(node):
    return dict((path, (mode, content)) for path, (mode, _mtime, content) in node.listing().items())


EXPECTED_RECORD = {
    "name": SLICE,
    "properties": {"AllowedCPUs": "0-3", "AllowedMemoryNodes": "0", "CPUQuota": "150%",
                   "MemoryMax": str(4 * GIB), "MemoryHigh": str(4 * GIB * 9 // 10)},
    "hugetlb_max": {"2MB": 4 * MIB, "1GB": 0},  # the size it does not book is held to none
    "hugetlb_current": {},
    "populated": False,
}


# --- a bind ------------------------------------------------------------------------------------------------------


def test_a_hold_with_limits_runs_in_a_slice_the_spec_env_and_event_name(node):
    result = node.run(1, [A1])
    assert result.section["state"] == "CONVERGED"
    assert record(node) == EXPECTED_RECORD
    spec = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    assert spec["annotations"]["bcd.dev/cgroup-parent"] == SLICE
    assert spec["containerEdits"]["env"][:2] == ["BCD_ALLOCATION_ID=a1", "BCD_CGROUP_PARENT=" + SLICE]
    lines = node.read("/run/bcd/allocations/a1.env").decode().splitlines()
    assert lines[0] == "BCD_ALLOCATION_ID=a1"
    assert lines[1] == "BCD_CGROUP_PARENT=" + SLICE
    assert lines[2:] == ["BCD_RESERVATION_ID=rsv_a1", "NVIDIA_VISIBLE_DEVICES=" + GPU_A]
    (bound,) = events(node, "AllocationBound", "a1")
    assert bound["body"]["cgroup_parent"] == SLICE
    assert result.holds[0]["cgroup_parent"] == SLICE
    assert SLICE in result.plan.actions[0].text and "CPUQuota=150%" in result.plan.actions[0].text


def test_a_hold_without_limits_gets_no_slice(node):
    node.run(1, [hold("a1", GPU_A)])
    assert not node.exists("/run/bcd/slices")
    spec = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    assert "bcd.dev/cgroup-parent" not in spec["annotations"]
    assert "BCD_CGROUP_PARENT" not in node.read("/run/bcd/allocations/a1.env").decode()
    assert "cgroup_parent" not in events(node, "AllocationBound", "a1")[0]["body"]


def test_the_slice_is_made_before_the_spec_names_it(node, monkeypatch):
    order = []
    real_apply, real_write = DirectWriter.apply_slice, DirectWriter.write_node_file

    def apply_slice(self, op):
        order.append(("slice", op.name))
        return real_apply(self, op)

    def write_node_file(self, kind, allocation_id, content, hold=None, path=None):
        order.append((kind, allocation_id))
        return real_write(self, kind, allocation_id, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "apply_slice", apply_slice)
    monkeypatch.setattr(DirectWriter, "write_node_file", write_node_file)
    node.run(1, [A1])
    # the slice before the spec names it; the env file before the spec makes the hold live
    assert order == [("slice", SLICE), ("allocation-env", "a1"), ("cdi", "a1")]


def test_a_spec_that_cannot_be_written_finds_the_slice_already_made(node, monkeypatch):
    real_write = DirectWriter.write_node_file

    def no_spec(self, kind, allocation_id, content, hold=None, path=None):
        if kind == "cdi":
            raise OSError(errno.EROFS, "Read-only file system")
        return real_write(self, kind, allocation_id, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "write_node_file", no_spec)
    result = node.run(1, [A1])
    assert result.section["state"] == "PROGRESSING"
    assert "Read-only file system" in result.section["message"]
    assert record(node) == EXPECTED_RECORD  # the slice came first
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert events(node, "AllocationBound") == []
    monkeypatch.undo()
    done = node.run(1, [A1])
    assert done.section["state"] == "CONVERGED"
    assert steps(done) == [("bind", "a1")]
    assert record(node) == EXPECTED_RECORD
    assert len(events(node, "AllocationBound", "a1")) == 1
    assert node.run(1, [A1]).changed is False


def test_a_slice_that_cannot_be_made_leaves_no_spec_naming_it(node, monkeypatch):
    def refuse(self, name, properties, huge):
        raise TransientSliceError("systemctl start %s failed (1): Access denied" % name)

    monkeypatch.setattr(RecordSlices, "apply", refuse)
    result = node.run(1, [A1, hold("a2", GPU_B)])
    assert result.section["state"] == "PROGRESSING"
    assert "Access denied" in result.section["message"]
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert not node.exists("/run/bcd/allocations/a1.env")
    assert [e["body"]["allocation_id"] for e in events(node, "AllocationBound")] == ["a2"]


def test_a_kubernetes_hold_with_limits_gets_no_slice(node):
    result = node.run(1, [kube("k1", GPU_A, limits=LIMITS)])
    assert result.section["state"] == "CONVERGED"
    assert not node.exists("/run/bcd/slices")
    spec = json.loads(node.read("/etc/cdi/bcd-k1.json"))
    assert spec["annotations"]["bcd.dev/binding"] == "kubernetes"
    assert "bcd.dev/cgroup-parent" not in spec["annotations"]
    assert not any(line.startswith("BCD_CGROUP_PARENT=") for line in spec["containerEdits"]["env"])
    assert "BCD_CGROUP_PARENT" not in node.read("/run/bcd/allocations/k1.env").decode()
    assert "cgroup_parent" not in events(node, "AllocationBound", "k1")[0]["body"]
    assert "cgroup_parent" not in result.holds[0]
    assert all(a.slice is None for a in result.plan.actions)


# --- releases and leftovers ----------------------------------------------------------------------------------------


def test_a_released_holds_empty_slice_is_stopped_after_its_release_is_reported(node):
    node.run(1, [A1])
    result = node.run(2, [])
    assert steps(result) == [("release", "a1")]
    assert result.plan.actions[0].slice.to_dict() == {"op": "remove", "name": SLICE}
    assert "then stop %s (empty)" % SLICE in result.plan.actions[0].text
    assert record(node) is None
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert len(events(node, "AllocationReleased", "a1")) == 1


def test_a_slice_still_running_a_workload_outlives_its_release_and_goes_once_empty(node):
    node.run(1, [A1])
    set_populated(node, True)
    released = node.run(2, [])
    assert steps(released) == [("release", "a1")]
    assert released.plan.actions[0].slice is None
    assert "%s still runs a workload and is kept with its limits" % SLICE in released.plan.actions[0].text
    assert not node.exists("/etc/cdi/bcd-a1.json")  # the hold is gone...
    kept = record(node)
    assert kept["populated"] is True and kept["properties"] == EXPECTED_RECORD["properties"]  # ...its limits stay
    assert len(events(node, "AllocationReleased", "a1")) == 1
    # while the workload runs, every pass keeps the slice and changes nothing
    busy = node.run(3, [])
    assert steps(busy) == [("keep-slice", "a1")]
    assert busy.changed is False
    assert "still runs a workload" in busy.plan.actions[0].text
    assert record(node)["populated"] is True
    # the workload exits: the leftover is stopped, and nothing is reported again
    set_populated(node, False)
    empty = node.run(4, [])
    assert steps(empty) == [("stop-slice", "a1")]
    assert empty.changed is True
    assert record(node) is None
    assert len(events(node, "AllocationReleased", "a1")) == 1
    assert node.run(5, []).changed is False


def test_a_leftover_slice_is_stopped_before_anything_is_bound(node):
    node.run(1, [A1])
    set_populated(node, True)
    node.run(2, [])
    set_populated(node, False)
    result = node.run(3, [hold("a2", GPU_B, limits={"cpus": "4-7"}), hold("a3", GPU_C)])
    assert steps(result) == [("stop-slice", "a1"), ("bind", "a2"), ("bind", "a3")]
    assert record(node) is None
    assert record(node, "bcd-alloc-a2.slice")["properties"] == {"AllowedCPUs": "4-7"}


def test_a_slice_that_cannot_be_stopped_is_a_leftover_next_pass(node, monkeypatch):
    node.run(1, [A1])

    def refuse(self, name):
        raise TransientSliceError("systemctl stop %s failed (1): Access denied" % name)

    monkeypatch.setattr(RecordSlices, "remove", refuse)
    result = node.run(2, [])
    assert result.section["state"] == "PROGRESSING"
    assert len(events(node, "AllocationReleased", "a1")) == 1  # the release itself was done and reported
    assert record(node) is not None
    monkeypatch.undo()
    again = node.run(2, [])
    assert steps(again) == [("stop-slice", "a1")]
    assert again.section["state"] == "CONVERGED"
    assert record(node) is None
    assert len(events(node, "AllocationReleased", "a1")) == 1


# --- kept holds --------------------------------------------------------------------------------------------------------


def test_a_kept_holds_slice_lost_on_a_reboot_is_made_again(node):
    node.run(1, [A1])
    spec = node.read("/etc/cdi/bcd-a1.json")
    env = node.read("/run/bcd/allocations/a1.env")
    os.unlink(node.path(RECORD))  # systemd forgets runtime slices on a reboot; the hold does not
    result = node.run(1, [A1])
    assert steps(result) == [("create-slice", "a1")]
    assert "create %s" % SLICE in result.plan.actions[0].text
    assert record(node) == EXPECTED_RECORD
    assert node.read("/etc/cdi/bcd-a1.json") == spec
    assert node.read("/run/bcd/allocations/a1.env") == env
    assert len(events(node, "AllocationBound", "a1")) == 1
    assert node.run(1, [A1]).changed is False


def test_a_whole_reboot_brings_back_the_slice_before_the_env_file(node):
    node.run(1, [A1, hold("a2", GPU_B)])
    env = node.read("/run/bcd/allocations/a1.env")
    for directory in ("/run/bcd/slices", "/run/bcd/allocations"):  # /run is tmpfs
        for name in os.listdir(node.path(directory)):
            os.unlink(os.path.join(node.path(directory), name))
    result = node.run(1, [A1, hold("a2", GPU_B)])
    assert steps(result) == [("create-slice", "a1"), ("write-env", "a1"), ("write-env", "a2")]
    assert record(node) == EXPECTED_RECORD
    assert node.read("/run/bcd/allocations/a1.env") == env
    assert len(events(node, "AllocationBound")) == 2


def test_a_kept_holds_changed_limits_are_set_on_its_slice(node):
    node.run(1, [A1])
    changed = dict(LIMITS, cpus="0-7", memory_bytes=8 * GIB)
    result = node.run(2, [hold("a1", GPU_A, limits=changed)])
    assert ("apply-slice", "a1") in steps(result)
    assert record(node)["properties"]["AllowedCPUs"] == "0-7"
    assert record(node)["properties"]["MemoryMax"] == str(8 * GIB)
    assert len(events(node, "AllocationBound", "a1")) == 1


# --- check mode -----------------------------------------------------------------------------------------------------


def check_then_run(node, generation, devices):
    before = node.listing()
    checked = node.run(generation, devices, check_mode=True)
    assert node.listing() == before, "check mode wrote something"
    real = node.run(generation, devices)
    assert [a.to_dict() for a in checked.plan.actions] == [a.to_dict() for a in real.plan.actions]
    return checked


def test_check_mode_shows_every_slice_step_and_writes_nothing(node):
    bind = check_then_run(node, 1, [A1])
    assert steps(bind) == [("bind", "a1")]
    assert bind.plan.actions[0].to_dict()["slice"] == {
        "op": "apply", "name": SLICE, "properties": EXPECTED_RECORD["properties"], "hugetlb_max": {"2MB": 4 * MIB, "1GB": 0}}
    os.unlink(node.path(RECORD))
    again = check_then_run(node, 1, [A1])
    assert steps(again) == [("create-slice", "a1")]
    set_populated(node, True)
    kept = check_then_run(node, 2, [])
    assert steps(kept) == [("release", "a1")]
    assert "still runs a workload" in kept.plan.actions[0].text
    busy = check_then_run(node, 3, [])
    assert steps(busy) == [("keep-slice", "a1")]
    set_populated(node, False)
    stop = check_then_run(node, 4, [])
    assert steps(stop) == [("stop-slice", "a1")]
    assert stop.plan.actions[0].to_dict()["slice"] == {"op": "remove", "name": SLICE}
    assert record(node) is None
    node.run(5, [A1])
    released = check_then_run(node, 6, [])
    assert steps(released) == [("release", "a1")]
    assert released.plan.actions[0].slice.to_dict() == {"op": "remove", "name": SLICE}


@pytest.mark.parametrize("limits", [{"cpus": "0-3"}, {"cpu_millis": 500}, {"memory_bytes": GIB},
                                    {"hugepages_1gi": 1}, {"mems": "0"}], ids=lambda d: next(iter(d)))
def test_any_one_limit_gives_the_hold_a_slice(node, limits):
    node.run(1, [hold("a1", GPU_A, limits=limits)])
    assert record(node) is not None
    assert json.loads(node.read("/etc/cdi/bcd-a1.json"))["annotations"]["bcd.dev/cgroup-parent"] == SLICE


# --- limits on a running slice keep headroom (issue 22) ---------------------------------------------------------


def run_workload(node, memory_current=None, hugetlb_current=None, name=SLICE):
    """A workload in the slice, as the host would show it: populated, using what is given."""
    data = record(node, name)
    data["populated"] = True
    if memory_current is not None:
        data["memory_current"] = memory_current
    if hugetlb_current is not None:
        data["hugetlb_current"] = hugetlb_current
    node.write("/run/bcd/slices/%s.json" % name, json.dumps(data))


def refused_then_kept(node, generation, limits, *words):
    """The pass does not set ``limits`` on the running slice: it stays PROGRESSING with ``words`` in its
    message, the slice keeps its properties, and the hold's spec and env file stay."""
    before = record(node)
    result = node.run(generation, [hold("a1", GPU_A, limits=limits)])
    assert result.section["state"] == "PROGRESSING", result.section
    for word in words:
        assert word in result.section["message"], (word, result.section["message"])
    assert record(node)["properties"] == before["properties"]
    assert record(node)["hugetlb_max"] == before["hugetlb_max"]
    assert node.exists("/etc/cdi/bcd-a1.json") and node.exists("/run/bcd/allocations/a1.env")
    return result


def test_a_memory_max_at_the_workloads_use_is_refused_and_one_just_past_the_margin_is_set(node):
    node.run(1, [hold("a1", GPU_A, limits={"memory_bytes": 4 * GIB})])
    used = GIB - 32 * MIB                                                      # 1040187392
    run_workload(node, memory_current=used)
    least = max(used + 64 * MIB, -(-used * 10 // 9))                           # MemoryHigh (90 %) >= use
    for wanted in (used, GIB, least - 1):
        refused_then_kept(node, 2, {"memory_bytes": wanted},
                          "memory_bytes %d leaves no headroom over the slice's current use %d: at least %d is "
                          "needed" % (wanted, used, least), "current + 64 MiB = %d" % (used + 64 * MIB))
    result = node.run(2, [hold("a1", GPU_A, limits={"memory_bytes": least})])
    assert result.section["state"] == "CONVERGED"
    assert record(node)["properties"] == {"MemoryMax": str(least), "MemoryHigh": str(least * 9 // 10)}
    assert least * 9 // 10 >= used


def test_a_memory_high_below_the_workloads_use_is_refused(node):
    node.run(1, [hold("a1", GPU_A, limits={"memory_bytes": 8 * GIB})])
    used = 2 * GIB
    run_workload(node, memory_current=used)
    margin = -(-used * 5 // 100)                                               # 5 % is more than 64 MiB here
    wanted = used + margin + MIB                                               # MemoryMax clears its margin...
    assert wanted * 9 // 10 < used                                             # ...but MemoryHigh would not
    refused_then_kept(node, 2, {"memory_bytes": wanted}, "current use %d: at least %d is needed" % (
        used, -(-used * 10 // 9)), "current + 5%% (%d) = %d" % (margin, used + margin))
    result = node.run(2, [hold("a1", GPU_A, limits={"memory_bytes": -(-used * 10 // 9)})])
    assert result.section["state"] == "CONVERGED"


def test_a_huge_page_limit_at_what_is_faulted_in_is_refused_one_page_more_is_set(node):
    node.run(1, [hold("a1", GPU_A, limits={"hugepages_2mi": 8})])
    run_workload(node, hugetlb_current={"2MB": 4 * MIB})                      # two pages faulted in
    refused_then_kept(node, 2, {"hugepages_2mi": 2},
                      "hugepages_2mi 2 (hugetlb.2MB.max=4194304) leaves no headroom over the 2MB huge pages "
                      "faulted in, 4194304 bytes (2 pages): at least 3 pages (6291456 bytes, one page more)")
    result = node.run(2, [hold("a1", GPU_A, limits={"hugepages_2mi": 3})])
    assert result.section["state"] == "CONVERGED"
    assert record(node)["hugetlb_max"] == {"2MB": 6 * MIB, "1GB": 0}


def test_a_cpu_quota_under_the_floor_is_refused_for_a_kept_hold_not_retried(node):
    # no slice ever takes it: refused at its generation like a new hold's (invalid-assignment), never a write
    # that fails and is retried every 30 seconds
    node.run(1, [hold("a1", GPU_A, limits={"cpu_millis": 1500})])
    run_workload(node)
    before = record(node)
    result = node.run(2, [hold("a1", GPU_A, limits={"cpu_millis": 10})])
    assert result.section["state"] == "FAILED", result.section
    assert [(f.allocation_id, f.reason, f.message) for f in result.plan.failures] == [
        ("a1", "invalid-assignment", "limits.cpu_millis: 10 gives CPUQuota=1%, below the floor of 10% of one CPU: "
         "at least 100 cpu_millis are needed (or none, for no quota); the hold keeps its limits")]
    assert record(node)["properties"] == before["properties"] == {"CPUQuota": "150%"}
    assert node.exists("/etc/cdi/bcd-a1.json") and node.exists("/run/bcd/allocations/a1.env")
    assert node.run(2, [hold("a1", GPU_A, limits={"cpu_millis": 10})]).plan.actions == []
    result = node.run(3, [hold("a1", GPU_A, limits={"cpu_millis": 100})])
    assert result.section["state"] == "CONVERGED"
    assert record(node)["properties"] == {"CPUQuota": "10%"}


@pytest.mark.parametrize("millis", [1, 50, 90])
def test_a_new_sliced_hold_under_the_cpu_floor_is_refused_at_admission(node, millis):
    result = node.run(1, [hold("a1", GPU_A, limits={"cpu_millis": millis}), hold("a2", GPU_B)])
    (failure,) = result.plan.failures
    assert (failure.allocation_id, failure.reason) == ("a1", "invalid-assignment")
    assert failure.message == ("limits.cpu_millis: %d gives CPUQuota=%d%%, below the floor of 10%% of one CPU: at "
                               "least 100 cpu_millis are needed (or none, for no quota)" % (millis, (millis + 9) // 10))
    assert record(node) is None and not node.exists("/etc/cdi/bcd-a1.json")
    assert node.exists("/etc/cdi/bcd-a2.json")


@pytest.mark.parametrize("millis", [8192001, 1 << 62, (1 << 63) - 1])
def test_a_new_sliced_hold_over_every_cpu_a_cpulist_names_is_refused_at_admission(node, millis):
    # systemd refuses such a CPUQuota (CPUQuota='461168601842738791%' is not valid): the slice would fail every
    # pass; refused at its generation instead, with the ceiling's numbers. 8 192 000 is still taken.
    result = node.run(1, [hold("a1", GPU_A, limits={"cpu_millis": millis}),
                          hold("a2", GPU_B, limits={"cpu_millis": 8192000})])
    (failure,) = result.plan.failures
    assert (failure.allocation_id, failure.reason) == ("a1", "invalid-assignment")
    assert failure.message == ("limits.cpu_millis: %d gives CPUQuota=%d%%, above the ceiling of 819200%% (8192 CPUs, "
                               "all a cpulist may name): at most 8192000 cpu_millis" % (millis, (millis + 9) // 10))
    assert record(node) is None and not node.exists("/etc/cdi/bcd-a1.json")
    assert record(node, "bcd-alloc-a2.slice")["properties"] == {"CPUQuota": "819200%"}


def test_the_cpu_floor_leaves_kubernetes_holds_and_no_quota_alone(node):
    # a pod may ask for 50m; the kubelet enforces it, no slice is made. cpu_millis 0 sets no quota.
    result = node.run(1, [kube("a1", GPU_A, limits={"cpu_millis": 50}),
                          hold("a2", GPU_B, limits={"cpu_millis": 0}),
                          hold("a3", GPU_C, limits={"cpu_millis": 91})])  # 91 rounds up to 10 %
    assert result.section["state"] == "CONVERGED", result.section
    assert "CPUQuota" not in (record(node, "bcd-alloc-a2.slice") or {}).get("properties", {})
    assert record(node, "bcd-alloc-a3.slice")["properties"] == {"CPUQuota": "10%"}


def test_an_empty_slice_may_be_set_below_what_it_last_used(node):
    # no workload, nothing to kill: page cache left charged to an empty slice does not hold its limits up
    node.run(1, [hold("a1", GPU_A, limits={"memory_bytes": 4 * GIB})])
    data = record(node)
    data["memory_current"] = 3 * GIB
    node.write(RECORD, json.dumps(data))
    assert node.run(2, [hold("a1", GPU_A, limits={"memory_bytes": GIB})]).section["state"] == "CONVERGED"
    assert record(node)["properties"]["MemoryMax"] == str(GIB)


def test_a_slice_a_workload_joins_as_it_is_stopped_is_kept(node, monkeypatch):
    # the release checks populated, then the backend freezes the slice and checks again: a process that
    # joined in between is seen, the slice is thawed and kept, and a later pass stops it once empty
    node.run(1, [A1])
    freezes = []

    def freeze(self, name, frozen):
        freezes.append(frozen)
        if frozen:
            run_workload(node)
        original(self, name, frozen)

    original = RecordSlices.freeze
    monkeypatch.setattr(RecordSlices, "freeze", freeze)
    result = node.run(2, [])
    assert freezes == [True, False]
    assert result.section["state"] == "PROGRESSING"
    assert "%s still runs a workload (it joined as the slice was stopped)" % SLICE in result.section["message"]
    assert record(node)["populated"] is True and record(node)["frozen"] is False
    assert not node.exists("/etc/cdi/bcd-a1.json")
    monkeypatch.setattr(RecordSlices, "freeze", original)
    set_populated(node, False)
    node.run(2, [])
    assert record(node) is None


# --- only what takes something away is held to the headroom ---------------------------------------------------


def test_a_workload_past_its_memory_high_still_gets_its_slice_changed_and_raised(node):
    # page cache keeps a busy workload at its MemoryHigh, and anonymous memory may take it past: setting the
    # same memory again (with another cpus) or a little more takes nothing away and is never refused
    limits = {"cpus": "0-3", "memory_bytes": GIB}
    node.run(1, [hold("a1", GPU_A, limits=limits)])
    used = GIB - 32 * MIB                                                      # above MemoryHigh, 90 % of 1 GiB
    assert used > GIB * 9 // 10
    run_workload(node, memory_current=used)
    moved = node.run(2, [hold("a1", GPU_A, limits=dict(limits, cpus="0-7"))])
    assert moved.section["state"] == "CONVERGED", moved.section
    assert record(node)["properties"]["AllowedCPUs"] == "0-7"
    raised = node.run(3, [hold("a1", GPU_A, limits=dict(limits, cpus="0-7", memory_bytes=GIB + 16 * MIB))])
    assert raised.section["state"] == "CONVERGED", raised.section
    assert record(node)["properties"]["MemoryMax"] == str(GIB + 16 * MIB)
    # lowering it is still held to the margin, with the numbers
    least = max(used + 64 * MIB, -(-used * 10 // 9))
    refused_then_kept(node, 4, {"cpus": "0-7", "memory_bytes": GIB},
                      "memory_bytes %d leaves no headroom over the slice's current use %d: at least %d is needed"
                      % (GIB, used, least))


def test_a_workload_with_every_huge_page_faulted_in_still_gets_its_slice_changed(node):
    # a workload that faulted in all it booked (the usual case for huge pages) is at hugetlb.max: its
    # slice's other limits, and its huge pages set again, must stay settable
    limits = {"memory_bytes": 2 * GIB, "hugepages_2mi": 4}
    node.run(1, [hold("a1", GPU_A, limits=limits)])
    run_workload(node, memory_current=GIB, hugetlb_current={"2MB": 8 * MIB})  # all 4 pages
    result = node.run(2, [hold("a1", GPU_A, limits=dict(limits, memory_bytes=3 * GIB))])
    assert result.section["state"] == "CONVERGED", result.section
    assert record(node)["properties"]["MemoryMax"] == str(3 * GIB)
    assert record(node)["hugetlb_max"] == {"2MB": 8 * MIB, "1GB": 0}
    refused_then_kept(node, 3, dict(limits, memory_bytes=3 * GIB, hugepages_2mi=3),
                      "hugepages_2mi 3 (hugetlb.2MB.max=6291456) leaves no headroom over the 2MB huge pages "
                      "faulted in, 8388608 bytes (4 pages): at least 5 pages")


def test_a_running_slice_bound_under_the_cpu_floor_keeps_its_quota(node):
    # a slice made before the floor (0.2.0 took 5 %): setting its quota again is no change; lowering it is
    node.run(1, [hold("a1", GPU_A, limits={"cpu_millis": 1500})])
    data = record(node)
    data["properties"] = {"CPUQuota": "5%", "AllowedCPUs": "0-1"}
    node.write(RECORD, json.dumps(data))
    run_workload(node)
    state = node.host().slices.state(SLICE)
    # its cpus widened (a running slice's cpus never narrow, issue 33), its quota set again
    node.host().slices.apply(SLICE, {"CPUQuota": "5%", "AllowedCPUs": "0-3"}, {})
    assert record(node)["properties"] == {"CPUQuota": "5%", "AllowedCPUs": "0-3"}
    with pytest.raises(SliceError) as caught:
        node.host().slices.apply(SLICE, {"CPUQuota": "4%"}, {})
    assert "CPUQuota=4%, below the floor of 10% of one CPU" in str(caught.value)
    assert state.properties == {"CPUQuota": "5%", "AllowedCPUs": "0-1"}

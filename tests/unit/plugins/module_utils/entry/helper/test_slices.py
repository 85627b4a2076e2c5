# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``slice.apply`` and ``slice.stop`` through the root helper (``entry/helper/handle.py``): root builds a
slice from the limits, checked as root; a slice is stopped only once empty, and its limits never go
below what its workload uses, whatever the peer checked (issue 22). ``check_a_populated_slice_is_kept``
is also run against a helper process by ``test_attacks.py``; ``cpus``/``mems`` on a running slice are
``test_slice_cpusets.py``'s."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_a_slice_is_built_by_root_from_limits_and_stopped_once_empty(helper):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a1",
                            "limits": {"cpus": "0-3,8", "memory_bytes": 1 << 30, "hugepages_2mi": 2}})
    assert reply == {"ok": True}
    record_path = helper.node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["AllowedCPUs"] == "0-3,8"
    assert record["properties"]["MemoryMax"] == str(1 << 30)
    assert record["hugetlb_max"] == {"2MB": 2 * 2097152, "1GB": 0}
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}
    assert not os.path.exists(record_path)
    # stopping a slice that is not there is no error either
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}
    # the log names the unit each slice request touched
    assert "uid %d: slice.apply bcd-alloc-a1.slice" % os.geteuid() in helper.log
    assert "uid %d: slice.stop bcd-alloc-a1.slice" % os.geteuid() in helper.log


@pytest.mark.parametrize("limits, error", [
    ({"cpus": ",".join(["1"] * 600)}, "limits.cpus: cpulist longer than 1024 characters"),
    ({"mems": "0-" + "9" * 1030}, "limits.mems: cpulist longer than 1024 characters"),
    ({"mems": "0-2000"}, "limits.mems: NUMA node 2000 is beyond 1023, the most any host has"),
    ({"cpus": "0-3;rm -rf /"}, "limits.cpus: '0-3;rm -rf /' is not a cpulist such as 0-3,8"),
    ({"cpus": "3-1"}, "limits.cpus: range 3-1 runs backwards"),
    ({"cpus": True}, "limits.cpus: must be a cpulist string such as 0-3,8"),
    ({"ExecStart": "/bin/sh"}, "limits.ExecStart: unknown field (known: cpus, mems, cpu_millis, memory_bytes, hugepages_2mi, hugepages_1gi)"),
    ({"memory_bytes": -1}, "limits.memory_bytes: must be a non-negative integer"),
    ({"hugepages_2mi": True}, "limits.hugepages_2mi: must be a non-negative integer"),
    (["cpus=0"], "limits: must be a mapping"),
    ({}, "the limits book nothing a slice enforces (cpus, mems, cpu_millis, memory_bytes, hugepages_2mi or "
         "hugepages_1gi)"),
])
def test_slice_limits_are_checked_as_root(helper, limits, error):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a1", "limits": limits})
    assert reply == {"ok": False, "error": error}
    assert not os.path.exists(helper.node("/run/bcd/slices"))


def least_memory_bytes(used):
    """Worked out here, not taken from the code: MemoryMax >= use + max(64 MiB, 5 %), MemoryHigh
    (90 % of it, rounded down) >= use. Returns (least memory_bytes, the margin)."""
    margin = max(64 << 20, -(-used * 5 // 100))
    least = max(used + margin, -(-used * 10 // 9))
    assert least * 9 // 10 >= used > (least - 1) * 9 // 10 or least == used + margin
    return least, margin


def headroom_message(wanted, used, least, margin):
    return ("bcd-alloc-a1.slice: memory_bytes %d leaves no headroom over the slice's current use %d: at least %d "
            "is needed (MemoryMax >= current + %s = %d, and MemoryHigh, 90%% of it, >= current); a change of its "
            "limits never kills its workload" % (wanted, used, least,
                                                 "64 MiB" if margin == 64 << 20 else "5%% (%d)" % margin,
                                                 used + margin))


def check_a_populated_slice_is_kept(request, node, used):
    """Through ``request``: a slice whose workload uses ``used`` bytes is neither stopped nor squeezed
    below that, and may grow. Also run against a real helper process by test_attacks.py. The slice is
    bound above the use, so each value tried below lowers what it has (the same value again is no change)."""
    bound = 4 << 30
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": bound}}) == {"ok": True}
    record_path = node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    record = json.loads(Path(record_path).read_text())
    record.update(populated=True, memory_current=used)      # a workload runs in it (root's record)
    Path(record_path).write_text(json.dumps(record))
    # what the slice holds now refuses these: retryable, the same request may be carried out later
    assert request({"op": "slice.stop", "allocation_id": "a1"}) == {
        "ok": False, "error": "bcd-alloc-a1.slice still runs a workload; it is stopped once empty", "retryable": True}
    least, margin = least_memory_bytes(used)
    for wanted in (1 << 20, used, least - 1):  # below use, at use (the next allocation OOM), one byte short
        reply = request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": wanted}})
        assert reply == {"ok": False, "error": headroom_message(wanted, used, least, margin), "retryable": True}
        assert json.loads(Path(record_path).read_text())["properties"]["MemoryMax"] == str(bound)
    assert os.path.exists(record_path)
    # just past the margin is fine
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": least}}) == {"ok": True}
    assert json.loads(Path(record_path).read_text())["properties"]["MemoryMax"] == str(least)
    # growing is fine
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 2 << 30}}) == {"ok": True}


def test_a_populated_slice_is_not_stopped_and_its_limits_never_go_below_its_use(helper):
    check_a_populated_slice_is_kept(helper.request, helper.node, 512 << 20)


def populate(node, name="bcd-alloc-a1.slice", **used):
    """A workload in the slice's record (root's), using ``used`` (memory_current, hugetlb_current)."""
    record_path = node("/run/bcd/slices/%s.json" % name)
    record = json.loads(Path(record_path).read_text())
    record.update(populated=True, **used)
    Path(record_path).write_text(json.dumps(record))
    return record_path


def test_the_helper_keeps_headroom_whatever_the_peer_checked(helper):
    """Issue 22: each limit at the edge of a running workload's use, sent straight to root's socket."""
    apply = {"op": "slice.apply", "allocation_id": "a1"}
    assert helper.request(dict(apply, limits={"memory_bytes": 8 << 30, "hugepages_2mi": 8, "cpu_millis": 1000})) \
        == {"ok": True}
    used = 2 << 30
    record_path = populate(helper.node, memory_current=used, hugetlb_current={"2MB": 4 << 20})
    # MemoryHigh (90 %) below use, MemoryMax past its margin
    wanted = used + (used * 5 // 100) + (1 << 20)
    reply = helper.request(dict(apply, limits={"memory_bytes": wanted}))
    assert reply["ok"] is False and "memory_bytes %d leaves no headroom over the slice's current use %d: at least " \
        "%d is needed" % (wanted, used, -(-used * 10 // 9)) in reply["error"]
    # a huge page limit at what is faulted in (2 pages), then one page more
    reply = helper.request(dict(apply, limits={"hugepages_2mi": 2}))
    assert reply == {"ok": False, "error": "bcd-alloc-a1.slice: hugepages_2mi 2 (hugetlb.2MB.max=4194304) leaves no "
                     "headroom over the 2MB huge pages faulted in, 4194304 bytes (2 pages): at least 3 pages "
                     "(6291456 bytes, one page more) are needed; a change of its limits never kills its workload",
                     "retryable": True}
    # a CPUQuota of 1 %
    reply = helper.request(dict(apply, limits={"cpu_millis": 10}))
    assert reply == {"ok": False, "error": "bcd-alloc-a1.slice: cpu_millis gives CPUQuota=1%, below the floor of "
                     "10% of one CPU: at least 100 cpu_millis are needed (or none, for no quota)"}
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["MemoryMax"] == str(8 << 30) and record["hugetlb_max"] == {"2MB": 16 << 20, "1GB": 0}
    assert record["properties"]["CPUQuota"] == "100%"
    # just past each margin
    for limits in ({"memory_bytes": -(-used * 10 // 9)}, {"hugepages_2mi": 3}, {"cpu_millis": 100}):
        assert helper.request(dict(apply, limits=limits)) == {"ok": True}, limits


def test_the_helper_refuses_a_fresh_slice_under_the_cpu_floor(helper):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a2", "limits": {"cpu_millis": 1}})
    assert reply == {"ok": False, "error": "bcd-alloc-a2.slice: cpu_millis gives CPUQuota=1%, below the floor of "
                     "10% of one CPU: at least 100 cpu_millis are needed (or none, for no quota)"}
    assert not os.path.exists(helper.node("/run/bcd/slices/bcd-alloc-a2.slice.json"))


def test_slice_stop_freezes_and_checks_again_so_a_late_joiner_is_kept(helper, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices
    assert helper.request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 1 << 30}}) \
        == {"ok": True}
    record_path = helper.node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    original = RecordSlices.freeze

    def freeze(self, name, frozen):  # a process joins between the helper's check and the freeze
        if frozen:
            populate(helper.node)
        original(self, name, frozen)

    monkeypatch.setattr(RecordSlices, "freeze", freeze)
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {
        "ok": False, "error": "bcd-alloc-a1.slice still runs a workload (it joined as the slice was stopped); it "
                              "is stopped once empty", "retryable": True}
    record = json.loads(Path(record_path).read_text())
    assert record["populated"] is True and record["frozen"] is False  # kept, and thawed


def test_the_helper_sets_the_same_limits_again_on_a_slice_used_to_its_limits(helper):
    """Only what takes something away is held to the headroom: a peer may set a running slice's limits
    again (another cpus, a drift repair) or raise them, even with the workload past its MemoryHigh and every
    huge page it booked faulted in; lowering them is refused with the numbers, as before."""
    apply = {"op": "slice.apply", "allocation_id": "a1"}
    limits = {"cpus": "0-3", "memory_bytes": 1 << 30, "hugepages_2mi": 4}
    assert helper.request(dict(apply, limits=limits)) == {"ok": True}
    used = (1 << 30) - (32 << 20)
    record_path = populate(helper.node, memory_current=used, hugetlb_current={"2MB": 8 << 20})
    assert helper.request(dict(apply, limits=dict(limits, cpus="0-7"))) == {"ok": True}
    assert helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=(1 << 30) + (16 << 20),
                                                  hugepages_2mi=5))) == {"ok": True}
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["AllowedCPUs"] == "0-7" and record["hugetlb_max"] == {"2MB": 10 << 20, "1GB": 0}
    assert record["properties"]["MemoryMax"] == str((1 << 30) + (16 << 20))
    reply = helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=1 << 30, hugepages_2mi=5)))
    assert reply["ok"] is False and "memory_bytes %d leaves no headroom over the slice's current use %d" % (
        1 << 30, used) in reply["error"]
    reply = helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=(1 << 30) + (16 << 20))))
    assert reply["ok"] is False and "hugepages_2mi 4 (hugetlb.2MB.max=8388608) leaves no headroom" in reply["error"]

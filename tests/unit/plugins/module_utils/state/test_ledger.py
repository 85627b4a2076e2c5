# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ledger.json, read once into the domain's records and written back byte for byte: what each record of the
file becomes (``BoundHold``, ``UnfinishedRelease``, ``JournaledRefusal``), the queries the planner asks of it,
and what a journaled event does to it."""

from __future__ import annotations

import json

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import BoundHold, JournaledRefusal, Ledger, UnfinishedRelease
from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import ledger_bytes, parse_ledger, record_event

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"

# What the node writes, as 0.3 wrote it: a hold reported with limits and a slice, one reported with neither, one
# whose limits a kept Kubernetes hold gave up (null), one from a ledger older than cgroup parents; a release cut
# short; a refusal with its reason, and one a 0.1.0 ledger kept as its generation alone.
WRITTEN = {
    "bound": {
        "a1": {"generation": 3, "device_ids": [GPU], "cgroup_parent": "bcd-alloc-a1.slice",
               "limits": {"cpus": "0-3", "memory_bytes": 1073741824}},
        "a2": {"generation": 3, "device_ids": [GPU_B + "/gi1/ci0"], "cgroup_parent": None},
        "k1": {"generation": 2, "device_ids": [GPU_B], "cgroup_parent": None, "limits": None},
        "old": {"generation": 1, "device_ids": [GPU_B + "/gi2/ci0"]},
    },
    "unfinished_releases": {"p1": {"generation": 2, "device_ids": [GPU]}},
    "failures": {"f1": {"generation": 3, "reason": "overlap", "message": "%s is assigned to a1" % GPU},
                 "f0": {"generation": 1}},
    "vfio": {GPU_B: "inst_1"},
    "renders": {"a1": {"key": "k", "spec": "s", "env": None, "notes": []}},
    "observed_generation": 3, "last_state": "CONVERGED", "journal_seq": 9,
}


def written(data):
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def test_the_file_is_read_into_records_and_written_back_byte_for_byte():
    content = ledger_bytes(parse_ledger(written(WRITTEN), "ledger.json"))
    assert content == written(WRITTEN)
    with_condition = dict(WRITTEN, conditions={"KubernetesReleasesUnreadable": {"device_ids": []}})
    assert ledger_bytes(parse_ledger(written(with_condition), "ledger.json")) == written(with_condition)


def test_each_record_is_a_typed_value_and_the_planner_asks_the_ledger_not_its_records():
    ledger = parse_ledger(written(WRITTEN), "ledger.json")
    assert ledger.bound["a1"] == BoundHold(3, (GPU,), "bcd-alloc-a1.slice", Limits(cpus="0-3", memory_bytes=1 << 30),
                                           limits_recorded=True)
    assert ledger.limits_of("a1") == Limits(cpus="0-3", memory_bytes=1 << 30)
    assert ledger.limits_of("a2") is None and ledger.limits_of("k1") is None and ledger.limits_of("gone") is None
    # an older ledger kept no cgroup parent: the one the hold's spec names stands for it
    assert ledger.bound["old"].reported_parent("bcd-alloc-old.slice") == "bcd-alloc-old.slice"
    assert ledger.bound["a2"].reported_parent("bcd-alloc-a2.slice") is None
    assert ledger.bound["a1"].reported_on([GPU]) and not ledger.bound["a1"].reported_on([GPU_B])
    assert ledger.unfinished_releases == {"p1": UnfinishedRelease(2, (GPU,))}
    assert ledger.refusal_at("f1", 3) == Refusal("f1", Reason.OVERLAP, "%s is assigned to a1" % GPU)
    assert ledger.refusal_at("f1", 4) is None
    # 0.1.0's record: not replayed, only not reported twice
    assert ledger.failures["f0"] == JournaledRefusal(1) and ledger.refusal_at("f0", 1) is None
    assert ledger.refused_at("f0") == 1 and ledger.refused_at("f1") == 3 and ledger.refused_at("nobody") is None


@pytest.mark.parametrize("entry", [
    {"generation": 1, "device_ids": [GPU], "cgroup_parent": 7},  # a parent that is not text
    {"generation": "1", "device_ids": [GPU]},
    {"generation": 1, "device_ids": GPU},
])
def test_a_bound_record_of_another_shape_is_dropped(entry):
    """Reported again, never lost: the unprivileged account writes this file."""
    assert parse_ledger(written({"bound": {"a1": entry}}), "ledger.json").bound == {}


def test_limits_the_input_s_checks_refuse_are_none():
    entry = {"generation": 1, "device_ids": [GPU], "cgroup_parent": None, "limits": {"cpus": "3-0"}}
    ledger = parse_ledger(written({"bound": {"a1": entry}}), "ledger.json")
    assert ledger.limits_of("a1") is None and "a1" in ledger.bound


def bound_event(allocation_id, device_ids, cgroup_parent=None, seq=1):
    body = {"allocation_id": allocation_id, "generation": 2, "device_ids": list(device_ids)}
    if cgroup_parent:
        body["cgroup_parent"] = cgroup_parent
    return {"seq": seq, "type": "AllocationBound", "body": body}


def test_a_journaled_bind_release_and_refusal_settle_as_the_file_always_had_them():
    ledger = Ledger()
    record_event(ledger, bound_event("a1", [GPU], "bcd-alloc-a1.slice"), {"cpus": "0-3"})
    record_event(ledger, bound_event("a2", [GPU_B], seq=2))
    record_event(ledger, {"seq": 3, "type": "AllocationFailed", "body": {
        "allocation_id": "f1", "generation": 2, "reason": Reason.OVERLAP, "message": "taken"}})
    assert json.loads(ledger_bytes(ledger))["bound"] == {
        "a1": {"generation": 2, "device_ids": [GPU], "cgroup_parent": "bcd-alloc-a1.slice", "limits": {"cpus": "0-3"}},
        "a2": {"generation": 2, "device_ids": [GPU_B], "cgroup_parent": None}}
    assert json.loads(ledger_bytes(ledger))["failures"] == {
        "f1": {"generation": 2, "reason": Reason.OVERLAP, "message": "taken"}}
    ledger.book("a2", None)  # a kept Kubernetes hold without a slice that gave its limits up
    ledger.book("gone", Limits(cpus="1"))  # never reported: nothing
    assert json.loads(ledger_bytes(ledger))["bound"]["a2"]["limits"] is None and "gone" not in ledger.bound
    # a late release of a hold's old devices leaves its newer hold reported
    record_event(ledger, {"seq": 4, "type": "AllocationReleased", "body": {
        "allocation_id": "a1", "generation": 1, "device_ids": [GPU_B]}})
    assert "a1" in ledger.bound
    record_event(ledger, {"seq": 5, "type": "AllocationReleased", "body": {
        "allocation_id": "a1", "generation": 2, "device_ids": [GPU]}})
    assert "a1" not in ledger.bound and ledger.journal_seq == 5

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 23's deviations from the spec page, each through the bcd.devices.holds module on a fakehw
root: ``instance_id`` is not read, the binding is checked before anything else of an assignment, a
hold that books one huge page size is held to none of the other, and a vendor spec's common env
never overrides bcd's own lines."""

from __future__ import annotations

import json

import pytest

from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import hold, run

GIB = 1 << 30
MIB = 1 << 20
SLICE_RECORD = "/run/bcd/slices/bcd-alloc-a1.slice.json"


def fails(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


def events(result):
    return [(e["type"], e["body"]["allocation_id"]) for e in result["events"]]


# -- a. instance_id is not read ------------------------------------------------------------

def test_instance_id_in_a_plain_hold_is_not_read_and_the_hold_binds(capsys, node):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, instance_id="vm-7")])
    assert fails(result) == []
    assert events(result) == [("AllocationBound", "a1")]
    assert node.exists("/etc/cdi/bcd-a1.json")
    assert "vm-7" not in node.read("/etc/cdi/bcd-a1.json").decode()


def test_a_binding_instance_with_its_instance_id_is_unsupported_binding(capsys, node):
    entry = hold("a1", GPU_A, binding="BINDING_INSTANCE", instance_id="vm-7")
    result = run(capsys, node, generation=1, devices=[entry, hold("a2", GPU_B)])
    assert fails(result) == [("a1", "unsupported-binding", "binding BINDING_INSTANCE is not supported")]
    assert [e["body"]["reason"] for e in result["events"] if e["type"] == "AllocationFailed"] == ["unsupported-binding"]
    assert [h["allocation_id"] for h in result["holds"]] == ["a2"]
    assert not node.exists("/etc/cdi/bcd-a1.json")


# -- b. the binding is checked first -------------------------------------------------------

@pytest.mark.parametrize("entry", [
    {"allocation_id": "a1", "binding": "BINDING_NODE", "devices": []},          # no devices
    {"allocation_id": "a1", "binding": "BINDING_NODE"},                          # devices missing
    {"allocation_id": "a1", "binding": "BINDING_NODE", "devices": [{"id": GPU_A}], "colour": "blue"},  # unknown field
    {"allocation_id": "a/1", "binding": "BINDING_NODE", "devices": [{"id": GPU_A}]},  # a bad id
    {"allocation_id": "a1", "binding": "BINDING_NODE", "devices": [{"id": GPU_A}], "limits": {"cpus": "x"}},
], ids=["no-devices", "no-devices-field", "unknown-field", "bad-id", "bad-limits"])
def test_an_unsupported_binding_is_refused_as_such_whatever_else_is_wrong(capsys, node, entry):
    result = run(capsys, node, generation=1, devices=[entry])
    assert [(reason, message) for _id, reason, message in fails(result)] == [
        ("unsupported-binding", "binding BINDING_NODE is not supported")]
    assert result["section"]["state"] == "FAILED"


def test_a_live_hold_re_sent_with_an_unsupported_binding_is_reported_failed(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, binding="BINDING_INSTANCE")])
    assert fails(result) == [("a1", "unsupported-binding", "binding BINDING_INSTANCE is not supported")]
    # its hold is kept: said as HoldChangeRefused, not AllocationFailed (issue 46, item 5)
    assert ("HoldChangeRefused", "a1") in events(result) and ("AllocationFailed", "a1") not in events(result)
    assert result["section"]["state"] == "FAILED"


# -- c. both huge page sizes are limited ----------------------------------------------------

@pytest.mark.parametrize("limits, wanted", [
    ({"hugepages_1gi": 2}, {"2MB": 0, "1GB": 2 * GIB}),
    ({"hugepages_2mi": 3, "memory_bytes": GIB}, {"2MB": 6 * MIB, "1GB": 0}),
    ({"hugepages_2mi": 1, "hugepages_1gi": 1}, {"2MB": 2 * MIB, "1GB": GIB}),
], ids=["1GB-only", "2MB-only", "both"])
def test_a_hold_booking_huge_pages_limits_every_size_the_unbooked_one_to_0(capsys, node, limits, wanted):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits=limits)])
    assert fails(result) == []
    assert json.loads(node.read(SLICE_RECORD))["hugetlb_max"] == wanted
    slice_steps = [p.get("slice") for p in result["plan"] if p["action"] == "bind"]
    assert slice_steps[0]["hugetlb_max"] == wanted
    again = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits=limits)])
    assert again["changed"] is False and again["plan"] == []


def test_a_hold_bound_with_one_size_limited_gets_the_other_set_to_0_on_the_next_pass(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"hugepages_1gi": 2})])
    record = json.loads(node.read(SLICE_RECORD))
    record["hugetlb_max"] = {"1GB": 2 * GIB}  # what 0.2.0 wrote: 2 MiB pages left at "max"
    node.write(SLICE_RECORD, json.dumps(record).encode())
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"hugepages_1gi": 2})])
    assert [p["action"] for p in result["plan"]] == ["apply-slice"]
    assert json.loads(node.read(SLICE_RECORD))["hugetlb_max"] == {"2MB": 0, "1GB": 2 * GIB}


def test_a_hold_booking_no_huge_pages_sets_no_hugetlb_limit(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": GIB})])
    assert json.loads(node.read(SLICE_RECORD))["hugetlb_max"] == {}


# -- d. bcd's env lines win over the vendor spec's -------------------------------------------

def vendor_spec(common_env, device_env=()):
    device = {"name": GPU_A, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
    if device_env:
        device["containerEdits"]["env"] = list(device_env)
    return {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [device],
            "containerEdits": {"env": list(common_env), "deviceNodes": [{"path": "/dev/nvidiactl"}]}}


def spec_env(node, allocation_id="a1"):
    spec = json.loads(node.read("/etc/cdi/bcd-%s.json" % allocation_id))
    return spec["containerEdits"]["env"], [d["containerEdits"].get("env") for d in spec["devices"]]


@pytest.mark.parametrize("theirs", [
    "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=",
    "BCD_ALLOCATION_ID=someone_else", "BCD_CGROUP_PARENT=-.slice", "BCD_RESERVATION_ID=rsv_x", "BCD_ANYTHING=1",
])
def test_a_vendor_env_line_setting_one_of_bcds_keys_is_dropped_so_bcds_line_wins(capsys, make_node, theirs):
    node = make_node(vendor=vendor_spec(["NVIDIA_DRIVER_CAPABILITIES=all", theirs, "NVIDIA_VISIBLE_DEVICES=void"],
                                        device_env=[theirs, "NVIDIA_REQUIRE_CUDA=cuda>=12"]))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})])
    assert fails(result) == [] and events(result) == [("AllocationBound", "a1")]
    common, per_device = spec_env(node)
    assert common == ["BCD_ALLOCATION_ID=a1", "BCD_CGROUP_PARENT=bcd-alloc-a1.slice",
                      "NVIDIA_VISIBLE_DEVICES=%s" % GPU_A, "NVIDIA_DRIVER_CAPABILITIES=all"]
    assert per_device == [["NVIDIA_REQUIRE_CUDA=cuda>=12"]]  # the device's other edits are kept


def test_a_vendor_device_whose_only_env_is_one_of_bcds_keys_keeps_its_device_nodes(capsys, make_node):
    node = make_node(vendor=vendor_spec([], device_env=["NVIDIA_VISIBLE_DEVICES=all"]))
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    spec = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    assert spec["devices"][0]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia0"}]}
    assert spec["containerEdits"]["env"] == ["BCD_ALLOCATION_ID=a1", "NVIDIA_VISIBLE_DEVICES=%s" % GPU_A]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's CPUs and NUMA nodes, through the module (issue 32, item 3): ``cpus`` and ``mems`` the node does not
have are refused with what is missing, in check mode too; ``cpus`` and ``mems`` off the GPUs' NUMA nodes are
held as booked, said in the plan, in ``holds_info`` and in one warning; limits the node has bind as before."""

from __future__ import annotations

import json

import pytest

from ansible_collections.bcd.devices.tests.unit.builders import hold, kube
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info

# Two sockets: CPUs 0-31 and node 0's memory beside GPU_A, CPUs 32-63 and node 1's beside GPU_B and GPU_C.
TWO_SOCKETS = {"cpus": "0-63", "numa_nodes": [{"node": 0, "cpus": "0-31"}, {"node": 1, "cpus": "32-63"}]}
GPUS = [{"uuid": GPU_A, "index": 0, "minor": 0, "numa_node": 0},
        {"uuid": GPU_B, "index": 1, "minor": 1, "numa_node": 1},
        {"uuid": GPU_C, "index": 2, "minor": 2, "numa_node": 1}]
NOT_LOCAL = ("not NUMA-local to their GPUs, held as booked (placement is the control plane's; host-to-GPU copies and "
             "NCCL traffic from there cross sockets): ")


@pytest.fixture
def numa(make_node):
    """A fakehw node of two sockets whose file describes its CPUs and NUMA nodes."""
    node = make_node(gpus=GPUS, vendor="mig")
    node.set_hardware(**TWO_SOCKETS)
    return node


def limited(allocation_id, gpu, **limits):
    return hold(allocation_id, gpu, limits=limits)


def refusals(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


def test_cpus_and_nodes_the_node_lacks_are_refused_naming_what_is_missing_and_check_mode_says_so_first(capsys, numa):
    devices = [limited("a1", GPU_A, cpus="0-4096"), limited("a2", GPU_B, mems="5"),
               limited("a3", GPU_C, cpus="60-70", mems="1-3")]
    before = numa.listing()
    checked = run(capsys, numa, check=True, generation=1, on_refusal="report", devices=devices)
    assert numa.listing() == before  # check mode writes nothing
    expected = [
        ("a1", "invalid-assignment", "limits.cpus 0-4096: CPUs 64-4096 are not online on this node (online: 0-63)"),
        ("a2", "invalid-assignment", "limits.mems 5: NUMA node 5 has no memory on this node (NUMA nodes with memory: 0-1)"),
        ("a3", "invalid-assignment", "limits.cpus 60-70: CPUs 64-70 are not online on this node (online: 0-63); "
                                     "limits.mems 1-3: NUMA nodes 2-3 have no memory on this node (NUMA nodes with "
                                     "memory: 0-1)")]
    assert refusals(checked) == expected
    real = run(capsys, numa, generation=1, on_refusal="report", devices=devices)
    assert real["plan"] == checked["plan"]
    assert refusals(real) == expected
    assert [p["action"] for p in real["plan"]] == ["refuse", "refuse", "refuse"]
    assert [(e["type"], e["body"]["reason"]) for e in real["events"]] == [("AllocationFailed", "invalid-assignment")] * 3
    said = warnings(real)
    for allocation_id, reason, message in expected:  # each refusal warned, with its message (a hint may follow)
        assert any(text.startswith("%s refused (%s): %s" % (allocation_id, reason, message)) for text in said), said
    for allocation_id in ("a1", "a2", "a3"):  # nothing bound: no slice, no spec
        assert not numa.exists("/run/bcd/slices/bcd-alloc-%s.slice.json" % allocation_id)
        assert not numa.exists("/etc/cdi/bcd-%s.json" % allocation_id)


def test_a_refusal_fails_the_task_by_default_with_the_message(capsys, numa):
    result = run(capsys, numa, generation=1, devices=[limited("a1", GPU_A, cpus="0-4096"), limited("a2", GPU_B, cpus="32-35")])
    assert result["failed"] is True
    assert "a1: invalid-assignment: limits.cpus 0-4096: CPUs 64-4096 are not online on this node (online: 0-63)" \
        in result["msg"]
    assert numa.exists("/etc/cdi/bcd-a2.json")  # the others of the pass are bound anyway


def test_a_node_of_one_numa_node_refuses_another_and_a_kubernetes_hold_is_refused_too(capsys, make_node):
    node = make_node(gpus=GPUS, vendor="mig")
    node.set_hardware(cpus="0-15")  # cpus alone: one NUMA node, 0, with every CPU and the memory
    result = run(capsys, node, generation=1, on_refusal="report",
                 devices=[limited("a1", GPU_A, mems="5"), kube("k1", GPU_B, limits={"cpus": "16"})])
    assert refusals(result) == [
        ("a1", "invalid-assignment", "limits.mems 5: NUMA node 5 has no memory on this node (NUMA nodes with memory: 0)"),
        ("k1", "invalid-assignment", "limits.cpus 16: CPU 16 is not online on this node (online: 0-15)")]


def test_limits_the_node_has_bind_as_before_with_no_note_and_no_warning(capsys, numa):
    result = run(capsys, numa, generation=1, devices=[
        limited("a1", GPU_A, cpus="0-7", mems="0", memory_bytes=1 << 30), limited("a2", GPU_B, cpus="32-63", mems=1)])
    assert result["section"]["state"] == "CONVERGED"
    assert [p["text"].split(", in ", 1)[1] for p in result["plan"]] == [
        "bcd-alloc-a1.slice (AllowedCPUs=0-7, AllowedMemoryNodes=0, MemoryMax=1073741824, MemoryHigh=966367641)",
        "bcd-alloc-a2.slice (AllowedCPUs=32-63, AllowedMemoryNodes=1)"]
    assert all("locality" not in p for p in result["plan"])
    assert [w for w in warnings(result) if "NUMA" in w] == []
    record = json.loads(numa.read("/run/bcd/slices/bcd-alloc-a2.slice.json"))
    assert record["properties"] == {"AllowedCPUs": "32-63", "AllowedMemoryNodes": "1"}
    assert [h["locality"] for h in info(capsys, numa)["holds"]] == [None, None]


def test_a_node_that_describes_no_cpus_checks_none_as_before(capsys, make_node):
    node = make_node(gpus=GPUS, vendor="mig")  # no cpus or numa_nodes in its file, no sysfs under its root
    result = run(capsys, node, generation=1, devices=[limited("a1", GPU_A, cpus="0-4096", mems="5")])
    assert result["section"]["state"] == "CONVERGED"
    assert json.loads(node.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))["properties"] == {
        "AllowedCPUs": "0-4096", "AllowedMemoryNodes": "5"}
    assert [w for w in warnings(result) if "CPU" in w] == []


def test_cpus_and_mems_off_the_gpus_numa_node_are_held_said_in_the_plan_holds_info_and_one_warning(capsys, numa):
    devices = [limited("a1", GPU_A, cpus="24-39"),  # CPUs 32-39 are on socket 1; GPU_A is on node 0
               limited("a2", GPU_B, cpus="0-3", mems="0"),  # socket 0 for a GPU on node 1
               limited("a3", GPU_C, cpus="40-47", mems="1")]  # local
    checked = run(capsys, numa, check=True, generation=1, devices=devices)
    real = run(capsys, numa, generation=1, devices=devices)
    assert real["plan"] == checked["plan"]
    assert real["section"]["state"] == "CONVERGED" and real["failures"] == []  # a note, never a refusal
    notes = dict((p["allocation_id"], p.get("locality")) for p in real["plan"])
    assert notes == {
        "a1": {"gpu_numa_nodes": [0], "local_cpus": "0-31", "remote_cpus": "32-39", "remote_mems": None,
               "text": "cpus 32-39 lie outside its GPUs' NUMA node 0 (CPUs 0-31)"},
        "a2": {"gpu_numa_nodes": [1], "local_cpus": "32-63", "remote_cpus": "0-3", "remote_mems": "0",
               "text": "cpus 0-3 and mems 0 lie outside its GPUs' NUMA node 1 (CPUs 32-63)"},
        "a3": None}
    texts = dict((p["allocation_id"], p["text"]) for p in real["plan"])
    assert texts["a1"].endswith("in bcd-alloc-a1.slice (AllowedCPUs=24-39); not NUMA-local: cpus 32-39 lie outside "
                                "its GPUs' NUMA node 0 (CPUs 0-31)")
    assert "NUMA" not in texts["a3"]
    warned = NOT_LOCAL + ("a1: cpus 32-39 lie outside its GPUs' NUMA node 0 (CPUs 0-31); a2: cpus 0-3 and mems 0 lie "
                          "outside its GPUs' NUMA node 1 (CPUs 32-63)")
    for result in (checked, real):  # once a task, for every hold it says
        assert [w for w in warnings(result) if "NUMA" in w] == [warned]
    # bound as booked: the slice has what the control plane placed
    assert json.loads(numa.read("/run/bcd/slices/bcd-alloc-a2.slice.json"))["properties"] == {
        "AllowedCPUs": "0-3", "AllowedMemoryNodes": "0"}
    again = run(capsys, numa, generation=1, devices=devices)
    assert again["changed"] is False and [w for w in warnings(again) if "NUMA" in w] == []
    holds = dict((h["allocation_id"], h["locality"]) for h in info(capsys, numa)["holds"])
    assert holds == dict(notes)


def test_a_kept_hold_moved_to_cpus_the_node_lacks_keeps_its_limits(capsys, numa):
    run(capsys, numa, generation=1, devices=[limited("a1", GPU_A, cpus="0-7")])
    moved = run(capsys, numa, generation=2, on_refusal="report", devices=[limited("a1", GPU_A, cpus="0-100")])
    assert refusals(moved) == [("a1", "invalid-assignment",
                                "limits.cpus 0-100: CPUs 64-100 are not online on this node (online: 0-63); "
                                "the hold keeps its limits")]
    assert json.loads(numa.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))["properties"] == {"AllowedCPUs": "0-7"}
    kept = run(capsys, numa, generation=3, devices=[limited("a1", GPU_A, cpus="0-15")])  # one it has: set
    assert kept["failures"] == []
    assert json.loads(numa.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))["properties"] == {"AllowedCPUs": "0-15"}


def write_sysfs(node, online="0-3", nodes="0", has_memory="0", node_cpus=None):
    node.write("/sys/devices/system/cpu/online", online + "\n")
    if nodes is not None:
        node.write("/sys/devices/system/node/online", nodes + "\n")
    if has_memory is not None:
        node.write("/sys/devices/system/node/has_memory", has_memory + "\n")
    for number, cpus in (node_cpus or {0: online}).items():
        node.write("/sys/devices/system/node/node%d/cpulist" % number, cpus + "\n")


def test_without_a_description_a_fakehw_node_reads_sysfs_under_its_root(capsys, make_node):
    node = make_node(gpus=GPUS, vendor="mig")
    write_sysfs(node, online="0-7", nodes="0-1", has_memory="0", node_cpus={0: "0-3", 1: "4-7"})
    result = run(capsys, node, generation=1, on_refusal="report",
                 devices=[limited("a1", GPU_A, cpus="0-9"), limited("a2", GPU_B, mems="1"), limited("a3", GPU_C, cpus="0-1")])
    assert refusals(result) == [
        ("a1", "invalid-assignment", "limits.cpus 0-9: CPUs 8-9 are not online on this node (online: 0-7)"),
        # node 1 is online but has no memory (its CPUs alone): cpuset.mems would not take it
        ("a2", "invalid-assignment", "limits.mems 1: NUMA node 1 has no memory on this node (NUMA nodes with memory: 0)")]
    assert [p["locality"]["text"] for p in result["plan"] if p["action"] == "bind"] == [
        "cpus 0-1 lie outside its GPUs' NUMA node 1 (CPUs 4-7)"]


def test_cpus_that_cannot_be_read_are_said_once_and_the_hold_is_bound_unchecked(capsys, make_node):
    node = make_node(gpus=GPUS, vendor="mig")
    node.write("/sys/devices/system/cpu/online", "0-3;reboot\n")
    result = run(capsys, node, generation=1, devices=[limited("a1", GPU_A, cpus="0-7"), limited("a2", GPU_B, cpus="9")])
    assert result["section"]["state"] == "CONVERGED"
    assert [w for w in warnings(result) if "CPU" in w] == [
        "host CPUs and NUMA nodes unreadable (/sys/devices/system/cpu/online: '0-3;reboot' is not a cpulist); cpus "
        "and mems are bound without checking them against the host"]
    again = run(capsys, node, generation=1, devices=[limited("a1", GPU_A, cpus="0-7"), limited("a2", GPU_B, cpus="9")])
    assert [w for w in warnings(again) if "CPU" in w] == []  # read only when a hold is placed anew

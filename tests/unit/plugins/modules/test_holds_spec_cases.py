# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cases operators hit, each against the spec page, through the bcd.devices.holds module:
one spelling per MIG instance and slot, a missing binding, the cap on assignments,
int64 limits as strings, refusals that stay final at their generation, damaged specs
of wanted holds, env files after a reboot, growing limits, a slice added to a kept
hold, writes that fail for one hold, and Kubernetes releases taken back."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from ansible_collections.bcd.devices.tests.unit.builders import hold, mig
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C, MIG_A1
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info


def fails(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


def types(result):
    """``(type, allocation_id)`` of the events a pass returns (a condition's: None, or its stuck release)."""
    return [(e["type"], e["body"].get("allocation_id")) for e in result["events"]]


# -- 1. one MIG instance or slot, one hold --------------------------------------------

@pytest.mark.parametrize("spelling", ["gi01/ci0", "gi1/ci00", "gi001/ci0"])
def test_a_mig_id_spelled_with_a_leading_zero_is_unsupported_whichever_comes_first(capsys, node, spelling):
    odd = "%s/%s" % (GPU_A, spelling)
    message = '"%s" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % odd
    first = run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi1/ci0"), mig("a2", odd)])
    assert fails(first) == [("a2", "unsupported-device", message)]
    assert [h["allocation_id"] for h in first["holds"]] == ["a1"]
    # the other order, on a fresh generation: the odd spelling is refused, the canonical one binds
    second = run(capsys, node, generation=2, devices=[mig("b2", odd), mig("b1", GPU_A + "/gi1/ci0")])
    assert fails(second) == [("b2", "unsupported-device", message)]
    assert [h["allocation_id"] for h in second["holds"]] == ["b1"]
    assert not node.exists("/etc/cdi/bcd-a2.json") and not node.exists("/etc/cdi/bcd-b2.json")


def test_a_slot_spelled_with_a_leading_zero_is_unsupported(capsys, node):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B + "/s1"), hold("a2", GPU_B + "/s01")])
    assert fails(result) == [("a2", "unsupported-device", '"%s/s01" is not a slot id (<gpu>/s<n>)' % GPU_B)]


def test_a_hold_on_disk_with_an_old_spelling_still_claims_its_mig_instance(capsys, node):
    # 0.1.0 took gi01: such a hold, read back, must still keep gi1/ci0 from a second allocation
    run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi1/ci0")])
    spec = node.read("/etc/cdi/bcd-a1.json").decode().replace(GPU_A + "/gi1/ci0", GPU_A + "/gi01/ci0")
    node.write("/etc/cdi/bcd-a1.json", spec.encode())
    result = run(capsys, node, generation=2, devices=[mig("a1", GPU_A + "/gi01/ci0"), mig("a2", GPU_A + "/gi1/ci0")])
    assert ("a2", "overlap", "%s/gi1/ci0 is assigned to a1" % GPU_A) in fails(result)
    assert not node.exists("/etc/cdi/bcd-a2.json")


# -- 3. a missing or empty binding ---------------------------------------------------

@pytest.mark.parametrize("binding", [None, ""])
def test_a_missing_or_empty_binding_is_refused_as_missing(capsys, node, binding):
    entry = hold("a1", GPU_A)
    if binding is None:
        del entry["binding"]
    else:
        entry["binding"] = binding
    result = run(capsys, node, generation=1, devices=[entry, hold("a2", GPU_B)])
    assert fails(result) == [("a1", "unsupported-binding", "binding is missing")]
    assert result["section"]["state"] == "FAILED"
    assert types(result) == [("AllocationBound", "a2"), ("AllocationFailed", "a1")]
    assert not node.exists("/etc/cdi/bcd-a1.json") and not node.exists("/run/bcd/allocations/a1.env")


# -- 4. more assignments than the cap ---------------------------------------------------

def test_assignments_beyond_the_cap_are_refused_one_by_one_and_the_rest_converge(capsys, node):
    devices = [hold("a%d" % n, "%s/s%d" % (GPU_B, n)) for n in range(512)]
    devices += [hold("x%d" % n, GPU_C) for n in range(3)] + [{"binding": "BINDING_HOLD", "devices": []}]
    result = run(capsys, node, check=True, generation=1, on_refusal="report", devices=devices)
    assert not result.get("failed")
    assert [p["action"] for p in result["plan"]].count("bind") == 512
    assert fails(result) == [
        ("x0", "invalid-assignment", "devices[512]: beyond the 512 assignments a pass honours"),
        ("x1", "invalid-assignment", "devices[513]: beyond the 512 assignments a pass honours"),
        ("x2", "invalid-assignment", "devices[514]: beyond the 512 assignments a pass honours"),
        ("devices[515]", "invalid-assignment", "devices[515]: beyond the 512 assignments a pass honours"),
    ]
    assert result["section"]["state"] == "FAILED"


def test_a_list_far_beyond_one_nodes_section_fails_the_task_and_writes_nothing(capsys, node):
    before = node.listing()
    result = run(capsys, node, generation=1, devices=[hold("a%d" % n, GPU_A) for n in range(1025)])
    assert result["failed"] is True
    assert "devices: 1025 assignments; at most 1024 are read (512 honoured)" in result["msg"]
    assert node.listing() == before


# -- 5. int64 limits as proto3 JSON writes them -------------------------------------------

def test_integer_limits_sent_as_decimal_strings_bind_like_numbers(capsys, node):
    limits = {"cpus": "0-1", "memory_bytes": "4294967296", "cpu_millis": "1500", "hugepages_2mi": "0"}
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits=limits)])
    assert fails(result) == []
    record = json.loads(node.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))
    assert record["properties"]["MemoryMax"] == "4294967296"
    assert record["properties"]["CPUQuota"] == "150%"
    as_numbers = dict(limits, memory_bytes=4294967296, cpu_millis=1500, hugepages_2mi=0)
    again = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits=as_numbers)])
    assert again["changed"] is False


@pytest.mark.parametrize("value", ["4G", "-1", "1.5", "0x10"])
def test_a_limit_string_that_is_no_decimal_integer_is_refused_clearly(capsys, node, value):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": value})])
    assert fails(result) == [("a1", "invalid-assignment",
                              "limits.memory_bytes: %r is not a non-negative integer or its decimal string" % value)]


# -- 2. a refusal is final at its generation ---------------------------------------------

def test_a_refusal_stays_final_at_its_generation_when_its_cause_goes(capsys, make_node):
    node = make_node(domains=[{"instance_id": "inst_1", "state": "running", "gpus": [GPU_C]}])
    refused = run(capsys, node, generation=5, devices=[hold("a1", GPU_C)])
    message = "%s is passed through to instance inst_1" % GPU_C
    assert fails(refused) == [("a1", "overlap", message)]
    assert types(refused) == [("AllocationFailed", "a1")]
    node.set_hardware(domains=[])  # the VM is gone: the GPU is free now
    # the drift or retry timer's pass at the same generation: still refused, for the same reason, unreported
    again = run(capsys, node, generation=5, devices=[hold("a1", GPU_C)])
    assert fails(again) == [("a1", "overlap", message)]
    assert again["section"]["state"] == "FAILED"
    assert again["changed"] is False and again["plan"] == []
    assert types(again) == [] and again["events_not_shown"] == 1  # the one journaled before, nothing new
    assert not node.exists("/etc/cdi/bcd-a1.json")
    # a new generation checks it again
    placed = run(capsys, node, generation=6, devices=[hold("a1", GPU_C)])
    assert fails(placed) == []
    assert types(placed)[-1] == ("AllocationBound", "a1")
    assert node.exists("/etc/cdi/bcd-a1.json")


# -- 12. an unreadable releases file is always reported ----------------------------------------

def test_the_pass_that_sets_an_unreadable_releases_file_aside_reports_it_though_it_clears_the_marker(capsys, node):
    node.set_hardware(kubelet={"reachable": True, "pods": []})  # nothing holds a GPU: the marker can go at once
    run(capsys, node, generation=1, devices=[])
    node.write("/var/lib/bcd/releasing.json", b"{ not json")
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])
    assert [c["type"] for c in result["conditions"]] == ["KubernetesReleasesUnreadable"]
    assert result["conditions"][0]["reason"] == "ReleasesFileUnreadable"
    assert [w for w in warnings(result) if "releasing.json is unreadable" in w], warnings(result)
    assert not node.exists("/var/lib/bcd/releasing.unreadable")
    # the condition raised and cleared in one pass is journaled appearing and clearing, both in that pass
    assert [(p["action"], p.get("event")) for p in result["plan"]] == [
        ("quarantine-releases", None), ("clear-marker", None), ("bind", "AllocationBound"),
        ("report-condition", "KubernetesReleasesUnreadable"), ("report-condition", "KubernetesReleasesUnreadableCleared")]
    assert types(result)[-2:] == [("KubernetesReleasesUnreadable", None), ("KubernetesReleasesUnreadableCleared", None)]
    # so the same input again has nothing to say
    again = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])
    assert again["changed"] is False and again["plan"] == [] and again["conditions"] == []


# -- 10. a write that fails is retryable for that hold only -----------------------------------------

def test_an_env_path_that_is_a_directory_holds_up_that_hold_alone_with_a_clear_message(capsys, node):
    os.makedirs(node.path("/run/bcd/allocations/a1.env"))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A), hold("a2", GPU_B)])
    # a retryable failure fails the task (so until: retries it), with the section and a message an operator reads
    assert result["failed"] is True
    assert result["msg"] == ("the pass could not finish and will be retried: a1: cannot write "
                             "/run/bcd/allocations/a1.env: Is a directory")
    assert result["section"]["state"] == "PROGRESSING"
    assert result["section"]["observed_generation"] is None
    assert result["section"]["message"] == (
        "a1: cannot write /run/bcd/allocations/a1.env: Is a directory")
    assert types(result) == [("AllocationBound", "a2")]  # the rest of the pass went on
    assert node.exists("/etc/cdi/bcd-a2.json")
    assert not node.exists("/etc/cdi/bcd-a1.json")  # never live without its env file
    os.rmdir(node.path("/run/bcd/allocations/a1.env"))  # the operator clears the way; the retry timer runs
    again = run(capsys, node, generation=1, devices=[hold("a1", GPU_A), hold("a2", GPU_B)])
    assert again["section"]["state"] == "CONVERGED"
    assert types(again)[-1] == ("AllocationBound", "a1")


def test_a_kept_hold_whose_env_file_cannot_be_written_again_is_not_reported_bound(capsys, node, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    # a crash lost the report (the ledger forgot it) and /run was emptied; now the env path is blocked
    state = NodeState(node.state(), "/var/lib/bcd")
    with state.lock(5):
        state.load()
        with state.change() as change:
            change.ledger.bound.clear()
    os.unlink(node.path("/run/bcd/allocations/a1.env"))
    os.makedirs(node.path("/run/bcd/allocations/a1.env"))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result["section"]["state"] == "PROGRESSING"
    assert "a1: cannot write /run/bcd/allocations/a1.env: Is a directory" in result["section"]["message"]
    assert [p["action"] for p in result["plan"]] == ["write-env", "report-bound"]
    assert types(result) == [] and result["events_not_shown"] == 1  # the first pass's, nothing new


# -- 7. the env file after a reboot ---------------------------------------------------------

def after_reboot_without_mig(node):
    """/run is emptied and mig-layout has not made GPU 0's MIG instances again yet."""
    for name in os.listdir(node.path("/run/bcd/allocations")):
        os.unlink(os.path.join(node.path("/run/bcd/allocations"), name))
    gpus = copy.deepcopy(DEFAULT_GPUS)
    gpus[0]["mig"] = []
    node.set_hardware(gpus=gpus)


def test_a_kept_holds_env_file_is_written_again_from_its_spec_before_its_mig_instance_is_back(capsys, make_node):
    node = make_node(vendor="mig")
    devices = [mig("a1", GPU_A + "/gi1/ci0"), hold("a2", GPU_B)]
    run(capsys, node, generation=1, devices=devices)
    spec, env = node.read("/etc/cdi/bcd-a1.json"), node.read("/run/bcd/allocations/a1.env")
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % MIG_A1).encode() in env
    after_reboot_without_mig(node)
    result = run(capsys, node, generation=1, devices=devices)
    assert [(p["action"], p["allocation_id"]) for p in result["plan"]] == [("write-env", "a1"), ("write-env", "a2")]
    assert node.read("/run/bcd/allocations/a1.env") == env  # as before the reboot
    assert node.read("/etc/cdi/bcd-a1.json") == spec  # left as it is
    assert types(result) == [("AllocationBound", "a1"), ("AllocationBound", "a2")]  # no release, no new bind
    assert "a1: %s has no MIG instance gi1/ci0; its spec is left as it is" % GPU_A in warnings(result)
    assert result["section"]["state"] == "CONVERGED"
    shown = info(capsys, node)
    assert [(h["allocation_id"], h["missing_devices"]) for h in shown["holds"]] == [
        ("a1", [GPU_A + "/gi1/ci0"]), ("a2", [])]
    assert run(capsys, node, generation=1, devices=devices)["changed"] is False


def test_a_kept_hold_whose_mig_instance_is_not_back_keeps_its_slice_when_its_limits_go(capsys, make_node):
    # its spec is left as it is until mig-layout makes the instance again: so is its slice, which the spec names
    node = make_node(vendor="mig")
    run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi1/ci0", limits={"cpus": "0-1"})])
    after_reboot_without_mig(node)
    result = run(capsys, node, generation=2, devices=[mig("a1", GPU_A + "/gi1/ci0")])
    assert [(p["action"], p["allocation_id"]) for p in result["plan"]] == [("write-env", "a1")]
    assert b"BCD_CGROUP_PARENT=bcd-alloc-a1.slice\n" in node.read("/run/bcd/allocations/a1.env")
    assert node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")
    assert ("a1 keeps the limits it was bound with (cgroup parent bcd-alloc-a1.slice) until its spec can be written "
            "again: some of its devices are missing") in warnings(result)
    assert [r["cgroup_parent"] for r in bound_events(result, "a1")] == ["bcd-alloc-a1.slice"]


def test_a_kubernetes_holds_env_file_waits_for_a_mig_instance_its_spec_does_not_name(capsys, node):
    devices = [mig("k1", GPU_A + "/gi1/ci0", binding="BINDING_KUBERNETES")]
    run(capsys, node, generation=1, devices=devices)
    after_reboot_without_mig(node)
    result = run(capsys, node, generation=1, devices=devices)
    assert result["plan"] == []
    assert "k1: its env file waits until its devices are back (its spec does not name them)" in warnings(result)
    assert not node.exists("/run/bcd/allocations/k1.env")


# -- 8. growing limits are admitted; 9. a slice added to a kept hold is reported ----------------------

GIB = 1 << 30


def with_memory(node, gib):
    node.write("/proc/meminfo", ("MemTotal:       %d kB\nMemFree:        %d kB\nHugetlb:               0 kB\n"
                                 % (gib * GIB // 1024, gib * GIB // 1024)).encode())


def bound_events(result, allocation_id):
    return [e["body"] for e in result["events"]
            if e["type"] == "AllocationBound" and e["body"]["allocation_id"] == allocation_id]


def test_a_kept_hold_grows_only_if_the_host_has_room_and_otherwise_keeps_its_limits(capsys, node):
    with_memory(node, 10)  # 9 GiB to hand out after the 1 GiB of headroom
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": 4 * GIB}),
                                             hold("a2", GPU_B, limits={"memory_bytes": 4 * GIB})])
    spec = node.read("/etc/cdi/bcd-a1.json")
    grown = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"memory_bytes": 6 * GIB}),
                                                     hold("a2", GPU_B, limits={"memory_bytes": 4 * GIB})])
    assert fails(grown) == [("a1", "resources-exhausted", "ResourcesExhausted: 2048 MiB of memory needed, "
                                                          "1024 MiB left on this host; the hold keeps its limits")]
    record = json.loads(node.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))
    assert record["properties"]["MemoryMax"] == str(4 * GIB)  # the old limits stay
    assert node.read("/etc/cdi/bcd-a1.json") == spec
    assert grown["section"]["state"] == "FAILED"
    # the node still holds a1: the control plane is told so (HoldChangeRefused), never that a1 failed (issue 46)
    assert [c["allocation_id"] for c in grown["conditions"] if c["type"] == "HoldChangeRefused"] == ["a1"]
    assert "AllocationFailed" not in [e["type"] for e in grown["events"]]
    # not final, since nothing failed: the next pass with room gives it the new limits, and the condition clears
    with_memory(node, 20)
    placed = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"memory_bytes": 6 * GIB}),
                                                      hold("a2", GPU_B, limits={"memory_bytes": 4 * GIB})])
    assert fails(placed) == []
    assert json.loads(node.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))["properties"]["MemoryMax"] == str(6 * GIB)
    assert "HoldChangeRefusedCleared" in [e["type"] for e in placed["events"]]


def test_growth_is_counted_against_the_new_holds_after_it(capsys, node):
    with_memory(node, 10)
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": 4 * GIB})])
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"memory_bytes": 8 * GIB}),
                                                      hold("a2", GPU_B, limits={"memory_bytes": 2 * GIB})])
    assert fails(result) == [("a2", "resources-exhausted",
                              "ResourcesExhausted: 2048 MiB of memory needed, 1024 MiB left on this host")]


def test_a_kubernetes_holds_growth_is_admitted_once_and_stays_booked(capsys, node):
    # no slice records what a Kubernetes hold books: the ledger does, or every pass admitted its growth again,
    # against holds bound after it meanwhile (found by make soak)
    from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.plan.test_admission import write_memory
    write_memory(node, 32 * GIB, hugetlb=4 * GIB, pages={"1GB": (4, 0)}, nodes={0: {"1GB": 2}, 1: {"1GB": 2}})
    run(capsys, node, generation=1, devices=[hold("k1", GPU_B, binding="BINDING_KUBERNETES")])
    # k1 grows by a page of NUMA node 0; a1 takes two pages of anywhere (so maybe node 0's)
    devices = [hold("k1", GPU_B, binding="BINDING_KUBERNETES", limits={"mems": "0", "hugepages_1gi": 1}),
               hold("a1", GPU_A, limits={"hugepages_1gi": 2})]
    grown = run(capsys, node, generation=2, devices=devices)
    assert fails(grown) == [] and grown["section"]["state"] == "CONVERGED"
    again = run(capsys, node, generation=2, devices=devices)
    assert fails(again) == [] and again["plan"] == [] and again["changed"] is False
    # and it counts against a hold of a later generation: one 1 GiB page is left on the host
    later = run(capsys, node, generation=3, devices=devices + [hold("a3", GPU_C, limits={"hugepages_1gi": 2})])
    assert fails(later) == [("a3", "resources-exhausted", "ResourcesExhausted: 2 hugepages of 1048576 KiB needed, 1 free")]


def test_a_pending_kubernetes_releases_memory_stays_committed_until_it_is_reported(capsys, node):
    with_memory(node, 10)
    node.set_hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_A]}]})
    run(capsys, node, generation=1, devices=[hold("k1", GPU_A, binding="BINDING_KUBERNETES",
                                                  limits={"memory_bytes": 6 * GIB})])
    # k1 goes while its pod still runs: its 6 GiB are still booked
    result = run(capsys, node, generation=2, devices=[hold("a2", GPU_B, limits={"memory_bytes": 4 * GIB})])
    assert [p["allocation_id"] for p in result["pending_releases"]] == ["k1"]
    assert fails(result) == [("a2", "resources-exhausted",
                              "ResourcesExhausted: 4096 MiB of memory needed, 3072 MiB left on this host")]


def test_a_slice_added_to_a_kept_hold_is_reported_with_its_cgroup_parent(capsys, node):
    first = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert "cgroup_parent" not in bound_events(first, "a1")[0]
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})])
    assert [p["action"] for p in result["plan"]] == ["create-slice", "rerender", "write-env", "report-bound"]
    reports = bound_events(result, "a1")
    assert len(reports) == 2 and reports[1]["generation"] == 2
    assert reports[1]["cgroup_parent"] == "bcd-alloc-a1.slice"
    assert b'"bcd.dev/cgroup-parent": "bcd-alloc-a1.slice"' in node.read("/etc/cdi/bcd-a1.json")
    assert run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})])["changed"] is False


BOOKWORM = [{"name": "podman", "version": "4.3.1"}]  # its CDI library loads cdiVersion 0.5.0 at most: no spec of bcd's
CEILING = ("its CDI spec needs cdiVersion 0.6.0 (annotations, devices[0].annotations), and podman 4.3.1 on this node "
           "loads at most 0.5.0")


def test_a_kept_hold_that_cannot_be_written_again_keeps_its_slice_when_its_limits_go(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})])
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)], cdi_runtimes=BOOKWORM)
    # its spec names its slice and cannot be written without it: the hold is kept as it is, slice included
    assert result["plan"] == [] and result["section"]["state"] == "CONVERGED"
    assert ("a1 keeps the limits it was bound with (cgroup parent bcd-alloc-a1.slice) until its spec can be written "
            "again: " + CEILING) in warnings(result)
    assert node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")
    assert b'"bcd.dev/cgroup-parent": "bcd-alloc-a1.slice"' in node.read("/etc/cdi/bcd-a1.json")
    assert [r["cgroup_parent"] for r in bound_events(result, "a1")] == ["bcd-alloc-a1.slice"]
    assert run(capsys, node, generation=2, devices=[hold("a1", GPU_A)], cdi_runtimes=BOOKWORM)["changed"] is False
    # the runtime upgraded: the spec is written without the slice, the slice stopped, the control plane told
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])
    assert [p["action"] for p in result["plan"]] == ["stop-slice", "rerender", "write-env", "report-bound"]
    assert not node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")
    assert b"cgroup-parent" not in node.read("/etc/cdi/bcd-a1.json")
    assert "cgroup_parent" not in bound_events(result, "a1")[-1] and bound_events(result, "a1")[-1]["generation"] == 2


def test_a_kept_hold_that_cannot_be_written_again_gets_no_slice_its_spec_does_not_name(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})], cdi_runtimes=BOOKWORM)
    assert result["plan"] == []
    assert ("a1 keeps the limits it was bound with (cgroup parent none) until its spec can be written again: "
            + CEILING) in warnings(result)
    assert not node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")
    assert [r.get("cgroup_parent") for r in bound_events(result, "a1")] == [None]


def test_a_kept_hold_leaving_its_slice_is_reported_once_its_env_file_is_written(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"})])
    os.unlink(node.path("/run/bcd/allocations/a1.env"))
    os.makedirs(node.path("/run/bcd/allocations/a1.env"))  # the env file cannot be written
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])
    assert result["section"]["state"] == "PROGRESSING"
    assert b"cgroup-parent" not in node.read("/etc/cdi/bcd-a1.json")  # its spec was written first
    # not reported while its env file is not in place: the failed result shows no event, the first pass's counted
    assert bound_events(result, "a1") == [] and result["events_not_shown"] == 1
    os.rmdir(node.path("/run/bcd/allocations/a1.env"))
    # the next pass writes the env file and tells the control plane the hold has left its slice
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])
    assert [p["action"] for p in result["plan"]] == ["write-env", "report-bound"]
    assert "cgroup_parent" not in bound_events(result, "a1")[-1] and bound_events(result, "a1")[-1]["generation"] == 2
    assert run(capsys, node, generation=2, devices=[hold("a1", GPU_A)])["changed"] is False


# -- 6. a damaged spec of a hold ---------------------------------------------------------------

def asides(node):
    return sorted(name for name in os.listdir(node.path("/etc/cdi")) if ".json.damaged-" in name)


def test_a_damaged_spec_of_a_wanted_hold_is_set_aside_and_rebound_silently(capsys, node):
    devices = [hold("a1", GPU_A), hold("a2", GPU_B)]
    run(capsys, node, generation=1, devices=devices)
    good = node.read("/etc/cdi/bcd-a1.json")
    node.write("/etc/cdi/bcd-a1.json", b'{"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devi')
    result = run(capsys, node, generation=1, devices=devices)
    assert [(p["action"], p.get("event")) for p in result["plan"]] == [("rebind", None), ("report-condition", "HoldSpecDamaged")]
    assert "already reported bound: nothing to report" in result["plan"][0]["text"]
    # nothing released, nothing bound anew; the damaged spec set aside is a condition someone must read
    assert types(result) == [("AllocationBound", "a1"), ("AllocationBound", "a2"), ("HoldSpecDamaged", None)]
    assert node.read("/etc/cdi/bcd-a1.json") == good
    (aside,) = asides(node)
    assert re.fullmatch(r"bcd-a1\.json\.damaged-\d{8}T\d{6}Z", aside)
    assert node.read("/etc/cdi/" + aside) == b'{"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devi'  # kept as it was
    assert [w for w in warnings(result) if w.startswith("cannot parse /etc/cdi/bcd-a1.json") and
            w.endswith("; it is set aside as /etc/cdi/bcd-a1.json.damaged-%s" % aside.rsplit("-", 1)[1])]
    (condition,) = result["conditions"]
    assert (condition["type"], condition["reason"]) == ("HoldSpecDamaged", "SpecUnreadable")
    assert "/etc/cdi/" + aside in condition["message"]
    # the condition stays while the file is there; holds_info shows it too
    again = run(capsys, node, generation=1, devices=devices)
    assert again["changed"] is False and [c["type"] for c in again["conditions"]] == ["HoldSpecDamaged"]
    assert [c["type"] for c in info(capsys, node)["conditions"]] == ["HoldSpecDamaged"]
    os.unlink(node.path("/etc/cdi/" + aside))
    assert run(capsys, node, generation=1, devices=devices)["conditions"] == []


def test_a_damaged_spec_of_a_hold_no_longer_wanted_is_set_aside_and_reported_released(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    node.write("/etc/cdi/bcd-a1.json", b"not json at all")
    result = run(capsys, node, generation=2, devices=[])
    assert [p["action"] for p in result["plan"]] == ["release", "report-condition"]
    released = [e["body"] for e in result["events"] if e["type"] == "AllocationReleased"]
    assert [(b["allocation_id"], b["device_ids"]) for b in released] == [("a1", [GPU_A])]  # as last reported
    assert not node.exists("/etc/cdi/bcd-a1.json") and not node.exists("/run/bcd/allocations/a1.env")
    (aside,) = asides(node)
    assert node.read("/etc/cdi/" + aside) == b"not json at all"
    assert [c["type"] for c in result["conditions"]] == ["HoldSpecDamaged"]


def test_a_damaged_spec_set_aside_twice_in_one_second_keeps_both(capsys, node, monkeypatch):
    import time as _time
    monkeypatch.setattr(_time, "time", lambda: 1764669600.0)
    devices = [hold("a1", GPU_A)]
    run(capsys, node, generation=1, devices=devices)
    for content in (b"first", b"second"):
        node.write("/etc/cdi/bcd-a1.json", content)
        run(capsys, node, generation=1, devices=devices)
    kept = [node.read("/etc/cdi/" + name) for name in asides(node)]
    assert sorted(kept) == [b"first", b"second"]


def test_a_damaged_spec_is_set_aside_through_the_check_mode_plan_without_touching_it(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    node.write("/etc/cdi/bcd-a1.json", b"{")
    before = node.listing()
    checked = run(capsys, node, check=True, diff=True, generation=1, devices=[hold("a1", GPU_A)])
    assert node.listing() == before
    assert [p["action"] for p in checked["plan"]] == ["rebind", "report-condition"]
    assert any(d.get("after_header", "").startswith("/etc/cdi/bcd-a1.json (set aside as ") for d in checked["diff"])


# -- 13. a pod holding a device through a DRA claim -----------------------------------------------

def dra_pod(name, *cdi_devices):
    """A pod the fakehw kubelet lists with a DRA claim on bcd's CDI devices (Kubernetes 1.34+)."""
    return {"namespace": "ml", "name": name, "container": "main", "dynamic_resources": [
        {"claim_name": name + "-gpu", "claim_namespace": "ml", "claim_resources": [
            {"driver_name": "gpu.bcd.dev", "pool_name": "node-a", "device_name": "dev-%d" % i, "cdi_devices": [cdi]}
            for i, cdi in enumerate(cdi_devices)]}]}


def test_a_kubernetes_release_waits_for_a_pod_that_holds_its_mig_instance_through_a_dra_claim(capsys, node):
    devices = [mig("k1", GPU_A + "/gi1/ci0", binding="BINDING_KUBERNETES")]
    run(capsys, node, generation=1, devices=devices)
    node.set_hardware(kubelet={"reachable": True, "pods": [dra_pod("train-0", "bcd.dev/gpu=%s_gi1_ci0" % GPU_A)]})
    waiting = run(capsys, node, generation=2, devices=[])
    assert [p["allocation_id"] for p in waiting["pending_releases"]] == ["k1"]
    assert "AllocationReleased" not in [e["type"] for e in waiting["events"]]
    # the GPU stays claimed meanwhile: a hold on it is refused, naming the release
    refused = run(capsys, node, generation=3, devices=[hold("a2", GPU_A)])
    assert [(f["allocation_id"], f["reason"]) for f in refused["failures"]] == [("a2", "overlap")]
    assert "k1" in refused["failures"][0]["message"]
    node.set_hardware(kubelet={"reachable": True, "pods": []})  # the pod ended
    released = run(capsys, node, generation=4, devices=[])
    assert released["pending_releases"] == []
    assert ("AllocationReleased", "k1") in types(released)


# -- 14. the cdiVersion of a Kubernetes hold -------------------------------------------------------

def vendor_version(node, version):
    path = node.path("/var/run/cdi/nvidia.yaml")
    text = open(path).read()
    with open(path, "w") as handle:
        handle.write(re.sub(r"(?m)^cdiVersion: .*$", "cdiVersion: %s" % version, text))


@pytest.mark.parametrize("binding", ["BINDING_HOLD", "BINDING_KUBERNETES"])
def test_a_holds_cdi_version_is_0_6_0_or_the_vendor_specs_when_later_whatever_its_binding(capsys, node, binding):
    devices = [hold("h1", GPU_A, binding=binding)]
    run(capsys, node, generation=1, devices=devices)
    assert json.loads(node.read("/etc/cdi/bcd-h1.json"))["cdiVersion"] == "0.6.0"  # the vendor's is 0.5.0
    vendor_version(node, "0.8.0")  # a toolkit upgrade writes a later spec
    again = run(capsys, node, generation=1, devices=devices)
    assert again["changed"] is True
    spec = json.loads(node.read("/etc/cdi/bcd-h1.json"))
    assert spec["cdiVersion"] == "0.8.0"
    if binding == "BINDING_KUBERNETES":  # still none of the vendor's edits
        assert "NVIDIA_VISIBLE_DEVICES" not in json.dumps(spec) and "deviceNodes" not in json.dumps(spec)
    assert run(capsys, node, generation=1, devices=devices)["changed"] is False


# -- 15. a fakehw domain in any libvirt state ------------------------------------------------------

@pytest.mark.parametrize("state, counts", [("running", True), ("paused", True), ("shut off", False),
                                           ("crashed", False), ("in shutdown", False), ("pmsuspended", False)])
def test_only_a_running_or_paused_vm_holds_its_gpu(capsys, make_node, state, counts):
    node = make_node(domains=[{"instance_id": "inst_1", "state": state, "gpus": [GPU_C]}])
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_C)])
    if counts:
        assert fails(result) == [("a1", "overlap", "%s is passed through to instance inst_1" % GPU_C)]
    else:
        assert fails(result) == [] and node.exists("/etc/cdi/bcd-a1.json")


def test_a_shut_off_vms_memory_is_not_counted_by_admission(capsys, make_node):
    node = make_node(domains=[{"instance_id": "inst_1", "state": "shut off", "memory_bytes": 8 * GIB}])
    with_memory(node, 10)
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": 8 * GIB})])
    assert fails(result) == []
    node.set_hardware(domains=[{"instance_id": "inst_1", "state": "running", "memory_bytes": 8 * GIB}])
    result = run(capsys, node, generation=2, devices=[hold("a2", GPU_B, limits={"memory_bytes": 8 * GIB})])
    assert [(f["allocation_id"], f["reason"]) for f in result["failures"]] == [("a2", "resources-exhausted")]


# -- 16. a fakehw host without meminfo -------------------------------------------------------------

UNREADABLE_MEMORY = "host memory unreadable; binding without host-side admission"


def test_a_fakehw_host_without_meminfo_binds_without_admission_and_says_so_once(capsys, node):
    assert not node.exists("/proc/meminfo")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"memory_bytes": 64 * GIB}),
                                                      hold("a2", GPU_B, limits={"memory_bytes": 64 * GIB})])
    assert fails(result) == []
    assert warnings(result).count(UNREADABLE_MEMORY) == 1
    # a hold that books no memory needs no admission: nothing to say
    assert UNREADABLE_MEMORY not in warnings(run(capsys, node, generation=2, devices=[hold("a3", GPU_C)]))
    # with meminfo, admission runs and the warning goes
    with_memory(node, 10)
    result = run(capsys, node, generation=3, devices=[hold("a4", GPU_A, limits={"memory_bytes": 64 * GIB})])
    assert UNREADABLE_MEMORY not in warnings(result)
    assert [(f["allocation_id"], f["reason"]) for f in result["failures"]] == [("a4", "resources-exhausted")]


# -- proto3 zeros: an unset number is no limit -----------------------------------------------------

def test_a_zero_memory_or_cpu_limit_is_no_limit_never_a_slice_that_kills_its_workload(capsys, node):
    result = run(capsys, node, generation=1, devices=[
        hold("a1", GPU_A, limits={"memory_bytes": 0, "cpu_millis": "0", "cpus": "0-1"}),
        hold("a2", GPU_B, limits={"memory_bytes": "0", "hugepages_2mi": 0})])
    assert fails(result) == []
    properties = json.loads(node.read("/run/bcd/slices/bcd-alloc-a1.slice.json"))["properties"]
    assert properties["AllowedCPUs"] == "0-1"
    assert "MemoryMax" not in properties and "CPUQuota" not in properties
    assert not node.exists("/run/bcd/slices/bcd-alloc-a2.slice.json")  # nothing booked: devices only
    assert "bcd.dev/cgroup-parent" not in node.read("/etc/cdi/bcd-a2.json").decode()

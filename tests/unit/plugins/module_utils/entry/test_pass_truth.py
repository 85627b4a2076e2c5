# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 46, items 4 to 6: the pass tells the control plane the truth. Each through the module's pass
(``entry.converge.run_pass``) or ``bcd-holds`` on a fakehw node, asserted by what the node and the control plane
see: the plan, the result, the files and slices on the node, and the signed journal.

4. A hold bound again into its own slice while that slice still runs its earlier hold's workload (moved to other
   GPUs, or back after its release) with ``cpus``/``mems`` that narrow the slice is refused when the pass is
   planned (``resources-exhausted``, an ``AllocationFailed``): check mode plans exactly what the run does, and the
   run no longer releases the old hold and then retries a bind its slice step refuses, ``PROGRESSING`` for as
   long as the job runs.
5. A hold the node keeps is never reported ``AllocationFailed`` (on which the control plane lets its devices go):
   a kept hold whose new limits are refused is kept as it was bound and raises ``HoldChangeRefused`` for its
   allocation, cleared once it takes its assignment.
6. A vendor spec at a ``cdiVersion`` no CDI release defines (0.99.0) raises ``VendorSpecUnsupported`` naming the
   version and what to do, in the pass's result, its events, ``bcd-holds status`` and the metrics.
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_metrics import samples, value

GIB = 1 << 30
SLICE = "bcd-alloc-a1.slice"
RECORD = "/run/bcd/slices/%s.json" % SLICE
VENDOR = "/var/run/cdi/nvidia.yaml"
RUNNING_CPUSET = ("a running workload's cpus and mems only widen or stay (it would lose CPUs, or the memory nodes "
                  "its pages are on)")


def journal(node, since=0):
    """``(type, allocation_id)`` of each event journaled after seq ``since``."""
    return [(e["type"], e["body"].get("allocation_id")) for e in Journal(node.state()).unacked() if e["seq"] > since]


def last_seq(node):
    return max([e["seq"] for e in Journal(node.state()).unacked()] or [0])


def failures(result):
    return [(f.allocation_id, f.reason, f.message) for f in result.plan.failures]


def run_workload(node, running=True):
    data = json.loads(node.read(RECORD))
    data["populated"] = running
    node.write(RECORD, json.dumps(data))


def slice_record(node):
    content = node.read(RECORD)
    return None if content is None else json.loads(content)


def check_then_run(node, generation, devices):
    """Check mode, then the real pass: check mode writes nothing and plans exactly what the run does, with the
    same refusals and section."""
    before = node.listing()
    checked = node.run(generation, devices, check_mode=True)
    assert node.listing() == before
    real = node.run(generation, devices)
    assert checked.to_dict()["plan"] == real.to_dict()["plan"]
    assert checked.to_dict()["failures"] == real.to_dict()["failures"]
    assert checked.section == real.section
    return real


# --- 4. a hold bound again into its own running slice, narrowing it -------------------------------------------


def kept_move(words, device=GPU_A):
    """The refusal of a1's move whose new cpus or mems narrow the slice its live hold's workload runs in."""
    return "%s: %s; %s, and the slice still runs the workload of a1's hold on %s: it is kept there as bound, and " \
           "moves once the slice is empty" % (SLICE, words, RUNNING_CPUSET, device)


def held_as_bound(generation, message, device=GPU_A):
    return "a1 is held as bound at generation 1 (%s), not as generation %d asks: resources-exhausted: %s" % (
        device, generation, message)


@pytest.mark.parametrize("bound, moved, words", [
    ({"cpus": "0-3"}, {"cpus": "0-1"}, "limits.cpus 0-1 narrows AllowedCPUs=0-3: it leaves out CPUs 2-3"),
    ({"cpus": "0-3", "mems": "0-1"}, {"cpus": "0-3", "mems": "1"},
     "limits.mems 1 narrows AllowedMemoryNodes=0-1: it leaves out NUMA node 0"),
    ({"memory_bytes": 4 * GIB}, {"memory_bytes": 4 * GIB, "cpus": "0-3"},
     "limits.cpus 0-3 narrows AllowedCPUs from every CPU to 0-3"),
], ids=["fewer-cpus", "fewer-mems", "cpus-where-it-had-none"])
def test_a_hold_moved_that_would_narrow_its_running_slice_is_kept_as_bound_releasing_nothing(node, bound, moved, words):
    node.run(1, [hold("a1", GPU_A, limits=bound)])
    spec, env = node.read("/etc/cdi/bcd-a1.json"), node.read("/run/bcd/allocations/a1.env")
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % GPU_A).encode() in env
    run_workload(node)
    before = slice_record(node)
    seq = last_seq(node)
    wanted = [hold("a1", GPU_B, limits=moved)]
    result = check_then_run(node, 2, wanted)
    message = kept_move(words)
    assert failures(result) == [("a1", "resources-exhausted", message)]
    assert result.section["state"] == "FAILED" and result.section["observed_generation"] == 2
    # refused before anything is released: the old hold stays on its GPU, its files and slice as they were
    assert not [entry for entry in result.to_dict()["plan"] if entry["action"] in ("release", "bind", "refuse")]
    assert node.read("/etc/cdi/bcd-a1.json") == spec and node.read("/run/bcd/allocations/a1.env") == env
    assert slice_record(node) == before
    assert [(h["allocation_id"], h["device_ids"]) for h in result.to_dict()["holds"]] == [("a1", [GPU_A])]
    # the control plane is told the hold is kept where it is, not that the allocation failed (and its GPU free)
    assert journal(node, seq) == [("HoldChangeRefused", "a1")]
    (event,) = [e for e in Journal(node.state()).unacked() if e["seq"] > seq]
    assert event["body"]["device_ids"] == [GPU_A] and event["body"]["message"] == held_as_bound(2, message)
    assert event["signature"]
    (condition,) = [c for c in result.to_dict()["conditions"] if c["type"] == "HoldChangeRefused"]
    assert condition["allocation_id"] == "a1" and condition["device_ids"] == [GPU_A]
    # judged again by the timer's pass: the same, and nothing new said
    again = check_then_run(node, 2, wanted)
    assert again.changed is False and failures(again) == [("a1", "resources-exhausted", message)]
    assert journal(node, seq) == [("HoldChangeRefused", "a1")]
    # the workload exits: the next pass moves the hold, and the condition clears
    run_workload(node, running=False)
    done = check_then_run(node, 2, wanted)
    assert failures(done) == [] and done.section["state"] == "CONVERGED"
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % GPU_B).encode() in node.read("/run/bcd/allocations/a1.env")
    assert [(h["allocation_id"], h["device_ids"]) for h in done.to_dict()["holds"]] == [("a1", [GPU_B])]
    assert journal(node, seq) == [("HoldChangeRefused", "a1"), ("AllocationReleased", "a1"),
                                  ("AllocationBound", "a1"), ("HoldChangeRefusedCleared", "a1")]


def test_the_gpus_of_a_move_kept_as_bound_are_not_handed_to_another_allocation(node):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3"})])
    run_workload(node)
    seq = last_seq(node)
    # a2 is placed on the GPU a1 leaves: a1 stays on it, so a2 is refused (overlap), not bound beside a1's workload
    result = check_then_run(node, 2, [hold("a1", GPU_B, limits={"cpus": "0-1"}), hold("a2", GPU_A)])
    assert [(f[0], f[1]) for f in failures(result)] == [("a1", "resources-exhausted"), ("a2", "overlap")]
    assert "a1" in failures(result)[1][2]
    assert not node.exists("/etc/cdi/bcd-a2.json") and not node.exists("/run/bcd/allocations/a2.env")
    assert sorted(journal(node, seq)) == [("AllocationFailed", "a2"), ("HoldChangeRefused", "a1")]
    assert [(h["allocation_id"], h["device_ids"]) for h in result.to_dict()["holds"]] == [("a1", [GPU_A])]


def test_a_moved_hold_that_widens_its_running_slice_moves(node):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3"})])
    run_workload(node)
    seq = last_seq(node)
    result = check_then_run(node, 2, [hold("a1", GPU_B, limits={"cpus": "0-7"})])
    assert failures(result) == [] and result.section["state"] == "CONVERGED"
    assert journal(node, seq) == [("AllocationReleased", "a1"), ("AllocationBound", "a1")]
    assert slice_record(node)["properties"] == {"AllowedCPUs": "0-7"}


def test_a_hold_back_after_its_release_that_narrows_its_running_slice_is_refused_and_widening_binds(node):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3"})])
    run_workload(node)
    node.run(2, [])  # released; its slice kept with its limits while the workload runs
    seq = last_seq(node)
    narrowed = check_then_run(node, 3, [hold("a1", GPU_A, limits={"cpus": "2-5"})])
    assert [(f[0], f[1]) for f in failures(narrowed)] == [("a1", "resources-exhausted")]
    assert "it leaves out CPUs 0-1" in failures(narrowed)[0][2]
    assert narrowed.section["state"] == "FAILED"
    assert journal(node, seq) == [("AllocationFailed", "a1")]
    assert slice_record(node)["properties"] == {"AllowedCPUs": "0-3"}
    # a wider list is no narrowing: bound into the running slice, as before
    wider = check_then_run(node, 4, [hold("a1", GPU_A, limits={"cpus": "0-7"})])
    assert failures(wider) == [] and wider.section["state"] == "CONVERGED"
    assert slice_record(node)["properties"] == {"AllowedCPUs": "0-7"}
    assert json.loads(node.read("/etc/cdi/bcd-a1.json"))["annotations"]["bcd.dev/cgroup-parent"] == SLICE


def test_an_empty_slice_takes_the_moved_holds_narrower_cpus(node):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3"})])
    result = check_then_run(node, 2, [hold("a1", GPU_B, limits={"cpus": "0-1"})])
    assert failures(result) == [] and result.section["state"] == "CONVERGED"
    assert slice_record(node)["properties"] == {"AllowedCPUs": "0-1"}


# --- 5. a hold the node keeps is never reported failed --------------------------------------------------------


def test_a_kept_hold_whose_narrowing_is_refused_is_kept_as_bound_and_says_so_never_failed(node):
    node.run(1, [hold("a1", GPU_A, limits={"cpus": "0-3"})])
    spec = node.read("/etc/cdi/bcd-a1.json")
    run_workload(node)
    seq = last_seq(node)
    wanted = [hold("a1", GPU_A, limits={"cpus": "0-1"})]
    result = check_then_run(node, 2, wanted)
    message = ("%s: limits.cpus 0-1 narrows AllowedCPUs=0-3: it leaves out CPUs 2-3; %s: set once the slice is "
               "empty; the hold keeps its limits" % (SLICE, RUNNING_CPUSET))
    assert failures(result) == [("a1", "resources-exhausted", message)]
    assert result.section["state"] == "FAILED"
    # the hold stays as it was bound, and the control plane is told so, not that the allocation failed
    assert node.read("/etc/cdi/bcd-a1.json") == spec and slice_record(node)["properties"] == {"AllowedCPUs": "0-3"}
    assert journal(node, seq) == [("HoldChangeRefused", "a1")]
    (event,) = [e for e in Journal(node.state()).unacked() if e["seq"] > seq]
    assert event["body"]["device_ids"] == [GPU_A] and event["body"]["reason"] == "KeptAsBound"
    assert event["body"]["message"] == "a1 is held as bound at generation 1 (%s), not as generation 2 asks: " \
                                       "resources-exhausted: %s" % (GPU_A, message)
    assert event["signature"]
    (condition,) = [c for c in result.to_dict()["conditions"] if c["type"] == "HoldChangeRefused"]
    assert condition["allocation_id"] == "a1" and condition["device_ids"] == [GPU_A]
    assert condition["message"] == event["body"]["message"]
    # the timer's pass finds the same: nothing new is said
    again = node.run(2, wanted)
    assert again.changed is False and journal(node, seq) == [("HoldChangeRefused", "a1")]
    # the workload exits: the next pass sets the new cpus, and the condition clears
    run_workload(node, running=False)
    done = check_then_run(node, 2, wanted)
    assert failures(done) == [] and done.section["state"] == "CONVERGED"
    assert slice_record(node)["properties"] == {"AllowedCPUs": "0-1"}
    assert journal(node, seq) == [("HoldChangeRefused", "a1"), ("HoldChangeRefusedCleared", "a1")]
    assert not [c for c in done.to_dict()["conditions"] if c["type"] == "HoldChangeRefused"]


def test_a_kept_hold_refused_is_a_condition_in_bcd_holds_status_and_the_metrics(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_A), hold("a2", GPU_C)]))
    # a2 re-sent with a binding the node does not take: kept, and said as kept
    resent = [hold("a1", GPU_A), hold("a2", GPU_C, binding="BINDING_INSTANCE")]
    cli(capsys, node, "converge", "--spec", write_spec(node, 2, resent, "g2.json"))
    assert ("AllocationFailed", "a2") not in journal(node)
    code, out, _err = cli(capsys, node, "status", "--json")
    assert code == EX_OK
    (condition,) = [c for c in json.loads(out)["conditions"] if c["type"] == "HoldChangeRefused"]
    assert condition["allocation_id"] == "a2" and condition["device_ids"] == [GPU_C]
    # the message the pass raised it with, which says why: status plans nothing and cannot judge it again
    (raised,) = [e for e in Journal(node.state()).unacked() if e["type"] == "HoldChangeRefused"]
    assert condition["message"] == raised["body"]["message"]
    assert condition["message"].startswith("a2 is held as bound at generation 1 (%s), not as generation 2 asks: "
                                           "unsupported-binding: " % GPU_C)
    code, out, _err = cli(capsys, node, "status")
    assert "HoldChangeRefused (KeptAsBound): a2 is held as bound at generation 1" in out
    code, out, _err = cli(capsys, node, "metrics")
    assert value(samples(out), "bcd_condition", type="HoldChangeRefused") == 1


def test_a_moved_hold_refused_is_released_first_so_its_failure_is_the_truth(node):
    node.set_hardware(domains=[{"instance_id": "inst_1", "state": "running", "gpus": [GPU_C]}])
    node.run(1, [hold("a1", GPU_A)])
    seq = last_seq(node)
    result = check_then_run(node, 2, [hold("a1", GPU_C)])  # GPU_C is the VM's: overlap
    assert [(f[0], f[1]) for f in failures(result)] == [("a1", "overlap")]
    assert journal(node, seq) == [("AllocationReleased", "a1"), ("AllocationFailed", "a1")]
    assert not node.exists("/etc/cdi/bcd-a1.json")


# --- 6. a vendor spec at a cdiVersion no runtime knows --------------------------------------------------------


def set_vendor_version(node, version):
    text = node.read(VENDOR).decode("utf-8")
    node.write(VENDOR, re.sub(r"(?m)^cdiVersion: .*$", "cdiVersion: %s" % version, text))


UNKNOWN = ("the vendor spec /var/run/cdi/nvidia.yaml has cdiVersion 0.99.0, which no CDI release defines (known: "
           "0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0), so no runtime loads it: no hold can be written "
           "from it and every bind is retried; regenerate it (nvidia-ctk cdi generate)")


def test_a_vendor_spec_of_a_version_no_release_defines_raises_a_condition_naming_it(capsys, node):
    set_vendor_version(node, "0.99.0")
    result = node.run(1, [hold("a1", GPU_B)])
    assert result.section["state"] == "PROGRESSING"
    assert [c for c in result.to_dict()["conditions"] if c["type"] == "VendorSpecUnsupported"] == [
        {"type": "VendorSpecUnsupported", "status": "True", "reason": "UnknownCdiVersion", "message": UNKNOWN}]
    (event,) = [e for e in Journal(node.state()).unacked() if e["type"] == "VendorSpecUnsupported"]
    assert event["body"]["message"] == UNKNOWN and event["signature"]
    code, out, _err = cli(capsys, node, "status")
    assert code == EX_OK and "VendorSpecUnsupported (UnknownCdiVersion): the vendor spec" in out
    code, out, _err = cli(capsys, node, "metrics")
    assert value(samples(out), "bcd_condition", type="VendorSpecUnsupported") == 1
    # regenerated at a version runtimes load: the bind goes through and the condition clears
    set_vendor_version(node, "0.8.0")
    fixed = node.run(1, [hold("a1", GPU_B)])
    assert fixed.section["state"] == "CONVERGED"
    assert not [c for c in fixed.to_dict()["conditions"] if c["type"] == "VendorSpecUnsupported"]
    assert ("VendorSpecUnsupportedCleared", None) in journal(node)
    code, out, _err = cli(capsys, node, "metrics")
    assert value(samples(out), "bcd_condition", type="VendorSpecUnsupported") == 0


@pytest.mark.parametrize("version", ["0.99.0", "1.9.0"])
def test_no_condition_where_the_runtimes_lower_the_holds_version_and_it_binds(node, version):
    # the oldest runtime loads at most 0.8.0: a hold is written at that, whatever the vendor spec says
    set_vendor_version(node, version)
    node.set_hardware(runtimes=[{"name": "podman", "version": "5.2.0"}])
    result = node.run(1, [hold("a1", GPU_B)], cdi_runtimes="auto")
    assert result.section["state"] == "CONVERGED"
    assert json.loads(node.read("/etc/cdi/bcd-a1.json"))["cdiVersion"] == "0.8.0"
    assert not [c for c in result.to_dict()["conditions"] if c["type"] == "VendorSpecUnsupported"]

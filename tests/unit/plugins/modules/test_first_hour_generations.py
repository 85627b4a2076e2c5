# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A user's first hour (issue 26, items 1 to 4), through the module: a playbook without a generation is
numbered by the node, so a fixed input is judged afresh; a generation given with another input than the
node applied at it fails before anything is written; a pass that did not reach the asked state fails
the task (``on_refusal: report`` keeps the old way); an integer cpulist means those CPUs; a diff shows
each changed file once, as a unified diff of that file."""

from __future__ import annotations

import difflib
import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.diffs import stable_settings
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.conftest import open_to_all
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import (
    NODE_UNPRIVILEGED,
    UNPRIVILEGED_MSG,
    hold,
    node_tree,
    run,
    run_as,
    warnings,
)

CONFLICT = ("generation %d was already applied with a different %s; raise generation, or leave it out to let the "
            "node number its inputs")


def stored(node):
    with open(os.path.join(node.state(), "nodespec.json")) as handle:
        return json.load(handle)


# -- 1. generations a person can use ----------------------------------------------------------------

def test_without_a_generation_the_node_numbers_its_inputs(capsys, node):
    first = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert first["section"]["generation"] == 1 and first["section"]["state"] == "CONVERGED"
    assert stored(node)["generation"] == 1
    same = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert same["section"]["generation"] == 1
    assert same["changed"] is False and same["plan"] == []
    edited = run(capsys, node, devices=[hold("a1", GPU_A), hold("a2", GPU_B)])
    assert edited["section"]["generation"] == 2
    assert [p["action"] for p in edited["plan"]] == ["bind"]
    instances = run(capsys, node, devices=[hold("a1", GPU_A), hold("a2", GPU_B)],
                    instances=[{"instance_id": "vm1", "gpus": []}])
    assert instances["section"]["generation"] == 3


def test_a_fixed_typo_is_judged_afresh_without_a_generation(capsys, node):
    typo = hold("a1", GPU_A)
    typo["devics"] = typo.pop("devices")
    refused = run(capsys, node, on_refusal="report", devices=[typo])
    assert [(f["generation"], f["reason"]) for f in refused["failures"]] == [(1, "invalid-assignment")]
    fixed = run(capsys, node, devices=[hold("a1", GPU_A)])
    assert not fixed.get("failed")
    assert fixed["section"] == {"state": "CONVERGED", "generation": 2, "observed_generation": 2, "message": ""}
    assert node.exists("/etc/cdi/bcd-a1.json")


def test_a_given_generation_keeps_working_as_a_control_plane_numbers_it(capsys, node):
    run(capsys, node, generation=7, devices=[hold("a1", GPU_A)])
    again = run(capsys, node, generation=7, devices=[hold("a1", GPU_A)])
    assert again["changed"] is False and again["section"]["generation"] == 7
    # left out after a control plane's 7: the same input is 7, another one 8
    assert run(capsys, node, devices=[hold("a1", GPU_A)])["section"]["generation"] == 7
    assert run(capsys, node, devices=[])["section"]["generation"] == 8


def test_a_given_generation_applied_with_another_input_fails_before_writing(capsys, node):
    run(capsys, node, generation=3, devices=[hold("a1", GPU_A)])
    before = node.listing()
    result = run(capsys, node, generation=3, devices=[hold("a1", GPU_B)])
    assert result["failed"] is True
    assert result["msg"] == CONFLICT % (3, "devices section")
    assert node.listing() == before
    checked = run(capsys, node, check=True, generation=3, devices=[hold("a1", GPU_B)])
    assert checked["msg"] == CONFLICT % (3, "devices section")
    only_instances = run(capsys, node, generation=3, devices=[hold("a1", GPU_A)],
                         instances=[{"instance_id": "vm1", "gpus": [GPU_B]}])
    assert only_instances["msg"] == CONFLICT % (3, "instances section")
    both = run(capsys, node, generation=3, devices=[], instances=[{"instance_id": "vm1", "gpus": [GPU_B]}])
    assert both["msg"] == CONFLICT % (3, "devices and instances sections")
    assert node.listing() == before
    raised = run(capsys, node, generation=4, devices=[hold("a1", GPU_B)])
    assert not raised.get("failed") and raised["section"]["generation"] == 4
    assert NodeState(node.state()).load(write=False).ledger.observed_generation == 4


# -- 3. input means what it says ----------------------------------------------------------------------

def slice_properties(node, allocation_id):
    return json.loads(node.read("/run/bcd/slices/bcd-alloc-%s.slice.json" % allocation_id))["properties"]


def test_an_integer_cpulist_names_that_cpu_or_node(capsys, node):
    result = run(capsys, node, devices=[hold("a0", GPU_A, limits={"cpus": 0, "mems": 0}),
                                        hold("a3", GPU_B, limits={"cpus": 3})])
    assert not result.get("failed") and result["failures"] == []
    assert slice_properties(node, "a0")["AllowedCPUs"] == "0"
    assert slice_properties(node, "a0")["AllowedMemoryNodes"] == "0"
    assert slice_properties(node, "a3")["AllowedCPUs"] == "3"
    assert [h["cgroup_parent"] for h in result["holds"]] == ["bcd-alloc-a0.slice", "bcd-alloc-a3.slice"]
    # the same CPUs written as text are the same input: nothing to do, no new generation
    again = run(capsys, node, devices=[hold("a0", GPU_A, limits={"cpus": "0", "mems": "0"}),
                                       hold("a3", GPU_B, limits={"cpus": "3"})])
    assert again["changed"] is False and again["section"]["generation"] == 1


def test_a_limit_given_as_its_zero_value_is_dropped_with_a_warning(capsys, node):
    result = run(capsys, node, devices=[hold("a1", GPU_A, limits={"cpus": "0-1", "memory_bytes": 0,
                                                                  "cpu_millis": "0", "mems": ""})])
    assert result["failures"] == []
    assert slice_properties(node, "a1") == {"AllowedCPUs": "0-1"}
    assert [w for w in warnings(result) if "limits." in w] == [
        'a1: limits.mems: "" reads as unset (proto3\'s zero value), so no mems limit is set',
        "a1: limits.cpu_millis: \"0\" reads as unset (proto3's zero value), so no cpu_millis limit is set",
        "a1: limits.memory_bytes: 0 reads as unset (proto3's zero value), so no memory_bytes limit is set"]


def test_a_negative_or_boolean_cpulist_is_still_refused(capsys, node):
    result = run(capsys, node, on_refusal="report", devices=[hold("a1", GPU_A, limits={"cpus": -1}),
                                                             hold("a2", GPU_B, limits={"cpus": True})])
    assert [(f["allocation_id"], f["message"]) for f in result["failures"]] == [
        ("a1", "limits.cpus: '-1' is not a cpulist such as 0-3,8"),
        ("a2", "limits.cpus: must be a cpulist string such as 0-3,8")]


# -- 2. a pass that did not reach the asked state fails the task ----------------------------------------

GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"


@pytest.mark.parametrize("check", [False, True])
def test_a_refusal_fails_the_task_with_every_return_value_and_the_others_held(capsys, node, check):
    result = run(capsys, node, check=check, devices=[hold("a1", GONE), hold("a2", GPU_A),
                                                     hold("a3", GPU_A)])
    assert result["failed"] is True
    assert result["msg"] == ("assignments refused (the others of the pass are held): a1: device-missing: %s not "
                             "present; this node has GPU 0 %s, GPU 1 %s, GPU 2 %s; a3: overlap: %s is assigned to a2"
                             % (GONE, GPU_A, GPU_B, GPU_C, GPU_A))
    assert result["changed"] is True
    assert [h["allocation_id"] for h in result["holds"]] == ["a2"]
    assert [(f["allocation_id"], f["reason"]) for f in result["failures"]] == [("a1", "device-missing"),
                                                                               ("a3", "overlap")]
    assert result["section"]["state"] == "FAILED"
    assert set(result) >= {"plan", "section", "failures", "events", "holds", "conditions", "pending_releases",
                           "capabilities"}
    assert node.exists("/etc/cdi/bcd-a2.json") is not check
    if not check:
        assert [e["type"] for e in result["events"]] == ["AllocationBound", "AllocationFailed", "AllocationFailed"]


def test_on_refusal_report_keeps_the_task_ok_for_a_control_plane_reading_the_events(capsys, node):
    result = run(capsys, node, on_refusal="report", devices=[hold("a1", GONE), hold("a2", GPU_A)])
    assert "failed" not in result and result["changed"] is True
    assert result["section"]["state"] == "FAILED"
    assert [e["type"] for e in result["events"]] == ["AllocationBound", "AllocationFailed"]
    assert "a1 refused (device-missing): %s not present" % GONE in " ".join(warnings(result))


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root for another uid")
@pytest.mark.parametrize("check", [False, True])
def test_without_become_on_a_writable_state_dir_the_task_fails_and_writes_no_state_file(capsys, node, check):
    open_to_all(node.root)
    os.makedirs(node.state(), mode=0o777)
    os.chmod(node.state(), 0o777)  # the state directory this account could write (the role's, become forgotten)
    before = node_tree(node.base)
    result = run_as(65534, capsys, node, check=check, on_refusal="report",
                    devices=[hold("a1", GPU_A), hold("a2", GPU_B + "/s1")])
    assert result["failed"] is True
    assert result["msg"] == UNPRIVILEGED_MSG
    assert result["msg"].startswith("add become: true")
    assert result["changed"] is False and result["events"] == []
    assert [f["message"] for f in result["failures"]] == [NODE_UNPRIVILEGED] * 2
    assert node_tree(node.base) == before  # nothing at all: no lock, ledger, journal, key or stored input
    assert os.listdir(node.state()) == []


# -- 4. diffs a person reads --------------------------------------------------------------------------

def shown_lines(entries):
    """The lines Ansible prints for the file and slice entries of a ``--diff``: each a unified diff of its
    ``before`` and ``after`` under its headers, with Ansible's 3 lines of context."""
    lines = []
    for entry in entries:
        if "before_header" in entry:
            lines.extend(difflib.unified_diff(entry["before"].splitlines(True), entry["after"].splitlines(True),
                                              fromfile=entry["before_header"], tofile=entry["after_header"], n=3))
    return lines


def test_a_gpu_move_diffs_as_the_two_files_old_to_new_not_two_whole_specs(capsys, node):
    run(capsys, node, generation=1, devices=[hold("alloc_old", GPU_A, env=["TEAM=a"])])
    old_spec = node.read("/etc/cdi/bcd-alloc_old.json").decode()
    old_env = node.read("/run/bcd/allocations/alloc_old.env").decode()
    moved = run(capsys, node, check=True, diff=True, generation=2, devices=[hold("alloc_new", GPU_A, env=["TEAM=a"])],
                diff_detail="full")
    files = [d for d in moved["diff"] if "before_header" in d]
    assert [(d["before_header"], d["after_header"]) for d in files] == [
        ("/etc/cdi/bcd-alloc_old.json (removed)", "/etc/cdi/bcd-alloc_new.json (created)"),
        ("/run/bcd/allocations/alloc_old.env (removed)", "/run/bcd/allocations/alloc_new.env (created)")]
    assert files[0]["before"] == old_spec and files[1]["before"] == old_env
    real = run(capsys, node, generation=2, devices=[hold("alloc_new", GPU_A, env=["TEAM=a"])])
    assert real["section"]["state"] == "CONVERGED"
    assert files[0]["after"] == node.read("/etc/cdi/bcd-alloc_new.json").decode()
    # measured: the whole specs and env files removed and created were 2 * (lines of each) plus headers;
    # now only what differs (the allocation and reservation ids, the generation) with its context
    whole = sum(len(d["before"].splitlines()) + len(d["after"].splitlines()) + 4 for d in files)
    shown = shown_lines(files)
    # measured on this fakehw node: 152 lines as two whole files each side, 33 now (511 on a real node,
    # whose specs carry the vendor's mounts and hooks, which are the same in both and so not shown)
    assert whole >= 150, whole
    assert len(shown) <= 35, (len(shown), whole)
    changed = [line for line in shown if line[:1] in "+-" and line[:3] not in ("---", "+++")]
    assert all("alloc_" in line or "rsv_" in line or "generation" in line for line in changed), changed
    # the default diff (vendor edits summarised) shows the same changed lines, with fewer around them
    summary = run(capsys, node, check=True, diff=True, generation=3, devices=[hold("alloc_old", GPU_A, env=["TEAM=a"])])
    summary_lines = shown_lines([d for d in summary["diff"] if "before_header" in d])
    assert len(summary_lines) <= len(shown)


def test_a_hold_released_and_bound_again_is_one_diff_of_its_file(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    moved = run(capsys, node, check=True, diff=True, generation=2, devices=[hold("a1", GPU_B)])
    files = [d for d in moved["diff"] if "before_header" in d]
    assert [(d["before_header"], d["after_header"]) for d in files] == [
        ("/etc/cdi/bcd-a1.json", "/etc/cdi/bcd-a1.json"),
        ("/run/bcd/allocations/a1.env", "/run/bcd/allocations/a1.env")]
    assert GPU_A in files[0]["before"] and GPU_B in files[0]["after"] and GPU_A not in files[0]["after"]


def test_a_slice_diff_keeps_its_lines_in_one_order(capsys, node):
    limits = {"cpus": "0-3", "cpu_millis": 1500, "memory_bytes": 1 << 30}
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits=limits)])
    grown = run(capsys, node, check=True, diff=True, generation=2,
                devices=[hold("a1", GPU_A, limits=dict(limits, cpus="0-7"))])
    [entry] = [d for d in grown["diff"] if d.get("before_header", "").startswith("slice ")]
    assert entry["before"] == "AllowedCPUs=0-3\nCPUQuota=150%\nMemoryMax=1073741824\nMemoryHigh=966367641\n"
    assert entry["after"] == "AllowedCPUs=0-7\nCPUQuota=150%\nMemoryMax=1073741824\nMemoryHigh=966367641\n"
    assert [line for line in shown_lines([entry]) if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        "-AllowedCPUs=0-3\n", "+AllowedCPUs=0-7\n"]


def test_slice_settings_read_back_in_the_hosts_order_are_shown_in_the_plans():
    # systemctl show lists properties in its own order; the diff lists both sides in PROPERTY_ORDER
    host = "MemoryHigh=966367641\nhugetlb.2MB.max=0\nMemoryMax=1073741824\nAllowedCPUs=0-3\n"
    assert stable_settings(host) == "AllowedCPUs=0-3\nMemoryMax=1073741824\nMemoryHigh=966367641\nhugetlb.2MB.max=0\n"

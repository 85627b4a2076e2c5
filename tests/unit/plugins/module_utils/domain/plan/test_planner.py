# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner (spec page, "One pass"), from hand-built observations: what a
pass does, in which order, and what it refuses with which reason and message."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import DeviceRef, Limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason, Refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import resolve_devices
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import parse_assignments
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    HoldRender,
    cdi_spec_path,
    env_file_path,
    read_hold,
    render_env,
    render_spec,
    spec_bytes,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain, Gpu, Inventory, MigInstance
from ansible_collections.bcd.devices.plugins.module_utils.domain.ledger import BoundHold, JournaledRefusal, Ledger, UnfinishedRelease
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.planner import Observed, plan_pass
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState

from ansible_collections.bcd.devices.tests.unit.builders import hold as build_hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, MIG_A1, MIG_A2

MIG = GPU_A + "/gi1/ci0"
MIG2 = GPU_A + "/gi2/ci0"
GPU_GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"

# The spec page's message, word for word.
NODE_UNPRIVILEGED = ("bcd node runs without root and without [helper]: it cannot write /etc/cdi or create hold "
                     "slices (run bcd node as root, or under bcd helper)")

INVENTORY = Inventory(gpus=[
    Gpu(uuid=GPU_A, index=0, minor=0, mig=(MigInstance(1, 0, MIG_A1), MigInstance(2, 0, MIG_A2))),
    Gpu(uuid=GPU_B, index=1, minor=1),
    Gpu(uuid=GPU_C, index=2, minor=2),
], source="fakehw")


def vendor(node_for_a="/dev/nvidia0"):
    return VendorSpec(
        path="/var/run/cdi/nvidia.json", cdi_version="0.5.0", digest=node_for_a,
        devices={GPU_A: {"deviceNodes": [{"path": node_for_a}]}, GPU_B: {"deviceNodes": [{"path": "/dev/nvidia1"}]},
                 MIG_A1: {"deviceNodes": [{"path": node_for_a}, {"path": "/dev/nvidia-caps/nvidia-cap21"}]}},
        common_edits={"deviceNodes": [{"path": "/dev/nvidiactl"}]})


def refs(ids):
    return [DeviceRef(i, "gpu.mig" if "/gi" in i else "gpu.slot" if "/s" in i else "gpu") for i in ids]


def assign(allocation_id, ids, **fields):
    return build_hold(allocation_id, *ids, **fields)


def live(allocation_id, ids, generation=1, reservation=None, kubernetes=False, spec_vendor=None, env=()):
    """A hold as a pass reads it back from /etc/cdi, and its env file."""
    atoms = resolve_devices(refs(ids), INVENTORY)
    hold = HoldRender(allocation_id, reservation or "rsv_" + allocation_id, generation, tuple(atoms),
                      kubernetes=kubernetes, env=tuple(env))
    content = spec_bytes(render_spec(hold, spec_vendor))
    return read_hold(allocation_id, cdi_spec_path(allocation_id), content), render_env(hold)


def observe(holds=(), ledger=None, env_files=None, **kwargs):
    values = dict(node_id="node-a", boot_id="boot-1", inventory=INVENTORY, vendor=VendorSpec(),
                  live={}, env_files={}, ledger=ledger, state_dir="/var/lib/bcd")
    for hold, env in holds:
        values["live"][hold.allocation_id] = hold
        values["env_files"][hold.allocation_id] = env
    if env_files:
        values["env_files"].update(env_files)
    if ledger is None:  # every live hold was reported
        values["ledger"] = Ledger(bound=dict((a, BoundHold(1, parent_recorded=False)) for a in values["live"]))
    values.update(kwargs)
    return Observed(**values)


def plan(generation, devices, observed, instances=None):
    return plan_pass(generation, parse_assignments(devices), observed, instances)


def steps(result):
    return [(a.kind, a.allocation_id) for a in result.actions]


def fails(result):
    return [(f.allocation_id, f.reason, f.message) for f in result.failures]


# --- binds and releases --------------------------------------------------------------------


def test_a_new_hold_is_bound_with_its_files_and_event():
    result = plan(42, [assign("a1", [GPU_A, MIG2])], observe())
    assert steps(result) == [("bind", "a1")]
    bind = result.actions[0]  # the only one (pylint reads Plan.actions' field() as no sequence)
    assert [(c.kind, c.path, c.before) for c in bind.node_files()] == [
        ("allocation-env", "/run/bcd/allocations/a1.env", None), ("cdi", "/etc/cdi/bcd-a1.json", None)]
    assert bind.event == {"type": "AllocationBound", "body": {
        "node_id": "node-a", "boot_id": "boot-1", "allocation_id": "a1", "generation": 42,
        "device_ids": [GPU_A, MIG2],
        "cdi_devices": ["bcd.dev/gpu=" + GPU_A, "bcd.dev/gpu=%s_gi2_ci0" % GPU_A],
        "cdi_spec_path": "/etc/cdi/bcd-a1.json", "env_file": "/run/bcd/allocations/a1.env"}}
    assert result.failures == [] and result.errors == []
    assert [h["allocation_id"] for h in result.holds] == ["a1"]


def test_a_hold_no_longer_wanted_is_released():
    hold = live("a1", [GPU_A, GPU_B + "/s1"])
    result = plan(2, [], observe([hold]))
    assert steps(result) == [("release", "a1")]
    release = result.actions[0]  # the only one
    assert [(c.path, c.before, c.after) for c in release.node_files()] == [
        ("/etc/cdi/bcd-a1.json", hold[0].content, None), ("/run/bcd/allocations/a1.env", hold[1], None)]
    assert release.event == {"type": "AllocationReleased", "body": {
        "node_id": "node-a", "boot_id": "boot-1", "allocation_id": "a1", "generation": 2,
        "device_ids": [GPU_A, GPU_B + "/s1"]}}
    assert result.holds == []


def test_releases_come_before_binds_so_a_gpu_moves_in_one_generation():
    result = plan(2, [assign("a2", [GPU_A])], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("release", "a1"), ("bind", "a2")]
    assert result.failures == []


def test_a_kept_hold_that_matches_needs_nothing():
    result = plan(2, [assign("a1", [GPU_A])], observe([live("a1", [GPU_A])]))
    assert steps(result) == []
    assert result.failures == [] and result.errors == []
    assert [h["allocation_id"] for h in result.holds] == ["a1"]
    assert result.holds[0]["generation"] == 1  # still the generation it was bound at


def test_a_kept_hold_is_rendered_again_for_a_new_vendor_spec():
    hold = live("a1", [GPU_A, MIG], spec_vendor=vendor("/dev/nvidia0"))
    result = plan(2, [assign("a1", [GPU_A, MIG])], observe([hold], vendor=vendor("/dev/nvidia7")))
    assert steps(result) == [("rerender", "a1")]
    (change,) = result.actions[0].node_files()
    assert (change.kind, change.path, change.before) == ("cdi", "/etc/cdi/bcd-a1.json", hold[0].content)
    assert b"/dev/nvidia7" in change.after and b"/dev/nvidia0" not in change.after
    assert b'"bcd.dev/generation": "1"' in change.after  # still bound at generation 1
    assert result.actions[0].event_type() is None  # a re-render is no new bind


def test_a_kept_hold_is_rendered_again_for_a_new_reservation_id():
    hold = live("a1", [GPU_A], reservation="rsv_old")
    result = plan(2, [assign("a1", [GPU_A], reservation_id="rsv_new")], observe([hold]))
    assert [a.kind for a in result.actions] == ["rerender", "write-env"]
    assert "reservation id" in result.actions[0].text
    assert b"rsv_new" in result.actions[0].node_files()[0].after
    assert b"BCD_RESERVATION_ID=rsv_new\n" in result.actions[1].node_files()[0].after


def test_a_missing_env_file_is_written_again():
    hold, _env = live("a1", [GPU_A])
    result = plan(2, [assign("a1", [GPU_A])], observe([(hold, None)]))
    assert steps(result) == [("write-env", "a1")]
    (change,) = result.actions[0].node_files()
    assert (change.path, change.before) == ("/run/bcd/allocations/a1.env", None)
    assert change.after.startswith(b"BCD_ALLOCATION_ID=a1\n")
    assert "missing" in result.actions[0].text


def test_new_env_lines_rewrite_the_env_file():
    result = plan(2, [assign("a1", [GPU_A], env=["TEAM=x"])], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("write-env", "a1")]
    assert result.actions[0].node_files()[0].after.endswith(b"TEAM=x\n")


def test_a_hold_whose_devices_changed_is_released_and_bound_again():
    result = plan(3, [assign("a1", [GPU_B])], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("release", "a1"), ("bind", "a1")]
    assert list(result.actions[0].device_ids) == [GPU_A]
    assert list(result.actions[1].device_ids) == [GPU_B]


def test_a_hold_whose_binding_changed_is_released_and_bound_again():
    result = plan(3, [assign("a1", [GPU_A], binding="BINDING_KUBERNETES")], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("release", "a1"), ("bind", "a1")]
    assert b'"bcd.dev/binding": "kubernetes"' in result.actions[1].node_files()[1].after


def test_a_hold_written_but_never_reported_is_reported():
    result = plan(2, [assign("a1", [GPU_A])], observe([live("a1", [GPU_A])], ledger=Ledger()))
    assert steps(result) == [("report-bound", "a1")]
    assert result.actions[0].node_files() == ()
    assert result.actions[0].event["type"] == "AllocationBound"
    assert result.actions[0].event["body"]["device_ids"] == [GPU_A]


def test_a_release_cut_short_is_finished_and_reported():
    ledger = Ledger(unfinished_releases={"a1": UnfinishedRelease(4, (GPU_A,))})
    hold = live("a1", [GPU_A])
    # the CDI spec is already gone, the env file is not
    result = plan(5, [], observe(ledger=ledger, env_files={"a1": hold[1]}))
    assert steps(result) == [("finish-release", "a1")]
    # only what is still there is removed (and shown in --diff with its real content)
    assert [(c.path, c.before) for c in result.actions[0].node_files()] == [("/run/bcd/allocations/a1.env", hold[1])]
    assert result.actions[0].event["body"]["generation"] == 4
    assert result.actions[0].event["body"]["device_ids"] == [GPU_A]


def test_a_live_hold_whose_new_input_is_invalid_is_kept():
    # kept as it was bound: no AllocationFailed (the control plane would let its GPU go), a condition instead
    result = plan(2, [assign("a1", [GPU_A], env=["BAD LINE"])], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("report-condition", "")]
    assert result.actions[0].event["type"] == "HoldChangeRefused"
    assert result.actions[0].event["body"]["allocation_id"] == "a1"
    assert fails(result) == [("a1", "invalid-assignment", "env[0]: 'BAD LINE' is not KEY=VALUE with KEY a letter or "
                                                          "underscore, then up to 127 letters, digits and underscores")]
    assert [h["allocation_id"] for h in result.holds] == ["a1"]


# --- conflicts -----------------------------------------------------------------------------


@pytest.mark.parametrize("held, wanted, message", [
    ([GPU_A], [GPU_A], "%s is assigned to a1" % GPU_A),
    ([MIG], [MIG], "%s is assigned to a1" % MIG),
    ([GPU_A + "/s1"], [GPU_A + "/s1"], "%s/s1 is assigned to a1" % GPU_A),
    ([MIG], [GPU_A], "%s has %s assigned to a1" % (GPU_A, MIG)),
    ([GPU_A + "/s2"], [GPU_A], "%s has %s/s2 assigned to a1" % (GPU_A, GPU_A)),
    ([GPU_A], [MIG2], "%s is assigned to a1" % GPU_A),
    ([GPU_A], [GPU_A + "/s3"], "%s is assigned to a1" % GPU_A),
])
def test_overlap_with_a_live_hold(held, wanted, message):
    result = plan(2, [assign("a1", held), assign("a2", wanted)], observe([live("a1", held)]))
    assert fails(result) == [("a2", "overlap", message)]
    assert steps(result) == [("refuse", "a2")]
    assert result.actions[0].event == {"type": "AllocationFailed", "body": {
        "node_id": "node-a", "allocation_id": "a2", "generation": 2, "reason": "overlap", "message": message}}


def test_overlap_with_a_hold_earlier_in_the_same_pass():
    result = plan(1, [assign("a1", [GPU_A]), assign("a2", [MIG]), assign("a3", [GPU_B])], observe())
    assert steps(result) == [("bind", "a1"), ("bind", "a3"), ("refuse", "a2")]
    assert fails(result) == [("a2", "overlap", "%s is assigned to a1" % GPU_A)]


def test_spec_order_decides_who_gets_a_contested_gpu():
    result = plan(1, [assign("a2", [MIG]), assign("a1", [GPU_A])], observe())
    assert steps(result) == [("bind", "a2"), ("refuse", "a1")]
    assert fails(result) == [("a1", "overlap", "%s has %s assigned to a2" % (GPU_A, MIG))]


def test_parts_of_one_gpu_go_to_different_holds():
    result = plan(1, [assign("a1", [MIG, GPU_B + "/s1"]), assign("a2", [MIG2, GPU_B + "/s2"])], observe())
    assert steps(result) == [("bind", "a1"), ("bind", "a2")]


def test_a_device_listed_twice():
    result = plan(1, [assign("a1", [GPU_B, GPU_B])], observe())
    assert fails(result) == [("a1", "overlap", "a device is listed twice")]


def test_a_gpu_in_an_instance_spec_is_the_vms():
    instances = [{"instance_id": "inst_1", "gpus": [GPU_B]}]
    result = plan(1, [assign("a1", [GPU_B + "/s1"]), assign("a2", [GPU_A])], observe(), instances)
    assert fails(result) == [("a1", "overlap", "%s is passed through to instance inst_1" % GPU_B)]
    assert steps(result) == [("bind", "a2"), ("refuse", "a1")]


def test_a_gpu_a_running_domain_has_is_the_vms():
    domains = [Domain("inst_2", "paused", gpus=(GPU_C,))]
    result = plan(1, [assign("a1", [GPU_C])], observe(domains=domains))
    assert fails(result) == [("a1", "overlap", "%s is passed through to instance inst_2" % GPU_C)]
    assert result.vfio == {GPU_C: "inst_2"}


def test_a_gpu_dropped_from_a_running_vms_spec_stays_the_vms():
    # the last pass saw inst_1 running with GPU_C; it still runs, GPU_C no longer in its spec
    ledger = Ledger(vfio={GPU_C: "inst_1"})
    domains = [Domain("inst_1", "running", gpus=())]
    result = plan(2, [assign("a1", [GPU_C])], observe(ledger=ledger, domains=domains),
                  [{"instance_id": "inst_1", "gpus": []}])
    assert fails(result) == [("a1", "overlap", "%s is passed through to instance inst_1" % GPU_C)]
    assert result.vfio == {GPU_C: "inst_1"}  # remembered until the VM's next start


def test_a_gpu_of_a_vm_that_stopped_is_free_again():
    ledger = Ledger(vfio={GPU_C: "inst_1"})
    result = plan(2, [assign("a1", [GPU_C])], observe(ledger=ledger, domains=[]))
    assert fails(result) == []
    assert steps(result) == [("bind", "a1")]
    assert result.vfio == {}


def test_while_domains_cannot_be_read_the_remembered_gpus_stay_the_vms():
    ledger = Ledger(vfio={GPU_C: "inst_1"})
    result = plan(2, [assign("a1", [GPU_C])], observe(ledger=ledger, domains=[], domains_error="virsh failed"))
    assert fails(result) == [("a1", "overlap", "%s is passed through to instance inst_1" % GPU_C)]
    assert result.vfio == {GPU_C: "inst_1"}


def test_a_released_holds_gpus_are_free_for_the_holds_after_it():
    result = plan(2, [assign("a2", [MIG]), assign("a3", [MIG2])], observe([live("a1", [GPU_A])]))
    assert steps(result) == [("release", "a1"), ("bind", "a2"), ("bind", "a3")]


# --- check order and messages -----------------------------------------------------------------


@pytest.mark.parametrize("binding, message", [
    ("BINDING_INSTANCE", "binding BINDING_INSTANCE is not supported"),
    ("BINDING_NODE", "binding BINDING_NODE is not supported"),
    ("BINDING_UNSPECIFIED", "binding is missing"),  # proto3's zero value: what a missing binding reads as
])
def test_unsupported_binding(binding, message):
    result = plan(1, [assign("a1", [GPU_A], binding=binding)], observe())
    assert fails(result) == [("a1", "unsupported-binding", message)]


@pytest.mark.parametrize("assignment, privileged, reason", [
    # binding first, even on an unprivileged node and with a bad atom
    (assign("a1", [GPU_GONE], binding="BINDING_INSTANCE"), False, "unsupported-binding"),
    # privilege before atoms
    (assign("a1", [GPU_GONE]), False, "node-unprivileged"),
    # unsupported atoms before missing ones
    (assign("a1", [GPU_GONE, "eth0"], devices=[{"id": GPU_GONE}, {"id": "eth0", "device_class": "nic.vf"}]),
     True, "unsupported-device"),
    # atoms before conflicts
    (assign("a1", [GPU_GONE, GPU_GONE]), True, "device-missing"),
    (assign("a1", [GPU_B, GPU_B]), True, "overlap"),
])
def test_the_first_failing_check_decides(assignment, privileged, reason):
    result = plan(1, [assignment], observe(privileged=privileged))
    assert [f.reason for f in result.failures] == [reason]


def test_device_missing_names_every_missing_device():
    result = plan(1, [assign("a1", [GPU_GONE, GPU_A, GPU_B + "/gi1/ci0"])], observe())
    assert fails(result) == [("a1", "device-missing", "%s not present; %s has no MIG instance gi1/ci0"
                              % (GPU_GONE, GPU_B))]


def test_unsupported_device_messages():
    result = plan(1, [assign("a1", [], devices=[{"id": "GPU-a/x", "device_class": "gpu.mig"}]),
                      assign("a2", [], devices=[{"id": "0000:3b:00.1", "device_class": "nic.vf"}])], observe())
    assert fails(result) == [
        ("a1", "unsupported-device", '"GPU-a/x" is not a MIG instance id (<gpu>/gi<n>/ci<n>)'),
        ("a2", "unsupported-device", "device class nic.vf cannot be held"),
    ]


def test_failures_are_in_spec_order_and_the_others_are_bound_anyway():
    devices = [
        assign("a1", [GPU_GONE]),
        {"allocation_id": "bad/id", "binding": "BINDING_HOLD", "devices": [{"id": GPU_B}]},
        assign("a3", [GPU_A]),
        assign("a4", [GPU_A]),
    ]
    result = plan(7, devices, observe())
    assert [(f.allocation_id, f.reason) for f in result.failures] == [
        ("a1", "device-missing"), ("devices[1]", "invalid-assignment"), ("a4", "overlap")]  # bad/id: by its position
    assert steps(result) == [("bind", "a3"), ("refuse", "a1"), ("refuse", "devices[1]"), ("refuse", "a4")]
    assert all(f.to_dict(result.generation)["generation"] == 7 for f in result.failures)


def test_an_allocation_sent_twice_is_refused_once():
    devices = [assign("a1", [GPU_A], env=["BAD"]), assign("a1", [GPU_B])]
    result = plan(1, devices, observe())
    assert [f.allocation_id for f in result.failures] == ["a1"]
    assert steps(result) == [("refuse", "a1")]


# --- failures once per allocation and generation ---------------------------------------------------


def test_a_failure_already_reported_for_this_generation_is_not_reported_again():
    # a ledger of 0.1.0 kept the generation alone: not reported twice, checked again
    result = plan(5, [assign("a1", [GPU_GONE])], observe(ledger=Ledger(failures={"a1": JournaledRefusal(5)})))
    assert fails(result) == [("a1", "device-missing", "%s not present" % GPU_GONE)]
    assert steps(result) == []


def test_a_refusal_of_this_generation_is_final_even_when_the_device_is_there_now():
    refused = JournaledRefusal(5, Refusal("a1", Reason.DEVICE_MISSING, "%s has no MIG instance gi1/ci0" % GPU_A))
    result = plan(5, [assign("a1", [MIG])], observe(ledger=Ledger(failures={"a1": refused})))
    assert fails(result) == [("a1", "device-missing", "%s has no MIG instance gi1/ci0" % GPU_A)]
    assert steps(result) == [] and result.holds == []


def test_a_later_generation_reports_the_failure_again():
    result = plan(6, [assign("a1", [GPU_GONE])], observe(ledger=Ledger(failures={"a1": JournaledRefusal(5)})))
    assert steps(result) == [("refuse", "a1")]
    assert result.actions[0].event["body"]["generation"] == 6


# --- unprivileged passes ---------------------------------------------------------------------------


def test_an_unprivileged_pass_refuses_every_new_hold_and_plans_no_writes():
    devices = [assign("a1", [GPU_A]), assign("a2", [MIG2], binding="BINDING_KUBERNETES"),
               assign("a3", [GPU_B], limits={"cpus": "0-3"})]
    result = plan(1, devices, observe(privileged=False))
    assert fails(result) == [(a, "node-unprivileged", NODE_UNPRIVILEGED) for a in ("a1", "a2", "a3")]
    assert steps(result) == [("refuse", "a1"), ("refuse", "a2"), ("refuse", "a3")]
    assert all(action.node_files() == () for action in result.actions)
    assert result.holds == []


def test_an_unprivileged_pass_leaves_live_holds_and_says_it_needs_root():
    result = plan(2, [], observe([live("a1", [GPU_A])], privileged=False))
    assert steps(result) == []
    assert len(result.errors) == 1 and "a1" in result.errors[0] and "root" in result.errors[0]


# --- purity --------------------------------------------------------------------------------------------


def test_planning_is_pure():
    holds = [live("a1", [GPU_A]), live("a2", [MIG2])]
    ledger = Ledger(bound={"a1": BoundHold(parent_recorded=False)}, failures={"a9": JournaledRefusal(1)},
                    vfio={GPU_C: "inst_1"})
    observed = observe(holds, ledger=ledger,
                       domains=[Domain("inst_1", gpus=(GPU_C,))])
    snapshot = copy.deepcopy(observed)
    devices = [assign("a2", [MIG2]), assign("a3", [GPU_B]), assign("a4", [GPU_C])]
    first = plan(2, devices, observed)
    second = plan(2, devices, observed)
    assert observed == snapshot
    assert [a.to_dict() for a in first.actions] == [a.to_dict() for a in second.actions]
    assert steps(first) == [("release", "a1"), ("report-bound", "a2"), ("bind", "a3"), ("refuse", "a4")]


def test_plan_text_has_one_line_per_action():
    result = plan(2, [assign("a2", [GPU_A]), assign("a3", [GPU_GONE])], observe([live("a1", [GPU_A])]))
    lines = result.text().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("release a1")
    assert lines[1].startswith("bind a2") and "bcd.dev/gpu=" + GPU_A in lines[1]
    assert lines[2].startswith("refuse a3 (device-missing)")
    assert plan(1, [], observe()).text() == "nothing to do"


def test_env_paths_never_come_from_input():
    result = plan(1, [assign("a1", [GPU_A])], observe())
    assert [c.path for c in result.actions[0].node_files()] == [env_file_path("a1"), cdi_spec_path("a1")]


def test_changed_limits_are_set_again_where_the_slice_cannot_be_read_back():
    # systemd's runtime properties are not read back (SliceState.properties is None): the limits the hold was
    # bound with, kept in the ledger, tell whether they changed.
    hold, env = live("a1", [GPU_A])
    bound = BoundHold(1, limits=Limits(cpus="0-3"), parent_recorded=False, limits_recorded=True)
    observed = observe([(hold, env)], ledger=Ledger(bound={"a1": bound}),
                       slices={"bcd-alloc-a1.slice": SliceState("bcd-alloc-a1.slice", properties=None)})
    changed = plan(2, [assign("a1", [GPU_A], limits={"cpus": "0-7"})], observed)
    assert [(a.kind, a.slice.properties) for a in changed.actions if a.kind == "apply-slice"] == [
        ("apply-slice", {"AllowedCPUs": "0-7"})]
    same = plan(2, [assign("a1", [GPU_A], limits={"cpus": "0-3"})], observed)
    assert "apply-slice" not in [a.kind for a in same.actions]

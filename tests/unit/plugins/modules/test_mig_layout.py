# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd.devices.mig_layout`` on fakehw nodes (issue 48), through the module and real passes: a layout made, made
again as nothing, planned honestly in check mode; mig-parted's documents; bad input refused before anything
changes; never under a hold, but around one; every change a signed event, and one made by someone else (or lost in
a crash) journaled at the next run; a mode change that waits for a reset; and a reboot, after which the boot run
makes the recorded layout again and the next pass renders the kept hold with its new MIG UUID."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_grammar import check_event
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import MIG_EVENT_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.entry import mig_layout as entry
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import reset_fakehw_gpus
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import fakehw_reboot, read_mig_file
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import FakeMigSide
from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.modules import mig_layout
from ansible_collections.bcd.devices.tests.unit.builders import mig
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call

G0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
G1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
A100 = "NVIDIA A100-SXM4-40GB"
DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture
def mig_node(make_node):
    """Two A100 40GB, MIG off on both, no instance."""
    return make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False},
                           {"uuid": G1, "index": 1, "minor": 1, "name": A100, "mig_mode": False}])


def layout_of(*entries):
    return [dict(devices=[index], mig_enabled=True, instances=[dict(i) for i in instances])
            for index, instances in entries]


def apply(capsys, node, check=False, diff=False, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    args.setdefault("lock_timeout", 5)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return call(capsys, mig_layout.main, args)


def layout_now(node):
    """``{gpu: [(gi, ci, gi profile, start, MIG uuid)]}`` as the fakehw file has it now."""
    found = {}
    for gpu in read_mig_file(node.fakehw).gpus:
        found[gpu.uuid] = sorted((inst.gi, ci.ci, inst.profile, inst.placement.start, ci.uuid)
                                 for inst in gpu.instances for ci in inst.compute)
    return found


def journal(node):
    """The MIG events journaled, each checked signed by the node's key and against the gateway's grammar:
    ``[(type, reason, device_id)]``."""
    key = NodeState(node.state()).public_key()
    found = []
    for line in (node.read("/var/lib/bcd/events.jsonl") or b"").splitlines():
        event = json.loads(line)
        if event["type"] not in MIG_EVENT_TYPES:
            continue
        assert verify_report(event, key), event
        assert check_event(event) is None, check_event(event)
        found.append((event["type"], event["body"]["reason"], event["body"]["device_ids"][0]))
    return found


THREE = [{"profile": "3g.20gb", "placement": 4}, {"profile": "2g.10gb", "count": 2}]


# -- made, then nothing to do ----------------------------------------------------------------------------------

def test_a_layout_is_made_once_and_a_second_run_changes_nothing(capsys, mig_node):
    done = apply(capsys, mig_node, layout=layout_of((0, THREE)))
    assert done["changed"] and not done.get("failed")
    assert [(op["kind"], op.get("profile"), op.get("placement")) for op in done["gpus"][0]["ops"]] == [
        ("mode", None, None), ("create", "3g.20gb", 4), ("create", "2g.10gb", 0), ("create", "2g.10gb", 2)]
    made = layout_now(mig_node)[G0]
    assert [(gi, ci, profile, start) for gi, ci, profile, start, _uuid in made] == [
        (1, 0, "3g.20gb", 4), (2, 0, "2g.10gb", 0), (3, 0, "2g.10gb", 2)]
    assert layout_now(mig_node)[G1] == []  # not named: left as it is
    assert [d["device_id"] for d in done["gpus"][0]["after"]] == ["%s/gi%d/ci0" % (G0, gi) for gi in (1, 2, 3)]
    assert journal(mig_node) == [("MIGModeChanged", "LayoutApplied", G0)] + [
        ("MIGInstanceCreated", "LayoutApplied", "%s/gi%d/ci0" % (G0, gi)) for gi in (1, 2, 3)]
    again = apply(capsys, mig_node, layout=layout_of((0, THREE)))
    assert not again["changed"] and again["msg"] == "the MIG layout is as wanted"
    assert layout_now(mig_node)[G0] == made and len(journal(mig_node)) == 4


def test_check_mode_plans_what_a_run_does_and_writes_nothing(capsys, mig_node):
    before = mig_node.listing()
    checked = apply(capsys, mig_node, check=True, diff=True, layout=layout_of((0, THREE)))
    assert mig_node.listing() == before
    assert checked["changed"]
    assert "+ %s: make GPU instance 3g.20gb at memory slice 4" % G0 in checked["diff"]["after"]
    done = apply(capsys, mig_node, layout=layout_of((0, THREE)))
    assert [op["text"] for op in done["gpus"][0]["ops"]] == [op["text"] for op in checked["gpus"][0]["ops"]]


def test_diff_shows_each_gpus_instances_before_and_after(capsys, mig_node):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    done = apply(capsys, mig_node, diff=True, layout=layout_of((0, [{"profile": "7g.40gb"}])))
    assert "%s/gi1/ci0 3g.20gb (GPU instance 3g.20gb at 4)" % G0 in done["diff"]["before"]
    assert "%s/gi1/ci0 7g.40gb (GPU instance 7g.40gb at 0)" % G0 in done["diff"]["after"]
    assert "3g.20gb" not in done["diff"]["after"]


def test_a_mig_parted_document_applies_the_config_it_names(capsys, mig_node):
    document = {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]}}
    done = apply(capsys, mig_node, mig_parted=document, mig_config="all-1g.5gb")
    assert done["changed"]
    assert [len(v) for v in layout_now(mig_node).values()] == [7, 7]
    apply(capsys, mig_node, mig_parted=document, mig_config="all-disabled")
    assert layout_now(mig_node) == {G0: [], G1: []}
    assert all(not gpu.mode for gpu in read_mig_file(mig_node.fakehw).gpus)


def test_nvidias_default_config_picks_each_gpu_by_its_pci_device_id_from_sysfs(capsys, make_node):
    h100 = "GPU-5f1c2a90-0000-4000-8000-000000000003"
    node = make_node(gpus=[
        {"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False, "pci_bus_id": "0000:07:00.0"},
        {"uuid": h100, "index": 1, "minor": 1, "name": "NVIDIA H100 80GB HBM3", "mig_mode": False,
         "pci_bus_id": "0000:0f:00.0"}])
    for address, device in (("0000:07:00.0", "0x20b0"), ("0000:0f:00.0", "0x2330")):
        node.write("/sys/bus/pci/devices/%s/device" % address, device + "\n")
        node.write("/sys/bus/pci/devices/%s/vendor" % address, "0x10de\n")
    document = yaml.safe_load((DATA / "mig-parted" / "deployments_systemd_config-default.yaml").read_text())
    done = apply(capsys, node, mig_parted=document, mig_config="all-1g.10gb")
    assert done["changed"] and not done.get("failed")
    assert [g["source"] for g in done["gpus"]] == ["mig-configs.all-1g.10gb[1]", "mig-configs.all-1g.10gb[0]"]
    now = layout_now(node)
    assert [p for _g, _c, p, _s, _u in now[G0]] == ["1g.10gb"] * 4  # the A100 40GB entry: 4 of them
    assert [p for _g, _c, p, _s, _u in now[h100]] == ["1g.10gb"] * 7  # the H100 80GB entry: 7


# -- refused ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("instances, message", [
    ([{"profile": "9g.80gb"}], "9g.80gb is not a MIG profile of NVIDIA A100-SXM4-40GB"),
    ([{"profile": "3g.20gb", "placement": 2}], "3g.20gb cannot start at memory slice 2"),
    ([{"profile": "1g.10gb", "count": 4}, {"profile": "1g.10gb"}], "5 instances of 1g.10gb"),
    ([{"profile": "4g.20gb"}, {"profile": "3g.20gb"}, {"profile": "1g.5gb"}], "more instances than the GPU has slices"),
])
def test_bad_input_is_refused_before_anything_changes(capsys, mig_node, instances, message):
    hardware = open(mig_node.fakehw, "rb").read()
    done = apply(capsys, mig_node, layout=layout_of((1, [{"profile": "1g.5gb"}]), (0, instances)))
    assert done["failed"] and message in done["msg"]
    assert done["msg"].startswith("the layout was refused, and nothing was changed: %s (GPU 0), layout[1]" % G0)
    assert open(mig_node.fakehw, "rb").read() == hardware and journal(mig_node) == []
    assert not mig_node.exists("/var/lib/bcd/mig-layout.json")


def test_more_instances_than_a_gpu_can_have_are_refused_by_the_input_check(capsys, mig_node):
    before = mig_node.listing()
    done = apply(capsys, mig_node, layout=layout_of((0, [{"profile": "1g.5gb", "count": 7}, {"profile": "1g.5gb"}])))
    assert done["failed"] and done["msg"] == ("layout[0].instances: more than 7 GPU instances once counts are "
                                              "expanded; a GPU has at most 7")
    assert mig_node.listing() == before


def test_a_gpu_not_present_is_refused(capsys, mig_node):
    done = apply(capsys, mig_node, layout=layout_of((7, THREE)))
    assert done["failed"] and "GPU 7 is not present" in done["msg"]


def test_a_held_instance_refuses_the_change_that_would_destroy_it_and_the_other_gpu_changes(capsys, mig_node):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    held = layout_now(mig_node)[G0][0]
    mig_node.run(1, [mig("alloc_train", "%s/gi1/ci0" % G0)])
    done = apply(capsys, mig_node, layout=layout_of((0, [{"profile": "7g.40gb"}]), (1, [{"profile": "7g.40gb"}])))
    assert done["failed"]
    assert "%s (GPU 0) is not changed: it would destroy GPU instance gi1: MIG instance gi1/ci0 held by alloc_train" \
        % G0 in done["msg"]
    assert layout_now(mig_node)[G0][0] == held
    assert [(profile, start) for _gi, _ci, profile, start, _uuid in layout_now(mig_node)[G1]] == [("7g.40gb", 0)]


@pytest.mark.parametrize("where", ["/var/run/cdi spec", "env file alone"])
def test_a_run_as_root_reads_the_holds_as_the_root_helper_does(capsys, mig_node, where):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    mig_node.run(1, [mig("alloc_train", "%s/gi1/ci0" % G0)])
    if where == "/var/run/cdi spec":
        mig_node.write("/var/run/cdi/bcd-alloc_train.json", mig_node.read("/etc/cdi/bcd-alloc_train.json"))
    os.unlink(mig_node.path("/etc/cdi/bcd-alloc_train.json"))  # the env file is left, naming the MIG device
    held = layout_now(mig_node)[G0][0]
    done = apply(capsys, mig_node, layout=layout_of((0, [{"profile": "7g.40gb"}])))
    assert done["failed"] and "it would destroy GPU instance gi1: MIG instance gi1/ci0 held by alloc_train" in done["msg"]
    assert layout_now(mig_node)[G0][0] == held


def test_a_gpu_a_vm_is_to_have_is_not_changed(capsys, mig_node):
    mig_node.run(1, [], instances=[{"instance_id": "inst_1", "gpus": [G1]}])
    done = apply(capsys, mig_node, layout=layout_of((0, THREE), (1, THREE)))
    assert done["failed"] and done["msg"].endswith(
        "%s (GPU 1) is not changed: to be passed through to VM inst_1" % G1)
    assert layout_now(mig_node)[G1] == [] and len(layout_now(mig_node)[G0]) == 3


def test_a_change_around_a_held_instance_goes_ahead_and_keeps_it_as_it_is(capsys, mig_node):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    held = layout_now(mig_node)[G0][0]
    mig_node.run(1, [mig("alloc_train", "%s/gi1/ci0" % G0)])
    done = apply(capsys, mig_node, layout=layout_of((0, [{"profile": "3g.20gb"}, {"profile": "1g.5gb", "count": 4}])))
    assert not done.get("failed") and done["changed"]
    assert [k["device_id"] for k in done["gpus"][0]["kept"]] == ["%s/gi1/ci0" % G0]
    now = layout_now(mig_node)[G0]
    assert held in now and sorted(p for _g, _c, p, _s, _u in now) == ["1g.5gb"] * 4 + ["3g.20gb"]


# -- a reset, a crash, someone else ----------------------------------------------------------------------------

def test_a_mode_change_that_waits_for_a_reset_is_said_and_the_next_run_after_a_reboot_goes_on(capsys, make_node):
    node = make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False,
                            "mig_mode_needs_reset": True}])
    done = apply(capsys, node, layout=layout_of((0, THREE)))
    assert not done.get("failed") and done["gpus"][0]["reset_needed"]
    assert "waits for a GPU reset (bcd.devices.gpu_reset) or a reboot" in done["msg"]
    assert layout_now(node)[G0] == []
    node.write("/proc/sys/kernel/random/boot_id", fakehw_reboot(node.fakehw) + "\n")
    booted = entry.converge_layout(node.host(), None, lock_timeout=5)  # the boot run keeps the mode the reset gave
    assert not booted["changed"] and read_mig_file(node.fakehw).gpu(G0).mode
    done = apply(capsys, node, layout=layout_of((0, THREE)))
    assert done["changed"] and len(layout_now(node)[G0]) == 3
    # the mode change was journaled when asked for, and not again when the reboot completed it
    assert [e for e in journal(node) if e[0] == "MIGModeChanged"] == [("MIGModeChanged", "LayoutApplied", G0)]


def test_a_mode_change_a_gpu_reset_completes_is_journaled_once(capsys, make_node):
    node = make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False,
                            "mig_mode_needs_reset": True}])
    assert apply(capsys, node, layout=layout_of((0, THREE)))["gpus"][0]["reset_needed"]
    reset_fakehw_gpus(node.fakehw, [G0])  # bcd.devices.gpu_reset's work on a fakehw node, in the same boot
    done = apply(capsys, node, layout=layout_of((0, THREE)))
    assert done["changed"] and len(layout_now(node)[G0]) == 3
    assert [e for e in journal(node) if e[0] == "MIGModeChanged"] == [("MIGModeChanged", "LayoutApplied", G0)]


def test_a_run_that_stops_between_a_change_and_its_event_is_made_whole_by_the_next(capsys, mig_node, monkeypatch):
    apply(capsys, mig_node, layout=layout_of((0, [{"profile": "7g.40gb"}])))
    real = FakeMigSide.apply
    calls = []

    def crash_after_the_second(self, op):
        done = real(self, op)
        calls.append(op)
        if len(calls) == 2:
            raise KeyboardInterrupt("the run was killed here")
        return done

    monkeypatch.setattr(FakeMigSide, "apply", crash_after_the_second)
    with pytest.raises(KeyboardInterrupt):
        entry.converge_layout(mig_node.host(), entry.wanted_of(mig_node.host(), layout_of((0, THREE))),
                              lock_timeout=5)
    monkeypatch.undo()
    half = layout_now(mig_node)[G0]
    assert [(gi, profile) for gi, _ci, profile, _s, _u in half] == [(1, "3g.20gb")]  # destroyed 7g, made one
    done = apply(capsys, mig_node, layout=layout_of((0, THREE)))
    assert done["changed"] and len(layout_now(mig_node)[G0]) == 3
    events = journal(mig_node)
    made_3g = ("MIGInstanceCreated", "ChangedOutside", "%s/gi1/ci0" % G0)  # made, killed before its event
    assert made_3g in events
    assert ("MIGInstanceDestroyed", "LayoutApplied", "%s/gi1/ci0" % G0) in events  # the 7g, journaled in time


def test_an_instance_destroyed_by_someone_else_is_journaled_at_the_next_run(capsys, mig_node):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    gone = layout_now(mig_node)[G0][1]
    FakeMigSide(mig_node.fakehw).apply(entry.MigOp(kind="destroy", gpu=G0, gi=gone[0]))
    done = apply(capsys, mig_node, layout=layout_of((0, THREE)))
    assert done["changed"]
    assert journal(mig_node)[-2:] == [("MIGInstanceDestroyed", "ChangedOutside", "%s/gi2/ci0" % G0),
                                      ("MIGInstanceCreated", "LayoutApplied", "%s/gi2/ci0" % G0)]


# -- a reboot ----------------------------------------------------------------------------------------------------

def test_after_a_reboot_the_boot_run_makes_the_layout_again_and_the_next_pass_renders_the_hold_anew(capsys, mig_node):
    apply(capsys, mig_node, layout=layout_of((0, THREE)))
    before = layout_now(mig_node)[G0]
    mig_node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    old_uuid = before[1][4]
    assert old_uuid in mig_node.read("/etc/cdi/bcd-alloc_train.json").decode()
    boot = fakehw_reboot(mig_node.fakehw)
    mig_node.write("/proc/sys/kernel/random/boot_id", boot + "\n")
    assert layout_now(mig_node)[G0] == []
    waiting = mig_node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    assert waiting is not None
    done = entry.converge_layout(mig_node.host(), None, lock_timeout=5)
    assert done["changed"] and not done["failed"] and done["held_missing"] == []
    after = layout_now(mig_node)[G0]
    assert [row[:4] for row in after] == [row[:4] for row in before]  # the same GI/CI at the same placements
    assert after[1][4] != old_uuid  # a fresh MIG UUID
    assert ("MIGInstanceCreated", "BootLayout", "%s/gi2/ci0" % G0) in journal(mig_node)
    mig_node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    spec = mig_node.read("/etc/cdi/bcd-alloc_train.json").decode()
    assert after[1][4] in spec and old_uuid not in spec


def test_the_boot_run_without_a_record_makes_nothing(mig_node):
    done = entry.converge_layout(mig_node.host(), None, lock_timeout=5)
    assert not done["changed"] and done["gpus"] == []

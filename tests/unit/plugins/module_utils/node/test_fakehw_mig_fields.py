# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG fields of a fakehw GPU entry (node/fakehw_mig_fields.py): what they read as, that a file without them
reads as it did, and that each bad one is a FakeHwError naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import MigInstance
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import ComputeInstance, GpuProcess
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeHwError, fakehw_from_data, load_fakehw
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig_fields import (
    MAX_MIG_ENTRIES,
    MAX_PROCESSES,
    FakeGpuInstance,
    FakeMigGpu,
    settle_mig_mode,
)

GPU1 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU2 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
MIG1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd1"
MIG2 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd2"
MIG3 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd3"
A100 = "NVIDIA A100-SXM4-40GB"

# A GPU entry with every MIG field: two GPU instances (one split in two compute instances), a third without
# compute instances, a pending change, a process on a MIG device and one on the GPU.
FULL = {
    "uuid": GPU1, "index": 0, "name": A100,
    "mig_mode": True, "mig_mode_pending": False, "mig_mode_needs_reset": True,
    "mig": [
        {"gi": 1, "ci": 0, "uuid": MIG1, "profile": "3g.20gb", "placement": 4, "ci_profile": "1c.3g.20gb"},
        {"gi": 1, "ci": 1, "uuid": MIG2, "profile": "3g.20gb", "placement": 4, "ci_profile": "2c.3g.20gb"},
        {"gi": 2, "ci": 0, "uuid": MIG3, "profile": "2g.10gb", "placement": 0},
        {"gi": 3, "profile": "1g.5gb", "placement": 2},
    ],
    "processes": [{"pid": 4242, "name": "python3", "gi": 1, "ci": 1}, {"pid": 7}],
}


def gpu(**fields):
    item = {"uuid": GPU1, "index": 0, "name": A100}
    item.update(fields)
    return item


def test_every_mig_field_reads_as_it_says():
    hw = fakehw_from_data({"gpus": [FULL]})
    assert hw.inventory.gpus[0].mig == (MigInstance(gi=1, ci=0, uuid=MIG1), MigInstance(gi=1, ci=1, uuid=MIG2),
                                        MigInstance(gi=2, ci=0, uuid=MIG3))  # MIG devices: compute instances only
    assert hw.mig == {GPU1: FakeMigGpu(
        where="gpus[0]", mode=True, pending=False, needs_reset=True,
        instances=(
            FakeGpuInstance(gi=1, profile="3g.20gb", placement=4, where="gpus[0].mig[0]", compute=(
                ComputeInstance(gi=1, ci=0, profile="1c.3g.20gb", uuid=MIG1),
                ComputeInstance(gi=1, ci=1, profile="2c.3g.20gb", uuid=MIG2))),
            FakeGpuInstance(gi=2, profile="2g.10gb", placement=0, where="gpus[0].mig[2]", compute=(
                ComputeInstance(gi=2, ci=0, profile="2g.10gb", uuid=MIG3),)),  # ci_profile: the GPU instance's
            FakeGpuInstance(gi=3, profile="1g.5gb", placement=2, where="gpus[0].mig[3]", compute=()),
        ),
        processes=(GpuProcess(gpu=GPU1, pid=4242, name="python3", gi=1, ci=1), GpuProcess(gpu=GPU1, pid=7)),
    )}


def test_the_mig_fields_change_nothing_else_a_pass_reads():
    """The same file without the new fields reads the same Inventory (and the same everything but ``mig``)."""
    old = copy.deepcopy(FULL)
    for name in ("mig_mode", "mig_mode_pending", "mig_mode_needs_reset", "processes"):
        old.pop(name)
    old["mig"] = [{"gi": e["gi"], "ci": e["ci"], "uuid": e["uuid"]} for e in old["mig"] if "ci" in e]
    new_hw, old_hw = fakehw_from_data({"gpus": [FULL]}), fakehw_from_data({"gpus": [old]})
    assert new_hw.inventory == old_hw.inventory
    new_hw.mig = old_hw.mig = {}
    assert new_hw == old_hw


def test_a_file_written_before_mig_layouts_reads_as_it_did(tmp_path):
    """``mig`` entries without a profile: GPU instances whose profile the file does not say, and no MIG mode said."""
    path = tmp_path / "hw.yml"
    path.write_text("gpus:\n  - uuid: %s\n    mig:\n      - {gi: 1, ci: 0, uuid: %s}\n      - {gi: 1, ci: 1, uuid: %s}\n"
                    "  - uuid: %s\n" % (GPU1, MIG1, MIG2, GPU2))
    hw = load_fakehw(str(path))
    assert hw.inventory.gpus[0].mig == (MigInstance(gi=1, ci=0, uuid=MIG1), MigInstance(gi=1, ci=1, uuid=MIG2))
    assert hw.mig[GPU1] == FakeMigGpu(where="gpus[0]", instances=(FakeGpuInstance(
        gi=1, profile=None, placement=None, where="gpus[0].mig[0]",
        compute=(ComputeInstance(gi=1, ci=0, profile="unknown", uuid=MIG1),
                 ComputeInstance(gi=1, ci=1, profile="unknown", uuid=MIG2))),))
    assert hw.mig[GPU2] == FakeMigGpu(where="gpus[1]")  # nothing said: read_mig decides from the catalog


def test_a_gpu_instance_without_compute_instances():
    hw = fakehw_from_data({"gpus": [gpu(mig=[{"gi": 2}, {"gi": 0, "profile": "7g.40gb", "placement": 0}])]})
    assert hw.inventory.gpus[0].mig == ()
    assert hw.mig[GPU1].instances == (FakeGpuInstance(gi=2, profile=None, placement=None, compute=(), where="gpus[0].mig[0]"),
                                      FakeGpuInstance(gi=0, profile="7g.40gb", placement=0, compute=(), where="gpus[0].mig[1]"))


@pytest.mark.parametrize("profile", ["1g.5gb", "1g.10gb+me", "7g.141gb", "1g.24gb+me.all", "1g.24gb-me", "4g.96gb+gfx"])
def test_profile_names_as_nvidia_smi_prints_them(profile):
    hw = fakehw_from_data({"gpus": [gpu(mig=[{"gi": 1, "ci": 0, "uuid": MIG1, "profile": profile, "placement": 0}])]})
    assert hw.mig[GPU1].instances[0].profile == profile


def mig(*entries):
    return {"gpus": [gpu(mig=list(entries))]}


def ci(gi=1, ci=0, uuid=MIG1, **fields):
    entry = {"gi": gi, "ci": ci, "uuid": uuid}
    entry.update(fields)
    return entry


THREE = {"profile": "3g.20gb", "placement": 4}


@pytest.mark.parametrize(
    "data,message",
    [
        ({"gpus": [gpu(mig_mode="yes")]}, r"gpus\[0\]\.mig_mode: must be true or false, not a string"),
        ({"gpus": [gpu(mig_mode_pending=1)]}, r"gpus\[0\]\.mig_mode_pending: must be true or false, not an integer"),
        ({"gpus": [gpu(mig_mode_needs_reset="no")]}, r"gpus\[0\]\.mig_mode_needs_reset: must be true or false"),
        ({"gpus": [gpu(mig_mode=False, mig=[ci()])]}, r"gpus\[0\]\.mig_mode: false, but mig lists MIG instances"),
        ({"gpus": [gpu(mig_mode=False, mig=[{"gi": 1}])]}, r"gpus\[0\]\.mig_mode: false, but mig lists MIG instances"),
        ({"gpus": [gpu(mig={"gi": 1})]}, r"gpus\[0\]\.mig: must be a list, not a mapping"),
        ({"gpus": [gpu(mig=[ci(ci=k, uuid="MIG-%d" % k) for k in range(MAX_MIG_ENTRIES + 1)])]},
         r"gpus\[0\]\.mig: lists 65 instances; at most 64"),
        (mig(ci(size=2)), r"gpus\[0\]\.mig\[0\]: unknown field 'size' \(known: gi, ci, uuid, profile, ci_profile, "
                          r"placement\)"),
        (mig(ci(profile="3g")), r"gpus\[0\]\.mig\[0\]\.profile: must be a GPU instance profile such as 3g.40gb, not '3g'"),
        (mig(ci(profile="MIG 3g.20gb", placement=0)), r"gpus\[0\]\.mig\[0\]\.profile: must be a GPU instance profile"),
        (mig(ci(profile="unknown", placement=0)), r"gpus\[0\]\.mig\[0\]\.profile: must be a GPU instance profile"),
        (mig(ci(profile=3, placement=0)), r"gpus\[0\]\.mig\[0\]\.profile: must be a string, not an integer"),
        (mig(ci(profile="3g.20gb")), r"gpus\[0\]\.mig\[0\]\.placement: required with profile"),
        (mig(ci(placement=4)), r"gpus\[0\]\.mig\[0\]\.profile: required with placement"),
        (mig(ci(ci_profile="1c.3g.20gb")), r"gpus\[0\]\.mig\[0\]\.profile: required with ci_profile"),
        (mig({"gi": 1, "placement": 4}), r"gpus\[0\]\.mig\[0\]\.profile: required with placement"),
        (mig(ci(profile="3g.20gb", placement=64)), r"gpus\[0\]\.mig\[0\]\.placement: must be at most 63, not 64"),
        (mig(ci(profile="3g.20gb", placement=-1)), r"gpus\[0\]\.mig\[0\]\.placement: must be a non-negative integer"),
        (mig(ci(ci_profile="2c.4g.20gb", **THREE)),
         r"gpus\[0\]\.mig\[0\]\.ci_profile: must be 3g.20gb or <n>c.3g.20gb with n under 3, not '2c.4g.20gb'"),
        (mig(ci(ci_profile="3c.3g.20gb", **THREE)), r"gpus\[0\]\.mig\[0\]\.ci_profile: must be 3g.20gb or <n>c"),
        (mig(ci(ci_profile="", **THREE)), r"gpus\[0\]\.mig\[0\]\.ci_profile: required"),
        (mig(ci(ci_profile="2c.3g.20gb", **THREE), ci(ci=1, uuid=MIG2, ci_profile="2c.3g.20gb", **THREE)),
         r"gpus\[0\]\.mig\[1\]\.ci_profile: the compute instances of GPU instance 1 take 4 compute slices; "
         r"a 3g.20gb has 3"),
        (mig(ci(**THREE), ci(ci=1, uuid=MIG2, **THREE)),
         r"gpus\[0\]\.mig\[1\]\.ci_profile: the compute instances of GPU instance 1 take 6 compute slices"),
        (mig(ci(**THREE), ci(ci=1, uuid=MIG2, profile="4g.20gb", placement=4)),
         r"gpus\[0\]\.mig\[1\]\.profile: GPU instance 1 is a 3g.20gb at placement 4 \(gpus\[0\]\.mig\[0\]\)"),
        (mig(ci(**THREE), ci(ci=1, uuid=MIG2, profile="3g.20gb", placement=0)),
         r"gpus\[0\]\.mig\[1\]\.placement: GPU instance 1 is a 3g.20gb at placement 4 \(gpus\[0\]\.mig\[0\]\)"),
        (mig(ci(), ci(ci=1, uuid=MIG2, **THREE)),
         r"gpus\[0\]\.mig\[1\]\.profile: GPU instance 1 has no profile \(gpus\[0\]\.mig\[0\]\)"),
        (mig(dict(gi=1, **THREE), ci(**THREE)),
         r"gpus\[0\]\.mig\[1\]: GPU instance 1 is listed without compute instances \(at gpus\[0\]\.mig\[0\]\)"),
        (mig(ci(**THREE), dict(gi=1, **THREE)),
         r"gpus\[0\]\.mig\[1\]: GPU instance 1 is listed with compute instances \(at gpus\[0\]\.mig\[0\]\)"),
        (mig({"gi": 1}, {"gi": 1}), r"gpus\[0\]\.mig\[1\]: duplicate GPU instance 1 \(also at gpus\[0\]\.mig\[0\]\)"),
        (mig(ci(profile="3g.20gb", placement=4, ci_profile="1c.3g.20gb", ci=None)), r"gpus\[0\]\.mig\[0\]\.ci: required"),
        ({"gpus": [gpu(processes={"pid": 1})]}, r"gpus\[0\]\.processes: must be a list, not a mapping"),
        ({"gpus": [gpu(processes=[{"pid": k} for k in range(MAX_PROCESSES + 1)])]},
         r"gpus\[0\]\.processes: lists 257 processes; at most 256"),
        ({"gpus": [gpu(processes=["python3"])]}, r"gpus\[0\]\.processes\[0\]: must be a mapping, not a string"),
        ({"gpus": [gpu(processes=[{"name": "python3"}])]}, r"gpus\[0\]\.processes\[0\]\.pid: required"),
        ({"gpus": [gpu(processes=[{"pid": -4}])]}, r"gpus\[0\]\.processes\[0\]\.pid: must be a non-negative integer"),
        ({"gpus": [gpu(processes=[{"pid": 1, "user": "x"}])]},
         r"gpus\[0\]\.processes\[0\]: unknown field 'user' \(known: pid, name, gi, ci\)"),
        ({"gpus": [gpu(processes=[{"pid": 1, "name": "a\nb"}])]}, r"gpus\[0\]\.processes\[0\]\.name: must be a non-empty"),
        ({"gpus": [gpu(mig=[ci()], processes=[{"pid": 1, "gi": 1}])]}, r"gpus\[0\]\.processes\[0\]\.ci: required with gi"),
        ({"gpus": [gpu(mig=[ci()], processes=[{"pid": 1, "ci": 0}])]}, r"gpus\[0\]\.processes\[0\]\.gi: required with ci"),
        ({"gpus": [gpu(mig=[ci()], processes=[{"pid": 1, "gi": 1, "ci": 1}])]},
         r"gpus\[0\]\.processes\[0\]: no MIG device gi 1 ci 1 on this GPU"),
        ({"gpus": [gpu(mig=[{"gi": 1}], processes=[{"pid": 1, "gi": 1, "ci": 0}])]},
         r"gpus\[0\]\.processes\[0\]: no MIG device gi 1 ci 0 on this GPU"),
    ],
)
def test_bad_mig_fields_name_the_field(tmp_path, data, message):
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FakeHwError, match=message):
        load_fakehw(str(path))


def test_unknown_gpu_field_lists_the_mig_fields():
    with pytest.raises(FakeHwError) as caught:
        fakehw_from_data({"gpus": [gpu(memory=1)]})
    assert str(caught.value) == ("gpus[0]: unknown field 'memory' (known: uuid, index, minor, numa_node, pci_bus_id, "
                                 "name, mig, health, mig_mode, mig_mode_pending, mig_mode_needs_reset, processes)")


@pytest.mark.parametrize(
    "before,after",
    [
        # a reboot: the pending mode is the mode, written out; MIG instances and processes gone
        (gpu(mig_mode=True, mig_mode_pending=False, mig=[ci()], processes=[{"pid": 1}]), gpu(mig_mode=False)),
        (gpu(mig=[ci()], processes=[{"pid": 1, "gi": 1, "ci": 0}]), gpu(mig_mode=True)),  # on: mig listed instances
        (gpu(mig_mode=False, mig_mode_pending=True), gpu(mig_mode=True)),
        (gpu(processes=[{"pid": 1}]), gpu()),  # no MIG mode said: none written
    ],
)
def test_settle_mig_mode_at_a_reboot(before, after):
    settle_mig_mode(before, reboot=True)
    assert before == after
    fakehw_from_data({"gpus": [before]})


@pytest.mark.parametrize(
    "before,after",
    [
        # a reset: only a pending mode the entry states takes effect
        (gpu(mig_mode=False, mig_mode_pending=True), gpu(mig_mode=True)),
        (gpu(mig=[ci()], processes=[{"pid": 1, "gi": 1, "ci": 0}, {"pid": 2}]),
         gpu(mig=[ci()], processes=[{"pid": 1, "gi": 1, "ci": 0}, {"pid": 2}])),
        (gpu(mig_mode=True, mig_mode_pending=True, mig=[ci()]), gpu(mig_mode=True, mig=[ci()])),
        (gpu(mig_mode=True, mig_mode_pending=False, mig=[ci()], processes=[{"pid": 1, "gi": 1, "ci": 0}, {"pid": 2}]),
         gpu(mig_mode=False, processes=[{"pid": 2}])),
    ],
)
def test_settle_mig_mode_at_a_reset(before, after):
    settle_mig_mode(before, reboot=False)
    assert before == after
    fakehw_from_data({"gpus": [before]})

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG side of a fakehw node (node/fakehw_mig.py): the layout read from the hardware file against the profile
catalog, each op carried out in the file as nvidia-smi would (and refused in its words), a reset and a reboot,
and, for any sequence of ops, a file that stays valid, with no two GPU instances overlapping and no UUID twice."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GiProfile,
    GpuInstance,
    GpuProcess,
    MigCapability,
    MigOp,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import (
    FakeHwError,
    load_fakehw,
    reset_fakehw_gpus,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import (
    apply_mig,
    fakehw_reboot,
    read_mig,
    read_mig_file,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import capability_for

REPO = Path(__file__).resolve().parents[5]
GPU0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
GPU2 = "GPU-5f1c2a90-0000-4000-8000-000000000003"
MIG1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd1"
MIG2 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd2"
MIG3 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd3"
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def write(tmp_path, *gpus, **top):
    path = tmp_path / "fakehw.json"
    data = dict(top, gpus=list(gpus))
    path.write_text(json.dumps(data))
    return str(path)


def data_of(path):
    return json.loads(Path(path).read_text())


def gpu(uuid=GPU0, index=0, name=A100, **fields):
    item = {"uuid": uuid, "index": index, "name": name}
    item.update(fields)
    return item


def op(kind, **fields):
    return MigOp(kind=kind, gpu=fields.pop("gpu", GPU0), **fields)


# An A100 40GB with a 3g.20gb at 4 cut in two compute instances, a 2g.10gb at 0 and a process on gi 1 ci 1.
LAID_OUT = gpu(mig_mode=True, mig=[
    {"gi": 1, "ci": 0, "uuid": MIG1, "profile": "3g.20gb", "placement": 4, "ci_profile": "1c.3g.20gb"},
    {"gi": 1, "ci": 1, "uuid": MIG2, "profile": "3g.20gb", "placement": 4, "ci_profile": "2c.3g.20gb"},
    {"gi": 2, "ci": 0, "uuid": MIG3, "profile": "2g.10gb", "placement": 0},
], processes=[{"pid": 4242, "name": "python3", "gi": 1, "ci": 1}, {"pid": 7, "name": "nvtop"}])


# -- reading ----------------------------------------------------------------------------------------------

def test_read_a_laid_out_gpu(tmp_path):
    node = read_mig_file(write(tmp_path, LAID_OUT, gpu(uuid=GPU1, index=1, name=H100)))
    assert (node.source, node.error) == ("fakehw", None)
    first, second = node.gpus
    assert (first.uuid, first.index, first.product, first.mode, first.pending) == (GPU0, 0, A100, True, True)
    assert first.capability == capability_for(A100)
    assert first.instances == (
        GpuInstance(gi=1, profile="3g.20gb", placement=Placement(4, 4), compute=(
            ComputeInstance(gi=1, ci=0, profile="1c.3g.20gb", uuid=MIG1),
            ComputeInstance(gi=1, ci=1, profile="2c.3g.20gb", uuid=MIG2))),
        GpuInstance(gi=2, profile="2g.10gb", placement=Placement(0, 2), compute=(
            ComputeInstance(gi=2, ci=0, profile="2g.10gb", uuid=MIG3),)),
    )
    # an H100 the file says nothing of: MIG off, its catalog entry, no instances
    assert (second.mode, second.pending, second.capability, second.instances) == (False, False, capability_for(H100), ())
    assert node.processes == [GpuProcess(gpu=GPU0, pid=4242, name="python3", gi=1, ci=1),
                              GpuProcess(gpu=GPU0, pid=7, name="nvtop")]


def test_read_a_file_written_before_mig_layouts(tmp_path):
    """hack/fakehw_node.py's GPUs: no name, MIG instances without a profile on GPU 1."""
    path = write(tmp_path, {"uuid": GPU0, "index": 0},
                 {"uuid": GPU1, "index": 1, "mig": [{"gi": 1, "ci": 0, "uuid": MIG1}, {"gi": 2, "ci": 0, "uuid": MIG2}]})
    plain, split = read_mig_file(path).gpus
    assert (plain.mode, plain.pending, plain.capability, plain.instances) == (None, None, None, ())  # cannot do MIG
    assert (split.mode, split.pending, split.capability) == (True, True, None)
    assert split.instances == (
        GpuInstance(gi=1, profile="unknown", placement=Placement(0, 0),
                    compute=(ComputeInstance(gi=1, ci=0, profile="unknown", uuid=MIG1),)),
        GpuInstance(gi=2, profile="unknown", placement=Placement(0, 0),
                    compute=(ComputeInstance(gi=2, ci=0, profile="unknown", uuid=MIG2),)),
    )


def test_read_the_mode_fields(tmp_path):
    path = write(tmp_path, gpu(mig_mode=False, mig_mode_pending=True, mig_mode_needs_reset=True),
                 gpu(uuid=GPU1, index=1, name="Tesla T4", mig_mode=False))
    pending, t4 = read_mig_file(path).gpus
    assert (pending.mode, pending.pending) == (False, True)
    assert (t4.mode, t4.pending, t4.capability) == (False, False, None)  # said, though the catalog does not know it


def test_read_with_a_catalog_of_the_test(tmp_path):
    one = MigCapability(product="Test GPU", memory_slices=2, compute_slices=2, profiles=(
        GiProfile(name="1g.1gb", id=3, slices=1, instances=2, memory_mib=1024, placements=(Placement(0, 1), Placement(1, 1))),))
    path = write(tmp_path, gpu(name="Test GPU", mig=[{"gi": 1, "ci": 0, "uuid": MIG1, "profile": "1g.1gb", "placement": 1}]))
    node = read_mig_file(path, catalog=lambda product: one if product == "Test GPU" else None)
    assert node.gpus[0].capability == one
    assert node.gpus[0].instances[0].placement == Placement(1, 1)
    done = apply_mig(path, op("create", profile="1g.1gb", placement=None, compute=("1g.1gb",)),
                     catalog=lambda product: one)
    assert (done.error, done.made.gi, done.made.placement) == (None, 2, Placement(0, 1))


def test_read_mig_takes_the_inventory_it_is_given(tmp_path):
    hw = load_fakehw(write(tmp_path, LAID_OUT, gpu(uuid=GPU1, index=1)))
    node = read_mig(hw, Inventory(gpus=hw.inventory.gpus[1:], source="fakehw"))
    assert [g.uuid for g in node.gpus] == [GPU1] and node.processes == []
    failed = read_mig(hw, Inventory(gpus=[], source="fakehw", error="the GPUs could not be listed"))
    assert (failed.gpus, failed.source, failed.error) == ([], "fakehw", "the GPUs could not be listed")


def gi(number, profile, placement, **fields):
    entry = {"gi": number, "ci": 0, "uuid": "MIG-7089d0f3-293f-58c9-8f8c-5ea666eee%03d" % number, "profile": profile,
             "placement": placement}
    entry.update(fields)
    return entry


@pytest.mark.parametrize(
    "item,message",
    [
        (gpu(mig=[gi(1, "3g.40gb", 0)]),
         r"^gpus\[0\]\.mig\[0\]\.profile: 3g.40gb is not a GPU instance profile of NVIDIA A100-SXM4-40GB \(1g.5gb, "
         r"1g.5gb\+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb\)$"),
        (gpu(mig=[gi(1, "3g.20gb", 2)]),
         r"^gpus\[0\]\.mig\[0\]\.placement: 2 is not a placement of 3g.20gb on NVIDIA A100-SXM4-40GB \(0, 4\)$"),
        (gpu(mig=[gi(1, "4g.20gb", 0), gi(2, "2g.10gb", 2)]),
         r"^gpus\[0\]\.mig\[1\]\.placement: GPU instance 2 \(2g.10gb at 2\) overlaps GPU instance 1 \(4g.20gb at 0\)$"),
        (gpu(mig=[gi(1, "1g.5gb+me", 0), gi(2, "1g.5gb+me", 1)]),
         r"^gpus\[0\]\.mig\[1\]\.profile: more 1g.5gb\+me GPU instances than NVIDIA A100-SXM4-40GB has room for \(1\)$"),
        (gpu(name=None, mig=[gi(1, "3g.20gb", 0)]),
         r"^gpus\[0\]\.mig\[0\]\.profile: the GPU's name \(none\) is not a product the MIG profile catalog knows$"),
        (gpu(name="Tesla T4", mig=[{"gi": 1, "profile": "1g.5gb", "placement": 0}]),
         r"^gpus\[0\]\.mig\[0\]\.profile: the GPU's name \(Tesla T4\) is not a product the MIG profile catalog knows$"),
    ],
)
def test_what_the_catalog_contradicts_is_the_nodes_error(tmp_path, item, message):
    if item["name"] is None:
        del item["name"]
    path = write(tmp_path, item)
    node = read_mig_file(path)
    assert node.gpus == [] and node.source == "fakehw" and re.match(message, node.error), node.error
    before = Path(path).read_bytes()
    with pytest.raises(FakeHwError, match=message[1:]):  # the file is not one an op can change
        apply_mig(path, op("mode", enabled=False))
    assert Path(path).read_bytes() == before


def test_a_file_that_cannot_be_read_raises(tmp_path):
    with pytest.raises(FakeHwError, match="cannot read fakehw file"):
        read_mig_file(str(tmp_path / "missing.json"))
    with pytest.raises(FakeHwError, match="cannot read fakehw file"):
        apply_mig(str(tmp_path / "missing.json"), op("mode", enabled=True))
    with pytest.raises(FakeHwError, match="cannot read fakehw file"):
        fakehw_reboot(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gpus": [gpu(mig_mode="on")]}))
    with pytest.raises(FakeHwError, match=r"gpus\[0\]\.mig_mode: must be true or false"):
        apply_mig(str(bad), op("mode", enabled=True))


# -- mode -------------------------------------------------------------------------------------------------

def test_mode_changes_at_once(tmp_path):
    path = write(tmp_path, gpu(), gpu(uuid=GPU1, index=1))
    done = apply_mig(path, op("mode", enabled=True))
    assert (done.error, done.made) == (None, None)
    first, second = read_mig_file(path).gpus
    assert (first.mode, first.pending, second.mode) == (True, True, False)
    assert data_of(path)["gpus"][0] == gpu(mig_mode=True, mig_mode_pending=True)
    assert apply_mig(path, op("mode", enabled=False)).error is None
    assert (read_mig_file(path).gpus[0].mode, read_mig_file(path).gpus[0].pending) == (False, False)


def test_mode_stays_pending_on_a_gpu_that_needs_a_reset(tmp_path):
    path = write(tmp_path, gpu(mig_mode_needs_reset=True))
    assert apply_mig(path, op("mode", enabled=True)).error is None
    state = read_mig_file(path).gpus[0]
    assert (state.mode, state.pending) == (False, True)
    assert apply_mig(path, op("create", profile="1g.5gb", placement=0, compute=("1g.5gb",))).error == \
        "No MIG-enabled devices found."  # not yet
    assert apply_mig(path, op("mode", enabled=False)).error is None  # asked back: nothing pending any more
    assert (read_mig_file(path).gpus[0].mode, read_mig_file(path).gpus[0].pending) == (False, False)
    apply_mig(path, op("mode", enabled=True))
    assert reset_fakehw_gpus(path, [GPU0]) == {GPU0: True}  # a reset makes it effective
    assert (read_mig_file(path).gpus[0].mode, read_mig_file(path).gpus[0].pending) == (True, True)
    assert data_of(path)["gpus"][0] == gpu(mig_mode_needs_reset=True, mig_mode=True)


def test_a_reset_leaves_the_mig_side_of_a_gpu_with_nothing_pending_as_it_is(tmp_path):
    path = write(tmp_path, LAID_OUT)
    reset_fakehw_gpus(path, [GPU0])
    assert data_of(path)["gpus"][0] == LAID_OUT


def test_mode_already_so_changes_nothing(tmp_path):
    path = write(tmp_path, gpu(mig_mode=True), gpu(uuid=GPU1, index=1, name="Tesla T4"))
    before = Path(path).read_bytes()
    assert apply_mig(path, op("mode", enabled=True)).error is None
    assert apply_mig(path, op("mode", gpu=GPU1, enabled=False)).error is None  # not a MIG GPU: nvidia-smi warns only
    assert Path(path).read_bytes() == before


@pytest.mark.parametrize(
    "item,enabled,error",
    [
        (gpu(name="Tesla T4"), True, "Unable to enable MIG Mode for GPU %s: Not Supported" % GPU0),
        ({"uuid": GPU0, "index": 0, "pci_bus_id": "0000:3b:00.0"}, True,
         "Unable to enable MIG Mode for GPU 0000:3b:00.0: Not Supported"),
        (LAID_OUT, False, "Unable to disable MIG Mode for GPU %s: In use by another client" % GPU0),
        (gpu(mig=[{"gi": 1}]), False, "Unable to disable MIG Mode for GPU %s: In use by another client" % GPU0),
        (gpu(), None, "a mode op names no mode (enabled)"),
    ],
)
def test_mode_refused(tmp_path, item, enabled, error):
    path = write(tmp_path, item)
    before = Path(path).read_bytes()
    done = apply_mig(path, op("mode", enabled=enabled))
    assert (done.error, done.made) == (error, None)
    assert Path(path).read_bytes() == before


# -- create -----------------------------------------------------------------------------------------------

def test_create_gpu_instances_with_compute_instances(tmp_path):
    path = write(tmp_path, gpu(mig_mode=True))
    first = apply_mig(path, op("create", profile="3g.20gb", placement=4, compute=("1c.3g.20gb", "2c.3g.20gb")))
    assert first.error is None
    assert (first.made.gi, first.made.profile, first.made.placement) == (1, "3g.20gb", Placement(4, 4))
    assert [(ci.gi, ci.ci, ci.profile) for ci in first.made.compute] == [(1, 0, "1c.3g.20gb"), (1, 1, "2c.3g.20gb")]
    assert all(MIG_UUID.match(ci.uuid) for ci in first.made.compute)
    second = apply_mig(path, op("create", profile="1g.5gb", placement=1, compute=("1g.5gb",)))
    assert (second.made.gi, second.made.compute[0].ci, second.made.compute[0].profile) == (2, 0, "1g.5gb")
    assert read_mig_file(path).gpus[0].instances == (first.made, second.made)
    assert data_of(path)["gpus"][0]["mig"] == [
        {"gi": 1, "ci": 0, "uuid": first.made.compute[0].uuid, "profile": "3g.20gb", "placement": 4,
         "ci_profile": "1c.3g.20gb"},
        {"gi": 1, "ci": 1, "uuid": first.made.compute[1].uuid, "profile": "3g.20gb", "placement": 4,
         "ci_profile": "2c.3g.20gb"},
        {"gi": 2, "ci": 0, "uuid": second.made.compute[0].uuid, "profile": "1g.5gb", "placement": 1},
    ]
    uuids = [ci.uuid for ci in first.made.compute + second.made.compute]
    assert len(set(uuids)) == 3
    # the inventory a pass reads has the new MIG devices
    assert [m.uuid for m in load_fakehw(path).inventory.gpus[0].mig] == uuids


def test_create_takes_the_lowest_free_gpu_instance_id_from_1(tmp_path):
    path = write(tmp_path, gpu(mig=[gi(0, "1g.5gb", 0), gi(1, "1g.5gb", 1), gi(3, "1g.5gb", 2)]))
    assert apply_mig(path, op("create", profile="1g.5gb", placement=3, compute=("1g.5gb",))).made.gi == 2
    assert apply_mig(path, op("create", profile="1g.5gb", placement=4, compute=("1g.5gb",))).made.gi == 4


def test_create_without_a_placement_takes_the_first_free_one(tmp_path):
    path = write(tmp_path, gpu(mig=[gi(1, "3g.20gb", 0)]))
    done = apply_mig(path, op("create", profile="3g.20gb", compute=("3g.20gb",)))
    assert done.made.placement == Placement(4, 4)


def test_create_a_gpu_instance_without_compute_instances_then_fill_it(tmp_path):
    path = write(tmp_path, gpu(mig_mode=True))
    empty = apply_mig(path, op("create", profile="4g.20gb", placement=0)).made
    assert empty == GpuInstance(gi=1, profile="4g.20gb", placement=Placement(0, 4), compute=())
    assert data_of(path)["gpus"][0]["mig"] == [{"gi": 1, "profile": "4g.20gb", "placement": 0}]
    assert load_fakehw(path).inventory.gpus[0].mig == ()  # no MIG device yet
    filled = apply_mig(path, op("create", gi=1, compute=("2c.4g.20gb", "1c.4g.20gb"))).made
    assert [(ci.ci, ci.profile) for ci in filled.compute] == [(0, "2c.4g.20gb"), (1, "1c.4g.20gb")]
    more = apply_mig(path, op("create", gi=1, compute=("1c.4g.20gb",))).made
    assert (more.gi, [ci.ci for ci in more.compute]) == (1, [2])  # only what this op made
    assert [ci.ci for ci in read_mig_file(path).gpus[0].instance(1).compute] == [0, 1, 2]
    assert apply_mig(path, op("create", gi=1, compute=("1c.4g.20gb",))).error == \
        "Unable to create a compute instance on GPU  0 GPU instance ID  1 using profile 1c.4g.20gb: Insufficient Resources"


@pytest.mark.parametrize(
    "item,create,error",
    [
        (gpu(), {"profile": "1g.5gb", "placement": 0}, "No MIG-enabled devices found."),
        (gpu(mig_mode=True, name="Tesla T4"), {"profile": "1g.5gb", "placement": 0}, "No MIG-enabled devices found."),
        (gpu(mig_mode=True), {"profile": "3g.40gb", "placement": 0},
         "Unable to create a GPU instance on GPU  0 using profile 3g.40gb: Invalid Argument"),
        (gpu(mig_mode=True), {"profile": "3g.20gb", "placement": 2},
         "Unable to create a GPU instance on GPU  0 using profile 9: Invalid Argument"),
        (LAID_OUT, {"profile": "3g.20gb", "placement": 4},
         "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources"),
        (LAID_OUT, {"profile": "4g.20gb", "placement": 0},
         "Unable to create a GPU instance on GPU  0 using profile 5: Insufficient Resources"),
        (gpu(mig=[gi(1, "1g.5gb+me", 0)]), {"profile": "1g.5gb+me", "placement": 3},
         "Unable to create a GPU instance on GPU  0 using profile 20: Insufficient Resources"),
        (gpu(mig=[gi(1, "3g.20gb", 0), gi(2, "3g.20gb", 4)]), {"profile": "3g.20gb"},
         "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources"),
        (gpu(mig=[gi(1, "4g.20gb", 0), gi(2, "2g.10gb", 4), gi(3, "1g.5gb", 6)]), {"profile": "1g.5gb", "placement": 7},
         "Unable to create a GPU instance on GPU  0 using profile 19: Invalid Argument"),
        (gpu(mig_mode=True), {"profile": "3g.20gb", "placement": 0, "compute": ("2c.4g.20gb",)},
         "Unable to create a compute instance on GPU  0 GPU instance ID  1 using profile 2c.4g.20gb: Invalid Argument"),
        (gpu(mig_mode=True), {"profile": "3g.20gb", "placement": 0, "compute": ("2c.3g.20gb", "2c.3g.20gb")},
         "Unable to create a compute instance on GPU  0 GPU instance ID  1 using profile 2c.3g.20gb: "
         "Insufficient Resources"),
        (LAID_OUT, {"gi": 5, "compute": ("1g.5gb",)},
         "Unable to create a compute instance on GPU  0 GPU instance ID  5: Not Found"),
        (gpu(name=None, mig=[{"gi": 1}]), {"gi": 1, "compute": ("1g.5gb",)}, "No MIG-enabled devices found."),
        (gpu(mig=[{"gi": 1}]), {"gi": 1, "compute": ("1g.5gb",)},
         "Unable to create a compute instance on GPU  0 GPU instance ID  1: Invalid Argument"),  # its profile unknown
    ],
)
def test_create_refused(tmp_path, item, create, error):
    if item.get("name", "") is None:
        del item["name"]
    path = write(tmp_path, item)
    before = Path(path).read_bytes()
    done = apply_mig(path, op("create", **create))
    assert (done.error, done.made) == (error, None)
    assert Path(path).read_bytes() == before  # nothing made


# -- destroy ----------------------------------------------------------------------------------------------

def test_destroy_a_compute_instance_then_its_gpu_instance(tmp_path):
    path = write(tmp_path, LAID_OUT)
    done = apply_mig(path, op("destroy", gi=1, ci=0))
    assert (done.error, done.made) == (None, None)
    assert [ci.ci for ci in read_mig_file(path).gpus[0].instance(1).compute] == [1]
    assert apply_mig(path, op("destroy", gi=2, ci=0)).error is None  # its last: the GPU instance stays, empty
    assert read_mig_file(path).gpus[0].instance(2) == GpuInstance(gi=2, profile="2g.10gb", placement=Placement(0, 2))
    assert data_of(path)["gpus"][0]["mig"][1] == {"gi": 2, "profile": "2g.10gb", "placement": 0}
    assert apply_mig(path, op("destroy", gi=2)).error is None
    assert [i.gi for i in read_mig_file(path).gpus[0].instances] == [1]
    assert [m.uuid for m in load_fakehw(path).inventory.gpus[0].mig] == [MIG2]


def test_destroy_a_gpu_instance_with_its_compute_instances(tmp_path):
    path = write(tmp_path, gpu(mig=[gi(1, "3g.20gb", 0), gi(2, "3g.20gb", 4)]))
    assert apply_mig(path, op("destroy", gi=1)).error is None
    assert [i.gi for i in read_mig_file(path).gpus[0].instances] == [2]
    assert apply_mig(path, op("destroy", gi=2)).error is None
    state = read_mig_file(path).gpus[0]
    assert (state.instances, state.mode, state.pending) == ((), True, True)  # MIG stays on, written out
    assert "mig" not in data_of(path)["gpus"][0]


def test_destroy_on_a_file_written_before_mig_layouts(tmp_path):
    """The last compute instance of a GPU instance whose profile the file does not say: it stays as ``{gi}``."""
    path = write(tmp_path, {"uuid": GPU1, "index": 0, "mig": [{"gi": 1, "ci": 0, "uuid": MIG1}, {"gi": 2, "ci": 0, "uuid": MIG2}]})
    assert apply_mig(path, op("destroy", gpu=GPU1, gi=1, ci=0)).error is None
    assert data_of(path)["gpus"][0]["mig"] == [{"gi": 1}, {"gi": 2, "ci": 0, "uuid": MIG2}]
    assert apply_mig(path, op("destroy", gpu=GPU1, gi=1)).error is None
    assert apply_mig(path, op("destroy", gpu=GPU1, gi=2)).error is None
    assert (read_mig_file(path).gpus[0].mode, read_mig_file(path).gpus[0].instances) == (True, ())


def test_a_process_on_another_compute_instance_does_not_stop_a_destroy(tmp_path):
    path = write(tmp_path, LAID_OUT)  # the process is on gi 1 ci 1
    assert apply_mig(path, op("destroy", gi=1, ci=0)).error is None


@pytest.mark.parametrize(
    "destroy,error",
    [
        ({"gi": 1, "ci": 1}, "Unable to destroy compute instance ID  1 from GPU  0 GPU instance ID  1: "
                             "In use by another client"),
        ({"gi": 1}, "Unable to destroy GPU instance ID  1 from GPU  0: In use by another client"),
        ({"gi": 9}, "Unable to destroy GPU instance ID  9 from GPU  0: Not Found"),
        ({"gi": 9, "ci": 0}, "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  9: Not Found"),
        ({"gi": 2, "ci": 3}, "Unable to destroy compute instance ID  3 from GPU  0 GPU instance ID  2: Not Found"),
        ({}, "a destroy op names no GPU instance (gi)"),
    ],
)
def test_destroy_refused(tmp_path, destroy, error):
    path = write(tmp_path, LAID_OUT)
    before = Path(path).read_bytes()
    assert apply_mig(path, op("destroy", **destroy)).error == error
    assert Path(path).read_bytes() == before


def test_an_op_on_a_gpu_not_in_the_file_or_of_no_kind(tmp_path):
    path = write(tmp_path, LAID_OUT)
    assert apply_mig(path, op("mode", gpu=GPU2, enabled=True)).error == "No GPU with UUID %s was found" % GPU2
    assert apply_mig(path, op("split", gi=1)).error == "unknown MIG op kind 'split'"


def test_the_file_keeps_its_mode_and_is_written_atomically(tmp_path):
    path = write(tmp_path, gpu(mig_mode=True))
    os.chmod(path, 0o640)
    apply_mig(path, op("create", profile="7g.40gb", placement=0, compute=("7g.40gb",)))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["fakehw.json"]  # no temporary file left


def test_a_file_that_cannot_be_written_raises(tmp_path, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.node import fakehw_mig

    def refuse(path, data):
        raise PermissionError(13, "Permission denied")

    path = write(tmp_path, gpu(mig_mode=True))
    monkeypatch.setattr(fakehw_mig, "write_fakehw_data", refuse)
    with pytest.raises(FakeHwError, match="cannot write fakehw file .*: Permission denied"):
        apply_mig(path, op("mode", enabled=False))


# -- reboot -----------------------------------------------------------------------------------------------

def test_a_reboot_drops_every_instance_and_process_and_settles_the_mode(tmp_path):
    path = write(tmp_path, LAID_OUT, gpu(uuid=GPU1, index=1, mig_mode_needs_reset=True, mig_mode_pending=True,
                                         health={"xids": [48]}),
                 {"uuid": GPU2, "index": 2, "processes": [{"pid": 9}]},
                 boot_id="6f0c1e9e-1c7a-4a43-9a9e-000000000001", node_id="node-a",
                 domains=[{"instance_id": "inst_7", "gpus": [GPU2]}])
    boot_id = fakehw_reboot(path)
    data = data_of(path)
    assert boot_id == data["boot_id"] and boot_id != "6f0c1e9e-1c7a-4a43-9a9e-000000000001"
    assert re.match(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", boot_id)
    assert data["gpus"] == [gpu(mig_mode=True), gpu(uuid=GPU1, index=1, mig_mode_needs_reset=True, mig_mode=True,
                                                    health={"xids": [48]}), {"uuid": GPU2, "index": 2}]
    assert (data["node_id"], data["domains"]) == ("node-a", [{"instance_id": "inst_7", "gpus": [GPU2]}])
    node = read_mig_file(path)
    assert [(g.mode, g.pending, g.instances) for g in node.gpus] == [(True, True, ()), (True, True, ()), (None, None, ())]
    assert node.processes == []
    assert fakehw_reboot(path) != boot_id


def test_a_reboot_of_an_empty_file(tmp_path):
    path = tmp_path / "fakehw.yml"
    path.write_text("")
    boot_id = fakehw_reboot(str(path))
    assert data_of(path) == {"boot_id": boot_id}


# -- docs/fakehw.md ---------------------------------------------------------------------------------------

def mig_section():
    text = (REPO / "docs" / "fakehw.md").read_text()
    return text.split("\n## MIG\n", 1)[1].split("\n## ", 1)[0]


def test_the_pages_example_reads_as_the_page_says(tmp_path):
    [example] = re.findall(r"```yaml\n(.*?)```", mig_section(), re.S)
    path = tmp_path / "fakehw.yml"
    path.write_text(example)
    node = read_mig_file(str(path))
    assert node.error is None
    [a100] = node.gpus
    assert (a100.product, a100.mode, a100.pending) == (A100, True, True)
    assert [(i.gi, i.profile, i.placement, [(c.ci, c.profile) for c in i.compute]) for i in a100.instances] == [
        (1, "3g.20gb", Placement(4, 4), [(0, "1c.3g.20gb"), (1, "2c.3g.20gb")]),
        (2, "2g.10gb", Placement(0, 2), [(0, "2g.10gb")]),
        (3, "1g.5gb", Placement(2, 1), []),
    ]
    assert node.processes == [GpuProcess(gpu=a100.uuid, pid=4242, name="python3", gi=1, ci=1)]


def test_the_pages_errors_are_the_codes(tmp_path):
    """Each line of the section's "Real errors" block is what an op or the file gives, from the page's example."""
    section = mig_section()
    [example] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    [errors] = re.findall(r"Real errors, .*?:\n\n```text\n(.*?)```", section, re.S)
    path = tmp_path / "fakehw.yml"
    page_gpu = yaml.safe_load(example)["gpus"][0]["uuid"]
    got = []
    for change in (op("destroy", gpu=page_gpu, gi=1, ci=1), op("destroy", gpu=page_gpu, gi=1),
                   op("mode", gpu=page_gpu, enabled=False),
                   op("create", gpu=page_gpu, profile="3g.20gb", placement=4, compute=("3g.20gb",)),
                   op("create", gpu=page_gpu, profile="4g.20gb", placement=2, compute=("4g.20gb",))):
        path.write_text(example)
        got.append(apply_mig(str(path), change).error)
    data = yaml.safe_load(example)
    data["gpus"][0]["mig"][3]["placement"] = 4
    path.write_text(json.dumps(data))
    got.append(read_mig_file(str(path)).error)
    assert errors.splitlines() == got


# -- any sequence of ops ----------------------------------------------------------------------------------

GPUS = [GPU0, GPU1]
# Each GPU's own profiles and compute profiles, and a few of no GPU of the file.
PROFILES = {GPU0: [p.name for p in capability_for(A100).profiles] + ["3g.40gb", "5g.1gb"],
            GPU1: [p.name for p in capability_for(H100).profiles] + ["3g.20gb"]}
COMPUTE = {GPU0: ["1c.3g.20gb", "2c.3g.20gb", "1c.4g.20gb", "2c.4g.20gb", "3c.4g.20gb", "1c.7g.40gb", "3g.20gb",
                  "1g.5gb", "2g.10gb", "4g.20gb", "7g.40gb", "1c.2g.10gb"],
           GPU1: ["1c.3g.40gb", "2c.3g.40gb", "1c.4g.40gb", "3g.40gb", "1g.10gb", "2g.20gb", "7g.80gb", "4g.40gb",
                  "1c.2g.20gb", "1g.20gb"]}


def creates(uuid):
    """A create on GPU ``uuid``: mostly of its own profiles, with compute instances mostly of the GPU instance's."""
    def with_compute(profile):
        own = [profile] + ["%dc.%s" % (n, profile) for n in (1, 2, 3)]
        return st.builds(lambda at, compute: MigOp(kind="create", gpu=uuid, profile=profile, placement=at,
                                                   compute=tuple(compute)),
                         st.none() | st.integers(0, 7),
                         st.lists(st.sampled_from(own), max_size=2) | st.lists(st.sampled_from(COMPUTE[uuid]), max_size=2))
    return st.sampled_from(PROFILES[uuid]).flatmap(with_compute)


def fills(uuid):
    return st.builds(lambda gi, compute: MigOp(kind="create", gpu=uuid, gi=gi, compute=tuple(compute)),
                     st.integers(1, 4), st.lists(st.sampled_from(COMPUTE[uuid]), min_size=1, max_size=2))


def destroys(uuid):
    return st.builds(lambda gi, ci: MigOp(kind="destroy", gpu=uuid, gi=gi, ci=ci),
                     st.integers(1, 4), st.none() | st.integers(0, 1))


ops = st.one_of(
    st.builds(lambda g, on: MigOp(kind="mode", gpu=g, enabled=on), st.sampled_from(GPUS),
              st.sampled_from([True, True, False])),
    creates(GPU0), creates(GPU0), creates(GPU1), creates(GPU1), fills(GPU0), fills(GPU1),
    destroys(GPU0), destroys(GPU0), destroys(GPU1),
    st.sampled_from(["reboot", "reset"]),
)


def check_the_file(path):
    """The file reads as a pass reads it; no two GPU instances of a GPU overlap; every UUID is there once."""
    hw = load_fakehw(path)
    node = read_mig(hw, hw.inventory)
    assert node.error is None
    uuids = [g.uuid for g in hw.inventory.gpus] + [m.uuid for g in hw.inventory.gpus for m in g.mig]
    assert len(uuids) == len(set(uuids))
    for state in node.gpus:
        assert [m.uuid for m in hw.inventory.gpu(state.uuid).mig] == [ci.uuid for i in state.instances for ci in i.compute]
        for k, inst in enumerate(state.instances):
            assert inst.placement in state.capability.profile(inst.profile).placements
            assert not any(inst.placement.overlaps(other.placement) for other in state.instances[:k])
            assert [ci.ci for ci in inst.compute] == sorted(set(ci.ci for ci in inst.compute))
        if state.instances:
            assert state.mode is True
    return node


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=25))
def test_any_sequence_of_ops_keeps_the_file_valid(sequence):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), LAID_OUT, gpu(uuid=GPU1, index=1, name=H100, mig_mode=True, mig_mode_needs_reset=True))
        seen = {MIG1, MIG2, MIG3}
        for change in sequence:
            before = Path(path).read_bytes()
            if change == "reboot":
                fakehw_reboot(path)
            elif change == "reset":
                reset_fakehw_gpus(path, GPUS)
            else:
                done = apply_mig(path, change)
                if done.error is not None:
                    assert Path(path).read_bytes() == before  # a refusal changes nothing
                elif done.made is not None:
                    made = [ci.uuid for ci in done.made.compute]
                    assert not seen & set(made)  # fresh UUIDs, never one seen before
                    seen.update(made)
            check_the_file(path)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Atoms (spec page, "Atoms"): ids and classes, their parent GPU, the names
NVIDIA_VISIBLE_DEVICES gets, and when each is held against the inventory."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import DeviceRef
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import (
    AtomRefused,
    atom_from_id,
    parse_atom,
    resolve_atom,
    resolve_devices,
    visible_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory, MigInstance

GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
GPU_GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"
MIG_A1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"

INVENTORY = Inventory(gpus=[
    Gpu(uuid=GPU_A, index=0, minor=0, mig=(MigInstance(1, 0, MIG_A1),)),
    Gpu(uuid=GPU_B, index=1, minor=1),
], source="fakehw")


def refused(refs):
    with pytest.raises(AtomRefused) as caught:
        resolve_devices(refs, INVENTORY)
    return caught.value.reason, caught.value.message


# --- classes and ids --------------------------------------------------------------


@pytest.mark.parametrize("device_class", ["gpu", "", None])
def test_a_whole_gpu_is_its_uuid_and_its_own_parent(device_class):
    atom = parse_atom(GPU_A, device_class)
    assert atom.device_class == "gpu" and atom.whole
    assert atom.gpu_uuid == GPU_A
    assert atom.cdi_name == GPU_A
    assert atom.visible_name == GPU_A


def test_a_mig_instance_is_gpu_gi_ci_and_its_parent_is_the_gpu():
    atom = parse_atom(GPU_A + "/gi1/ci0", "gpu.mig")
    assert (atom.gpu_uuid, atom.gi, atom.ci) == (GPU_A, 1, 0)
    assert not atom.whole
    assert atom.cdi_name == GPU_A + "_gi1_ci0"  # CDI names allow no "/"


def test_a_slot_is_gpu_s_n_and_the_driver_sees_its_parent_gpu():
    atom = parse_atom(GPU_A + "/s3", "gpu.slot")
    assert (atom.gpu_uuid, atom.slot) == (GPU_A, 3)
    assert not atom.whole
    assert atom.cdi_name == GPU_A + "_s3"
    assert atom.visible_name == GPU_A


@pytest.mark.parametrize("device_id, device_class, message", [
    ("GPU-a/x", "gpu.mig", '"GPU-a/x" is not a MIG instance id (<gpu>/gi<n>/ci<n>)'),
    (GPU_A, "gpu.mig", '"%s" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % GPU_A),
    (GPU_A + "/gi1", "gpu.mig", '"%s/gi1" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % GPU_A),
    (GPU_A + "/gi1/ci0/x", "gpu.mig", '"%s/gi1/ci0/x" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % GPU_A),
    ("GPU-a/x", "gpu.slot", '"GPU-a/x" is not a slot id (<gpu>/s<n>)'),
    (GPU_A + "/gi1/ci0", "gpu.slot", '"%s/gi1/ci0" is not a slot id (<gpu>/s<n>)' % GPU_A),
    (GPU_A + "/s", "gpu.slot", '"%s/s" is not a slot id (<gpu>/s<n>)' % GPU_A),
    ("0000:3b:00.0", "nic.vf", "device class nic.vf cannot be held"),
    ("nvme0n1", "disk", "device class disk cannot be held"),
    (GPU_A, "GPU", "device class GPU cannot be held"),
])
def test_malformed_ids_and_other_classes_are_unsupported_devices(device_id, device_class, message):
    with pytest.raises(AtomRefused) as caught:
        parse_atom(device_id, device_class)
    assert caught.value.reason == "unsupported-device"
    assert caught.value.message == message


@pytest.mark.parametrize("device_id, device_class", [
    (GPU_A, "gpu"),
    (GPU_A + "/gi1/ci0", "gpu.mig"),
    (GPU_A + "/s3", "gpu.slot"),
])
def test_an_atom_id_read_back_from_a_spec_has_its_class_back(device_id, device_class):
    atom = atom_from_id(device_id)
    assert atom.device_class == device_class
    assert atom == parse_atom(device_id, device_class)


# --- resolution against the inventory -------------------------------------------------


def test_a_listed_gpu_is_held():
    (atom,) = resolve_devices([DeviceRef(GPU_B, "gpu")], INVENTORY)
    assert atom.id == GPU_B and atom.visible_name == GPU_B


def test_a_mig_instance_resolves_to_its_mig_uuid():
    (atom,) = resolve_devices([DeviceRef(GPU_A + "/gi1/ci0", "gpu.mig")], INVENTORY)
    assert atom.mig_uuid == MIG_A1
    assert atom.visible_name == MIG_A1  # NVIDIA_VISIBLE_DEVICES names the MIG device


def test_a_slot_of_a_listed_gpu_is_held():
    (atom,) = resolve_devices([DeviceRef(GPU_B + "/s7", "gpu.slot")], INVENTORY)
    assert atom.visible_name == GPU_B


@pytest.mark.parametrize("ref, message", [
    (DeviceRef(GPU_GONE, "gpu"), "%s not present" % GPU_GONE),
    (DeviceRef(GPU_GONE + "/s1", "gpu.slot"), "%s not present" % GPU_GONE),
    (DeviceRef(GPU_GONE + "/gi1/ci0", "gpu.mig"), "%s not present" % GPU_GONE),
    # booked, but the mig-layout unit has not created it yet
    (DeviceRef(GPU_A + "/gi1/ci1", "gpu.mig"), "%s has no MIG instance gi1/ci1" % GPU_A),
    (DeviceRef(GPU_B + "/gi1/ci0", "gpu.mig"), "%s has no MIG instance gi1/ci0" % GPU_B),
])
def test_what_the_inventory_lacks_is_device_missing(ref, message):
    assert refused([ref]) == ("device-missing", message)


def test_resolve_atom_says_why_instead_of_raising():
    found, why = resolve_atom(parse_atom(GPU_GONE), INVENTORY)
    assert found is None and why == "%s not present" % GPU_GONE


def test_every_missing_device_is_named_joined_by_semicolons():
    reason, message = refused([
        DeviceRef(GPU_GONE, "gpu"),
        DeviceRef(GPU_B, "gpu"),
        DeviceRef(GPU_A + "/gi3/ci0", "gpu.mig"),
    ])
    assert reason == "device-missing"
    assert message == "%s not present; %s has no MIG instance gi3/ci0" % (GPU_GONE, GPU_A)


def test_a_missing_gpu_named_twice_is_named_once():
    reason, message = refused([DeviceRef(GPU_GONE + "/s1", "gpu.slot"), DeviceRef(GPU_GONE + "/s2", "gpu.slot")])
    assert message == "%s not present" % GPU_GONE


def test_an_unsupported_device_decides_before_a_missing_one():
    # missing first in the list, unsupported second: the unsupported check runs first
    assert refused([DeviceRef(GPU_GONE, "gpu"), DeviceRef("eth0", "nic.vf")]) == \
        ("unsupported-device", "device class nic.vf cannot be held")


def test_an_id_that_cannot_name_a_cdi_device_is_unsupported():
    reason, message = refused([DeviceRef("GPU-a b", "gpu")])
    assert reason == "unsupported-device"
    assert "GPU-a b" in message


# --- NVIDIA_VISIBLE_DEVICES names -----------------------------------------------------


def test_visible_devices_lists_each_gpu_once_and_each_mig_uuid_in_order():
    atoms = resolve_devices([
        DeviceRef(GPU_B + "/s1", "gpu.slot"),
        DeviceRef(GPU_A + "/gi1/ci0", "gpu.mig"),
        DeviceRef(GPU_B + "/s2", "gpu.slot"),
    ], INVENTORY)
    assert visible_devices(atoms) == [GPU_B, MIG_A1]

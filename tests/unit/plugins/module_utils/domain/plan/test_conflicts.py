# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Conflicts (spec page, "Conflicts"; messages as DESIGN.md restores them):
each row of the table, and what is not a conflict."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import parse_atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import UNREADABLE_RELEASES, Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import conflicts

GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
MIG = GPU_A + "/gi1/ci0"
MIG2 = GPU_A + "/gi2/ci0"
SLOT = GPU_A + "/s1"
SLOT2 = GPU_A + "/s2"


def atom(device_id):
    if "/gi" in device_id:
        return parse_atom(device_id, "gpu.mig")
    if "/s" in device_id:
        return parse_atom(device_id, "gpu.slot")
    return parse_atom(device_id, "gpu")


def held(**owners):
    """Claims where each keyword allocation holds the given atom ids."""
    claims = Claims()
    for owner, ids in owners.items():
        claims = claims.hold(owner, [atom(i) for i in ids])
    return claims


def check(ids, claims):
    return conflicts([atom(i) for i in ids], claims)


def test_a_device_listed_twice():
    assert check([GPU_B, GPU_B], Claims()) == ["a device is listed twice"]
    assert check([SLOT, GPU_B, SLOT], Claims()) == ["a device is listed twice"]


def test_a_gpu_a_vm_has_through_vfio():
    claims = Claims().pass_through("inst_1", [GPU_A])
    for ids in ([GPU_A], [MIG], [SLOT]):  # the parent GPU decides
        assert check(ids, claims) == ["%s is passed through to instance inst_1" % GPU_A]


@pytest.mark.parametrize("wanted, owned", [(GPU_A, GPU_A), (MIG, MIG), (SLOT, SLOT)])
def test_an_atom_held_by_another_allocation(wanted, owned):
    assert check([wanted], held(alloc_1=[owned])) == ["%s is assigned to alloc_1" % wanted]


@pytest.mark.parametrize("part", [MIG, SLOT])
def test_a_whole_gpu_while_part_of_it_is_held(part):
    assert check([GPU_A], held(alloc_1=[part])) == ["%s has %s assigned to alloc_1" % (GPU_A, part)]


@pytest.mark.parametrize("part", [MIG, SLOT])
def test_part_of_a_gpu_another_allocation_holds_whole(part):
    assert check([part], held(alloc_1=[GPU_A])) == ["%s is assigned to alloc_1" % GPU_A]


def test_parts_of_one_gpu_are_shared_between_allocations():
    assert check([SLOT2], held(alloc_1=[SLOT])) == []
    assert check([MIG2], held(alloc_1=[MIG])) == []


def test_another_gpu_is_free():
    assert check([GPU_B, GPU_B + "/s1"], held(alloc_1=[GPU_A])) == []


def test_every_conflict_of_a_hold_is_named_once():
    claims = held(alloc_1=[GPU_A], alloc_2=[GPU_B + "/s1"])
    found = check([MIG, SLOT, GPU_B, GPU_B], claims)
    assert found == [
        "a device is listed twice",
        "%s is assigned to alloc_1" % GPU_A,
        "%s has %s/s1 assigned to alloc_2" % (GPU_B, GPU_B),
    ]


def test_an_unreadable_releases_file_holds_every_gpu():
    claims = Claims().every_gpu(UNREADABLE_RELEASES, [GPU_A, GPU_B])
    assert check([GPU_B], claims) == ["%s is assigned to (pending Kubernetes releases that could not be read)"
                                      % GPU_B]
    assert check([SLOT], claims) == ["%s is assigned to %s" % (GPU_A, UNREADABLE_RELEASES)]


# An env file naming a MIG instance (NVIDIA_VISIBLE_DEVICES=MIG-…) claims that instance, as root and doctor read it
# (issue 33, item 7: the model-based test of the helper found root reading only the GPUs an env file names).
MIG_UUID = "MIG-7089d0f3-0000-58c9-8f8c-000000010001"
MIG2_UUID = "MIG-7089d0f3-0000-58c9-8f8c-000000010002"


def _inventory():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory, MigInstance
    migs = (MigInstance(gi=1, ci=0, uuid=MIG_UUID), MigInstance(gi=2, ci=0, uuid=MIG2_UUID))
    return Inventory(gpus=[Gpu(uuid=GPU_A, index=0, mig=migs), Gpu(uuid=GPU_B, index=1)], source="test")


def test_an_env_file_naming_a_mig_instance_claims_it_and_its_gpu_whole_only():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import claims_on_disk, env_file_atoms
    named = env_file_atoms(b"NVIDIA_VISIBLE_DEVICES=" + MIG_UUID.encode() + b"\nBCD_ALLOCATION_ID=e1\n", _inventory())
    assert [a.key for a in named] == [atom(MIG).key]
    claims = claims_on_disk({}, {"e1": named})
    assert conflicts([atom(MIG)], claims, "other") == ["%s is assigned to e1" % MIG]
    assert conflicts([atom(GPU_A)], claims, "other") == ["%s has %s assigned to e1" % (GPU_A, MIG)]
    assert conflicts([atom(MIG2)], claims, "other") == []
    assert conflicts([atom(GPU_B)], claims, "other") == []
    # without the inventory (or a UUID no GPU lists) a MIG name names nothing: no allocation can be handed it
    assert env_file_atoms(b"NVIDIA_VISIBLE_DEVICES=" + MIG_UUID.encode() + b"\n") == []
    assert env_file_atoms(b"NVIDIA_VISIBLE_DEVICES=MIG-00000000-0000-0000-0000-000000000000\n", _inventory()) == []


def test_an_env_file_naming_a_mig_instance_its_spec_lacks_claims_it():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.conflicts import beyond_spec, env_file_atoms
    named = env_file_atoms(("NVIDIA_VISIBLE_DEVICES=%s,%s\n" % (MIG_UUID, MIG2_UUID)).encode(), _inventory())
    assert [a.key for a in beyond_spec(named, [atom(MIG)])] == [atom(MIG2).key]
    assert beyond_spec(named, [atom(GPU_A)]) == []
    assert [a.key for a in beyond_spec(named, None)] == [atom(MIG).key, atom(MIG2).key]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Conflicts (spec page, "Conflicts"; messages as DESIGN.md restores them):
each row of the table, and what is not a conflict."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import parse_atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.claims import Claims
from ansible_collections.bcd.devices.plugins.module_utils.domain.conflicts import UNREADABLE_RELEASES, conflicts

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

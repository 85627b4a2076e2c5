# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG profile catalog against the recorded nvidia-smi outputs it was built from (tests/data/nvidia-smi-mig)."""

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import CI_PROFILE_IDS, MigCapability, Placement
from ansible_collections.bcd.devices.plugins.module_utils.node import mig_catalog
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import BUILT_NOT_RECORDED, CATALOG, capability_for
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_smi import capability_from_tables, parse_lgip, parse_lgipp

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "data", "nvidia-smi-mig")


def recorded(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as handle:
        return handle.read()


# The one recorded -lgipp (H100 PCIe); NVIDIA's MIG user guide prints the same seven lines for an A100-SXM4-40GB.
LGIPP = parse_lgipp(recorded("docs-platform_h100-pcie_mig-lgipp.txt"))[0]

RECORDED = [
    ("NVIDIA A100-SXM4-40GB", "mps-test_a100-sxm4-40gb_mig-lgip.txt", ()),
    # its driver predates profile 15: the catalog adds 1g.20gb from the MIG user guide
    ("NVIDIA A100-SXM4-80GB", "migprofiler_a100-sxm4-80gb_mig-i0-lgip.txt", ("1g.20gb",)),
    ("NVIDIA H100 PCIe", "docs-platform_h100-pcie_mig-lgip.txt", ()),
]


@pytest.mark.parametrize("product,lgip,added", RECORDED)
def test_catalog_entry_is_what_the_recorded_output_says(product, lgip, added):
    parsed = capability_from_tables(product, parse_lgip(recorded(lgip)), LGIPP)
    entry = CATALOG[product]
    kept = tuple(profile for profile in entry.profiles if profile.name not in added)
    assert parsed == MigCapability(product=product, profiles=kept)
    assert [profile.name for profile in entry.profiles if profile.name in added] == list(added)


def test_the_recorded_lgipp_is_every_entry_s_placements():
    for entry in CATALOG.values():
        for profile in entry.profiles:
            assert profile.placements == LGIPP[profile.id], (entry.product, profile.name)


@pytest.mark.parametrize("product", sorted(CATALOG))
def test_each_entry_is_consistent(product):
    entry = CATALOG[product]
    assert entry.product == product
    assert (entry.memory_slices, entry.compute_slices) == (8, 7)
    assert len({p.name for p in entry.profiles}) == len({p.id for p in entry.profiles}) == len(entry.profiles)
    for profile in entry.profiles:
        assert re.match(r"^\d+g\.\d+gb(\+me)?$", profile.name)
        assert profile.slices == int(profile.name.split("g")[0])
        assert profile.slices in CI_PROFILE_IDS
        assert 1 <= profile.instances <= len(profile.placements)
        assert profile.memory_mib > 0
        for placement in profile.placements:
            assert 0 <= placement.start and placement.end <= entry.memory_slices
        # the same memory slices give the same memory
        same = [p for p in entry.profiles if p.placements[0].size == profile.placements[0].size]
        assert len({p.memory_mib for p in same}) == 1, profile.name


def test_built_entries_have_the_recorded_h100_geometry():
    h100 = CATALOG["NVIDIA H100 PCIe"]
    geometry = [(p.id, p.slices, p.instances, p.placements) for p in h100.profiles]
    for product in BUILT_NOT_RECORDED:
        entry = CATALOG[product]
        assert [(p.id, p.slices, p.instances, p.placements) for p in entry.profiles] == geometry
    assert [p.name for p in CATALOG["NVIDIA H200"].profiles] == [
        "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]


@pytest.mark.parametrize("record,slices_by_profile", [
    ("mps-test_a100-sxm4-40gb_mig-cgi-C.txt", {"3g.20gb": 3}),
    ("migprofiler_a100-sxm4-80gb_mig-i0-cgi-C.txt", {"4g.40gb": 4}),
    ("docs-platform_h100-pcie_mig-cgi-C.txt", {"3g.40gb": 3, "1g.10gb": 1}),
])
def test_compute_profile_ids_are_what_nvidia_smi_prints(record, slices_by_profile):
    seen = re.findall(r"compute instance ID\s+\d+ .* using profile MIG (\S+) \(ID\s+(\d+)\)", recorded(record))
    assert seen
    for profile, ci_id in seen:
        assert CI_PROFILE_IDS[slices_by_profile[profile]] == int(ci_id)


def test_capability_for_finds_names_as_drivers_print_them():
    a100 = CATALOG["NVIDIA A100-SXM4-40GB"]
    assert capability_for("NVIDIA A100-SXM4-40GB") is a100
    assert capability_for("A100-SXM4-40GB") is a100  # R450 drivers (tests/data/nvidia-smi legacy -L)
    assert capability_for("  nvidia  a100-sxm4-40gb ") is a100
    assert capability_for("H200") is CATALOG["NVIDIA H200"]
    assert capability_for("NVIDIA H100 80GB HBM3") is CATALOG["NVIDIA H100 80GB HBM3"]


@pytest.mark.parametrize("product", [None, "", "NVIDIA A10", "NVIDIA A100", "A100-SXM4-40GB-X", "x" * 10000, 42,
                                     "NVIDIA\x00A100-SXM4-40GB"])
def test_capability_for_unknown_or_hostile_is_none(product):
    assert capability_for(product) is None


def test_catalog_is_literal_data():
    # built at import from literals: no file is read, nothing parsed
    source = open(mig_catalog.__file__, encoding="utf-8").read()
    assert "open(" not in source and "parse_" not in source
    assert all(isinstance(p, Placement) for e in CATALOG.values() for pr in e.profiles for p in pr.placements)

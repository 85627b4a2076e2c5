# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each MIG-capable GPU model can be cut into, as ``nvidia-smi mig -lgip`` and ``-lgipp`` print it.

A GPU in MIG mode lists its own profiles (``node/mig_smi.py`` reads them); a GPU whose MIG mode is off lists
none, so the planner takes them from here to plan "enable MIG, then make these instances" in one run, and the
fakehw model (``node/fakehw_mig.py``) takes them from here for the GPUs it pretends to have. Keys are product
names as nvidia-smi prints them (``nvidia-smi -L``, ``<product_name>`` of ``-q -x``); ``capability_for``
also finds a name without the ``NVIDIA `` prefix that drivers before R470 printed, and ignores case and spacing.

Memory is nvidia-smi's GiB column (two decimals) times 1024, rounded to MiB. Where each entry comes from
(the recorded outputs are under ``tests/data/nvidia-smi-mig/``, their sources in its README.md;
``tests/unit/.../node/test_mig_catalog.py`` parses each one and compares it with the entry):

* ``NVIDIA A100-SXM4-40GB``: recorded ``-lgip`` (seansiddens/mps-test). Placements: NVIDIA's MIG user guide
  ("Getting Started with MIG", the ``-lgipp`` of an A100-SXM4-40GB: the same seven lines as the recorded
  H100 PCIe ``-lgipp`` below).
* ``NVIDIA A100-SXM4-80GB``: recorded ``-lgip`` (HuaizhengZhang/MIGProfiler; its driver predates profile 15).
  Added from the MIG user guide's A100 table: ``1g.20gb`` (profile 15, 4 instances, R525 and later), with the
  memory of ``2g.20gb`` (both two memory slices). Placements: as the A100-SXM4-40GB's (user guide).
* ``NVIDIA H100 PCIe``: recorded ``-lgip`` and ``-lgipp`` (scaleway/docs-content, via
  khulnasoft/docs-platform).
* ``NVIDIA H100 80GB HBM3`` (SXM5): NOT recorded here. Profiles, ids, instance counts and placements are the
  MIG user guide's H100 table (the same as the H100 PCIe's); memory as an H100 SXM5 session prints it
  (https://jbarrow.ai/field_notes/nvidia-mig/: 9.75, 9.75, 19.62, 19.62, 39.50 GiB), ``4g.40gb`` taken equal
  to ``3g.40gb`` (the same four memory slices) and ``7g.80gb`` as 79.25 GiB.
* ``NVIDIA H200``: NOT recorded here (only an excerpt was found: the rows of one GPU of a DGX H200's
  ``-lgip`` in NVIDIA/mig-parted issue #120: ids, instance counts and memory of six profiles). ``7g.141gb``'s
  memory is an estimate: twice the four-slice profile's. Placements: the MIG user guide's H200 table.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import GiProfile, MigCapability, Placement


def _at(size: int, *starts: int) -> Tuple[Placement, ...]:
    """``-lgipp``'s ``{starts}:size``."""
    return tuple(Placement(start, size) for start in starts)


# The placements every GPU below shares (8 memory slices): -lgipp of the MIG user guide and of the recording.
_ONE = _at(1, 0, 1, 2, 3, 4, 5, 6)  # profiles 19, 20: {0,1,2,3,4,5,6}:1
_ONE_WIDE = _at(2, 0, 2, 4, 6)  # profile 15: {0,2,4,6}:2
_TWO = _at(2, 0, 2, 4)  # profile 14: {0,2,4}:2
_THREE = _at(4, 0, 4)  # profile 9: {0,4}:4
_FOUR = _at(4, 0)  # profile 5: {0}:4
_SEVEN = _at(8, 0)  # profile 0: {0}:8

CATALOG: Dict[str, MigCapability] = {
    "NVIDIA A100-SXM4-40GB": MigCapability(
        product="NVIDIA A100-SXM4-40GB",
        profiles=(
            GiProfile(name="1g.5gb", id=19, slices=1, instances=7, memory_mib=4864, placements=_ONE),  # 4.75 GiB
            GiProfile(name="1g.5gb+me", id=20, slices=1, instances=1, memory_mib=4864, placements=_ONE),
            GiProfile(name="1g.10gb", id=15, slices=1, instances=4, memory_mib=9851, placements=_ONE_WIDE),  # 9.62
            GiProfile(name="2g.10gb", id=14, slices=2, instances=3, memory_mib=9851, placements=_TWO),
            GiProfile(name="3g.20gb", id=9, slices=3, instances=2, memory_mib=19968, placements=_THREE),  # 19.50
            GiProfile(name="4g.20gb", id=5, slices=4, instances=1, memory_mib=19968, placements=_FOUR),
            GiProfile(name="7g.40gb", id=0, slices=7, instances=1, memory_mib=40192, placements=_SEVEN),  # 39.25
        ),
    ),
    "NVIDIA A100-SXM4-80GB": MigCapability(
        product="NVIDIA A100-SXM4-80GB",
        profiles=(
            GiProfile(name="1g.10gb", id=19, slices=1, instances=7, memory_mib=9728, placements=_ONE),  # 9.50 GiB
            GiProfile(name="1g.10gb+me", id=20, slices=1, instances=1, memory_mib=9728, placements=_ONE),
            # not in the recording (driver before R525): the MIG user guide's A100 table
            GiProfile(name="1g.20gb", id=15, slices=1, instances=4, memory_mib=19968, placements=_ONE_WIDE),
            GiProfile(name="2g.20gb", id=14, slices=2, instances=3, memory_mib=19968, placements=_TWO),  # 19.50
            GiProfile(name="3g.40gb", id=9, slices=3, instances=2, memory_mib=40448, placements=_THREE),  # 39.50
            GiProfile(name="4g.40gb", id=5, slices=4, instances=1, memory_mib=40448, placements=_FOUR),
            GiProfile(name="7g.80gb", id=0, slices=7, instances=1, memory_mib=81152, placements=_SEVEN),  # 79.25
        ),
    ),
    "NVIDIA H100 PCIe": MigCapability(
        product="NVIDIA H100 PCIe",
        profiles=(
            GiProfile(name="1g.10gb", id=19, slices=1, instances=7, memory_mib=9851, placements=_ONE),  # 9.62 GiB
            GiProfile(name="1g.10gb+me", id=20, slices=1, instances=1, memory_mib=9851, placements=_ONE),
            GiProfile(name="1g.20gb", id=15, slices=1, instances=4, memory_mib=19968, placements=_ONE_WIDE),  # 19.50
            GiProfile(name="2g.20gb", id=14, slices=2, instances=3, memory_mib=19968, placements=_TWO),
            GiProfile(name="3g.40gb", id=9, slices=3, instances=2, memory_mib=40192, placements=_THREE),  # 39.25
            GiProfile(name="4g.40gb", id=5, slices=4, instances=1, memory_mib=40192, placements=_FOUR),
            GiProfile(name="7g.80gb", id=0, slices=7, instances=1, memory_mib=80896, placements=_SEVEN),  # 79.00
        ),
    ),
    "NVIDIA H100 80GB HBM3": MigCapability(
        product="NVIDIA H100 80GB HBM3",
        profiles=(
            GiProfile(name="1g.10gb", id=19, slices=1, instances=7, memory_mib=9984, placements=_ONE),  # 9.75 GiB
            GiProfile(name="1g.10gb+me", id=20, slices=1, instances=1, memory_mib=9984, placements=_ONE),
            GiProfile(name="1g.20gb", id=15, slices=1, instances=4, memory_mib=20091, placements=_ONE_WIDE),  # 19.62
            GiProfile(name="2g.20gb", id=14, slices=2, instances=3, memory_mib=20091, placements=_TWO),
            GiProfile(name="3g.40gb", id=9, slices=3, instances=2, memory_mib=40448, placements=_THREE),  # 39.50
            GiProfile(name="4g.40gb", id=5, slices=4, instances=1, memory_mib=40448, placements=_FOUR),
            GiProfile(name="7g.80gb", id=0, slices=7, instances=1, memory_mib=81152, placements=_SEVEN),  # 79.25
        ),
    ),
    "NVIDIA H200": MigCapability(
        product="NVIDIA H200",
        profiles=(
            GiProfile(name="1g.18gb", id=19, slices=1, instances=7, memory_mib=16384, placements=_ONE),  # 16.00 GiB
            GiProfile(name="1g.18gb+me", id=20, slices=1, instances=1, memory_mib=16384, placements=_ONE),
            GiProfile(name="1g.35gb", id=15, slices=1, instances=4, memory_mib=33024, placements=_ONE_WIDE),  # 32.25
            GiProfile(name="2g.35gb", id=14, slices=2, instances=3, memory_mib=33024, placements=_TWO),
            GiProfile(name="3g.71gb", id=9, slices=3, instances=2, memory_mib=71168, placements=_THREE),  # 69.50
            GiProfile(name="4g.71gb", id=5, slices=4, instances=1, memory_mib=71168, placements=_FOUR),
            # memory not recorded: twice the four-slice profile's (an estimate)
            GiProfile(name="7g.141gb", id=0, slices=7, instances=1, memory_mib=142336, placements=_SEVEN),
        ),
    ),
}

# Entries built (in part) from NVIDIA's tables rather than a recorded -lgip/-lgipp (see the docstring).
BUILT_NOT_RECORDED = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")

_MAX_PRODUCT_CHARS = 200


def _key(product: str) -> str:
    name = " ".join(product.split()).casefold()
    if name.startswith("nvidia "):
        name = name[len("nvidia "):]
    return name


_BY_KEY: Dict[str, MigCapability] = {_key(name): capability for name, capability in CATALOG.items()}


def capability_for(product: Optional[str]) -> Optional[MigCapability]:
    """The catalog entry for ``product`` as nvidia-smi names it: the exact name, else the same name without
    the ``NVIDIA `` prefix, in any case and spacing (``A100-SXM4-40GB``, as drivers before R470 print it).
    None for a product the catalog does not know (it may still do MIG: its own ``-lgip`` says so)."""
    if not isinstance(product, str) or not product or len(product) > _MAX_PRODUCT_CHARS:
        return None
    found = CATALOG.get(product)
    if found is not None:
        return found
    return _BY_KEY.get(_key(product))

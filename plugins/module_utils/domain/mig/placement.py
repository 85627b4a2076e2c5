# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where new GPU instances go: a placement for each, among those its profile allows (``nvidia-smi mig -lgipp``),
overlapping neither each other nor the instances that stay.

The planner always passes an explicit placement to the host (``-cgi <profile>:<start>``), so what a run makes
is what its plan said, and the boot unit makes the same layout again from the same placements. An operator's
placement is kept as given; the rest are searched, the larger instances first, each profile's placements in
the driver's order. A GPU has 8 memory slices and at most 7 instances, so the search is small; it is bounded
all the same (``MAX_STEPS``).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import GiProfile, Placement

MAX_STEPS = 20000

# One instance to place: its profile and the start slice the operator gave, or None.
ToPlace = Tuple[GiProfile, Optional[int]]


def placement_at(profile: GiProfile, start: int) -> Optional[Placement]:
    """The placement of ``profile`` starting at slice ``start``, or None when the profile has none there."""
    for placement in profile.placements:
        if placement.start == start:
            return placement
    return None


def fit(wanted: Sequence[ToPlace], occupied: Sequence[Placement]) -> Optional[List[Placement]]:
    """A placement for each of ``wanted``, in its order, none overlapping another or ``occupied``; None when there
    is none (or an operator's placement is not one of its profile's)."""
    chosen: List[Optional[Placement]] = [None] * len(wanted)
    taken = list(occupied)
    for i, (profile, start) in enumerate(wanted):
        if start is None:
            continue
        placement = placement_at(profile, start)
        if placement is None or any(placement.overlaps(other) for other in taken):
            return None
        chosen[i] = placement
        taken.append(placement)
    order = sorted((i for i, (_profile, start) in enumerate(wanted) if start is None),
                   key=lambda i: (-wanted[i][0].slices, -_size(wanted[i][0]), i))
    steps = [0]

    def place(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for placement in wanted[i][0].placements:
            steps[0] += 1
            if steps[0] > MAX_STEPS:
                return False
            if any(placement.overlaps(other) for other in taken):
                continue
            chosen[i] = placement
            taken.append(placement)
            if place(k + 1):
                return True
            taken.pop()
            chosen[i] = None
        return False

    if not place(0):
        return None
    return [placement for placement in chosen if placement is not None]


def _size(profile: GiProfile) -> int:
    return max((placement.size for placement in profile.placements), default=0)

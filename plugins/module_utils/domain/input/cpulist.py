# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernel's cpulist (``0-3,8,10-11``), read and written in one place: the CPUs and NUMA nodes of a hold's
``limits``, of a slice's ``AllowedCPUs``/``AllowedMemoryNodes`` and of the host (``/sys``, fakehw). What a
cpulist may be in the input is checked with the assignment's fields (``assignment.check_cpulist``)."""

from __future__ import annotations

from typing import Iterable, List, Set


def parse_cpulist(value: str) -> Set[int]:
    """The set of numbers a checked cpulist names."""
    numbers: Set[int] = set()
    for part in value.split(","):
        if "-" in part:
            low, high = part.split("-")
            numbers.update(range(int(low), int(high) + 1))
        else:
            numbers.add(int(part))
    return numbers


def format_cpulist(numbers: Iterable[int]) -> str:
    """Numbers as the kernel writes a cpulist: ``0-3,8,10-11``; empty for none."""
    ranges: List[List[int]] = []
    for number in sorted(set(numbers)):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    return ",".join("%d" % low if low == high else "%d-%d" % (low, high) for low, high in ranges)

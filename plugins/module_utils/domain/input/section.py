# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input's sections as a whole: their bounds, and the devices section split into assignments and refusals.

``parse_assignments`` reads the ``devices`` section: it bounds what the section costs before anything
else reads it (``section_size``: bytes and depth; how many entries; how many atoms), then hands each
entry to ``assignment.parse_assignment`` and keeps the refusals in the section's order. The
``instances`` section (GPUs passed through to VMs) is bounded the same way (``check_instances``); its
shape is read elsewhere. Apart from ``assignment.py`` because that module checks one assignment, this one
what a pass takes in all: the two change for different reasons. The bounds themselves are
``assignment.py``'s, beside every other bound on the input.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_ASSIGNMENTS,
    MAX_ATOMS,
    MAX_DEVICES,
    MAX_LISTED,
    MAX_SECTION_BYTES,
    MAX_SECTION_DEPTH,
    InvalidAssignment,
    ParsedInput,
    is_allocation_id,
    parse_assignment,
    unset_limits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Refusal
from ansible_collections.bcd.devices.plugins.module_utils.support.bounded_json import MAX_INT_DIGITS


def _text_size(text: str) -> int:
    """An upper bound of ``text``'s length in JSON: ``json.dumps`` escapes a quote or backslash in two
    characters, anything else outside printable ASCII in at most 12 (a surrogate pair of ``\\uXXXX``)."""
    if text.isascii() and text.isprintable():
        return len(text) + text.count('"') + text.count("\\")
    return 12 * len(text)


_TOO_MANY_DIGITS = 10 ** MAX_INT_DIGITS  # the least integer root's reader refuses


def section_size(raw: object, limit: int = MAX_SECTION_BYTES, depth_limit: int = MAX_SECTION_DEPTH,
                 name: str = "devices") -> int:
    """An upper bound of the bytes of ``raw`` as JSON indented by 2 (the stored input is compact: less),
    walked without recursion and stopped as soon as it passes ``limit``; ``InvalidAssignment`` then,
    or when ``raw`` nests deeper than ``depth_limit``. Every value, key and bracket counts 10 bytes
    and its indentation besides, so a section within ``limit`` has fewer than ``limit / 10`` values."""
    total = 0
    stack: List[Tuple[object, int]] = [(raw, 0)]
    while stack:
        value, depth = stack.pop()
        total += 10 + 2 * depth
        if isinstance(value, str):
            total += len(value) if len(value) > limit else _text_size(value)
        elif isinstance(value, bool) or value is None:
            total += 5
        elif isinstance(value, int):
            # what root's reader takes back of the stored input (support/bounded_json.py): a number it would
            # refuse there, stored, would stop every timer pass, so the section is refused here instead
            if abs(value) >= _TOO_MANY_DIGITS:
                raise InvalidAssignment("%s: holds an integer of more than %d digits; the section is not "
                                        "read" % (name, MAX_INT_DIGITS))
            total += value.bit_length() // 3 + 2
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidAssignment("%s: holds %r, which is no JSON number; the section is not read" % (name, value))
        elif isinstance(value, (list, tuple, dict)):
            if depth >= depth_limit:
                raise InvalidAssignment("%s: nested deeper than %d levels; the section is not read"
                                        % (name, depth_limit))
            if total + len(value) * (10 + 2 * depth) > limit:  # what its items cost at least: refused unwalked
                total = limit + 1
            elif isinstance(value, dict):
                for key, item in value.items():
                    total += 10 + 2 * depth + (_text_size(key) if isinstance(key, str) else 24)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)
        else:  # a float, or what YAML may make of a scalar
            total += 32
        if total > limit:
            raise InvalidAssignment("%s: the section is larger than %d bytes (%s as JSON), the most a "
                                    "pass reads; it is not read (docs/security.md, \"Hostile numbers are cheap\")"
                                    % (name, limit, "%d MiB" % (limit >> 20) if limit >= 1 << 20 else "%d KiB" % (limit >> 10)))
    return total


# The instances section (GPUs passed through to VMs): each instance takes whole GPUs, and a node has about
# 16, so these bounds are far above any node while keeping what a pass reads, and the stored input, small.
MAX_INSTANCES = 256
MAX_INSTANCE_GPUS = 64
MAX_INSTANCES_BYTES = 256 * 1024


def check_instances(raw: object) -> None:
    """``InvalidAssignment`` when the instances section is past its bounds (how many instances, GPUs an
    instance, bytes as JSON): like a devices section past its own, it is not read, and the pass stops
    before anything is written. Its shape is checked where it is read (the module's options, the stored
    input's reader); this bounds what that costs."""
    if not isinstance(raw, list):
        return
    if len(raw) > MAX_INSTANCES:
        raise InvalidAssignment("instances: %d instances, more than the %d a pass reads; the section is not read"
                                % (len(raw), MAX_INSTANCES))
    for index, instance in enumerate(raw):
        gpus = instance.get("gpus") if isinstance(instance, dict) else None
        if isinstance(gpus, list) and len(gpus) > MAX_INSTANCE_GPUS:
            raise InvalidAssignment("instances[%d]: %d GPUs, more than the %d a pass reads; the section is not read"
                                    % (index, len(gpus), MAX_INSTANCE_GPUS))
    section_size(raw, MAX_INSTANCES_BYTES, name="instances")


def _atoms_listed(raw: object) -> int:
    """How many atoms a raw entry lists (0 when it lists none in a list: it is refused for that)."""
    devices = raw.get("devices") if isinstance(raw, dict) else None
    return len(devices) if isinstance(devices, list) else 0


def parse_assignments(raw_list: object, env_allow: Optional[Tuple[str, ...]] = None) -> ParsedInput:
    """Split the raw ``devices`` section into assignments and refusals.

    The first ``MAX_ASSIGNMENTS`` entries are honoured; each one after them is
    refused. An allocation id may appear once. One sent more than once is ambiguous, so
    every entry of it is refused (one refusal for the allocation) and a hold it
    already has is kept as it is. A refusal for an entry without a usable
    allocation id (none, or one that is not valid: ``../x``) is keyed by its
    position (``devices[3]``) so it can still be reported; its message says
    which id was sent.
    """
    if raw_list is not None and not isinstance(raw_list, list):
        raise InvalidAssignment("devices: must be a list of assignments")
    entries: List[Any] = raw_list or []  # each entry as sent: anything JSON or YAML makes, checked below
    if len(entries) > MAX_LISTED:
        raise InvalidAssignment("devices: %d assignments; at most %d are read (%d honoured)"
                                % (len(entries), MAX_LISTED, MAX_ASSIGNMENTS))
    section_size(entries)
    parsed = ParsedInput()
    atoms = 0
    keys: List[str] = []
    for index, raw in enumerate(entries):
        raw_id = raw.get("allocation_id") if isinstance(raw, dict) else None
        # A refusal is reported under the id the control plane sent when it is one; else under the entry's
        # position, which the events' grammar takes in its stead (never the raw text: it may be anything).
        keys.append(raw_id if isinstance(raw_id, str) and is_allocation_id(raw_id) else "devices[%d]" % index)
    counts: Dict[str, int] = dict((key, keys.count(key)) for key in keys)
    for index, (key, raw) in enumerate(zip(keys, entries)):
        if key in parsed.order:
            continue
        parsed.order.append(key)
        try:
            if counts[key] > 1:
                raise InvalidAssignment("allocation_id: %s appears %d times" % (key, counts[key]))
            if index >= MAX_ASSIGNMENTS:
                raise InvalidAssignment("devices[%d]: beyond the %d assignments a pass honours"
                                        % (index, MAX_ASSIGNMENTS))
            listed = _atoms_listed(raw)
            if atoms + listed > MAX_ATOMS and listed <= MAX_DEVICES:
                raise InvalidAssignment("devices: %d atoms would take the section to %d, past the %d atoms a pass "
                                        "honours (%d taken by the assignments before it)"
                                        % (listed, atoms + listed, MAX_ATOMS, atoms))
            parsed.assignments.append(parse_assignment(raw, index, env_allow))
            atoms += listed
            parsed.warnings.extend("%s: limits.%s: %s reads as unset (proto3's zero value), so no %s limit is set"
                                   % (key, name, json.dumps(raw["limits"][name]), name)
                                   for name in unset_limits(raw.get("limits")))
        except InvalidAssignment as exc:
            parsed.refusals.append(Refusal(key, exc.reason, str(exc)))
            if is_allocation_id(key):
                parsed.refused_ids.append(key)
    return parsed

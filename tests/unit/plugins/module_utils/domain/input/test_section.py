# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The devices section as a whole (``domain/input/section.py``): what it may cost a pass is bounded before
anything reads it (bytes, depth, entries, atoms), and so is the instances section; a section past a bound
fails the task and writes nothing, an entry past the atom budget is refused alone."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_ATOMS, MAX_DEVICES, InvalidAssignment
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import parse_assignments, section_size
from ansible_collections.bcd.devices.tests.unit.builders import hold as build_hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.input.test_assignment import GPU, entry
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run as run_module


# --- the whole section is bounded (docs/security.md, "Hostile numbers are cheap") -------------------

def slot_hold(allocation_id, count, gpu=GPU, first=0, **fields):
    return entry(allocation_id=allocation_id, devices=[{"id": "%s/s%d" % (gpu, n), "device_class": "gpu.slot"}
                                                       for n in range(first, first + count)], **fields)


def test_past_the_atom_budget_assignments_are_refused_one_by_one_and_smaller_ones_after_still_fit():
    assert (MAX_ATOMS, MAX_DEVICES) == (4096, 1024)
    parsed = parse_assignments([slot_hold("a%d" % n, 1024, first=1024 * n) for n in range(3)]
                               + [slot_hold("a3", 1000, first=3072), slot_hold("big", 100), slot_hold("b2", 97),
                                  slot_hold("last", 24, first=5000), slot_hold("over", 1)])
    assert [a.allocation_id for a in parsed.assignments] == ["a0", "a1", "a2", "a3", "last"]
    assert sum(len(a.devices) for a in parsed.assignments) == 4096
    assert [(r.allocation_id, r.message) for r in parsed.refusals] == [
        ("big", "devices: 100 atoms would take the section to 4172, past the 4096 atoms a pass honours "
                "(4072 taken by the assignments before it)"),
        ("b2", "devices: 97 atoms would take the section to 4169, past the 4096 atoms a pass honours "
               "(4072 taken by the assignments before it)"),
        ("over", "devices: 1 atoms would take the section to 4097, past the 4096 atoms a pass honours "
                 "(4096 taken by the assignments before it)"),
    ]
    assert parsed.refused_ids == ["big", "b2", "over"]  # their live holds are kept, as any refused entry's


def test_a_refused_entry_takes_none_of_the_atom_budget():
    parsed = parse_assignments([slot_hold("bad", 1024, env=["PATH=/x"])] + [slot_hold("a%d" % n, 1024) for n in range(4)])
    assert [a.allocation_id for a in parsed.assignments] == ["a0", "a1", "a2", "a3"]


@pytest.mark.parametrize("section", [
    [],
    [entry()],
    [slot_hold("a%d" % n, 4, env=["K=%s" % ("x" * 3000)]) for n in range(64)],
    [entry(env=["Q=\"\\\"\\" * 500, "U=caf\u00e9 \U0001f600 \u2603" * 20], reservation_id="\u00e9" * 200)],
    [{"allocation_id": "a", "devices": [[[[{}]]]], "limits": {"memory_bytes": 1 << 62, "cpus": 1.5}}, None, True, 7],
    [{"k": {"n": [None, False, -(1 << 70)]}}],
])
def test_the_size_walk_is_an_upper_bound_of_the_stored_json(section):
    stored = json.dumps({"generation": 1, "devices": section, "instances": []}, indent=2, sort_keys=True)
    assert section_size(section) + 200 >= len(stored.encode("utf-8"))


def test_what_the_section_bounds_admit_the_state_files_reader_takes_back():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input import assignment
    from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
    from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS
    # the stored input is the section plus a few fields; every value counts at least 10 bytes
    assert assignment.MAX_SECTION_BYTES * 2 <= FILE_CAPS["nodespec.json"]
    assert assignment.MAX_SECTION_BYTES // 10 + 1024 <= bounded_json.MAX_ITEMS
    assert assignment.MAX_SECTION_DEPTH + 2 <= bounded_json.MAX_DEPTH


def test_a_section_past_4_mib_is_not_read_and_fails_whole():
    section = [slot_hold("a%d" % n, 4, env=["K%d=%s" % (k, "x" * 4000) for k in range(256)]) for n in range(5)]
    with pytest.raises(InvalidAssignment) as raised:
        parse_assignments(section)
    assert str(raised.value) == ("devices: the section is larger than 4194304 bytes (4 MiB as JSON), the most a pass "
                                 "reads; it is not read (docs/security.md, \"Hostile numbers are cheap\")")


@pytest.mark.parametrize("section", [
    [[[]] * 10_000_000],  # refused by its length times what an item costs at least, before walking it
    [entry(reservation_id="x" * (64 << 20))],
    [{"allocation_id": "a", "junk": {str(n): n for n in range(1_000_000)}}],
])
def test_a_huge_section_is_refused_at_the_cost_of_a_small_one(section):
    started = time.monotonic()
    with pytest.raises(InvalidAssignment, match="^devices: the section is larger than 4194304 bytes"):
        parse_assignments(section)
    assert time.monotonic() - started < 0.5


def test_a_section_nested_deeper_than_16_levels_is_not_read():
    deep = "x"
    for _n in range(40):
        deep = [deep]
    with pytest.raises(InvalidAssignment, match="^devices: nested deeper than 16 levels; the section is not read$"):
        parse_assignments([entry(env=deep)])


def test_through_the_module_the_atom_budget_refuses_and_a_section_too_big_fails_writing_nothing(capsys, node):
    devices = [build_hold("a%d" % n, *["%s/s%d" % (GPU_B, k) for k in range(1024 * n, 1024 * (n + 1))])
               for n in range(4)] + [build_hold("x1", GPU_C)]
    result = run_module(capsys, node, check=True, generation=1, on_refusal="report", devices=devices)
    assert not result.get("failed")
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("x1", "invalid-assignment", "devices: 1 atoms would take the section to 4097, past the 4096 atoms a pass "
                                     "honours (4096 taken by the assignments before it)")]
    assert [p["action"] for p in result["plan"]].count("bind") == 4
    before = node.listing()
    devices = [build_hold("a%d" % n, GPU_A, env=["K%d=%s" % (k, "x" * 4000) for k in range(256)])
               for n in range(5)]
    result = run_module(capsys, node, generation=1, devices=devices)
    assert result["failed"] is True
    assert "devices: the section is larger than 4194304 bytes (4 MiB as JSON)" in result["msg"]
    assert node.listing() == before


@pytest.mark.parametrize("instances, message", [
    ([{"instance_id": "vm%d" % n, "gpus": [GPU_C]} for n in range(257)],
     "instances: 257 instances, more than the 256 a pass reads; the section is not read"),
    ([{"instance_id": "vm1", "gpus": ["GPU-%04d" % n for n in range(65)]}],
     "instances[0]: 65 GPUs, more than the 64 a pass reads; the section is not read"),
    ([{"instance_id": "vm%d-%s" % (n, "i" * 2000), "gpus": [GPU_C]} for n in range(200)],
     "instances: the section is larger than 262144 bytes (256 KiB as JSON), the most a pass reads; it is not "
     "read (docs/security.md, \"Hostile numbers are cheap\")"),
])
def test_through_the_module_an_instances_section_past_its_bounds_fails_writing_nothing(capsys, node, instances,
                                                                                       message):
    """The instances section was read and stored whatever its size: every timer pass then read it back."""
    before = node.listing()
    result = run_module(capsys, node, generation=1, devices=[build_hold("a1", GPU_A)], instances=instances)
    assert result["failed"] is True and message in result["msg"]
    assert node.listing() == before
    within = [{"instance_id": "vm%d" % n, "gpus": [GPU_C]} for n in range(256)]
    result = run_module(capsys, node, generation=1, devices=[build_hold("a1", GPU_A)], instances=within)
    assert not result.get("failed") and result["changed"] is True


@pytest.mark.parametrize("hostile, message", [
    (7 * 10 ** 1000, "devices: holds an integer of more than 40 digits; the section is not read"),
    (-(10 ** 40), "devices: holds an integer of more than 40 digits; the section is not read"),
    (float("inf"), "devices: holds inf, which is no JSON number; the section is not read"),
    (float("nan"), "devices: holds nan, which is no JSON number; the section is not read"),
])
def test_a_number_root_could_not_read_back_fails_the_section_before_it_is_stored(capsys, node, hostile, message):
    """Found by make fuzz: one such number anywhere in the section (here a limit) was stored in nodespec.json,
    whose reader refuses it, so every timer pass after the task failed on its own stored input."""
    before = node.listing()
    hold = dict(build_hold("a1", GPU_A), limits={"cpus": "0-3", "mems": hostile})
    result = run_module(capsys, node, generation=1, devices=[hold])
    assert result["failed"] is True and message in result["msg"]
    assert node.listing() == before
    assert parse_assignments([entry(limits={"memory_bytes": 10 ** 40 - 1})]).refusals  # 40 digits: read, refused

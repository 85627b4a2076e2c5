# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pass hands back (entry/converge.py, ``PassResult``): the plan as the planner made it, and beside it the
holds on the node after the pass, read back when the pass wrote. Applying never writes into the plan, and the
section is said once a pass."""

from __future__ import annotations

import errno

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import converge as _converge
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B


def ids(holds):
    return [summary["allocation_id"] for summary in holds]


def test_the_holds_read_back_after_a_failed_write_ride_in_the_result_and_the_plan_stays_as_planned(node, monkeypatch):
    real = DirectWriter.write_node_file

    def no_spec_for_a2(self, kind, allocation_id, content, hold=None, path=None):
        if kind == "cdi" and allocation_id == "a2":
            raise OSError(errno.EROFS, "Read-only file system")
        return real(self, kind, allocation_id, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "write_node_file", no_spec_for_a2)
    result = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)])
    assert result.section["state"] == "PROGRESSING"
    assert ids(result.plan.holds) == ["a1", "a2"]  # what the planner meant to hold, untouched by the apply
    assert ids(result.holds) == ["a1"]  # what the node holds: a2's spec was never written
    assert result.to_dict()["holds"] == result.holds


def test_a_pass_that_writes_nothing_returns_the_plans_holds(node):
    node.run(1, [hold("a1", GPU_A)])
    checked = node.run(2, [hold("a1", GPU_A), hold("a2", GPU_B)], check_mode=True)
    assert ids(checked.holds) == ["a1", "a2"] and checked.holds == checked.plan.holds
    same = node.run(1, [hold("a1", GPU_A)])  # a no-op: nothing written, nothing read again
    assert ids(same.holds) == ["a1"] and same.holds == same.plan.holds


def test_a_real_pass_reads_back_what_it_wrote_in_the_inputs_order(node):
    result = node.run(1, [hold("b2", GPU_B), hold("a1", GPU_A)])
    assert ids(result.holds) == ["b2", "a1"]
    assert result.holds == node.run(1, [hold("b2", GPU_B), hold("a1", GPU_A)]).holds


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_section_is_said_once_a_pass(node, monkeypatch, check_mode):
    calls = []
    real = _converge.section_of

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(_converge, "section_of", counting)
    result = node.run(1, [hold("a1", GPU_A)], check_mode=check_mode)
    assert len(calls) == 1 and result.section == real(*calls[0])

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""reports.in_report_order: the kept holds' reports, each after the report that moves another hold off its
devices, so the journal never says two holds have one device (found by make soak: a pass died after binding
a hold moved off GPU A and one bound on it, and the next pass reported them in spec order)."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import FileChange, ReportBound, WriteEnv
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import in_report_order
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C


def report(allocation_id, device_ids, reported_on=()):
    why = ReportBound.MOVED if reported_on else ReportBound.NEVER_JOURNALED
    return ReportBound(allocation_id, event={"type": "AllocationBound", "body": {"allocation_id": allocation_id}},
                       device_ids=tuple(device_ids), generation=4, limits=None, why=why, reported_on=tuple(reported_on))


def order(actions):
    return [(action.kind, action.allocation_id) for action in in_report_order(actions)]


def test_a_hold_bound_on_a_gpu_is_reported_after_the_hold_that_moved_off_it():
    takes, moves = report("a1", [GPU_A]), report("a3", [GPU_C + "/s0"], reported_on=[GPU_A])
    assert order([takes, moves]) == [("report-bound", "a3"), ("report-bound", "a1")]


def test_a_part_of_the_gpu_counts_and_the_other_steps_keep_their_places():
    env = WriteEnv("a2", file=FileChange("allocation-env", "/run/bcd/allocations/a2.env", None, b"X=1\n"),
                   device_ids=(GPU_C,), generation=4)
    takes, moves = report("a1", [GPU_A + "/gi1/ci0"]), report("a3", [GPU_B], reported_on=[GPU_A])
    assert order([takes, env, moves]) == [("report-bound", "a3"), ("write-env", "a2"), ("report-bound", "a1")]


def test_reports_that_share_nothing_keep_spec_order():
    first, second = report("a1", [GPU_A]), report("a3", [GPU_C], reported_on=[GPU_B])
    assert order([first, second]) == [("report-bound", "a1"), ("report-bound", "a3")]


def test_holds_that_swapped_gpus_keep_spec_order():
    one, other = report("a1", [GPU_B], reported_on=[GPU_A]), report("a3", [GPU_A], reported_on=[GPU_B])
    assert order([one, other]) == [("report-bound", "a1"), ("report-bound", "a3")]

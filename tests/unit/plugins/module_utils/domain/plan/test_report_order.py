# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""reports.in_report_order: the kept holds' reports, each after the report that moves another hold off its
devices, so the journal never says two holds have one device (found by make soak: a pass died after binding
a hold moved off GPU A and one bound on it, and the next pass reported them in spec order)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import FileChange, ReportBound, WriteEnv
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.reports import in_report_order
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C

GPU_D = "GPU-5f1c2a90-0000-4000-8000-000000000004"


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


# -- against the rule as written, on random reports ------------------------------------------------------

ATOM_IDS = [gpu + part for gpu in (GPU_A, GPU_B, GPU_C) for part in ("", "/gi1/ci0", "/gi2/ci0", "/s0", "/s1")]
reports_st = st.lists(st.tuples(st.lists(st.sampled_from(ATOM_IDS), min_size=1, max_size=3, unique=True),
                                st.lists(st.sampled_from(ATOM_IDS), max_size=3, unique=True)), max_size=8)


def moves_off(first, then):
    """The rule, pair by pair: ``first`` was last reported on a part of what ``then`` takes."""
    return any(a.gpu_uuid == b.gpu_uuid and (a.whole or b.whole or a.key == b.key)
               for a in atoms_of(first.reported_on) for b in atoms_of(then.device_ids))


def reference(reports):
    """Each time, the first report in spec order that no report left to place moved off from."""
    left, ordered = list(reports), []
    while left:
        ready = next((i for i, one in enumerate(left)
                      if not any(moves_off(other, one) for other in left if other is not one)), 0)
        ordered.append(left.pop(ready))
    return ordered


@settings(max_examples=300, deadline=None)
@given(reports_st)
def test_the_order_is_the_rules_and_keeps_the_other_steps_in_place(drawn):
    reports = [report("a%d" % n, taken, reported_on=left) for n, (taken, left) in enumerate(drawn)]
    env = WriteEnv("x", file=FileChange("allocation-env", "/run/bcd/allocations/x.env", None, b"X=1\n"),
                   device_ids=(GPU_D,), generation=4)
    actions = [env] + [step for one in reports for step in (one, env)]
    ordered = in_report_order(actions)
    assert [step for step in ordered if step is env] == [step for step in actions if step is env]
    assert [i for i, step in enumerate(ordered) if step is env] == [i for i, step in enumerate(actions) if step is env]
    assert [step for step in ordered if step is not env] == reference(reports)


def test_a_crash_after_the_largest_section_is_ordered_through_the_index():
    # 512 holds of 8 slots, each moved off the slots the one before it in spec order takes: a chain of 512 that
    # runs against spec order. The rule pair by pair took 68 s of CPU here; the index takes milliseconds
    gpus = [GPU_A, GPU_B, GPU_C, GPU_D]

    def slots(n):
        return ["%s/s%d" % (gpus[n % 4], (n // 4) * 8 + k) for k in range(8)]

    reports = [report("a%d" % n, slots(n), reported_on=slots(n - 1) if n else ()) for n in range(512)]
    assert [step.allocation_id for step in in_report_order(reports)] == ["a%d" % n for n in reversed(range(512))]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, item 1: ``doctor`` checks "one GPU, one hold" over the node's specs and env files, with the rule the
planner and the root helper apply (``conflicts.one_gpu_one_hold``), and fails when it does not hold."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_doctor import (  # noqa: F401  # pylint: disable=unused-import
    doctor_run,
    healthy,
)


def test_one_gpu_one_hold_passes_on_a_converged_node(capsys, healthy):  # noqa: F811  # pylint: disable=redefined-outer-name
    code, checks, lines = doctor_run(capsys, healthy)
    assert code == EX_OK
    assert checks["one-hold"] == ("OK", "each GPU, or part of one, is held once (1 specs, 1 env files)")
    names = [line.split()[1] for line in lines]
    assert names.index("one-hold") == names.index("holds") + 1


def test_a_second_spec_or_an_env_file_naming_a_held_gpu_fails_doctor(capsys, healthy):  # noqa: F811  # pylint: disable=redefined-outer-name
    healthy.write("/run/bcd/allocations/a2.env", "BCD_ALLOCATION_ID=a2\nNVIDIA_VISIBLE_DEVICES=%s\n" % GPU_B)
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s is assigned to a1" % GPU_B)
    healthy.write("/var/run/cdi/bcd-a3.json", healthy.read("/etc/cdi/bcd-a1.json").replace(b"a1", b"a3"))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s is assigned to a1; a3: %s is assigned to a1" % (GPU_B, GPU_B))


def test_an_env_file_naming_a_gpu_its_spec_lacks_fails_doctor_where_another_holds_it(capsys, healthy):  # noqa: F811  # pylint: disable=redefined-outer-name
    # a2's spec holds GPU_A; a1's spec is GPU_B's, but its env file names GPU_A too: two files hand out GPU_A
    healthy.write("/etc/cdi/bcd-a2.json", healthy.read("/etc/cdi/bcd-a1.json").replace(b"a1", b"a2")
                  .replace(GPU_B.encode(), GPU_A.encode()))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code == EX_OK and checks["one-hold"][0] == "OK"
    healthy.write("/run/bcd/allocations/a1.env", "BCD_ALLOCATION_ID=a1\nNVIDIA_VISIBLE_DEVICES=%s,%s\n" % (GPU_B, GPU_A))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s has %s (env file) assigned to a1" % (GPU_A, GPU_A))

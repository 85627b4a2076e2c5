# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, item 3, through the module on a fakehw node: a kept hold's slice that runs a workload (its record says
populated) keeps its ``cpus`` and ``mems`` when new limits would narrow them, refused with the numbers; the same
limits widened, or set again once the slice is empty, are set. (The helper: helper/test_slice_cpusets.py.)"""

from __future__ import annotations

import json

from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_host_cpus import limited, numa, refusals  # noqa: F401  # pylint: disable=unused-import

RECORD = "/run/bcd/slices/bcd-alloc-a1.slice.json"


def set_populated(node, populated):
    data = json.loads(node.read(RECORD))
    data["populated"] = populated
    node.write(RECORD, json.dumps(data))


def slice_properties(node):
    return json.loads(node.read(RECORD))["properties"]


def test_a_running_slices_cpus_and_mems_are_not_narrowed_and_widen(capsys, numa):  # noqa: F811  # pylint: disable=redefined-outer-name
    run(capsys, numa, generation=1, devices=[limited("a1", GPU_A, cpus="0-7", mems="0-1")])
    set_populated(numa, True)
    for generation, check in ((2, True), (2, False)):  # check mode says it first, and writes nothing
        narrowed = run(capsys, numa, check=check, generation=generation, on_refusal="report",
                       devices=[limited("a1", GPU_A, cpus="0-7", mems="1")])
        assert refusals(narrowed) == [(
            "a1", "resources-exhausted",
            "bcd-alloc-a1.slice: limits.mems 1 narrows AllowedMemoryNodes=0-1: it leaves out NUMA node 0; a running "
            "workload's cpus and mems only widen or stay (it would lose CPUs, or the memory nodes its pages are on): "
            "set once the slice is empty; the hold keeps its limits")]
        assert slice_properties(numa) == {"AllowedCPUs": "0-7", "AllowedMemoryNodes": "0-1"}
    fewer = run(capsys, numa, generation=3, on_refusal="report", devices=[limited("a1", GPU_A, cpus="4-11")])
    assert refusals(fewer) == [(
        "a1", "resources-exhausted",
        "bcd-alloc-a1.slice: limits.cpus 4-11 narrows AllowedCPUs=0-7: it leaves out CPUs 0-3; a running workload's "
        "cpus and mems only widen or stay (it would lose CPUs, or the memory nodes its pages are on): set once the "
        "slice is empty; the hold keeps its limits")]
    assert slice_properties(numa) == {"AllowedCPUs": "0-7", "AllowedMemoryNodes": "0-1"}
    wider = run(capsys, numa, generation=4, devices=[limited("a1", GPU_A, cpus="0-15", mems="0-1")])
    assert wider["failures"] == []
    assert slice_properties(numa) == {"AllowedCPUs": "0-15", "AllowedMemoryNodes": "0-1"}
    set_populated(numa, False)  # the workload exited: the narrowing is set
    empty = run(capsys, numa, generation=5, devices=[limited("a1", GPU_A, cpus="4-11", mems="1")])
    assert empty["failures"] == []
    assert slice_properties(numa) == {"AllowedCPUs": "4-11", "AllowedMemoryNodes": "1"}


def test_a_running_slice_is_not_widened_to_cpus_the_node_lacks(capsys, numa):  # noqa: F811  # pylint: disable=redefined-outer-name
    run(capsys, numa, generation=1, devices=[limited("a1", GPU_A, cpus="0-7")])
    set_populated(numa, True)
    moved = run(capsys, numa, generation=2, on_refusal="report", devices=[limited("a1", GPU_A, cpus="0-100")])
    assert refusals(moved) == [("a1", "invalid-assignment",
                                "limits.cpus 0-100: CPUs 64-100 are not online on this node (online: 0-63); "
                                "the hold keeps its limits")]
    assert slice_properties(numa) == {"AllowedCPUs": "0-7"}

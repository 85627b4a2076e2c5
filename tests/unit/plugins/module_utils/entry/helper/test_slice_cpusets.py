# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, item 3, through the helper as the tests serve it: on a populated slice ``cpus``/``mems`` only widen
or stay, and only to CPUs and NUMA nodes the host has; refused otherwise with the numbers in the message."""

from __future__ import annotations

import json
from pathlib import Path

RECORD = "/run/bcd/slices/bcd-alloc-a1.slice.json"


def populate(helper):
    path = Path(helper.node(RECORD))
    record = json.loads(path.read_text())
    record.update(populated=True, memory_current=1 << 20)  # a workload runs in it (root's record)
    path.write_text(json.dumps(record))


def properties(helper):
    return json.loads(Path(helper.node(RECORD)).read_text())["properties"]


def apply(helper, **limits):
    return helper.request({"op": "slice.apply", "allocation_id": "a1", "limits": dict(memory_bytes=4 << 30, **limits)})


def test_a_running_slices_cpus_and_mems_never_narrow_and_may_widen(helper):
    assert apply(helper, cpus="0-3", mems="0-1") == {"ok": True}
    populate(helper)
    assert apply(helper, cpus="0-3", mems="1") == {
        "ok": False, "retryable": True,
        "error": "bcd-alloc-a1.slice: limits.mems 1 narrows AllowedMemoryNodes=0-1: it leaves out NUMA node 0; a "
                 "running workload's cpus and mems only widen or stay (it would lose CPUs, or the memory nodes its "
                 "pages are on): set once the slice is empty"}
    assert apply(helper, cpus="2-5", mems="0-1") == {
        "ok": False, "retryable": True,
        "error": "bcd-alloc-a1.slice: limits.cpus 2-5 narrows AllowedCPUs=0-3: it leaves out CPUs 0-1; a running "
                 "workload's cpus and mems only widen or stay (it would lose CPUs, or the memory nodes its pages "
                 "are on): set once the slice is empty"}
    assert properties(helper)["AllowedCPUs"] == "0-3" and properties(helper)["AllowedMemoryNodes"] == "0-1"
    assert apply(helper, cpus="0-3", mems="0-1") == {"ok": True}  # the same again (a drift repair)
    assert apply(helper, cpus="0-7", mems="0-1") == {"ok": True}  # wider
    assert properties(helper)["AllowedCPUs"] == "0-7"
    assert apply(helper) == {"ok": True}  # no list: every CPU and node, the widest
    assert apply(helper, cpus="4") == {
        "ok": False, "retryable": True,
        "error": "bcd-alloc-a1.slice: limits.cpus 4 narrows AllowedCPUs from every CPU to 4; a running workload's "
                 "cpus and mems only widen or stay (it would lose CPUs, or the memory nodes its pages are on): set "
                 "once the slice is empty"}


def test_an_empty_slice_may_narrow(helper):
    assert apply(helper, cpus="0-3", mems="0-1") == {"ok": True}
    assert apply(helper, cpus="2", mems="1") == {"ok": True}
    assert properties(helper)["AllowedCPUs"] == "2" and properties(helper)["AllowedMemoryNodes"] == "1"


def test_cpus_and_nodes_the_host_lacks_are_refused_with_the_numbers(helper):
    hardware = json.loads(Path(helper.fakehw).read_text())  # the helper reads the node afresh on every request
    hardware.update(cpus="0-7", numa_nodes=[{"node": 0, "cpus": "0-3"}, {"node": 1, "cpus": "4-7"}])
    Path(helper.fakehw).write_text(json.dumps(hardware))
    assert apply(helper, cpus="0-3", mems="0-1") == {"ok": True}
    populate(helper)
    assert apply(helper, cpus="0-9", mems="0-3") == {
        "ok": False,
        "error": "bcd-alloc-a1.slice: limits.cpus 0-9: CPUs 8-9 not online on this node (online: 0-7); limits.mems "
                 "0-3: NUMA nodes 2-3 without memory on this node (NUMA nodes with memory: 0-1)"}
    assert properties(helper)["AllowedCPUs"] == "0-3"
    assert apply(helper, cpus="0-7", mems="0-1") == {"ok": True}

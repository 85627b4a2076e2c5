# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's CPUs and NUMA nodes in admission (``domain/plan/admission.py``): what a hold's ``cpus`` and ``mems`` name
that the host lacks, and when they lie off its GPUs' NUMA nodes. Pure: the host is plain data."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import (
    LOCALITY_NAMED,
    HostCpus,
    cpus_problem,
    gpu_numa_nodes,
    locality,
    locality_warning,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_CPU, Limits, parse_limits
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.cpulist import format_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import atoms_of
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory

from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C

HOST = HostCpus(online=frozenset(range(64)), memory_nodes=frozenset([0, 1]),
                node_cpus={0: frozenset(range(32)), 1: frozenset(range(32, 64))})
INVENTORY = Inventory(gpus=[Gpu(uuid=GPU_A, index=0, numa_node=0), Gpu(uuid=GPU_B, index=1, numa_node=1),
                            Gpu(uuid=GPU_C, index=2)], source="fakehw")


@pytest.mark.parametrize("numbers, text", [
    ([], ""), ([3], "3"), ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"), ([5, 4, 4, 6], "4-6"), (range(8192), "0-8191")])
def test_a_set_is_written_as_the_kernel_writes_a_cpulist(numbers, text):
    assert format_cpulist(numbers) == text


@pytest.mark.parametrize("limits, problem", [
    (Limits(cpus="0-63", mems="0-1"), None),
    (Limits(cpu_millis=4000, memory_bytes=1 << 30), None),
    (Limits(cpus="0-4096"), "limits.cpus 0-4096: CPUs 64-4096 are not online on this node (online: 0-63)"),
    (Limits(cpus="64"), "limits.cpus 64: CPU 64 is not online on this node (online: 0-63)"),
    (Limits(mems="5"), "limits.mems 5: NUMA node 5 has no memory on this node (NUMA nodes with memory: 0-1)"),
    (Limits(cpus="0,70", mems="1-3"), "limits.cpus 0,70: CPU 70 is not online on this node (online: 0-63); "
                                      "limits.mems 1-3: NUMA nodes 2-3 have no memory on this node (NUMA nodes with memory: 0-1)"),
])
def test_cpus_and_mems_the_host_lacks_are_named(limits, problem):
    assert cpus_problem(limits, HOST) == problem


def test_nothing_is_refused_when_the_host_was_not_read_or_nothing_is_booked():
    assert cpus_problem(Limits(cpus="0-8191"), None) is None
    assert cpus_problem(None, HOST) is None


def test_the_largest_cpulist_a_hold_may_give_is_checked_within_the_bound():
    limits = parse_limits({"cpus": "0-%d" % MAX_CPU, "mems": "0-1023"})
    assert cpus_problem(limits, HOST) == (
        "limits.cpus 0-8191: CPUs 64-8191 are not online on this node (online: 0-63); limits.mems 0-1023: NUMA nodes "
        "2-1023 have no memory on this node (NUMA nodes with memory: 0-1)")


def test_a_cpu_on_the_node_but_a_node_without_memory_is_refused_as_cpuset_mems_would():
    host = HostCpus(online=frozenset(range(8)), memory_nodes=frozenset([0]),
                    node_cpus={0: frozenset(range(4)), 1: frozenset(range(4, 8))})
    assert cpus_problem(Limits(cpus="4-7"), host) is None
    assert cpus_problem(Limits(mems="1"), host) == (
        "limits.mems 1: NUMA node 1 has no memory on this node (NUMA nodes with memory: 0)")


def test_the_gpus_numa_nodes_are_known_only_when_each_gpus_is():
    assert gpu_numa_nodes(atoms_of([GPU_A]), INVENTORY) == frozenset([0])
    assert gpu_numa_nodes(atoms_of([GPU_A, GPU_B + "/s1"]), INVENTORY) == frozenset([0, 1])
    assert gpu_numa_nodes(atoms_of([GPU_A, GPU_C]), INVENTORY) is None  # GPU_C's node is not known
    assert gpu_numa_nodes(atoms_of(["GPU-5f1c2a90-0000-4000-8000-0000000000ff"]), INVENTORY) is None


def test_cpus_and_mems_off_the_gpus_nodes_get_a_note():
    assert locality(Limits(cpus="24-39", mems="0-1"), frozenset([0]), HOST) == {
        "gpu_numa_nodes": [0], "local_cpus": "0-31", "remote_cpus": "32-39", "remote_mems": "1",
        "text": "cpus 32-39 and mems 1 lie outside its GPUs' NUMA node 0 (CPUs 0-31)"}
    assert locality(Limits(mems="0"), frozenset([1]), HOST)["text"] == "mems 0 lie outside its GPUs' NUMA node 1 (CPUs 32-63)"


@pytest.mark.parametrize("limits, gpu_nodes, host", [
    (Limits(cpus="0-31", mems="0"), frozenset([0]), HOST),  # local
    (Limits(cpus="0-63", mems="0-1"), frozenset([0, 1]), HOST),  # GPUs on both sockets: both are local
    (Limits(memory_bytes=1 << 30), frozenset([0]), HOST),  # books neither
    (Limits(cpus="40"), None, HOST),  # the GPUs' node is not known
    (Limits(cpus="40"), frozenset([2]), HOST),  # a node whose CPUs the host did not say
    (Limits(cpus="40"), frozenset([0]), None),  # the host was not read
])
def test_no_note_when_local_or_not_known(limits, gpu_nodes, host):
    assert locality(limits, gpu_nodes, host) is None


def test_one_warning_names_a_few_holds_and_counts_the_rest():
    note = locality(Limits(cpus="40"), frozenset([0]), HOST)
    one = locality_warning([("a1", note)])
    assert one == ("not NUMA-local to their GPUs, held as booked (placement is the control plane's; host-to-GPU "
                   "copies and NCCL traffic from there cross sockets): a1: cpus 40 lie outside its GPUs' NUMA node 0 "
                   "(CPUs 0-31)")
    many = locality_warning([("a%d" % i, note) for i in range(LOCALITY_NAMED + 3)])
    assert many.count("lie outside") == LOCALITY_NAMED
    assert many.endswith("; and 3 more (each one's plan entry has its locality)")

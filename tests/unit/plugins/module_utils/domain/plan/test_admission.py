# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host admission (spec page, "Host admission"): a new hold that books memory or
huge pages must fit in what the host has not promised yet. The host is a fakehw
node whose ``/proc/meminfo`` and huge page files are written under its root."""

from __future__ import annotations

import json

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import Admission, Exhausted, HostMemory
from ansible_collections.bcd.devices.plugins.module_utils.node.memory import read_host_memory
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain

from ansible_collections.bcd.devices.tests.unit.builders import hold as build_hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C

MIB = 1 << 20
GIB = 1 << 30
UNREADABLE = "host memory unreadable; binding without host-side admission"
SIZES_KIB = {"2MB": 2048, "1GB": 1048576}


def hold(allocation_id, device_id, binding="BINDING_HOLD", **limits):
    """A hold of one whole GPU booking ``limits`` (none when none are given)."""
    return build_hold(allocation_id, device_id, device_class="gpu", binding=binding, **({"limits": limits} if limits else {}))


def write_memory(node, mem_total, hugetlb=0, pages=None, nodes=None):
    """``/proc/meminfo`` (sizes in bytes, written in kB as the kernel does), host-wide huge pages
    ``{size: (free, resv)}`` and per NUMA node ``{node: {size: free}}``."""
    node.write("/proc/meminfo", (
        "MemTotal:       %d kB\n"
        "MemFree:          123456 kB\n"
        "MemAvailable:     234567 kB\n"
        "HugePages_Total:       0\n"
        "Hugepagesize:       2048 kB\n"
        "Hugetlb:        %d kB\n" % (mem_total // 1024, hugetlb // 1024)))
    for size, (free, resv) in (pages or {}).items():
        base = "/sys/kernel/mm/hugepages/hugepages-%dkB/" % SIZES_KIB[size]
        node.write(base + "free_hugepages", "%d\n" % free)
        node.write(base + "resv_hugepages", "%d\n" % resv)
    for number, per_size in (nodes or {}).items():
        node.write("/sys/devices/system/node/node%d/cpulist" % number, "0-7\n")
        for size, free in per_size.items():
            node.write("/sys/devices/system/node/node%d/hugepages/hugepages-%dkB/free_hugepages"
                       % (number, SIZES_KIB[size]), "%d\n" % free)


def failures(result):
    return dict((f.allocation_id, (f.reason, f.message)) for f in result.plan.failures)


def bound(result):
    return [h["allocation_id"] for h in result.plan.holds]


def set_slice_current(node, allocation_id, current):
    """What the hold's workload has faulted in: ``hugetlb.<size>.current`` of its slice."""
    path = "/run/bcd/slices/bcd-alloc-%s.slice.json" % allocation_id
    record = json.loads(node.read(path))
    record["hugetlb_current"] = current
    node.write(path, json.dumps(record))


# --- what the host has ----------------------------------------------------------------------------------------


def test_normal_memory_is_memtotal_less_the_huge_page_pool_and_a_gibibyte(make_node):
    node = make_node()
    write_memory(node, 8 * GIB, hugetlb=2 * GIB)
    memory = read_host_memory(node.host())
    assert memory.mem_total == 8 * GIB
    assert memory.hugetlb == 2 * GIB
    assert memory.normal_available == 5 * GIB
    result = node.run(1, [hold("a1", GPU_A, memory_bytes=6 * GIB)])
    assert failures(result) == {"a1": ("resources-exhausted",
                                       "ResourcesExhausted: 6144 MiB of memory needed, 5120 MiB left on this host")}
    assert result.section["state"] == "FAILED"
    assert not node.exists("/etc/cdi/bcd-a1.json")
    assert not node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")  # nothing written for a refused hold
    fits = node.run(2, [hold("a1", GPU_A, memory_bytes=5 * GIB)])
    assert fits.section["state"] == "CONVERGED"
    assert bound(fits) == ["a1"]


def test_huge_pages_are_free_less_reserved_host_wide_and_free_per_numa_node(make_node):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"2MB": (100, 4), "1GB": (8, 1)},
                 nodes={0: {"2MB": 40, "1GB": 3}, 1: {"2MB": 60, "1GB": 5}})
    memory = read_host_memory(node.host())
    assert memory.free_pages == {"2MB": 96, "1GB": 7}
    assert memory.node_free_pages == {"2MB": {0: 40, 1: 60}, "1GB": {0: 3, 1: 5}}


def test_committed_memory_counts_running_and_paused_domains_with_their_overhead():
    memory = HostMemory(mem_total=64 * GIB, hugetlb=0)
    domains = [
        Domain("vm_running", "running", memory_bytes=8 * GIB),  # 8 GiB + 256 MiB + 256 MiB
        Domain("vm_paused_huge", "paused", memory_bytes=4 * GIB, hugepages=True),  # only 128 MiB + 256 MiB
        Domain("vm_off", "shutoff", memory_bytes=32 * GIB),
        Domain("vm_crashed", "crashed", memory_bytes=32 * GIB),
    ]
    admission = Admission(memory, domains)
    assert admission.committed == 8 * GIB + 256 * MIB + 256 * MIB + 128 * MIB + 256 * MIB


def test_the_spec_pages_memory_message_from_vms_and_bound_holds(make_node):
    # 16 GiB, 4 GiB of them huge pages: 11 GiB for normal memory. A running VM of 8 GiB takes 8.5 GiB,
    # a paused huge-page VM of 4 GiB takes its 384 MiB overhead, and a bound Kubernetes hold booked
    # 1152 MiB: 1024 MiB are left.
    node = make_node(domains=[
        {"instance_id": "inst_1", "state": "running", "memory_bytes": 8 * GIB, "gpus": []},
        {"instance_id": "inst_2", "state": "paused", "memory_bytes": 4 * GIB, "hugepages": True, "gpus": []},
    ])
    write_memory(node, 16 * GIB, hugetlb=4 * GIB)
    k1 = hold("k1", GPU_A, binding="BINDING_KUBERNETES", memory_bytes=1152 * MIB)
    first = node.run(1, [k1])
    assert first.section["state"] == "CONVERGED"
    assert not node.exists("/run/bcd/slices/bcd-alloc-k1.slice.json")  # admitted, but no slice
    result = node.run(2, [k1, hold("a2", GPU_B, memory_bytes=4096 * MIB)])
    assert failures(result) == {"a2": ("resources-exhausted",
                                       "ResourcesExhausted: 4096 MiB of memory needed, 1024 MiB left on this host")}
    assert [e["body"]["message"] for e in result.events if e["type"] == "AllocationFailed"] == [
        "ResourcesExhausted: 4096 MiB of memory needed, 1024 MiB left on this host"]
    # exactly what is left fits; one byte more does not
    fits = node.run(3, [k1, hold("a2", GPU_B, memory_bytes=1024 * MIB)])
    assert fits.section["state"] == "CONVERGED"
    full = node.run(4, [k1, hold("a2", GPU_B, memory_bytes=1024 * MIB), hold("a3", GPU_C, memory_bytes=1)])
    assert failures(full) == {"a3": ("resources-exhausted",
                                     "ResourcesExhausted: 1 MiB of memory needed, 0 MiB left on this host")}


def test_a_bound_hold_refused_this_pass_still_counts_its_booked_memory(make_node):
    node = make_node()
    write_memory(node, 4 * GIB)  # 3 GiB for holds
    node.run(1, [hold("a1", GPU_A, memory_bytes=2 * GIB)])
    # a1's new input is bad: it is refused and kept as it is, with the memory it booked
    bad_a1 = hold("a1", GPU_A, memory_bytes=2 * GIB)
    bad_a1["env"] = ["NOT A LINE"]
    result = node.run(2, [bad_a1, hold("a2", GPU_B, memory_bytes=1536 * MIB)])
    assert failures(result)["a1"][0] == "invalid-assignment"
    assert failures(result)["a2"] == ("resources-exhausted",
                                      "ResourcesExhausted: 1536 MiB of memory needed, 1024 MiB left on this host")
    assert node.exists("/etc/cdi/bcd-a1.json")


def test_a_released_hold_gives_its_memory_back_in_the_same_pass(make_node):
    node = make_node()
    write_memory(node, 4 * GIB)
    node.run(1, [hold("a1", GPU_A, memory_bytes=2 * GIB)])
    result = node.run(2, [hold("a2", GPU_B, memory_bytes=3 * GIB)])
    assert result.section["state"] == "CONVERGED"
    assert bound(result) == ["a2"]


def test_the_spec_pages_huge_page_message_from_what_bound_holds_may_still_take(make_node):
    # 7 free 1 GiB pages, 1 of them reserved: 6. A bound hold booked 5 and its workload faulted in 1:
    # it may still take 4, so 2 are free.
    node = make_node()
    write_memory(node, 64 * GIB, hugetlb=8 * GIB, pages={"1GB": (7, 1), "2MB": (0, 0)})
    node.run(1, [hold("b1", GPU_A, hugepages_1gi=5)])
    assert node.exists("/run/bcd/slices/bcd-alloc-b1.slice.json")
    set_slice_current(node, "b1", {"1GB": GIB})
    result = node.run(2, [hold("b1", GPU_A, hugepages_1gi=5), hold("a2", GPU_B, hugepages_1gi=8)])
    assert failures(result) == {"a2": ("resources-exhausted",
                                       "ResourcesExhausted: 8 hugepages of 1048576 KiB needed, 2 free")}
    fits = node.run(3, [hold("b1", GPU_A, hugepages_1gi=5), hold("a2", GPU_B, hugepages_1gi=2)])
    assert fits.section["state"] == "CONVERGED"
    assert bound(fits) == ["b1", "a2"]


def test_huge_pages_a_bound_hold_already_faulted_in_are_not_counted_twice(make_node):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"2MB": (10, 0)})
    node.run(1, [hold("b1", GPU_A, hugepages_2mi=8)])
    # the workload faulted all 8 in: the host's free count already lacks them
    write_memory(node, 64 * GIB, pages={"2MB": (2, 0)})
    set_slice_current(node, "b1", {"2MB": 8 * 2 * MIB})
    result = node.run(2, [hold("b1", GPU_A, hugepages_2mi=8), hold("a2", GPU_B, hugepages_2mi=2)])
    assert result.section["state"] == "CONVERGED"
    again = node.run(3, [hold("b1", GPU_A, hugepages_2mi=8), hold("a2", GPU_B, hugepages_2mi=2),
                         hold("a3", GPU_C, hugepages_2mi=1)])
    assert failures(again) == {"a3": ("resources-exhausted",
                                      "ResourcesExhausted: 1 hugepages of 2048 KiB needed, 0 free")}


def test_huge_pages_come_from_the_holds_numa_nodes(make_node):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"2MB": (100, 0)}, nodes={0: {"2MB": 10}, 1: {"2MB": 90}})
    result = node.run(1, [hold("a1", GPU_A, mems="0", hugepages_2mi=16), hold("a2", GPU_B, mems="1", hugepages_2mi=16)])
    assert failures(result) == {"a1": ("resources-exhausted",
                                       "ResourcesExhausted: 16 hugepages of 2048 KiB needed, 10 free")}
    assert bound(result) == ["a2"]
    # both nodes together; then node 1 has 74 left after a2, node 0 still 10
    both = node.run(2, [hold("a1", GPU_A, mems="0-1", hugepages_2mi=84), hold("a2", GPU_B, mems="1", hugepages_2mi=16)])
    assert both.section["state"] == "CONVERGED"


def test_what_bound_holds_may_take_is_counted_on_their_numa_nodes(make_node):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"2MB": (100, 0)}, nodes={0: {"2MB": 10}, 1: {"2MB": 90}})
    node.run(1, [hold("b1", GPU_A, mems="0", hugepages_2mi=4)])
    result = node.run(2, [hold("b1", GPU_A, mems="0", hugepages_2mi=4), hold("a2", GPU_B, mems="0", hugepages_2mi=7),
                          hold("a3", GPU_C, mems="1", hugepages_2mi=90)])
    assert failures(result) == {"a2": ("resources-exhausted",
                                       "ResourcesExhausted: 7 hugepages of 2048 KiB needed, 6 free")}
    assert "a3" in bound(result)


def test_a_numa_node_never_gives_more_than_the_host_wide_count(make_node):
    node = make_node()
    # the node files say 20 free, but 15 of the host's free pages are reserved
    write_memory(node, 64 * GIB, pages={"1GB": (20, 15)}, nodes={0: {"1GB": 20}})
    result = node.run(1, [hold("a1", GPU_A, mems="0", hugepages_1gi=6)])
    assert failures(result) == {"a1": ("resources-exhausted",
                                       "ResourcesExhausted: 6 hugepages of 1048576 KiB needed, 5 free")}


def test_huge_pages_without_mems_come_from_the_whole_host(make_node):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"1GB": (6, 0)}, nodes={0: {"1GB": 3}, 1: {"1GB": 3}})
    result = node.run(1, [hold("a1", GPU_A, hugepages_1gi=6)])
    assert result.section["state"] == "CONVERGED"


# --- within one pass ------------------------------------------------------------------------------------------------


def test_holds_earlier_in_the_pass_count_against_later_ones(make_node):
    node = make_node()
    write_memory(node, 2 * GIB + 1024 * MIB, hugetlb=0, pages={"1GB": (6, 0)})  # 2048 MiB of normal memory
    result = node.run(1, [hold("a1", GPU_A, memory_bytes=1200 * MIB), hold("a2", GPU_B, memory_bytes=1200 * MIB),
                          hold("a3", GPU_C, hugepages_1gi=4)])
    assert failures(result) == {"a2": ("resources-exhausted",
                                       "ResourcesExhausted: 1200 MiB of memory needed, 848 MiB left on this host")}
    assert bound(result) == ["a1", "a3"]
    node2 = make_node()
    write_memory(node2, 64 * GIB, pages={"1GB": (6, 0)})
    pages = node2.run(1, [hold("a1", GPU_A, hugepages_1gi=4), hold("a2", GPU_B, hugepages_1gi=4)])
    assert failures(pages) == {"a2": ("resources-exhausted",
                                      "ResourcesExhausted: 4 hugepages of 1048576 KiB needed, 2 free")}


def test_a_hold_refused_before_admission_books_nothing(make_node):
    node = make_node()
    write_memory(node, 2 * GIB + 1024 * MIB)  # 2048 MiB
    result = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_A, memory_bytes=2000 * MIB),
                          hold("a3", GPU_B, memory_bytes=4000 * MIB), hold("a4", GPU_C, memory_bytes=2000 * MIB)])
    assert failures(result)["a2"][0] == "overlap"
    assert failures(result)["a3"] == ("resources-exhausted",
                                      "ResourcesExhausted: 4000 MiB of memory needed, 2048 MiB left on this host")
    assert bound(result) == ["a1", "a4"]


# --- what is not admitted ---------------------------------------------------------------------------------------------


def count_meminfo_reads(monkeypatch):
    reads = []
    real_read = FakeHwHost.read

    def counting_read(self, node_path):
        if node_path == "/proc/meminfo":
            reads.append(node_path)
        return real_read(self, node_path)

    monkeypatch.setattr(FakeHwHost, "read", counting_read)
    return reads


def test_a_hold_with_only_cpus_or_cpu_millis_is_not_admitted(make_node, monkeypatch):
    node = make_node()
    write_memory(node, 1 * GIB)  # nothing left for anyone
    reads = count_meminfo_reads(monkeypatch)
    result = node.run(1, [hold("a1", GPU_A, cpus="0-1", cpu_millis=1500), hold("a2", GPU_B, mems="0")])
    assert result.section["state"] == "CONVERGED"
    assert bound(result) == ["a1", "a2"]
    assert reads == []
    assert UNREADABLE not in result.warnings


def test_the_host_is_read_only_when_a_new_hold_needs_admission(make_node, monkeypatch):
    node = make_node()
    write_memory(node, 64 * GIB, pages={"2MB": (64, 0)})
    reads = count_meminfo_reads(monkeypatch)
    node.run(1, [hold("a0", GPU_C)])
    assert reads == []  # no limits: nothing to admit
    first = [hold("a1", GPU_A, memory_bytes=GIB), hold("a2", GPU_B, hugepages_2mi=4)]
    node.run(2, first, check_mode=True)
    assert len(reads) == 1
    node.run(2, first)
    assert len(reads) == 2  # once per pass, however many holds need it
    node.run(2, first)
    assert len(reads) == 2  # kept holds are not admitted again
    node.run(3, [])
    assert len(reads) == 2  # releases need no admission


@pytest.mark.parametrize("meminfo", [None, "", "MemFree: 1 kB\n", "garbage\x00\xff"],
                         ids=["absent", "empty", "no-memtotal", "garbage"])
def test_a_host_whose_memory_cannot_be_read_binds_without_the_check(make_node, meminfo):
    node = make_node()
    if meminfo is not None:
        node.write("/proc/meminfo", meminfo)
    result = node.run(1, [hold("a1", GPU_A, memory_bytes=1 << 50), hold("a2", GPU_B, hugepages_1gi=10000)])
    assert result.section["state"] == "CONVERGED"
    assert bound(result) == ["a1", "a2"]
    assert result.warnings.count(UNREADABLE) == 1
    assert UNREADABLE in result.plan.text()


def test_exhausted_is_a_plain_exception_with_the_message():
    admission = Admission(HostMemory(mem_total=2 * GIB, hugetlb=0), [])
    with pytest.raises(Exhausted) as caught:
        admission.check(Limits(memory_bytes=GIB + 1))
    assert str(caught.value) == "ResourcesExhausted: 1025 MiB of memory needed, 1024 MiB left on this host"
    booked = admission.check(Limits(memory_bytes=GIB))
    assert booked.committed == GIB
    assert admission.committed == 0  # a value: a hold refused after admission books nothing


def test_a_released_hold_whose_workload_still_runs_keeps_its_memory_and_pages(make_node):
    # 11 GiB of normal memory and 4 free 1 GiB pages; b1 books 8 GiB and 3 pages, then is released while its
    # slice still runs a workload: what the slice was promised is still committed.
    node = make_node()
    write_memory(node, 16 * GIB, hugetlb=4 * GIB, pages={"1GB": (4, 0), "2MB": (0, 0)})
    node.run(1, [hold("b1", GPU_A, memory_bytes=8 * GIB, hugepages_1gi=3)])
    slice_record = node.path("/run/bcd/slices/bcd-alloc-b1.slice.json")
    with open(slice_record) as handle:
        data = json.load(handle)
    data["populated"] = True
    with open(slice_record, "w") as handle:
        json.dump(data, handle)
    result = node.run(2, [hold("a2", GPU_B, memory_bytes=4 * GIB), hold("a3", GPU_C, hugepages_1gi=2)])
    assert failures(result) == {
        "a2": ("resources-exhausted", "ResourcesExhausted: 4096 MiB of memory needed, 3072 MiB left on this host"),
        "a3": ("resources-exhausted", "ResourcesExhausted: 2 hugepages of 1048576 KiB needed, 1 free"),
    }
    data["populated"] = False  # the workload exits: the slice goes, and so does what it held
    with open(slice_record, "w") as handle:
        json.dump(data, handle)
    freed = node.run(3, [hold("a2", GPU_B, memory_bytes=4 * GIB), hold("a3", GPU_C, hugepages_1gi=2)])
    assert failures(freed) == {}

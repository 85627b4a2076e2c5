# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's CPUs and NUMA nodes as a host reads them (``node/cpus.py``, ``Host.cpus``): sysfs under the root of
a real host, and on a fakehw host the file's ``cpus``/``numa_nodes``, else the same sysfs files, else nothing."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus
from ansible_collections.bcd.devices.plugins.module_utils.node.cpus import MAX_BYTES, read_host_cpus
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeHwError, fakehw_from_data
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost, RealHost

SYS = "sys/devices/system"


def write(root, node_path, text):
    path = os.path.join(str(root), node_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def sysfs(root, online="0-63", nodes="0-1", has_memory="0-1", node_cpus=None):
    write(root, SYS + "/cpu/online", online + "\n")
    if nodes is not None:
        write(root, SYS + "/node/online", nodes + "\n")
    if has_memory is not None:
        write(root, SYS + "/node/has_memory", has_memory + "\n")
    for number, cpus in (node_cpus if node_cpus is not None else {0: "0-31", 1: "32-63"}).items():
        write(root, SYS + "/node/node%d/cpulist" % number, cpus + "\n")


def real(root):
    return RealHost(str(root), runner=lambda argv: (127, "", "not found"))


def numbers(text):
    low, _sep, high = text.partition("-")
    return frozenset(range(int(low), int(high or low) + 1))


def test_a_real_host_reads_its_cpus_and_numa_nodes_from_sysfs(tmp_path):
    sysfs(tmp_path)
    assert real(tmp_path).cpus() == (HostCpus(online=numbers("0-63"), memory_nodes=numbers("0-1"),
                                              node_cpus={0: numbers("0-31"), 1: numbers("32-63")}), None)


def test_a_node_of_cpus_alone_has_no_memory_and_a_node_of_memory_alone_no_cpus(tmp_path):
    # a CPU-less node of memory (a GPU's HBM on Grace Hopper, CXL memory): mems may name it
    sysfs(tmp_path, online="0-7", nodes="0-2", has_memory="0,2", node_cpus={0: "0-3", 1: "4-7", 2: ""})
    cpus, problem = real(tmp_path).cpus()
    assert problem is None
    assert cpus.memory_nodes == frozenset([0, 2])
    assert cpus.node_cpus == {0: numbers("0-3"), 1: numbers("4-7"), 2: frozenset()}


def test_a_kernel_without_numa_is_one_node_with_every_cpu_and_the_memory(tmp_path):
    sysfs(tmp_path, online="0-3", nodes=None, has_memory=None, node_cpus={})
    assert real(tmp_path).cpus() == (HostCpus(online=numbers("0-3"), memory_nodes=frozenset([0]),
                                              node_cpus={0: numbers("0-3")}), None)


def test_without_has_memory_every_online_node_has_memory_and_a_node_without_cpulist_is_not_known(tmp_path):
    sysfs(tmp_path, has_memory=None, node_cpus={0: "0-31"})
    cpus, _problem = real(tmp_path).cpus()
    assert cpus.memory_nodes == frozenset([0, 1])
    assert cpus.node_cpus == {0: numbers("0-31")}  # node 1's CPUs not known: no locality said for its GPUs


def test_offline_cpus_are_on_no_node(tmp_path):
    sysfs(tmp_path, online="0-15,32-47")
    cpus, _problem = real(tmp_path).cpus()
    assert cpus.node_cpus == {0: numbers("0-15"), 1: numbers("32-47")}


def test_a_real_host_whose_cpus_cannot_be_read_says_why(tmp_path):
    assert real(tmp_path).cpus() == (None, "/sys/devices/system/cpu/online is not there")
    write(tmp_path, SYS + "/cpu/online", "0-3\n")
    write(tmp_path, SYS + "/node/online", "zero\n")
    assert real(tmp_path).cpus() == (None, "/sys/devices/system/node/online: 'zero' is not a cpulist")


@pytest.mark.parametrize("text, problem", [
    ("0-8192", "/sys/devices/system/cpu/online: 0-8192 is not an ascending list of CPUs up to 8191"),
    ("3-1", "/sys/devices/system/cpu/online: 3-1 is not an ascending list of CPUs up to 8191"),
    # parts overlapping or out of order: at most 8192 numbers are ever counted
    ("0-8191,0-8191", "/sys/devices/system/cpu/online: 0-8191 is not an ascending list of CPUs up to 8191"),
    ("4,2", "/sys/devices/system/cpu/online: 2 is not an ascending list of CPUs up to 8191"),
    ("9" * 12, "/sys/devices/system/cpu/online: '999999999999' is not a cpulist"),
])
def test_a_list_the_kernel_would_not_write_is_unreadable(tmp_path, text, problem):
    write(tmp_path, SYS + "/cpu/online", text + "\n")
    assert read_host_cpus(real(tmp_path)) == (None, problem)


def test_a_file_past_its_bound_or_not_a_regular_file_is_unreadable_never_waited_on(tmp_path):
    write(tmp_path, SYS + "/cpu/online", "0," * (MAX_BYTES // 2 + 1))
    assert read_host_cpus(real(tmp_path)) == (None, "/sys/devices/system/cpu/online is larger than %d bytes" % MAX_BYTES)
    os.remove(os.path.join(str(tmp_path), SYS, "cpu/online"))
    os.mkfifo(os.path.join(str(tmp_path), SYS, "cpu/online"))
    assert read_host_cpus(real(tmp_path)) == (None, "/sys/devices/system/cpu/online is not a regular file")


def fakehw_host(tmp_path, **data):
    path = tmp_path / "fakehw.json"
    path.write_text(json.dumps(data))
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return FakeHwHost(str(root), str(path))


def test_a_fakehw_file_describes_its_cpus_and_numa_nodes(tmp_path):
    host = fakehw_host(tmp_path, cpus="0-63", numa_nodes=[
        {"node": 0, "cpus": "0-31"}, {"node": 1, "cpus": "32-63"},
        {"node": 2, "memory": True}, {"node": 3, "cpus": "", "memory": False}])
    sysfs(tmp_path / "root", online="0")  # the description wins over files under the root
    assert host.cpus() == (HostCpus(online=numbers("0-63"), memory_nodes=frozenset([0, 1, 2]),
                                    node_cpus={0: numbers("0-31"), 1: numbers("32-63"), 2: frozenset(), 3: frozenset()}),
                           None)


def test_cpus_alone_is_one_node_and_numa_nodes_alone_put_their_cpus_online(tmp_path):
    assert fakehw_host(tmp_path, cpus=7).cpus()[0] == HostCpus(
        online=frozenset([7]), memory_nodes=frozenset([0]), node_cpus={0: frozenset([7])})
    assert fakehw_host(tmp_path, numa_nodes=[{"node": 1, "cpus": "4-7"}]).cpus()[0] == HostCpus(
        online=numbers("4-7"), memory_nodes=frozenset([1]), node_cpus={1: numbers("4-7")})


def test_a_fakehw_node_without_a_description_reads_sysfs_under_its_root_else_checks_nothing(tmp_path):
    host = fakehw_host(tmp_path)
    assert host.cpus() == (None, None)  # a test tree: nothing said, nothing checked
    sysfs(tmp_path / "root", online="0-3", nodes="0", has_memory="0", node_cpus={0: "0-3"})
    assert host.cpus() == (HostCpus(online=numbers("0-3"), memory_nodes=frozenset([0]), node_cpus={0: numbers("0-3")}),
                           None)


@pytest.mark.parametrize("data, message", [
    ({"cpus": "0-3;8"}, "cpus: '0-3;8' is not a cpulist such as 0-3,8"),
    ({"cpus": "0-9000"}, "cpus: CPU 9000 is beyond 8191, the most any host has"),
    ({"cpus": ["0"]}, "cpus: must be a cpulist string such as 0-3,8"),
    ({"numa_nodes": {"0": "0-3"}}, "numa_nodes: must be a list, not a mapping"),
    ({"numa_nodes": [{"cpus": "0-3"}]}, "numa_nodes[0].node: required"),
    ({"numa_nodes": [{"node": 1024}]}, "numa_nodes[0].node: NUMA node 1024 is beyond 1023, the most any host has"),
    ({"numa_nodes": [{"node": 0}, {"node": 0}]}, "numa_nodes[1].node: duplicate NUMA node 0"),
    ({"numa_nodes": [{"node": 0, "cpus": "0-3"}, {"node": 1, "cpus": "3-7"}]}, "numa_nodes[1].cpus: CPU 3 is on NUMA node 0 too"),
    ({"cpus": "0-3", "numa_nodes": [{"node": 0, "cpus": "0-5"}]}, "numa_nodes[0].cpus: CPUs 4-5 are not in cpus (0-3)"),
    ({"cpus": "0-3", "numa_nodes": [{"node": 0, "cpus": "4"}]}, "numa_nodes[0].cpus: CPU 4 is not in cpus (0-3)"),
    ({"numa_nodes": [{"node": 0, "memory": "yes"}]}, "numa_nodes[0].memory: must be true or false, not a string"),
    ({"numa_nodes": [{"node": 0, "cpu": "0"}]}, "numa_nodes[0]: unknown field 'cpu' (known: node, cpus, memory)"),
])
def test_a_wrong_description_names_its_field(data, message):
    with pytest.raises(FakeHwError) as raised:
        fakehw_from_data(data)
    assert str(raised.value) == message


def test_existing_fakehw_files_describe_no_cpus():
    assert fakehw_from_data({"gpus": [{"uuid": "GPU-a", "numa_node": 1}]}).cpus is None

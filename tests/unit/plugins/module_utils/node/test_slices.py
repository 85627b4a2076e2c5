# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hold slices (spec page, "Hold slices"): the systemd properties and huge page
limits a hold's ``limits`` become, the names and cpulists refused before any
command runs, and the real-host backend against a recorded ``systemctl`` and a
cgroup-v2 tree made of plain files under ``tmp_path``."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Limits
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import capabilities
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import RealHost
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    check_slice_request,
    cpu_quota,
    hugetlb_max,
    slice_name,
    slice_properties,
    SliceError,
    wanted_slice,
)

GIB = 1 << 30
MIB = 1 << 20
NAME = "bcd-alloc-a1.slice"
CGROUP = "/sys/fs/cgroup"
SLICE_DIR = CGROUP + "/bcd.slice/bcd-alloc.slice"


# --- what the limits become -------------------------------------------------------------------------------------


@pytest.mark.parametrize("millis, quota", [(1234, "124%"), (1000, "100%"), (1, "1%"), (1001, "101%"), (999, "100%"),
                                           (250, "25%"), (16000, "1600%")])
def test_cpu_millis_become_whole_percents_of_one_cpu_rounded_up(millis, quota):
    assert cpu_quota(millis) == quota
    assert slice_properties(Limits(cpu_millis=millis)) == {"CPUQuota": quota}


def test_every_limit_becomes_its_property():
    limits = Limits(cpus="0-3,8", mems="0", cpu_millis=1234, memory_bytes=10 * GIB)
    assert slice_properties(limits) == {
        "AllowedCPUs": "0-3,8",
        "AllowedMemoryNodes": "0",
        "CPUQuota": "124%",
        "MemoryMax": str(10 * GIB),
        "MemoryHigh": "9663676416",  # 90% of 10 GiB
    }


def test_memory_high_is_ninety_percent_of_memory_max():
    properties = slice_properties(Limits(memory_bytes=1000 * MIB))
    assert properties == {"MemoryMax": str(1000 * MIB), "MemoryHigh": str(900 * MIB)}


def test_huge_pages_become_hugetlb_limits_in_bytes():
    # a hold that books one size is held to none of the other (0, not "max": issue 23)
    assert hugetlb_max(Limits(hugepages_2mi=3)) == {"2MB": 3 * 2 * MIB, "1GB": 0}
    assert hugetlb_max(Limits(hugepages_1gi=2)) == {"2MB": 0, "1GB": 2 * GIB}
    assert hugetlb_max(Limits(memory_bytes=GIB)) == {}  # no huge pages booked: no hugetlb limit
    assert hugetlb_max(Limits(hugepages_2mi=512, hugepages_1gi=4)) == {"2MB": GIB, "1GB": 4 * GIB}
    # systemd has no property for them
    assert slice_properties(Limits(hugepages_2mi=512, hugepages_1gi=4)) == {}


def test_absent_limits_set_nothing():
    assert slice_properties(None) == {}
    assert hugetlb_max(None) == {}
    assert wanted_slice(None) is None
    assert wanted_slice(Limits()) is None  # nothing booked: no slice at all
    assert slice_properties(Limits(cpus="2")) == {"AllowedCPUs": "2"}
    assert hugetlb_max(Limits(cpus="2")) == {}
    assert wanted_slice(Limits(mems="1")) == ({"AllowedMemoryNodes": "1"}, {})


def test_the_slice_is_named_after_the_allocation():
    assert slice_name("alloc_01jz8k2v") == "bcd-alloc-alloc_01jz8k2v.slice"


# --- the real host: a recorded systemctl and a cgroup tree of plain files ----------------------------------------


class Systemctl(object):
    """A recorded ``systemctl``: every argv is kept; ``start`` makes the slice's cgroup as systemd would,
    ``stop`` removes it. ``fail`` maps a verb to ``(rc, stderr)``; ``sizes`` are the huge page sizes
    the kernel has (a ``hugetlb.<size>.*`` pair each)."""

    def __init__(self, root):
        self.root = root
        self.calls = []
        self.fail = {}
        self.sizes = ("2MB", "1GB")

    def __call__(self, argv):
        self.calls.append(list(argv))
        verb = argv[1] if len(argv) > 1 else ""
        if verb in self.fail:
            rc, err = self.fail[verb]
            return rc, "", err
        if argv[0] == "systemctl" and verb == "start":
            directory = os.path.join(self.root, SLICE_DIR.lstrip("/"), argv[2])
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "cgroup.events"), "w") as handle:
                handle.write("populated 0\nfrozen 0\n")
            for size in self.sizes:
                for suffix in ("max", "current"):
                    with open(os.path.join(directory, "hugetlb.%s.%s" % (size, suffix)), "w") as handle:
                        handle.write("max\n" if suffix == "max" else "0\n")
        elif argv[0] == "systemctl" and verb == "stop":
            shutil.rmtree(os.path.join(self.root, SLICE_DIR.lstrip("/"), argv[2]), ignore_errors=True)
        return 0, "", ""


def cgroup_host(tmp_path, v2=True, systemd=True):
    """A host whose root is ``tmp_path``: a cgroup-v2 tree with bcd.slice and bcd-alloc.slice, and systemd."""
    root = str(tmp_path)
    if v2:
        for directory in (CGROUP, CGROUP + "/bcd.slice", SLICE_DIR):
            os.makedirs(os.path.join(root, directory.lstrip("/")), exist_ok=True)
            with open(os.path.join(root, directory.lstrip("/"), "cgroup.subtree_control"), "w") as handle:
                handle.write("")
        with open(os.path.join(root, CGROUP.lstrip("/"), "cgroup.controllers"), "w") as handle:
            handle.write("cpuset cpu io memory hugetlb pids rdma misc\n")
    if systemd:
        os.makedirs(os.path.join(root, "run/systemd/system"), exist_ok=True)
    systemctl = Systemctl(root)
    host = RealHost(root, runner=systemctl)
    return host, systemctl


def read(host, node_path):
    with open(host.path(node_path)) as handle:
        return handle.read()


def test_apply_starts_the_slice_then_sets_every_property_at_runtime(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    properties, huge = wanted_slice(Limits(cpus="0-3,8", mems="0", cpu_millis=1234, memory_bytes=10 * GIB))
    host.slices.apply(NAME, properties, huge)
    assert systemctl.calls == [
        ["systemctl", "start", NAME],
        ["systemctl", "set-property", "--runtime", NAME, "AllowedCPUs=0-3,8", "AllowedMemoryNodes=0",
         "CPUQuota=124%", "MemoryMax=10737418240", "MemoryHigh=9663676416"],
    ]
    # no huge pages booked: the hugetlb controller is left alone
    for parent in ("", "/bcd.slice", "/bcd.slice/bcd-alloc.slice"):
        assert read(host, CGROUP + parent + "/cgroup.subtree_control") == ""
    assert read(host, "%s/%s/hugetlb.2MB.max" % (SLICE_DIR, NAME)) == "max\n"


def test_properties_go_in_a_fixed_order_whatever_order_they_come_in(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"MemoryHigh": "900", "CPUQuota": "50%", "MemoryMax": "1000"}, {})
    assert systemctl.calls[1] == ["systemctl", "set-property", "--runtime", NAME, "CPUQuota=50%", "MemoryMax=1000",
                                  "MemoryHigh=900"]


def test_huge_pages_enable_hugetlb_down_the_tree_and_write_the_limits_in_bytes(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    properties, huge = wanted_slice(Limits(mems="1", hugepages_2mi=3, hugepages_1gi=2))
    host.slices.apply(NAME, properties, huge)
    assert systemctl.calls == [
        ["systemctl", "start", NAME],
        ["systemctl", "set-property", "--runtime", NAME, "AllowedMemoryNodes=1"],
    ]
    for parent in ("", "/bcd.slice", "/bcd.slice/bcd-alloc.slice"):
        assert read(host, CGROUP + parent + "/cgroup.subtree_control") == "+hugetlb"
    assert read(host, "%s/%s/hugetlb.2MB.max" % (SLICE_DIR, NAME)) == str(3 * 2 * MIB)
    assert read(host, "%s/%s/hugetlb.1GB.max" % (SLICE_DIR, NAME)) == str(2 * GIB)


def test_only_huge_pages_start_the_slice_without_set_property(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {}, {"1GB": GIB})
    assert systemctl.calls == [["systemctl", "start", NAME]]
    assert read(host, "%s/%s/hugetlb.1GB.max" % (SLICE_DIR, NAME)) == str(GIB)


def test_remove_stops_the_slice(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"MemoryMax": "1000"}, {})
    host.slices.remove(NAME)
    assert systemctl.calls[-1] == ["systemctl", "stop", NAME]
    assert host.slices.state(NAME) is None


def test_a_hold_booking_one_huge_page_size_gets_the_other_size_set_to_0_in_its_cgroup(tmp_path):
    host, _unused = cgroup_host(tmp_path)
    properties, huge = wanted_slice(Limits(hugepages_1gi=2))
    host.slices.apply(NAME, properties, huge)
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    with open(os.path.join(directory, "hugetlb.1GB.max")) as handle:
        assert handle.read() == str(2 * GIB)
    with open(os.path.join(directory, "hugetlb.2MB.max")) as handle:
        assert handle.read() == "0"  # was left at "max": its workload could take 2 MiB pages promised to others
    assert host.slices.state(NAME).hugetlb_max == {"2MB": 0, "1GB": 2 * GIB}


def test_a_size_the_node_does_not_have_is_not_written_as_0(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    systemctl.sizes = ("1GB",)  # a kernel without 2 MiB pages
    host.slices.apply(NAME, {}, {"2MB": 0, "1GB": 2 * GIB})
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    assert not os.path.exists(os.path.join(directory, "hugetlb.2MB.max"))
    with open(os.path.join(directory, "hugetlb.1GB.max")) as handle:
        assert handle.read() == str(2 * GIB)


def test_the_slice_state_is_read_from_the_cgroup(tmp_path):
    host, _unused = cgroup_host(tmp_path)
    assert host.slices.names() == []
    assert host.slices.state(NAME) is None
    host.slices.apply(NAME, {}, {"2MB": 4 * MIB})
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    with open(os.path.join(directory, "hugetlb.2MB.current"), "w") as handle:
        handle.write("2097152\n")
    state = host.slices.state(NAME)
    assert state.name == NAME
    assert state.populated is False
    assert state.hugetlb_max == {"2MB": 4 * MIB}  # "max" (no limit) for 1GB is not a number: not listed
    assert state.hugetlb_current == {"2MB": 2 * MIB, "1GB": 0}
    with open(os.path.join(directory, "cgroup.events"), "w") as handle:
        handle.write("populated 1\nfrozen 0\n")
    assert host.slices.state(NAME).populated is True
    # other cgroups beside it are not bcd's slices
    os.makedirs(host.path(SLICE_DIR + "/other.slice"))
    os.makedirs(host.path(SLICE_DIR + "/bcd-alloc-a-b.slice"))
    assert host.slices.names() == [NAME]
    assert list(host.slice_states()) == [NAME]


def test_a_failing_systemctl_raises_slice_error_with_its_stderr(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    systemctl.fail["start"] = (1, "Failed to start bcd-alloc-a1.slice: Access denied\n")
    with pytest.raises(SliceError) as caught:
        host.slices.apply(NAME, {"MemoryMax": "1000"}, {"2MB": 2 * MIB})
    assert "Failed to start bcd-alloc-a1.slice: Access denied" in str(caught.value)
    assert "systemctl start %s" % NAME in str(caught.value)
    assert systemctl.calls == [["systemctl", "start", NAME]]  # nothing after a failed start
    assert read(host, CGROUP + "/cgroup.subtree_control") == ""


def test_a_failing_set_property_and_stop_raise_slice_error(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    systemctl.fail["set-property"] = (1, "Unknown assignment: AllowedCPUs=0-3\n")
    with pytest.raises(SliceError) as caught:
        host.slices.apply(NAME, {"AllowedCPUs": "0-3"}, {})
    assert "Unknown assignment: AllowedCPUs=0-3" in str(caught.value)
    systemctl.fail["stop"] = (5, "Unit bcd-alloc-a1.slice not loaded.\n")
    with pytest.raises(SliceError) as caught:
        host.slices.remove(NAME)
    assert "Unit bcd-alloc-a1.slice not loaded." in str(caught.value)


def test_a_hugetlb_file_that_cannot_be_written_raises_slice_error(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    systemctl.fail["start"] = (0, "")  # systemd answers but makes no cgroup: the limit has nowhere to go
    with pytest.raises(SliceError) as caught:
        host.slices.apply(NAME, {}, {"1GB": GIB})
    assert "hugetlb.1GB.max" in str(caught.value)


def test_slices_are_available_on_systemd_with_cgroup_v2(tmp_path):
    host, _unused = cgroup_host(tmp_path)
    assert host.slices.available() is None
    assert host.slices_unavailable() is None


def test_slices_are_unavailable_without_cgroup_v2(tmp_path):
    host, _unused = cgroup_host(tmp_path, v2=False)
    reason = host.slices.available()
    assert reason is not None and "cgroup v2" in reason and "/sys/fs/cgroup" in reason
    inventory = Inventory(gpus=[], source="none")
    assert "devices.limits" not in capabilities(host, inventory)


def test_slices_are_unavailable_without_systemd(tmp_path):
    host, _unused = cgroup_host(tmp_path, systemd=False)
    reason = host.slices.available()
    assert reason is not None and "systemd" in reason
    assert "devices.limits" not in capabilities(host, Inventory(gpus=[], source="none"))
    host_ok, _unused = cgroup_host(tmp_path / "ok")
    assert "devices.limits" in capabilities(host_ok, Inventory(gpus=[], source="none"))


# --- refused before any command -----------------------------------------------------------------------------------

BAD_NAMES = [
    "bcd-alloc-.slice",
    "bcd-alloc-a-b.slice",
    "bcd-alloc-a1.service",
    "bcd-alloc-../../x.slice",
    "bcd-alloc-a1.slice\n",
    "bcd-alloc-a1.slice;reboot",
    "bcd-alloc-%s.slice" % ("a" * 81),
    "bcd-alloc-a 1.slice",
    "other-a1.slice",
    "-.slice",
    "",
    None,
    42,
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_slice_name_is_refused_before_any_command(tmp_path, name):
    host, systemctl = cgroup_host(tmp_path)
    before = sorted(os.walk(str(tmp_path)))
    with pytest.raises(SliceError) as caught:
        host.slices.apply(name, {"MemoryMax": "1000"}, {"2MB": 2 * MIB})
    assert "bcd-alloc-" in str(caught.value)
    with pytest.raises(SliceError):
        host.slices.remove(name)
    assert systemctl.calls == []
    assert sorted(os.walk(str(tmp_path))) == before
    assert read(host, CGROUP + "/cgroup.subtree_control") == ""


def test_the_longest_name_is_accepted(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    name = "bcd-alloc-%s.slice" % ("A_9" * 26 + "zz")  # 80 characters
    host.slices.apply(name, {}, {})
    host.slices.remove(name)
    assert systemctl.calls == [["systemctl", "start", name], ["systemctl", "stop", name]]


CPULIST_1024 = "0," * 511 + "10"
CPULIST_1025 = "0," * 511 + "100"

BAD_PROPERTIES = [
    {"AllowedCPUs": CPULIST_1025},
    {"AllowedMemoryNodes": CPULIST_1025},
    {"AllowedCPUs": "0-3;reboot"},
    {"AllowedCPUs": "0-3 8"},
    {"AllowedCPUs": "3-1"},
    {"AllowedCPUs": "all"},
    {"AllowedCPUs": ""},
    {"AllowedCPUs": "0-3\n"},
    {"AllowedMemoryNodes": "0\nMemoryMax=1"},
    {"AllowedCPUs": 3},
    {"CPUQuota": "124"},
    {"CPUQuota": "-5%"},
    {"MemoryMax": "infinity"},
    {"MemoryHigh": "1G"},
    {"Delegate": "yes"},
    {"ExecStartPre": "/bin/sh"},
]


@pytest.mark.parametrize("properties", BAD_PROPERTIES, ids=lambda p: repr(p)[:40])
def test_bad_properties_are_refused_before_any_command(tmp_path, properties):
    host, systemctl = cgroup_host(tmp_path)
    with pytest.raises(SliceError):
        host.slices.apply(NAME, properties, {})
    assert systemctl.calls == []


@pytest.mark.parametrize("properties", [{"CPUQuota": "100%\n"}, {"MemoryMax": "1024\n"}, {"MemoryHigh": "9\n"}],
                         ids=["CPUQuota", "MemoryMax", "MemoryHigh"])
def test_a_property_with_a_trailing_line_break_is_refused_before_any_command(tmp_path, properties):
    # The root helper runs this same check on what an unprivileged client sends: a value that
    # is not exactly a number must not reach systemctl's command line.
    host, systemctl = cgroup_host(tmp_path)
    with pytest.raises(SliceError):
        host.slices.apply(NAME, properties, {})
    assert systemctl.calls == []


@pytest.mark.parametrize("huge", [{"4MB": 4 * MIB}, {"2MB": -1}, {"2MB": True}, {"1GB": "1073741824"},
                                  {"1GB": 1.5}, []], ids=repr)
def test_bad_hugetlb_limits_are_refused_before_any_command(tmp_path, huge):
    host, systemctl = cgroup_host(tmp_path)
    with pytest.raises(SliceError):
        host.slices.apply(NAME, {}, huge)
    assert systemctl.calls == []
    assert read(host, CGROUP + "/cgroup.subtree_control") == ""


def test_a_cpulist_of_1024_characters_is_accepted(tmp_path):
    assert len(CPULIST_1024) == 1024 and len(CPULIST_1025) == 1025
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"AllowedCPUs": CPULIST_1024, "AllowedMemoryNodes": CPULIST_1024}, {})
    assert systemctl.calls[1] == ["systemctl", "set-property", "--runtime", NAME, "AllowedCPUs=" + CPULIST_1024,
                                  "AllowedMemoryNodes=" + CPULIST_1024]


def test_the_record_backend_refuses_the_same_before_writing(make_node):
    node = make_node()
    host = node.host()
    for name, properties, huge in [("bcd-alloc-../x.slice", {}, {}), (NAME, {"AllowedCPUs": CPULIST_1025}, {}),
                                   (NAME, {"AllowedCPUs": "0;1"}, {}), (NAME, {}, {"2MB": -1})]:
        with pytest.raises(SliceError):
            host.slices.apply(name, properties, huge)
    assert not node.exists("/run/bcd/slices")
    with pytest.raises(SliceError):
        check_slice_request(NAME, "AllowedCPUs=0", {})


def test_the_record_backend_keeps_a_slice_as_a_json_record(make_node):
    node = make_node()
    host = node.host()
    properties, huge = wanted_slice(Limits(cpus="0-3", mems="0", cpu_millis=1234, memory_bytes=GIB, hugepages_2mi=2))
    host.slices.apply(NAME, properties, huge)
    record = json.loads(node.read("/run/bcd/slices/%s.json" % NAME))
    assert record == {
        "name": NAME,
        "properties": {"AllowedCPUs": "0-3", "AllowedMemoryNodes": "0", "CPUQuota": "124%",
                       "MemoryMax": str(GIB), "MemoryHigh": str(GIB * 9 // 10)},
        "hugetlb_max": {"2MB": 4 * MIB, "1GB": 0},
        "hugetlb_current": {},
        "populated": False,
    }
    # a running workload (a test sets populated) survives a new apply of the limits
    record["populated"] = True
    record["hugetlb_current"] = {"2MB": 2 * MIB}
    node.write("/run/bcd/slices/%s.json" % NAME, json.dumps(record))
    host.slices.apply(NAME, {"MemoryMax": "5"}, {})
    state = host.slices.state(NAME)
    assert state.populated is True and state.hugetlb_current == {"2MB": 2 * MIB}
    assert state.properties == {"MemoryMax": "5"}
    # the backend itself never stops a slice that runs a workload (the helper and the pass check first too)
    with pytest.raises(SliceError, match="still runs a workload"):
        host.slices.remove(NAME)
    assert host.slices.state(NAME) is not None
    record = json.loads(node.read("/run/bcd/slices/%s.json" % NAME))
    node.write("/run/bcd/slices/%s.json" % NAME, json.dumps(dict(record, populated=False)))
    host.slices.remove(NAME)
    assert host.slices.state(NAME) is None
    assert host.slices.names() == []


# --- reading systemd's properties back (drift repair) ---------------------------------------------------------


def test_systemctl_show_is_read_back_in_the_form_the_properties_are_set():
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import parse_show, parse_timespan_usec
    shown = ("AllowedCPUs=0-3\nAllowedMemoryNodes=0\nCPUQuotaPerSecUSec=1.240000s\n"
             "MemoryMax=4294967296\nMemoryHigh=3865470566\n")
    assert parse_show(shown) == {"AllowedCPUs": "0-3", "AllowedMemoryNodes": "0", "CPUQuota": "124%",
                                 "MemoryMax": "4294967296", "MemoryHigh": "3865470566"}
    unset = "AllowedCPUs=\nAllowedMemoryNodes=\nCPUQuotaPerSecUSec=infinity\nMemoryMax=infinity\nMemoryHigh=infinity\n"
    assert parse_show(unset) == {}
    assert [parse_timespan_usec(t) for t in ("500ms", "1min 4s", "10ms", "2s", "1.5x", "")] == [
        500000, 64000000, 10000, 2000000, None, None]


def test_a_property_changed_by_hand_is_set_again_and_an_equal_cpulist_is_left_alone():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import same_properties
    wanted = {"AllowedCPUs": "0-3", "CPUQuota": "124%", "MemoryMax": "4294967296"}
    assert same_properties({"AllowedCPUs": "0,1,2,3", "CPUQuota": "124%", "MemoryMax": "4294967296",
                            "MemoryHigh": "1"}, wanted)
    assert not same_properties({"AllowedCPUs": "0-3", "CPUQuota": "124%", "MemoryMax": "1073741824"}, wanted)
    assert not same_properties({"AllowedCPUs": "0-3", "MemoryMax": "4294967296"}, wanted)


# --- limits on a running slice keep headroom; a stop freezes first (issue 22) ------------------------------------


def running(used=None, hugetlb=None, populated=True):
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState
    return SliceState(name=NAME, populated=populated, memory_current=used, hugetlb_current=hugetlb or {})


@pytest.mark.parametrize("used, least", [
    (0, 64 * MIB),                                # nothing used: 64 MiB is the least margin
    (512 * MIB, 576 * MIB),                       # 64 MiB > 5 %, and 90 % of 576 MiB still covers the use
    (GIB - 32 * MIB, (10 * (GIB - 32 * MIB) + 8) // 9),   # MemoryHigh (90 %) decides from ~576 MiB on
    (100 * GIB, (10 * 100 * GIB + 8) // 9),
])
def test_memory_needs_its_margin_and_memory_high_its_use(used, least):
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import check_slice_change, least_memory_bytes
    assert least_memory_bytes(used) == least
    check_slice_change(running(used), slice_properties(Limits(memory_bytes=least)), {})
    with pytest.raises(SliceError, match="memory_bytes %d leaves no headroom over the slice's current use %d: at "
                                         "least %d is needed" % (least - 1, used, least)):
        check_slice_change(running(used), slice_properties(Limits(memory_bytes=least - 1)), {})


def test_memory_max_alone_or_high_alone_are_checked_too():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import check_slice_change
    used = GIB
    with pytest.raises(SliceError, match=r"current \+ 64 MiB = %d" % (used + 64 * MIB)):
        check_slice_change(running(used), {"MemoryMax": str(used + 64 * MIB - 1)}, {})
    check_slice_change(running(used), {"MemoryMax": str(used + 64 * MIB)}, {})
    with pytest.raises(SliceError, match="MemoryHigh %d is below the slice's current use %d" % (used - 1, used)):
        check_slice_change(running(used), {"MemoryHigh": str(used - 1)}, {})
    check_slice_change(running(used), {"MemoryHigh": str(used)}, {})


def test_huge_page_limits_keep_one_page_over_what_is_faulted_in():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import check_slice_change
    state = running(hugetlb={"1GB": 2 * GIB, "2MB": 0})
    with pytest.raises(SliceError, match=r"hugepages_1gi 2 \(hugetlb.1GB.max=%d\) leaves no headroom over the 1GB "
                                         r"huge pages faulted in, %d bytes \(2 pages\): at least 3 pages" % (2 * GIB, 2 * GIB)):
        check_slice_change(state, {}, hugetlb_max(Limits(hugepages_1gi=2)))
    check_slice_change(state, {}, hugetlb_max(Limits(hugepages_1gi=3, hugepages_2mi=1)))  # 2MB: nothing faulted


def test_an_empty_or_unknown_slice_has_only_the_cpu_floor():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import check_slice_change
    squeeze = slice_properties(Limits(memory_bytes=MIB))
    check_slice_change(None, squeeze, {"2MB": 2 * MIB})
    check_slice_change(running(GIB, {"2MB": 8 * MIB}, populated=False), squeeze, {"2MB": 2 * MIB})
    check_slice_change(running(None), squeeze, {})  # memory.current unreadable: nothing to compare
    for state in (None, running(GIB), running(populated=False)):
        with pytest.raises(SliceError, match="CPUQuota=9%, below the floor of 10% of one CPU"):
            check_slice_change(state, slice_properties(Limits(cpu_millis=90)), {}, NAME)
        check_slice_change(state, slice_properties(Limits(cpu_millis=91)), {}, NAME)


def test_the_systemd_backend_checks_before_any_command(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"MemoryMax": str(4 * GIB)}, {})
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    with open(os.path.join(directory, "cgroup.events"), "w") as handle:
        handle.write("populated 1\nfrozen 0\n")
    with open(os.path.join(directory, "memory.current"), "w") as handle:
        handle.write("%d\n" % GIB)
    calls = len(systemctl.calls)
    with pytest.raises(SliceError, match="memory_bytes %d leaves no headroom" % GIB):
        host.slices.apply(NAME, {"MemoryMax": str(GIB)}, {})
    assert len(systemctl.calls) == calls  # not even systemctl show: the cgroup files are all it reads
    host.slices.apply(NAME, {"MemoryMax": str(GIB + 64 * MIB)}, {})
    assert systemctl.calls[-1][-1] == "MemoryMax=%d" % (GIB + 64 * MIB)


def frozen_cgroup(tmp_path):
    host, systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"MemoryMax": str(GIB)}, {})
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    with open(os.path.join(directory, "cgroup.freeze"), "w") as handle:
        handle.write("0\n")
    return host, systemctl, directory


def test_a_systemd_slice_is_frozen_then_checked_again_then_stopped(tmp_path):
    host, systemctl, directory = frozen_cgroup(tmp_path)
    seen = []
    real = systemctl.__call__

    def recording(argv):
        if argv[1] == "stop":
            seen.append(read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME)))
        return real(argv)

    host.slices.runner = recording
    host.slices.remove(NAME)
    assert seen == ["1"]  # frozen when systemctl stop ran
    assert not os.path.exists(directory)


def test_a_process_that_joins_before_the_freeze_keeps_the_slice_thawed(tmp_path, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import SystemdSlices
    host, systemctl, directory = frozen_cgroup(tmp_path)
    original = SystemdSlices.freeze

    def freeze(self, name, frozen):
        if frozen:
            with open(os.path.join(directory, "cgroup.events"), "w") as handle:
                handle.write("populated 1\nfrozen 0\n")
        original(self, name, frozen)

    monkeypatch.setattr(SystemdSlices, "freeze", freeze)
    with pytest.raises(SliceError, match="still runs a workload \\(it joined as the slice was stopped\\)"):
        host.slices.remove(NAME)
    assert ["systemctl", "stop", NAME] not in systemctl.calls
    assert read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME)) == "0"


def test_a_stop_that_fails_thaws_the_slice(tmp_path):
    host, systemctl, _directory = frozen_cgroup(tmp_path)
    systemctl.fail["stop"] = (1, "Access denied")
    with pytest.raises(SliceError, match="Access denied"):
        host.slices.remove(NAME)
    assert read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME)) == "0"


# --- only a setting that takes something away is held to the headroom ------------------------------------------


def write_cgroup_files(host, **files):
    directory = host.path("%s/%s" % (SLICE_DIR, NAME))
    for filename, content in files.items():
        with open(os.path.join(directory, filename.replace("_", ".", 1)), "w") as handle:
            handle.write(content)


@pytest.mark.parametrize("content, percent", [(b"max 100000\n", None), (b"124000 100000\n", 124), (b"12400 100000\n", 12), (b"5000 100000", 5),
                                              (b"1000 10000\n", 10), (b"", None), (b"5000 0\n", None),
                                              (b"-1 100000\n", None), (b"5000\n", None)])
def test_cpu_max_is_read_as_whole_percents_of_one_cpu(content, percent):
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import parse_cpu_max
    assert parse_cpu_max(content) == percent


def test_the_systemd_backend_reads_what_the_slice_holds_from_its_cgroup(tmp_path):
    host, _systemctl = cgroup_host(tmp_path)
    host.slices.apply(NAME, {"MemoryMax": str(GIB)}, {})
    write_cgroup_files(host, memory_max="%d\n" % GIB, memory_high="%d\n" % (GIB * 9 // 10), cpu_max="5000 100000\n")
    state = host.slices.state(NAME, show=False)
    assert (state.memory_max, state.memory_high, state.cpu_quota) == (GIB, GIB * 9 // 10, 5)
    write_cgroup_files(host, memory_high="max\n", cpu_max="max 100000\n")
    state = host.slices.state(NAME, show=False)
    assert (state.memory_high, state.cpu_quota) == (None, None)


def test_a_running_systemd_slice_at_its_limits_may_be_set_the_same_again_but_not_lower(tmp_path):
    # a workload past its MemoryHigh, with every huge page it booked faulted in, in a slice bound at 5 %
    host, systemctl = cgroup_host(tmp_path)
    same = {"CPUQuota": "5%", "MemoryMax": str(GIB), "MemoryHigh": str(GIB * 9 // 10)}
    huge = {"2MB": 8 * MIB}
    host.slices.apply(NAME, {"MemoryMax": str(GIB)}, huge)

    def workload():  # what systemd and the kernel show (the stand-in systemctl's start empties the slice)
        write_cgroup_files(host, cgroup_events="populated 1\nfrozen 0\n", memory_max="%d\n" % GIB,
                           memory_high="%d\n" % (GIB * 9 // 10), memory_current="%d\n" % (GIB - 32 * MIB),
                           cpu_max="5000 100000\n",
                           **{"hugetlb.2MB.current": "%d\n" % (8 * MIB), "hugetlb.2MB.max": "%d\n" % (8 * MIB)})
    workload()
    calls = len(systemctl.calls)
    host.slices.apply(NAME, dict(same, AllowedCPUs="0-7"), huge)
    workload()
    assert systemctl.calls[calls:] == [
        ["systemctl", "start", NAME],
        ["systemctl", "set-property", "--runtime", NAME, "AllowedCPUs=0-7", "CPUQuota=5%", "MemoryMax=%d" % GIB,
         "MemoryHigh=%d" % (GIB * 9 // 10)]]
    calls = len(systemctl.calls)
    for properties, hugetlb, words in [
            (dict(same, CPUQuota="4%"), huge, "CPUQuota=4%, below the floor"),
            (dict(same, MemoryMax=str(GIB - MIB)), huge, "memory_bytes %d leaves no headroom" % (GIB - MIB)),
            ({"MemoryHigh": str(GIB * 9 // 10 - 1)}, huge, "MemoryHigh %d is below" % (GIB * 9 // 10 - 1)),
            (same, {"2MB": 6 * MIB}, "hugepages_2mi 3 (hugetlb.2MB.max=6291456) leaves no headroom")]:
        with pytest.raises(SliceError, match=re.escape(words)):
            host.slices.apply(NAME, properties, hugetlb)
    assert len(systemctl.calls) == calls  # each refused before any command


def test_only_a_limit_that_lowers_what_the_slice_has_is_checked():
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState, check_slice_change
    used = GIB
    have = SliceState(name=NAME, populated=True, memory_current=used,
                      properties={"MemoryMax": str(GIB), "MemoryHigh": str(GIB // 2), "CPUQuota": "2%"},
                      hugetlb_max={"1GB": GIB}, hugetlb_current={"1GB": GIB})
    check_slice_change(have, {"MemoryMax": str(GIB), "MemoryHigh": str(GIB // 2), "CPUQuota": "2%"}, {"1GB": GIB})
    check_slice_change(have, {"MemoryMax": str(GIB + 1), "MemoryHigh": str(GIB // 2 + 1), "CPUQuota": "3%"},
                       {"1GB": GIB + 1})
    for properties, huge in [({"MemoryMax": str(GIB - 1)}, {}), ({"MemoryHigh": str(GIB // 2 - 1)}, {}),
                             ({"CPUQuota": "1%"}, {}), ({}, {"1GB": GIB - 1})]:
        with pytest.raises(SliceError):
            check_slice_change(have, properties, huge)
    # where the slice has no limit (unset, or unknown), any limit takes something away and is checked
    unlimited = SliceState(name=NAME, populated=True, memory_current=used, hugetlb_current={"1GB": GIB})
    for properties, huge in [({"MemoryMax": str(GIB)}, {}), ({"MemoryHigh": str(GIB - 1)}, {}),
                             ({"CPUQuota": "9%"}, {}), ({}, {"1GB": GIB})]:
        with pytest.raises(SliceError):
            check_slice_change(unlimited, properties, huge)
    # from the cgroup files where properties cannot be read back
    files = SliceState(name=NAME, populated=True, memory_current=used, memory_max=GIB, memory_high=GIB // 2,
                       cpu_quota=2)
    check_slice_change(files, {"MemoryMax": str(GIB), "MemoryHigh": str(GIB // 2), "CPUQuota": "2%"}, {})
    with pytest.raises(SliceError):
        check_slice_change(files, {"CPUQuota": "1%"}, {})


# --- a stop closes the slice first: no cgroup can be made under it (issue 22) ------------------------------------


def closable_cgroup(tmp_path):
    host, systemctl, directory = frozen_cgroup(tmp_path)
    with open(os.path.join(directory, "cgroup.max.descendants"), "w") as handle:
        handle.write("max\n")
    return host, systemctl, directory


def test_a_systemd_slice_is_closed_and_frozen_when_systemctl_stop_runs(tmp_path):
    host, systemctl, directory = closable_cgroup(tmp_path)
    seen = []
    real = systemctl.__call__

    def recording(argv):
        if argv[1] == "stop":
            seen.append((read(host, "%s/%s/cgroup.max.descendants" % (SLICE_DIR, NAME)),
                         read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME))))
        return real(argv)

    host.slices.runner = recording
    host.slices.remove(NAME)
    assert seen == [("0", "1")]
    assert not os.path.exists(directory)


def test_a_stop_that_fails_or_finds_a_joiner_opens_and_thaws_the_slice(tmp_path):
    host, systemctl, directory = closable_cgroup(tmp_path)
    systemctl.fail["stop"] = (1, "Access denied")
    with pytest.raises(SliceError, match="Access denied"):
        host.slices.remove(NAME)
    assert (read(host, "%s/%s/cgroup.max.descendants" % (SLICE_DIR, NAME)),
            read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME))) == ("max", "0")
    # a cgroup under the slice (a unit or container being started) counts as a workload
    del systemctl.fail["stop"]
    with open(os.path.join(directory, "cgroup.stat"), "w") as handle:
        handle.write("nr_descendants 1\nnr_dying_descendants 0\n")
    assert host.slices.state(NAME).populated is True
    calls = len(systemctl.calls)
    with pytest.raises(SliceError, match="still runs a workload"):
        host.slices.remove(NAME)
    assert systemctl.calls[calls:] == []
    with open(os.path.join(directory, "cgroup.stat"), "w") as handle:
        handle.write("nr_descendants 0\nnr_dying_descendants 2\n")  # dying ones are on their way out
    host.slices.remove(NAME)
    assert not os.path.exists(directory)


def test_a_slice_whose_cgroup_outlives_its_stop_is_opened_and_thawed(tmp_path):
    host, systemctl, directory = closable_cgroup(tmp_path)
    real = systemctl.__call__
    host.slices.runner = lambda argv: (0, "", "") if argv[1] == "stop" else real(argv)  # the cgroup stays
    host.slices.remove(NAME)
    assert (read(host, "%s/%s/cgroup.max.descendants" % (SLICE_DIR, NAME)),
            read(host, "%s/%s/cgroup.freeze" % (SLICE_DIR, NAME))) == ("max", "0")


def writable_cgroup2():
    """A cgroup-v2 directory this process may make cgroups in and move processes into, or None."""
    if os.geteuid() != 0:
        return None
    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split(" - ")[0].split()[4] for line in handle if " - cgroup2 " in line]
    for mount in mounts:
        probe = os.path.join(mount, "bcd-test-%d" % os.getpid())
        try:
            os.mkdir(probe)
        except OSError:
            continue
        if os.path.exists(os.path.join(probe, "cgroup.freeze")):
            return probe
        os.rmdir(probe)
    return None


def test_on_a_real_kernel_a_closed_slice_takes_no_new_cgroup_and_freezes_what_is_moved_in(tmp_path):
    import errno
    import signal
    import subprocess
    import time
    base = writable_cgroup2()
    if base is None:
        pytest.skip("needs root and a writable cgroup-v2 hierarchy with cgroup.freeze")
    root = tmp_path / "root"
    os.makedirs(str(root / "sys/fs/cgroup/bcd.slice"))
    os.symlink(base, str(root / SLICE_DIR.lstrip("/")))
    slice_dir = os.path.join(base, NAME)
    os.mkdir(slice_dir)
    stops = []

    def runner(argv):  # systemd stops the slice and removes its cgroup, which the kernel allows only empty
        stops.append(argv)
        os.rmdir(slice_dir)
        return 0, "", ""

    host = RealHost(str(root), runner=runner)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        host.slices.freeze(NAME, True)
        with pytest.raises(OSError) as caught:  # what systemd's or a runtime's start into the slice meets
            os.mkdir(os.path.join(slice_dir, "run-u1.service"))
        assert caught.value.errno == errno.EAGAIN
        with open(os.path.join(slice_dir, "cgroup.procs"), "w") as handle:  # root moves a process straight in
            handle.write(str(sleeper.pid))
        deadline = time.time() + 10
        while b"frozen 1" not in (open(os.path.join(slice_dir, "cgroup.events"), "rb").read()) and time.time() < deadline:
            time.sleep(0.05)
        assert b"populated 1" in open(os.path.join(slice_dir, "cgroup.events"), "rb").read()
        assert b"frozen 1" in open(os.path.join(slice_dir, "cgroup.events"), "rb").read()
        host.slices.freeze(NAME, False)
        with pytest.raises(SliceError, match="still runs a workload"):
            host.slices.remove(NAME)
        assert stops == []
        assert open(os.path.join(slice_dir, "cgroup.max.descendants")).read().strip() == "max"
        assert open(os.path.join(slice_dir, "cgroup.freeze")).read().strip() == "0"
        os.mkdir(os.path.join(slice_dir, "run-u2.service"))  # open again
        os.rmdir(os.path.join(slice_dir, "run-u2.service"))
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    deadline = time.time() + 10
    while b"populated 0" not in open(os.path.join(slice_dir, "cgroup.events"), "rb").read() and time.time() < deadline:
        time.sleep(0.05)
    try:
        host.slices.remove(NAME)
        assert len(stops) == 1 and not os.path.exists(slice_dir)
    finally:
        if os.path.isdir(slice_dir):
            os.rmdir(slice_dir)
        os.rmdir(base)

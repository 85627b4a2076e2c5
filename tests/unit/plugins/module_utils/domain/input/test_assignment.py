# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input checks (DESIGN.md "Input that cannot be honoured as given"): every
bad field is refused as ``invalid-assignment`` with a message naming the field,
and the other assignments of the pass go on."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    BINDING_HOLD,
    BINDING_KUBERNETES,
    DeviceRef,
    InvalidAssignment,
    Limits,
    UnsupportedBinding,
    parse_assignment,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.cpulist import parse_cpulist
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import parse_assignments
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted
from ansible_collections.bcd.devices.tests.unit.builders import hold as build_hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run as run_module

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"


def entry(**fields):
    """``alloc_1``, reservation ``rsv_1``, a hold of one whole GPU; ``fields`` replace what is built."""
    built = build_hold("alloc_1", GPU, reservation_id="rsv_1")
    built.update(fields)
    return built


def refusal_of(raw):
    """The one refusal of a single-entry devices section."""
    parsed = parse_assignments([raw])
    assert parsed.assignments == []
    assert len(parsed.refusals) == 1
    refusal = parsed.refusals[0]
    assert refusal.reason == "invalid-assignment"
    return refusal


# --- what a good assignment reads as ------------------------------------------


def test_a_full_assignment_is_read_field_by_field():
    parsed = parse_assignments([entry(
        binding="BINDING_KUBERNETES",
        devices=[{"id": GPU, "device_class": ""}, {"id": GPU + "/gi1/ci0", "device_class": "gpu.mig"}],
        limits={"cpus": "0-3,8,10-11", "mems": "0", "cpu_millis": 1500, "memory_bytes": 0,
                "hugepages_2mi": 4, "hugepages_1gi": 1},
        env=["TEAM=vision", "EMPTY=", "EQ=a=b"],
    )])
    assert parsed.refusals == []
    (assignment,) = parsed.assignments
    assert assignment.allocation_id == "alloc_1"
    assert assignment.reservation_id == "rsv_1"
    assert assignment.binding == BINDING_KUBERNETES and assignment.kubernetes
    # an empty class reads as gpu
    assert assignment.devices == (DeviceRef(GPU, "gpu"), DeviceRef(GPU + "/gi1/ci0", "gpu.mig"))
    # memory_bytes 0 is proto3's unset: no limit
    assert assignment.limits == Limits(cpus="0-3,8,10-11", mems="0", cpu_millis=1500, memory_bytes=None,
                                       hugepages_2mi=4, hugepages_1gi=1)
    assert assignment.env == ("TEAM=vision", "EMPTY=", "EQ=a=b")


def test_absent_optional_fields_mean_a_hold_of_devices_only():
    assignment = parse_assignment({"allocation_id": "a", "binding": "BINDING_HOLD", "devices": [{"id": GPU}]})
    assert assignment.binding == BINDING_HOLD and not assignment.kubernetes
    assert assignment.reservation_id == ""
    assert assignment.devices == (DeviceRef(GPU, "gpu"),)
    assert assignment.limits is None  # absent: devices only
    assert assignment.env == ()


def test_empty_limits_are_devices_only():
    assert parse_assignment(entry(limits={})).limits is None


def test_env_may_be_given_as_a_mapping():
    assert parse_assignment(entry(env={"A": "1", "B": "x y"})).env == ("A=1", "B=x y")


@pytest.mark.parametrize("binding", ["BINDING_INSTANCE", "BINDING_NODE", "whatever"])
def test_other_bindings_are_refused_unsupported_binding_before_any_other_check(binding):
    # the spec page checks the binding first: no devices and an unknown field still read unsupported-binding
    bare = entry(binding=binding, devices=[], colour="blue")
    with pytest.raises(UnsupportedBinding, match="^binding %s is not supported$" % binding) as caught:
        parse_assignment(bare)
    assert caught.value.reason == "unsupported-binding"
    parsed = parse_assignments([bare])
    assert [(r.allocation_id, r.reason) for r in parsed.refusals] == [("alloc_1", "unsupported-binding")]
    assert parsed.refused_ids == ["alloc_1"]


def test_instance_id_is_known_and_not_read():
    assert parse_assignment(entry(instance_id="vm-1")) == parse_assignment(entry())


def test_an_allocation_id_of_80_characters_is_fine():
    assert parse_assignment(entry(allocation_id="a" * 80)).allocation_id == "a" * 80


# --- allocation ids ------------------------------------------------------------


@pytest.mark.parametrize("allocation_id", [
    "../../etc/passwd",
    "alloc/1",
    "alloc-1",
    "alloc 1",
    "alloc.1",
    "a" * 81,
    "",
    "ä",
    7,
    None,
    ["alloc_1"],
])
def test_an_allocation_id_that_cannot_name_a_file_is_refused(allocation_id):
    refusal = refusal_of(entry(allocation_id=allocation_id))
    # the pattern said in words: the refusal is journaled, and no event may hold a curly bracket
    assert refusal.message == "allocation_id: %s is not an allocation id (1 to 80 letters, digits and underscores)" % (
        quoted(allocation_id))
    assert refusal.allocation_id == "devices[0]"  # reported under its position, never under what was sent


@pytest.mark.parametrize("allocation_id, message", [
    ("alloc-01/../x", "allocation_id: 'alloc-01/../x' is not an allocation id (1 to 80 letters, digits and underscores)"),
    (None, "allocation_id: None is not an allocation id (1 to 80 letters, digits and underscores)"),
    ("{{ lookup('pipe', 'id') }}", "allocation_id: '\\x7b\\x7b lookup(\\x27pipe\\x27, \\x27id\\x27) \\x7d\\x7d' is not "
                                   "an allocation id (1 to 80 letters, digits and underscores)"),
    ("a\u202eb\x85", "allocation_id: 'a\\u202eb\\x85' is not an allocation id (1 to 80 letters, digits and underscores)"),
    (["alloc_1"], "allocation_id: a list is not an allocation id (1 to 80 letters, digits and underscores)"),
    ("x" * 300, "allocation_id: '%s...' is not an allocation id (1 to 80 letters, digits and underscores)" % ("x" * 77)),
])
def test_a_refused_allocation_id_is_quoted_safely(allocation_id, message):
    assert refusal_of(entry(allocation_id=allocation_id)).message == message


@pytest.mark.parametrize("allocation_id", ["alloc_1\n", "alloc_1\r", "alloc\n_1", "alloc_1\x00"])
def test_an_allocation_id_with_a_line_break_or_nul_is_refused(allocation_id):
    # "alloc_1\n" would name /etc/cdi/bcd-alloc_1\n.json and a slice with a newline in it.
    refusal = refusal_of(entry(allocation_id=allocation_id))
    assert refusal.message.startswith("allocation_id: ")


def test_a_huge_allocation_id_gives_a_short_message():
    refusal = refusal_of(entry(allocation_id="x" * 100000))
    assert refusal.message.startswith("allocation_id: ")
    assert len(refusal.message) < 300
    assert len(refusal.allocation_id) <= 256


def test_an_allocation_id_may_appear_once():
    # Sent twice, it is ambiguous: neither entry is honoured, and the allocation is refused once.
    parsed = parse_assignments([entry(), entry(devices=[{"id": GPU + "/s1", "device_class": "gpu.slot"}]),
                                entry(allocation_id="alloc_2")])
    assert [a.allocation_id for a in parsed.assignments] == ["alloc_2"]
    assert [(r.allocation_id, r.reason) for r in parsed.refusals] == [("alloc_1", "invalid-assignment")]
    assert parsed.refusals[0].message == "allocation_id: alloc_1 appears 2 times"
    assert parsed.refused_ids == ["alloc_1"]  # a hold it already has is kept


# --- env -------------------------------------------------------------------------


@pytest.mark.parametrize("line, why", [
    ("A=1\nB=2", "newline"),
    ("A=1\rB=2", "carriage return"),
    ("A=1\x00", "NUL"),
    ("NOEQUALS", "KEY=VALUE"),
    ("=value", "KEY=VALUE"),
    ("1A=x", "KEY=VALUE"),
    ("A-B=x", "KEY=VALUE"),
    ("A B=x", "KEY=VALUE"),
    (5, "KEY=VALUE"),
    (None, "KEY=VALUE"),
])
def test_a_bad_env_line_is_refused_naming_its_index(line, why):
    refusal = refusal_of(entry(env=["GOOD=1", line]))
    assert refusal.message.startswith("env[1]: ")
    assert why in refusal.message


@pytest.mark.parametrize("key", ["BCD_ALLOCATION_ID", "BCD_RESERVATION_ID", "BCD_CGROUP_PARENT",
                                 "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY"])
def test_env_cannot_override_what_bcd_writes(key):
    refusal = refusal_of(entry(env=["%s=x" % key]))
    assert refusal.message.startswith("env[0]: ")
    assert key in refusal.message


@pytest.mark.parametrize("env", ["A=1", 5, {"A": "1\nB=2"}])
def test_env_of_the_wrong_shape_is_refused(env):
    assert refusal_of(entry(env=env)).message.startswith("env")


# --- limits ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["cpus", "mems"])
@pytest.mark.parametrize("value", ["0-3,", ",1", "a", "0-3-5", "3-1", "0 -3", "1,,2", -3, True, 4.0, ["0-3"],
                                   "0," * 600 + "1"])
def test_a_bad_cpulist_is_refused_naming_its_field(field, value):
    refusal = refusal_of(entry(limits={field: value}))
    assert refusal.message.startswith("limits.%s: " % field)


@pytest.mark.parametrize("field", ["cpus", "mems"])
@pytest.mark.parametrize("value, cpulist", [(0, "0"), (3, "3"), ("0", "0"), ("", None)])
def test_an_integer_cpulist_is_that_number_and_an_empty_one_unset(field, value, cpulist):
    assert getattr(parse_assignment(entry(limits={field: value, "cpu_millis": 100})).limits, field) == cpulist


def test_a_limit_given_as_its_zero_value_is_warned_about():
    parsed = parse_assignments([entry(limits={"cpus": 0, "hugepages_2mi": 0, "hugepages_1gi": "0", "mems": ""})])
    assert parsed.assignments[0].limits.cpus == "0"
    assert parsed.warnings == [
        "alloc_1: limits.mems: \"\" reads as unset (proto3's zero value), so no mems limit is set",
        "alloc_1: limits.hugepages_2mi: 0 reads as unset (proto3's zero value), so no hugepages_2mi limit is set",
        "alloc_1: limits.hugepages_1gi: \"0\" reads as unset (proto3's zero value), so no hugepages_1gi limit is set"]


@pytest.mark.parametrize("field", ["cpus", "mems"])
def test_a_cpulist_with_a_trailing_newline_is_refused(field):
    # It would reach systemctl set-property AllowedCPUs= (and the helper) with a newline in it.
    refusal = refusal_of(entry(limits={field: "0-3\n"}))
    assert refusal.message.startswith("limits.%s: " % field)


def test_a_cpulist_of_1024_characters_is_fine():
    value = ("1," * 512)[:1023] + "2"
    assert len(value) == 1024
    assert parse_assignment(entry(limits={"cpus": value})).limits.cpus == value


@pytest.mark.parametrize("field", ["cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi"])
@pytest.mark.parametrize("value", [-1, 1.5, 1.0, True, [1], {}])
def test_a_limit_that_is_not_a_non_negative_integer_is_refused(field, value):
    refusal = refusal_of(entry(limits={field: value}))
    assert refusal.message == "limits.%s: must be a non-negative integer" % field


@pytest.mark.parametrize("field", ["cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi"])
def test_an_integer_limit_may_come_as_its_decimal_string_as_proto3_json_writes_int64(field):
    assert getattr(parse_assignment(entry(limits={field: "4294967296"})).limits, field) == 4294967296
    # 0, as a number or a string, is proto3's unset field: no limit, and with nothing else booked no limits
    assert parse_assignment(entry(limits={field: "0"})).limits is None
    assert parse_assignment(entry(limits={field: 0, "cpus": "0-1"})).limits == Limits(cpus="0-1")


@pytest.mark.parametrize("value", ["-1", "1.5", "1e9", " 5", "5 ", "0x10", "", "4G", "٣", "1" * 21])
def test_a_limit_string_that_is_not_a_decimal_integer_is_refused(value):
    refusal = refusal_of(entry(limits={"memory_bytes": value}))
    assert refusal.message == "limits.memory_bytes: %s is not a non-negative integer or its decimal string" % quoted(value)


def test_a_limit_string_beyond_int64_is_refused():
    refusal = refusal_of(entry(limits={"memory_bytes": str(1 << 63)}))
    assert refusal.message == "limits.memory_bytes: larger than %d" % ((1 << 63) - 1)


@pytest.mark.parametrize("limits, message", [
    ({"gpus": 1}, "limits.gpus: unknown field; did you mean cpus?"),
    ({"memory": 1 << 30}, "limits.memory: unknown field; did you mean memory_bytes?"),
    ({"ExecStart": "/bin/sh"},
     "limits.ExecStart: unknown field (known: cpus, mems, cpu_millis, memory_bytes, hugepages_2mi, hugepages_1gi)"),
    ([1], "limits: must be a mapping"),
    ("cpus=0", "limits: must be a mapping"),
])
def test_limits_of_the_wrong_shape_are_refused(limits, message):
    assert refusal_of(entry(limits=limits)).message == message


def test_parse_cpulist_names_every_number():
    assert parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}


# --- devices and other fields -------------------------------------------------------


@pytest.mark.parametrize("devices, start", [
    (None, "devices: "),
    ("GPU-1", "devices: "),
    ({"id": GPU}, "devices: "),
    ([], "devices: at least one device is required"),
    ([{"id": "GPU-%d" % n} for n in range(1025)], "devices: more than 1024 devices"),
    ([GPU], "devices[0]: "),
    ([{"id": GPU}, {"device_class": "gpu"}], "devices[1].id: required"),
    ([{"id": 5}], "devices[0].id: must be a string"),
    ([{"id": "GPU-1\n"}], "devices[0].id: contains a control character"),
    ([{"id": "G" * 300}], "devices[0].id: longer than"),
    ([{"id": GPU, "device_class": 1}], "devices[0].device_class: must be a string"),
])
def test_bad_devices_are_refused_naming_the_field(devices, start):
    assert refusal_of(entry(devices=devices)).message.startswith(start)


@pytest.mark.parametrize("field, value", [
    ("reservation_id", 5),
    ("reservation_id", "rsv\n1"),
    ("reservation_id", "r" * 1000),
    ("binding", ["BINDING_HOLD"]),
    ("binding", "BINDING_HOLD\n"),
])
def test_bad_text_fields_are_refused_naming_the_field(field, value):
    assert refusal_of(entry(**{field: value})).message.startswith(field + ": ")


def test_a_refusal_does_not_stop_the_others_and_keeps_spec_order():
    parsed = parse_assignments([
        entry(allocation_id="a1"),
        "not a mapping",
        entry(allocation_id="a2", env=["BAD"]),
        {"devices": [{"id": GPU}]},
        entry(allocation_id="a3"),
    ])
    assert [a.allocation_id for a in parsed.assignments] == ["a1", "a3"]
    assert [r.allocation_id for r in parsed.refusals] == ["devices[1]", "a2", "devices[3]"]
    assert parsed.order == ["a1", "devices[1]", "a2", "devices[3]", "a3"]
    assert parsed.refusals[0].message == "devices[1]: an assignment must be a mapping"
    # a refused entry with a usable name keeps its live hold; nameless ones cannot have one
    assert parsed.refused_ids == ["a2"]


def test_an_entry_without_a_valid_id_is_reported_under_its_position_naming_the_id_sent():
    # the events' grammar takes an allocation id or devices[N] (domain/event_grammar.py): what was sent may be anything
    parsed = parse_assignments([entry(allocation_id="a1"), entry(allocation_id="../../etc/passwd"),
                                entry(allocation_id="../../etc/passwd"), entry(allocation_id="a" * 81)])
    assert [(r.allocation_id, r.message) for r in parsed.refusals] == [
        ("devices[%d]" % index, "allocation_id: '%s' is not an allocation id (1 to 80 letters, digits and underscores)"
         % sent) for index, sent in ((1, "../../etc/passwd"), (2, "../../etc/passwd"), (3, "a" * 77 + "..."))]
    assert parsed.order == ["a1", "devices[1]", "devices[2]", "devices[3]"]
    assert parsed.refused_ids == []  # never used as a name


def test_no_devices_section_is_no_assignments():
    assert parse_assignments([]).assignments == []
    assert parse_assignments(None).assignments == []


def test_parse_assignment_raises_the_documented_exception():
    with pytest.raises(InvalidAssignment, match="^allocation_id: "):
        parse_assignment(entry(allocation_id="a/b"))


# --- hostile numbers are cheap ---------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("cpus", "0-30000000", "limits.cpus: CPU 30000000 is beyond 8191, the most any host has"),
    ("cpus", "8192", "limits.cpus: CPU 8192 is beyond 8191, the most any host has"),
    ("mems", "0-30000000", "limits.mems: NUMA node 30000000 is beyond 1023, the most any host has"),
    ("mems", "1024", "limits.mems: NUMA node 1024 is beyond 1023, the most any host has"),
    ("cpus", "9" * 1000, "limits.cpus: CPU 999999999999... (1000 digits) is beyond 8191, the most any host has"),
])
def test_a_cpu_or_numa_node_beyond_any_host_is_refused(field, value, message):
    assert refusal_of(entry(limits={field: value})).message == message


def test_the_highest_cpu_and_numa_node_any_host_has_are_fine():
    limits = parse_assignment(entry(limits={"cpus": "0-8191", "mems": "0-1023"})).limits
    assert (limits.cpus, limits.mems) == ("0-8191", "0-1023")


@pytest.mark.parametrize("field", ["cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi"])
def test_a_number_beyond_int64_is_refused(field):
    assert refusal_of(entry(limits={field: 1 << 63})).message == "limits.%s: larger than %d" % (field, (1 << 63) - 1)
    assert getattr(parse_assignment(entry(limits={field: (1 << 63) - 1})).limits, field) == (1 << 63) - 1


def test_at_most_256_env_lines():
    assert len(parse_assignment(entry(env=["K%d=v" % n for n in range(256)])).env) == 256
    assert refusal_of(entry(env=["K%d=v" % n for n in range(257)])).message == "env: more than 256 lines"


@pytest.mark.parametrize("extra, message", [
    ({"reservaton_id": "rsv_1"}, "reservaton_id: unknown field; did you mean reservation_id?"),
    ({"bindng": "BINDING_HOLD"}, "bindng: unknown field; did you mean binding?"),
    ({"node": "n1"}, "node: unknown field (known: allocation_id, reservation_id, binding, devices, limits, env)"),
    ({7: "x"}, "7: unknown field (known: allocation_id, reservation_id, binding, devices, limits, env)"),
    ({"devices": [{"id": "GPU-5f1c2a90-0000-4000-8000-000000000001", "device_clas": "gpu.mig"}]},
     "devices[0].device_clas: unknown field; did you mean device_class?"),
    ({"devices": [{"id": "GPU-5f1c2a90-0000-4000-8000-000000000001"}, {"uuid": "GPU-1"}]},
     "devices[1].uuid: unknown field; did you mean id?"),
    ({"x\n" * 40: 1}, "%sx...: unknown field (known: allocation_id, reservation_id, binding, devices, limits, env)"
     % ("x\\n" * 20)),  # a hostile key is shown escaped and cut short
    ({"{{ x }}": 1}, "\\x7b\\x7b x \\x7d\\x7d: unknown field (known: allocation_id, reservation_id, binding, devices, "
                     "limits, env)"),
])
def test_an_unknown_key_is_refused_with_the_nearest_field(extra, message):
    """A typo in an assignment or a device is never read as an absent field (an empty reservation id, a
    device class that reads as gpu): the assignment is refused, naming the key and what was meant."""
    raw = entry()
    raw.update(extra)
    refusal = refusal_of(raw)
    assert (refusal.reason, refusal.message) == ("invalid-assignment", message)


@pytest.mark.parametrize("generation", [2 ** 63, 7 * 10 ** 19, -(2 ** 63) - 1])
def test_a_generation_past_64_bits_fails_the_task_before_anything_is_stored(capsys, node, generation):
    """Found by make fuzz: the module took any integer and stored it; the stored input's reader takes
    a 64-bit generation only, so every timer pass after the task failed."""
    before = node.listing()
    result = run_module(capsys, node, generation=generation, devices=[build_hold("a1", GPU_A)])
    assert result["failed"] is True
    assert "generation must be a 64-bit integer (at most 9223372036854775807)" in result["msg"]
    assert node.listing() == before

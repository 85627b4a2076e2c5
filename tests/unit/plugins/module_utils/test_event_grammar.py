# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The grammar of the node's events (domain/event_grammar.py): what a gateway hands on to a rulebook. No field
may hold a template delimiter or a control character, whoever signed it; and every event a real node journals
(binds, releases, refusals of every reason, every condition appearing and clearing), on fakehw nodes, passes."""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain import event_grammar as grammar
from ansible_collections.bcd.devices.plugins.module_utils.domain import event_types
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import CONDITION_TYPES, EVENT_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.state import events as events_lib
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal
from ansible_collections.bcd.devices.tests.unit.builders import hold, kube, mig
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_kuberelease import pods, set_since
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_busy_and_maintenance import service
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_gpu_health import sick
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_gpu_recovery import reset
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_runtimes_and_upgrades import (
    LIBCUDA_NEW,
    driver,
    set_vendor_version,
)

SIGNATURE = "rNBpFPvefNKQKArpVrt3SVZMuY4arQStcFNYVgOS7YxTF+dA5uljxKein0uf2GbFEKZH0yX+Y+b+RJDDRBSfDA=="
BOOT = "6f0c1e9e-1c7a-4a43-9a9e-000000000001"

# The events of docs/events.md, one of each shape (seal and signatures are well-formed, not valid: the grammar
# reads their form, the gateway checks them).
BOUND = {"seq": 1, "type": "AllocationBound", "format": 2, "seal": SIGNATURE, "purpose": "attested-report",
         "signature": SIGNATURE,
         "body": {"node_id": "node-a", "boot_id": BOOT, "allocation_id": "alloc_train", "generation": 1,
                  "device_ids": [GPU_A, GPU_B + "/gi1/ci0", GPU_C + "/s3"],
                  "cdi_devices": ["bcd.dev/gpu=" + GPU_A, "bcd.dev/gpu=%s_gi1_ci0" % GPU_B, "bcd.dev/gpu=%s_s3" % GPU_C],
                  "cdi_spec_path": "/etc/cdi/bcd-alloc_train.json", "env_file": "/run/bcd/allocations/alloc_train.env",
                  "cgroup_parent": "bcd-alloc-alloc_train.slice"}}
RELEASED = {"seq": 3, "type": "AllocationReleased", "purpose": "attested-report", "signature": SIGNATURE,
            "body": {"node_id": "node-a", "boot_id": BOOT, "allocation_id": "alloc_notebook", "generation": 2,
                     "device_ids": [GPU_B + "/gi1/ci0"]}}
FAILED = {"seq": 9, "type": "AllocationFailed", "format": 2, "seal": SIGNATURE,
          "body": {"node_id": "node-b", "allocation_id": "alloc_vfio", "generation": 1, "reason": "overlap",
                   "message": "GPU-5f1c2a90-0002-4000-8000-000000000003 is passed through to instance inst_9"}}
UNHEALTHY = {"seq": 2, "type": "GPUUnhealthy", "format": 2, "seal": SIGNATURE, "purpose": "attested-report",
             "signature": SIGNATURE,
             "body": {"type": "GPUUnhealthy", "node_id": "node-a", "boot_id": BOOT, "generation": 4,
                      "device_ids": [GPU_B], "reason": "GPUFaulted",
                      "message": "%s is unhealthy: Xid 79: GPU has fallen off the bus (reboot the node)" % GPU_B}}
STUCK_CLEARED = {"seq": 5, "type": "KubernetesReleaseStuckCleared", "purpose": "attested-report", "signature": SIGNATURE,
                 "body": {"type": "KubernetesReleaseStuckCleared", "node_id": "gpu-17.rack-3.example.org", "boot_id": "",
                          "generation": 5, "device_ids": [GPU_A], "allocation_id": "k1", "reason": "ConditionCleared",
                          "message": "KubernetesReleaseStuck (k1) no longer holds"}}
RESET = {"seq": 6, "type": "GPUReset", "format": 2, "seal": SIGNATURE, "purpose": "attested-report", "signature": SIGNATURE,
         "body": {"type": "GPUReset", "node_id": "node-a", "boot_id": BOOT, "generation": 0, "device_ids": [GPU_B],
                  "reason": "ResetHealthy", "message": "%s was reset and reads healthy" % GPU_B}}
SHAPES = [BOUND, RELEASED, FAILED, UNHEALTHY, STUCK_CLEARED, RESET]

# Every string a field can hold, by where it is: (event, path), the path's last part an index for a list's item.
STRING_FIELDS = [(BOUND, ("type",)), (BOUND, ("purpose",)), (BOUND, ("signature",)), (BOUND, ("seal",))] + [
    (BOUND, ("body", name))
    for name in ("node_id", "boot_id", "allocation_id", "cdi_spec_path", "env_file", "cgroup_parent")] + [
    (BOUND, ("body", "device_ids", 1)), (BOUND, ("body", "cdi_devices", 2)), (RELEASED, ("body", "allocation_id")),
    (FAILED, ("body", "allocation_id")), (FAILED, ("body", "reason")), (FAILED, ("body", "message")),
    (UNHEALTHY, ("body", "type")), (UNHEALTHY, ("body", "reason")), (UNHEALTHY, ("body", "message")),
    (UNHEALTHY, ("body", "device_ids", 0)), (STUCK_CLEARED, ("body", "allocation_id")),
    (STUCK_CLEARED, ("body", "node_id")), (STUCK_CLEARED, ("body", "boot_id")), (RESET, ("body", "reason")),
    (RESET, ("body", "message")), (RESET, ("body", "type"))]


def with_value(event, path, value):
    changed = copy.deepcopy(event)
    target = changed
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return changed


def named(path):
    """How a reason names the field at ``path``: ``body.device_ids[1]``."""
    text = ".".join(str(part) for part in path if not isinstance(part, int))
    return text + "".join("[%d]" % part for part in path if isinstance(part, int))


def test_the_shapes_of_the_docs_pass():
    assert [grammar.check_event(event) for event in SHAPES] == [None] * len(SHAPES)


def test_the_grammar_knows_what_the_journal_writes():
    assert grammar.ATTESTED_PURPOSE == events_lib.PURPOSE and grammar.SEAL_FORMAT == events_lib.SEAL_FORMAT
    assert sorted(grammar.BODY_FIELDS) == sorted(EVENT_TYPES)
    assert sorted(grammar.CONDITION_REASONS) == sorted(CONDITION_TYPES)  # a new condition type needs its reason here
    assert [kind for kind in EVENT_TYPES if not grammar.reasons_of(kind) and kind not in event_types.ATTESTED_TYPES] == []
    for name in ("GPU_CONDITION_REASONS", "CONDITION_REASONS"):  # what event_types.py says of reasons, by either name
        said = getattr(event_types, name, {})
        assert dict((kind, grammar.CONDITION_REASONS[kind]) for kind in said) == said
    assert grammar.reasons_of("AllocationFailed") == REASONS
    assert grammar.reasons_of("GPUUnhealthyCleared") == ("ConditionCleared",)
    assert grammar.reasons_of("GPUReset") == tuple(event_types.RECOVERY_REASONS["GPUReset"])


@pytest.mark.parametrize("kind", EVENT_TYPES)
def test_every_type_has_a_grammar_and_a_stray_field_is_refused_not_raised(kind):
    """Every type event_types.py lists, a new one included, is checked, never a KeyError: a body with its type
    and nothing else is missing a field, a body of a hold's fields under a typed type has unknown ones."""
    event = {"seq": 1, "type": kind, "body": {"type": kind, "node_id": "node-a"}}
    if kind in event_types.SIGNED_TYPES:
        event.update(purpose="attested-report", signature=SIGNATURE)
    reason = grammar.check_event(event)
    assert reason is not None and reason.startswith("body."), reason


@pytest.mark.parametrize("event, reason", [
    (["seq", 1], 'not an event: a mapping is expected, got ["seq", 1]'),
    (dict(BOUND, extra=1), '"extra": unknown field (an event has seq, type, body, purpose, signature, format, seal)'),
    (dict(BOUND, seq=0), "seq: must be an integer from 1 to 9223372036854775807, got 0"),
    (dict(BOUND, seq=True), "seq: must be an integer from 1 to 9223372036854775807, got true"),
    (dict(BOUND, seq=1 << 63), "seq: must be an integer from 1 to 9223372036854775807, got 9223372036854775808"),
    (dict(BOUND, type="GPUHealthy"), 'type: "GPUHealthy" is not a type of event a node journals'),
    (dict(BOUND, body=[]), "body: must be a mapping, got []"),
    (dict(BOUND, purpose="other"), 'purpose: every AllocationBound carries attested-report, got "other"'),
    (dict(BOUND, signature="c2ln"), 'signature: must be the base64 of an Ed25519 signature (88 characters), got "c2ln"'),
    (dict(FAILED, purpose="attested-report"), "purpose: AllocationFailed carries none (it is not a signed type)"),
    (dict(BOUND, format=1), "format: must be 2 (a sealed event), got 1"),
    (dict(BOUND, format=True), "format: must be 2 (a sealed event), got true"),
    (dict((k, v) for k, v in BOUND.items() if k != "seal"),
     "seal: must be the base64 of an Ed25519 signature (88 characters), got null"),
    (with_value(BOUND, ("body", "x"), 1), "body.x: unknown field for AllocationBound (its body has node_id, boot_id, "
                                          "allocation_id, generation, device_ids, cdi_devices, cdi_spec_path, env_file, "
                                          "cgroup_parent)"),
    (dict(RELEASED, body=dict(BOUND["body"])), "body.cdi_devices: unknown field for AllocationReleased (its body has "
                                               "node_id, boot_id, allocation_id, generation, device_ids)"),
    (dict(BOUND, body=dict((k, v) for k, v in BOUND["body"].items() if k != "env_file")),
     "body.env_file: missing (every AllocationBound carries it)"),
    (with_value(BOUND, ("body", "node_id"), "node_a"), 'body.node_id: "node_a" is not a host name (RFC 1123: labels of '
                                                       "letters, digits and hyphens joined by dots, at most 253 characters)"),
    (with_value(BOUND, ("body", "node_id"), "a." * 127 + "b"), "body.node_id: "),
    (with_value(BOUND, ("body", "node_id"), "-a"), "body.node_id: "),
    (with_value(BOUND, ("body", "boot_id"), "6f0c1e9e"), 'body.boot_id: "6f0c1e9e" is not a boot id (a UUID, or empty)'),
    (with_value(BOUND, ("body", "generation"), -1), "body.generation: must be an integer from 0 to 9223372036854775807, "
                                                    "got -1"),
    (with_value(BOUND, ("body", "generation"), 1.5), "body.generation: "),
    (with_value(BOUND, ("body", "allocation_id"), "alloc-1"), 'body.allocation_id: "alloc-1" is not an allocation id '
                                                              "(1 to 80 letters, digits and underscores)"),
    (with_value(FAILED, ("body", "allocation_id"), "devices[01]"), 'body.allocation_id: "devices[01]" is not an '
                                                                   "allocation id (1 to 80 letters, digits and "
                                                                   "underscores) nor devices[N]"),
    (with_value(BOUND, ("body", "device_ids"), "GPU-x"), 'body.device_ids: must be a list, got "GPU-x"'),
    (with_value(BOUND, ("body", "device_ids"), ["GPU-x"] * 1025), "body.device_ids: lists 1025 items, more than 1024"),
    (with_value(BOUND, ("body", "device_ids", 1), "GPU-x/gi01/ci0/extra"), 'body.device_ids[1]: "GPU-x/gi01/ci0/extra" '
                                                                           "is not a device id (a GPU, <gpu>/gi<n>/ci<m> "
                                                                           "or <gpu>/s<n>, that can name a CDI device)"),
    (with_value(BOUND, ("body", "device_ids", 1), "GPU x"), "body.device_ids[1]: "),
    (with_value(BOUND, ("body", "cdi_devices", 0), "nvidia.com/gpu=all"), 'body.cdi_devices[0]: "nvidia.com/gpu=all" is '
                                                                          "not a CDI device of this collection "
                                                                          "(bcd.dev/gpu=<device id with / as _>)"),
    (with_value(BOUND, ("body", "cdi_spec_path"), "/etc/cdi/../shadow"), 'body.cdi_spec_path: "/etc/cdi/../shadow" is '
                                                                         "not a hold's spec "
                                                                         "(/etc/cdi/bcd-<allocation id>.json)"),
    (with_value(BOUND, ("body", "env_file"), "/etc/profile"), 'body.env_file: "/etc/profile" is not a hold\'s env file '
                                                              "(/run/bcd/allocations/<allocation id>.env)"),
    (with_value(BOUND, ("body", "cgroup_parent"), "system.slice"), 'body.cgroup_parent: "system.slice" is not a hold\'s '
                                                                   "slice (bcd-alloc-<allocation id>.slice)"),
    (with_value(FAILED, ("body", "reason"), "GPUFaulted"), 'body.reason: "GPUFaulted" is not a reason of AllocationFailed '
                                                           "(unsupported-binding, node-unprivileged, unsupported-device, "
                                                           "device-missing, overlap, resources-exhausted, "
                                                           "invalid-assignment)"),
    (with_value(UNHEALTHY, ("body", "reason"), "ConditionCleared"), 'body.reason: "ConditionCleared" is not a reason of '
                                                                    "GPUUnhealthy (GPUFaulted)"),
    (with_value(UNHEALTHY, ("body", "type"), "GPUUnhealthyCleared"), "body.type: must name the event's own type, "
                                                                     'GPUUnhealthy, got "GPUUnhealthyCleared"'),
    (with_value(FAILED, ("body", "message"), "x" * (grammar.MAX_MESSAGE + 1)), "body.message: is 1048577 characters "
                                                                               "long, more than 1048576"),
    (with_value(FAILED, ("body", "message"), "held by {{ lookup('pipe', 'id') }}"),
     "body.message: holds U+007B at character 9; a message holds printable characters only, and no curly bracket "
     "(a template delimiter)"),
    (with_value(FAILED, ("body", "message"), "two\nlines"), "body.message: holds U+000A at character 4"),
    (with_value(FAILED, ("body", "message"), "right-to-left \u202e override"), "body.message: holds U+202E at character 15"),
])
def test_each_field_is_refused_with_a_reason_naming_it(event, reason):
    assert (grammar.check_event(event) or "").startswith(reason)


def test_the_work_per_event_is_bounded_by_what_its_type_allows():
    """A body of a million keys is refused after looking at a few of them; a list past its bound is not walked."""
    huge = dict(("k%d" % n, n) for n in range(1000000))
    huge.update(BOUND["body"])
    started = time.process_time()
    for _round in range(1000):
        assert grammar.check_event(dict(BOUND, body=huge)).startswith("body.k0: unknown field")
    assert time.process_time() - started < 0.5  # 1 000 refusals of it: far from walking a million keys each


# --- what no field holds -------------------------------------------------------------------------------------

FORBIDDEN = st.sampled_from(["{", "}", "{{", "{%", "{#", "}}", "\x00", "\n", "\r", "\x1b", "\x7f", "\x85", "\u2028",
                             "\u202e", "\ufeff"])


@settings(max_examples=400, deadline=None)
@given(where=st.sampled_from(STRING_FIELDS), before=st.text(max_size=20), bad=FORBIDDEN, after=st.text(max_size=20))
def test_no_string_holding_a_curly_bracket_or_a_control_character_passes_any_field(where, before, bad, after):
    event, path = where
    value = before + bad + after
    reason = grammar.check_event(with_value(event, path, value))
    assert reason is not None, (path, value)
    if path[-1] not in ("type",) or path[0] == "body":
        assert reason.startswith(named(path) + ":"), (path, reason)
    assert not set(reason) & set("{}\n\r\x00"), reason  # the reason itself can be shown anywhere


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=30))
def test_an_unknown_body_field_is_refused_whatever_its_name(key):
    event = with_value(BOUND, ("body", key), "x")
    if key in grammar.BODY_FIELDS["AllocationBound"][0] + grammar.BODY_FIELDS["AllocationBound"][1]:
        return
    reason = grammar.check_event(event)
    assert reason is not None and reason.startswith("body.") and "unknown field" in reason
    assert not set(reason) & set("{}\n\r\x00"), reason


# --- every event a real node journals --------------------------------------------------------------------------

def journaled(node):
    return Journal(node.state()).unacked()


def refused(pass_result):
    return [(f.allocation_id, f.reason) for f in pass_result.plan.failures]


def assert_all_pass(events):
    bad = [(event["seq"], event["type"], grammar.check_event(event)) for event in events
           if grammar.check_event(event) is not None]
    assert bad == []


def test_binds_releases_and_refusals_of_every_reason_a_pass_journals_pass(node):
    """Real passes on a fakehw node: binds of each kind of atom (a slice too), releases, and a refusal for each
    reason whose message quotes no curly bracket (each one checked to be there)."""
    node.write("/proc/meminfo", b"MemTotal: 10485760 kB\nMemFree: 10485760 kB\nHugetlb: 0 kB\n")  # 10 GiB
    limits = {"cpus": "0-3", "mems": "0", "cpu_millis": 1500, "memory_bytes": 4 << 30}
    assert node.run(1, [hold("a_whole", GPU_C, limits=limits), mig("a_mig", GPU_A + "/gi1/ci0"),
                        hold("a_slot", GPU_B + "/s0"), hold("a_slot2", GPU_B + "/s1")]).section["state"] == "CONVERGED"
    second = node.run(2, [
        mig("a_mig", GPU_A + "/gi1/ci0"),                                  # kept; the others released
        hold("r_overlap", GPU_A + "/gi1/ci0"),                              # overlap
        hold("r_missing", "GPU-00000000-dead-4000-8000-000000000000"),      # device-missing
        hold("r_device", GPU_A + "/slot2", device_class="gpu.slot"),        # unsupported-device
        hold("r_binding", GPU_B, binding="BINDING_INSTANCE"),               # unsupported-binding
        hold("r_empty", devices=[]),                                        # invalid-assignment
        hold("r_twice", GPU_B, GPU_B),                                      # overlap: a device listed twice
        hold("r_memory", GPU_C, limits={"memory_bytes": 1 << 60}),          # resources-exhausted
        hold("r_env", GPU_C, env=["LD_PRELOAD=/tmp/x.so"]),                 # invalid-assignment (env policy)
    ])
    reasons = set(reason for _allocation, reason in refused(second))
    assert reasons >= set(REASONS) - {"node-unprivileged"}, reasons  # unprivileged passes journal nothing
    events = journaled(node)
    assert {"AllocationBound", "AllocationReleased", "AllocationFailed"} <= set(e["type"] for e in events)
    assert any(e["body"].get("cgroup_parent") for e in events if e["type"] == "AllocationBound")
    assert all(events_lib.is_sealed(e) for e in events)
    assert_all_pass(events)


def test_every_condition_a_pass_journals_appearing_and_clearing_passes(node):
    """GPUUnhealthy, VendorSpecStale, VendorSpecUnsupported, KubernetesReleaseStuck, KubernetesReleasesUnreadable
    and HoldSpecDamaged, each raised by a real pass and cleared by a later one."""
    node.set_hardware(driver=driver(), kubelet={"reachable": True, "pods": []})
    node.run(1, [hold("a1", GPU_B), kube("k1", GPU_C)])
    # a GPU faults, the driver is upgraded under NVIDIA's spec, a spec is damaged, a Kubernetes release is stuck
    node.set_hardware(gpus=sick(DEFAULT_GPUS, 0, xids=[79]), driver=driver(version="590.44.01", files=[LIBCUDA_NEW]))
    pods(node, GPU_C)
    node.write("/etc/cdi/bcd-a1.json", b'{"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devi')
    node.run(2, [hold("a1", GPU_B)])
    set_since(node, "k1", 6 * 60)
    node.run(2, [hold("a1", GPU_B)])
    node.write("/var/lib/bcd/releasing.json", b"{ not json")  # KubernetesReleasesUnreadable, raised and cleared
    node.run(3, [hold("a1", GPU_B)])
    set_vendor_version(node, "1.9.0")  # VendorSpecUnsupported
    node.run(3, [hold("a1", GPU_B)])
    # all of it fixed
    set_vendor_version(node, "0.8.0")
    vendor = node.read("/var/run/cdi/nvidia.yaml")
    node.write("/var/run/cdi/nvidia.yaml", vendor.replace(b"580.65.06", b"590.44.01"))
    node.set_hardware(gpus=DEFAULT_GPUS)
    pods(node)
    node.run(4, [hold("a1", GPU_B)])
    events = journaled(node)
    types = set(e["type"] for e in events)
    raised = set(t for t in CONDITION_TYPES if t in types)
    assert raised >= {"GPUUnhealthy", "VendorSpecStale", "VendorSpecUnsupported", "KubernetesReleaseStuck",
                      "KubernetesReleasesUnreadable", "HoldSpecDamaged"}, types
    assert {"GPUUnhealthyCleared", "VendorSpecStaleCleared", "KubernetesReleasesUnreadableCleared"} <= types, types
    assert_all_pass(events)


def journal_takes_recovery_steps():
    """Whether state/events.py journals a step of a GPU's recovery (a body-typed signed event) yet."""
    with tempfile.TemporaryDirectory() as directory:
        key = events_lib.NodeKey.load_or_create(os.path.join(directory, "node.key"))
        try:
            Journal(directory).append_many([("GPUReset", dict(RESET["body"]), key)], seal_with=key)
        except events_lib.EventsError:
            return False
    return True


@pytest.mark.skipif(not journal_takes_recovery_steps(), reason="state/events.py does not journal recovery steps yet")
def test_every_step_of_a_gpu_recovery_a_node_journals_passes(capsys, make_node):
    """bcd.devices.maintenance and bcd.devices.gpu_reset on fakehw nodes: one GPU reset back to health and put back
    in service, one a reset does not help (GPUResetIneffective)."""
    node = make_node(vendor="mig")
    gpus = copy.deepcopy(DEFAULT_GPUS)
    gpus[1]["health"] = {"retired_pages_pending": True, "xids": [48]}
    gpus[2]["health"] = {"row_remap_failure": True, "reset_clears": False}
    node.set_hardware(gpus=gpus)
    node.run(1, [])
    service(capsys, node, gpus=[GPU_B, GPU_C], reason="unhealthy, being reset")
    reset(capsys, node, GPU_B, GPU_C)
    service(capsys, node, gpus=[GPU_B], state="absent")
    node.run(1, [])
    events = journaled(node)
    types = set(e["type"] for e in events)
    assert {"GPUMaintenanceStarted", "GPUReset", "GPUMaintenanceEnded", "GPUResetIneffective"} <= types, types
    assert_all_pass(events)


def test_a_message_quoting_a_pattern_is_refused_for_its_curly_brackets():
    """What a node's refusal said before it said its patterns in words (the test below): the gateway refused it, and
    the node's delivery stalled on it."""
    assert grammar.check_event(with_value(FAILED, ("body", "message"),
                                          "allocation_id: 'alloc-01/../x' does not match ^[A-Za-z0-9_]{1,80}$")) == (
        "body.message: holds U+007B at character 60; a message holds printable characters only, and no curly bracket "
        "(a template delimiter)")


def test_invalid_assignments_a_node_reports_pass(node):
    """The node says its patterns in words, quotes what it was sent without a curly bracket or a control character,
    and reports an entry whose allocation id is not one under its position (the id sent is in the message)."""
    node.run(1, [hold("alloc-01/../x", GPU_A), hold("a_env", GPU_B, env=["not a pair"]),
                 {"reservation_id": "rsv", "binding": "BINDING_HOLD", "devices": [{"id": GPU_C}]}])  # devices[2]
    events = journaled(node)
    assert sorted(e["body"]["allocation_id"] for e in events) == ["a_env", "devices[0]", "devices[2]"]
    assert [e["body"]["message"] for e in events if e["body"]["allocation_id"] == "devices[0]"] == [
        "allocation_id: 'alloc-01/../x' is not an allocation id (1 to 80 letters, digits and underscores)"]
    assert_all_pass(events)


def test_a_refusal_quoting_a_lone_surrogate_is_journaled(node):
    """A lone surrogate (JSON's "\\ud800") in an allocation id, a binding or a device class: the refusals quote it
    escaped, so the journal (UTF-8) takes them. Quoted raw, each failed the whole pass writing its event."""
    result = node.run(1, [hold("\ud800", GPU_A), hold("a1", GPU_A, binding="X\ud800"),
                          hold("a2", GPU_B, device_class="\ud800")])
    assert [(f.allocation_id, f.message) for f in result.plan.failures] == [
        ("devices[0]", "allocation_id: '\\ud800' is not an allocation id (1 to 80 letters, digits and underscores)"),
        ("a1", "binding X\\ud800 is not supported"), ("a2", "device class \\ud800 cannot be held")]
    assert_all_pass(journaled(node))


# Text a control plane (or anyone who can write its input) may send: any characters, and those the grammar refuses
# or that look like what the node itself writes.
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["{{ lookup('pipe', 'id') }}", "{%", "}}", "\\", "'", '"', "\x00", "\n", "\r\n", "\x1b[2J",
                     "\x7f", "\x85", "\u2028", "\u202e", "\ufeff", "\U000e0001", "\ud800", "devices[0]", "a" * 300,
                     "alloc-01/../x", "A=b", "LD_PRELOAD=/x.so", "0-3", "GPU-{{x}}"]),
    st.builds("{}{}{}".format, st.text(max_size=8), st.sampled_from(["{", "}", "{{", "\n", "\u202e", "\\", "'"]),
              st.text(max_size=8)))
HOSTILE = st.one_of(HOSTILE_TEXT, st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.lists(HOSTILE_TEXT, max_size=2),
                    st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=2))
HOSTILE_KEY = HOSTILE_TEXT  # the input arrives as JSON (the module's arguments, the stored input): its keys are text


def hostile_assignment(index):
    """An entry with each field either as a good hold writes it or hostile: an allocation id, a reservation id, a
    binding, device ids and classes, limits (known and unknown fields), env lines and mappings, an unknown field."""
    def build(draw):
        entry = hold("alloc_%d" % index, GPU_A)
        fields = draw(st.sets(st.sampled_from(["allocation_id", "reservation_id", "binding", "devices", "limits", "env",
                                               "unknown"]), min_size=1))
        if "allocation_id" in fields:
            entry["allocation_id"] = draw(HOSTILE)
        if "reservation_id" in fields:
            entry["reservation_id"] = draw(HOSTILE)
        if "binding" in fields:
            entry["binding"] = draw(st.one_of(st.sampled_from(["BINDING_HOLD", "BINDING_KUBERNETES", "BINDING_INSTANCE",
                                                               "HOLD"]), HOSTILE))
        if "devices" in fields:
            entry["devices"] = draw(st.one_of(HOSTILE, st.lists(st.one_of(HOSTILE, st.fixed_dictionaries(
                {"id": st.one_of(HOSTILE, st.sampled_from([GPU_B, GPU_C + "/gi1/ci0", GPU_B + "/s1"])),
                 "device_class": st.one_of(HOSTILE, st.sampled_from(["gpu", "gpu.mig", "gpu.slot", ""]))})),
                min_size=1, max_size=3)))
        if "limits" in fields:
            entry["limits"] = draw(st.one_of(HOSTILE, st.dictionaries(st.one_of(st.sampled_from(
                ["cpus", "mems", "cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi"]), HOSTILE_KEY),
                HOSTILE, max_size=3)))
        if "env" in fields:
            entry["env"] = draw(st.one_of(
                HOSTILE, st.lists(st.one_of(HOSTILE, st.builds("{}={}".format, HOSTILE_TEXT, HOSTILE_TEXT),
                                            st.builds("TEAM={}".format, HOSTILE_TEXT)), max_size=3),
                st.dictionaries(HOSTILE_KEY, HOSTILE, max_size=3)))
        if "unknown" in fields:
            entry[draw(HOSTILE_KEY)] = draw(HOSTILE)
        return entry
    return st.composite(build)()


@settings(max_examples=100, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_refusal_of_hostile_assignments_a_node_journals_passes(make_node, data):
    """Real passes on a fakehw node of entries holding anything in their fields (and a VM whose instance id is
    anything, and a GPU in maintenance for any reason, both of which an overlap names): every refusal the node
    journals fits the grammar, so a gateway hands it on and the node's delivery goes on past it."""
    node = make_node(vendor="mig")
    entries = [data.draw(hostile_assignment(index), label="devices[%d]" % index)
               for index in range(data.draw(st.integers(min_value=1, max_value=4), label="entries"))]
    instance = data.draw(HOSTILE_TEXT, label="instance_id")
    reason = data.draw(HOSTILE_TEXT, label="maintenance reason")  # the file is the account's to write: anything
    node.write("/var/lib/bcd/maintenance.json", json.dumps({GPU_B: {"reason": reason, "since": 1}}).encode())
    result = node.run(1, entries + [hold("a_vm", GPU_C), hold("a_maintenance", GPU_B)],
                      instances=[{"instance_id": instance, "gpus": [GPU_C]}])
    assert ("a_vm", "overlap") in refused(result)
    events = journaled(node)
    failed = [e for e in events if e["type"] == "AllocationFailed"]
    assert len(failed) == len(result.plan.failures), (failed, result.plan.failures)
    assert_all_pass(events)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_event_of_generated_passes_passes(make_node, data):
    """Passes of generated assignments (ids of the collection's grammar, any atom of the node or none of it, limits
    or none, each pass a new generation with some of the last one's holds kept): what the node journals passes."""
    node = make_node(vendor="mig")
    atoms = [GPU_A, GPU_B, GPU_C, GPU_A + "/gi1/ci0", GPU_A + "/gi2/ci0", GPU_B + "/s0", GPU_B + "/s1", GPU_C + "/s2",
             "GPU-00000000-dead-4000-8000-000000000000", GPU_C + "/gi7/ci0"]
    allocation_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                             min_size=1, max_size=80)
    assignment = st.builds(
        lambda allocation_id, devices, limited: hold(allocation_id, *devices,
                                                     **({"limits": {"cpus": "0-1", "cpu_millis": 500}} if limited else {})),
        allocation_ids, st.lists(st.sampled_from(atoms), min_size=1, max_size=3), st.booleans())
    for generation in range(1, data.draw(st.integers(min_value=2, max_value=4), label="passes") + 1):
        node.run(generation, data.draw(st.lists(assignment, min_size=1, max_size=5), label="generation %d" % generation))
    events = journaled(node)
    assert events
    assert_all_pass(events)


def test_a_node_id_becomes_a_file_name_safely():
    """What passes as a node id is a host name: no slash, no dot-dot, no leading dot, at most 253 characters."""
    for node in ("node-a", "gpu-17.rack-3.example.org", "A" * 63):
        assert grammar.node_id_error(node) is None
    for node in ("", ".", "..", "../x", "a/b", ".hidden", "a..b", "a" * 64, "a.", "x\n", "\u0430"):  # Cyrillic a
        assert grammar.node_id_error(node) is not None, node
    assert grammar.node_of(json.loads(json.dumps(BOUND))) == "node-a"
    assert grammar.node_of({"body": {"node_id": "../x"}}) is None

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whole passes on a fakehw node in a directory: the files a user finds on the
node, the events the control plane gets, check mode, idempotence, retryable
write failures, crashes between steps, and hostile input."""

from __future__ import annotations

import errno
import gc
import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import bind as _bind, keep as _keep
from ansible_collections.bcd.devices.plugins.module_utils.state import events as _events
from ansible_collections.bcd.devices.plugins.module_utils.entry import converge as _converge
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import PassError
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, verify_report
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import LockTimeout, PassLock
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter

from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, MIG_A1, vendor_text

GPU_GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"
MIG = GPU_A + "/gi1/ci0"


def journal(node):
    return Journal(node.state()).unacked()


def reported(node, event_type, allocation_id, generation=None):
    """How many times the journal reported this event for this allocation (and generation)."""
    return sum(1 for e in journal(node) if e["type"] == event_type and e["body"]["allocation_id"] == allocation_id
               and (generation is None or e["body"]["generation"] == generation))


def plan_of(result):
    return [action.to_dict() for action in result.plan.actions]


def contents(node):
    """Every path under the node's directory with its mode and content (not its mtime), but the stamp
    every real pass leaves of when it ran (``last-pass.json``, read by ``bcd-holds metrics``)."""
    return dict((path, (mode, content)) for path, (mode, _mtime, content) in node.listing().items()
                if not path.endswith("/var/lib/bcd/last-pass.json"))


def holds_on_disk(node):
    names = sorted(os.listdir(node.path("/etc/cdi"))) if node.exists("/etc/cdi") else []
    return [n for n in names if n.startswith("bcd-")]


# --- what a bind leaves on the node ---------------------------------------------------------------


def test_a_bind_writes_the_spec_and_env_file_and_reports_it(node):
    old_umask = os.umask(0o077)  # a strict umask must not make the spec unreadable to runtimes
    try:
        result = node.run(42, [hold("alloc_01jz8k2v", GPU_A, env=["TEAM=vision"])])
    finally:
        os.umask(old_umask)
    assert result.section == {"state": "CONVERGED", "generation": 42, "observed_generation": 42, "message": ""}
    assert result.changed is True
    spec = json.loads(node.read("/etc/cdi/bcd-alloc_01jz8k2v.json"))
    assert spec["kind"] == "bcd.dev/gpu"
    assert spec["devices"][0]["name"] == GPU_A
    assert spec["devices"][0]["containerEdits"]["deviceNodes"]  # NVIDIA's edits for the GPU
    assert node.read("/run/bcd/allocations/alloc_01jz8k2v.env") == (
        "BCD_ALLOCATION_ID=alloc_01jz8k2v\nBCD_RESERVATION_ID=rsv_alloc_01jz8k2v\n"
        "NVIDIA_VISIBLE_DEVICES=%s\nTEAM=vision\n" % GPU_A).encode()
    assert node.mode("/etc/cdi/bcd-alloc_01jz8k2v.json") == 0o644
    assert node.mode("/run/bcd/allocations/alloc_01jz8k2v.env") == 0o644
    for name in os.listdir(node.state()):
        assert node.mode(node.state_dir + "/" + name) == 0o600, name
    assert {"events.jsonl", "node.key"} <= set(os.listdir(node.state()))
    assert node.mode(node.state_dir) == 0o700
    (event,) = result.events
    assert event["type"] == "AllocationBound"
    assert event["body"] == {
        "node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
        "allocation_id": "alloc_01jz8k2v", "generation": 42, "device_ids": [GPU_A],
        "cdi_devices": ["bcd.dev/gpu=" + GPU_A], "cdi_spec_path": "/etc/cdi/bcd-alloc_01jz8k2v.json",
        "env_file": "/run/bcd/allocations/alloc_01jz8k2v.env"}
    assert result.events == journal(node)  # journaled before it is returned


def test_a_real_pass_keeps_its_input_for_the_timers_and_check_mode_does_not(node):
    devices = [hold("a1", GPU_A)]
    node.run(3, devices, check_mode=True)
    assert not node.exists(node.state_dir + "/nodespec.json")
    node.run(3, devices, instances=[{"instance_id": "inst_1", "gpus": [GPU_C]}])
    stored = json.loads(node.read(node.state_dir + "/nodespec.json"))
    assert stored["generation"] == 3
    assert stored["devices"] == devices
    assert stored["instances"] == [{"instance_id": "inst_1", "gpus": [GPU_C]}]
    assert node.mode(node.state_dir + "/nodespec.json") == 0o600


def test_writes_go_through_temporary_names_that_runtimes_do_not_load(node, monkeypatch):
    renames = []
    real_rename = os.rename

    def recording_rename(src, dst, *args, **kwargs):
        renames.append((os.fspath(src), os.fspath(dst)))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", recording_rename)
    first = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)])
    assert first.section["state"] == "CONVERGED"
    node.write("/run/bcd/allocations/a1.env", "stale")
    node.run(2, [hold("a2", GPU_B), hold("a1", GPU_A)])
    specs = [(s, d) for s, d in renames if d.endswith(".json") and "/etc/cdi/" in d]
    assert len(specs) == 2
    for src, dst in renames:
        assert not src.endswith((".json", ".yaml", ".yml")), src
        assert os.path.dirname(src) == os.path.dirname(dst)  # a rename within the directory: atomic
    assert [n for n in os.listdir(node.path("/etc/cdi")) if "tmp" in n] == []  # no temporary file left


def test_a_pass_collects_less_often_and_puts_the_collector_back(node, monkeypatch):
    # the root helper's process runs pass after pass: a pass's collector setting must not outlive it, even
    # when the pass fails
    seen = []
    monkeypatch.setattr(_converge, "plan_pass", lambda *args, **kwargs: seen.append(gc.get_threshold()) or 1 / 0)
    before = gc.get_threshold()
    with pytest.raises(ZeroDivisionError):
        node.run(1, [hold("a1", GPU_A)])
    assert seen and seen[0][0] >= 20000 and gc.get_threshold() == before


def test_a_second_run_changes_nothing_and_reports_nothing(node):
    devices = [hold("a1", GPU_A), hold("a2", GPU_B + "/s1"), hold("a3", GPU_GONE)]
    first = node.run(3, devices)
    assert first.changed
    before = contents(node)
    second = node.run(3, devices)
    assert second.changed is False
    assert second.plan.actions == []
    assert [e["seq"] for e in second.events] == [e["seq"] for e in first.events]
    assert second.section == first.section
    # nothing on the node changed: same files, same modes, same contents
    assert contents(node) == before


def test_events_are_signed_with_the_node_key_and_their_seq_grows(node):
    node.run(1, [hold("a1", GPU_A), hold("a2", GPU_GONE)])
    node.run(2, [hold("a3", GPU_B)])
    events = journal(node)
    assert [(e["seq"], e["type"], e["body"]["allocation_id"]) for e in events] == [
        (1, "AllocationBound", "a1"), (2, "AllocationFailed", "a2"),
        (3, "AllocationReleased", "a1"), (4, "AllocationBound", "a3")]
    key = NodeState(node.state()).public_key()
    assert key
    attested = [e for e in events if e["type"] != "AllocationFailed"]
    assert attested and all(verify_report(e, key) for e in attested)
    failed = [e for e in events if e["type"] == "AllocationFailed"]
    assert failed and all("signature" not in e for e in failed)
    assert failed[0]["body"] == {"node_id": "node-a", "allocation_id": "a2", "generation": 1,
                                 "reason": "device-missing", "message": "%s not present" % GPU_GONE}
    tampered = json.loads(json.dumps(attested[0]))
    tampered["body"]["device_ids"] = [GPU_B]
    assert not verify_report(tampered, key)


def test_a_release_removes_the_files_and_reports_it(node):
    node.run(1, [hold("a1", GPU_A, GPU_B)])
    result = node.run(2, [])
    assert [a["action"] for a in plan_of(result)] == ["release"]
    assert holds_on_disk(node) == []
    assert not node.exists("/run/bcd/allocations/a1.env")
    released = [e for e in result.events if e["type"] == "AllocationReleased"]
    assert len(released) == 1
    assert released[0]["body"] == {"node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
                                   "allocation_id": "a1", "generation": 2, "device_ids": [GPU_A, GPU_B]}
    assert verify_report(released[0], NodeState(node.state()).public_key())
    assert result.section["state"] == "CONVERGED"


def test_a_gpu_moves_between_allocations_in_one_generation(node):
    node.run(1, [hold("a1", GPU_A)])
    result = node.run(2, [hold("a2", GPU_A)])
    assert [(a["action"], a["allocation_id"]) for a in plan_of(result)] == [("release", "a1"), ("bind", "a2")]
    assert holds_on_disk(node) == ["bcd-a2.json"]
    assert result.section["state"] == "CONVERGED"


def test_a_missing_env_file_is_written_again_without_a_new_event(node):
    node.run(1, [hold("a1", GPU_A)])
    content = node.read("/run/bcd/allocations/a1.env")
    os.unlink(node.path("/run/bcd/allocations/a1.env"))  # /run is tmpfs: a reboot empties it
    result = node.run(1, [hold("a1", GPU_A)])
    assert result.changed is True
    assert [a["action"] for a in plan_of(result)] == ["write-env"]
    assert node.read("/run/bcd/allocations/a1.env") == content
    assert reported(node, "AllocationBound", "a1") == 1


def test_a_new_vendor_spec_re_renders_kept_holds_without_a_new_event(node):
    node.run(1, [hold("a1", GPU_A)])
    before = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    # a driver upgrade: NVIDIA's spec now names other libraries and device nodes
    node.write("/var/run/cdi/nvidia.yaml", vendor_text("mig").replace("580.65.06", "580.99.01")
               .replace("/dev/nvidia3", "/dev/nvidia9").replace("/dev/nvidia0", "/dev/nvidia9"))
    result = node.run(1, [hold("a1", GPU_A)])
    assert [a["action"] for a in plan_of(result)] == ["rerender"]
    after = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    assert after != before
    assert "580.99.01" in json.dumps(after) and "580.65.06" not in json.dumps(after)
    assert after["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia9"}]
    assert after["annotations"] == before["annotations"]
    assert reported(node, "AllocationBound", "a1") == 1
    assert node.run(1, [hold("a1", GPU_A)]).changed is False


def test_a_gpu_the_vendor_spec_does_not_name_is_bound_with_a_warning(node):
    # the vendor spec (tests/data/nvidia-cdi/constructed_mig_nvidia.yaml) knows GPU_A and GPU_B only
    result = node.run(1, [hold("a1", GPU_C)])
    assert result.section["state"] == "CONVERGED"
    assert any(GPU_C in warning for warning in result.warnings)
    spec = json.loads(node.read("/etc/cdi/bcd-a1.json"))
    assert "NVIDIA_VISIBLE_DEVICES=%s" % GPU_C in spec["containerEdits"]["env"]


def test_a_recreated_mig_instance_re_renders_its_hold_without_a_new_event(node):
    node.run(1, [hold("a1", MIG)])
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % MIG_A1).encode() in node.read("/run/bcd/allocations/a1.env")
    # the mig-layout unit recreated gi1/ci0: same place, a new MIG UUID
    new_uuid = "MIG-00000000-1111-5222-8333-444444444444"
    node.set_hardware(gpus=[{"uuid": GPU_A, "index": 0, "minor": 0, "mig": [{"gi": 1, "ci": 0, "uuid": new_uuid}]}])
    result = node.run(1, [hold("a1", MIG)])
    assert [a["action"] for a in plan_of(result)] == ["rerender", "write-env"]
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % new_uuid) in json.loads(node.read("/etc/cdi/bcd-a1.json"))[
        "containerEdits"]["env"]
    assert ("NVIDIA_VISIBLE_DEVICES=%s\n" % new_uuid).encode() in node.read("/run/bcd/allocations/a1.env")
    assert reported(node, "AllocationBound", "a1") == 1


# --- check mode ---------------------------------------------------------------------------------------


def scenario_first_generation(node):
    node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B + "/s1"), hold("a3", GPU_C)])
    os.unlink(node.path("/run/bcd/allocations/a3.env"))


SECOND_GENERATION = [
    hold("a2", GPU_B + "/s1", reservation_id="rsv_changed"),  # re-rendered
    hold("a3", GPU_C),  # its env file is missing
    hold("a4", GPU_A),  # takes the GPU a1 releases
    hold("a5", GPU_GONE),  # refused
    hold("a6", GPU_B),  # overlaps a2's slot
]


def test_check_mode_on_a_fresh_node_writes_nothing_at_all(node):
    before = node.listing()
    result = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_GONE)], check_mode=True)
    assert node.listing() == before
    assert not node.exists(node.state_dir)  # not even the state directory, the key or a lock
    assert [(a["action"], a["allocation_id"]) for a in plan_of(result)] == [("bind", "a1"), ("refuse", "a2")]
    assert result.changed is True
    assert result.events == []


def test_check_mode_shows_the_plan_the_real_run_then_performs(node):
    scenario_first_generation(node)
    before = node.listing()
    checked = node.run(2, SECOND_GENERATION, check_mode=True)
    assert node.listing() == before
    real = node.run(2, SECOND_GENERATION)
    assert plan_of(checked) == plan_of(real)
    assert [(a["action"], a["allocation_id"]) for a in plan_of(real)] == [
        ("release", "a1"), ("rerender", "a2"), ("write-env", "a2"), ("write-env", "a3"), ("bind", "a4"),
        ("refuse", "a5"), ("refuse", "a6")]
    assert checked.holds == real.holds
    assert checked.to_dict()["failures"] == real.to_dict()["failures"]
    assert checked.section["state"] == real.section["state"] == "FAILED"
    # and the real run did what the plan said
    assert holds_on_disk(node) == ["bcd-a2.json", "bcd-a3.json", "bcd-a4.json"]
    assert node.exists("/run/bcd/allocations/a3.env")


# --- failures and the section ------------------------------------------------------------------------------


def test_refusals_fail_the_section_and_the_others_are_bound(node):
    result = node.run(4, [hold("a1", GPU_A), hold("a2", GPU_A), hold("a3", GPU_GONE), hold("a4", GPU_B)])
    assert result.section == {
        "state": "FAILED", "generation": 4, "observed_generation": 4,
        "message": "a2: %s is assigned to a1; a3: %s not present" % (GPU_A, GPU_GONE)}
    assert result.to_dict()["failures"] == [
        {"allocation_id": "a2", "generation": 4, "reason": "overlap", "message": "%s is assigned to a1" % GPU_A},
        {"allocation_id": "a3", "generation": 4, "reason": "device-missing",
         "message": "%s not present" % GPU_GONE}]
    assert holds_on_disk(node) == ["bcd-a1.json", "bcd-a4.json"]


def test_allocation_failed_once_per_allocation_and_generation(node):
    devices = [hold("a1", GPU_GONE)]
    node.run(1, devices)
    again = node.run(1, devices)
    assert again.changed is False
    assert again.section["state"] == "FAILED"  # still failed, reported once
    assert reported(node, "AllocationFailed", "a1", 1) == 1
    later = node.run(2, devices)
    assert later.changed is True
    assert reported(node, "AllocationFailed", "a1", 2) == 1
    assert reported(node, "AllocationFailed", "a1") == 2
    assert later.section["observed_generation"] == 2


def test_an_allocation_sent_twice_is_reported_once(node):
    node.run(1, [hold("a1", GPU_A, env=["NOT A LINE"]), hold("a1", GPU_B)])
    assert reported(node, "AllocationFailed", "a1", 1) == 1


def test_a_stale_generation_is_refused(node):
    node.run(5, [hold("a1", GPU_A)])
    before = node.listing()
    with pytest.raises(PassError) as caught:
        node.run(4, [])
    assert "4" in str(caught.value) and "5" in str(caught.value)
    assert {k: v for k, v in node.listing().items() if not k.endswith("lock")} == \
        {k: v for k, v in before.items() if not k.endswith("lock")}
    assert holds_on_disk(node) == ["bcd-a1.json"]


def test_a_pass_waits_for_another_and_gives_up_clearly(node):
    node.run(1, [])
    with PassLock(node.state()):
        with pytest.raises(LockTimeout) as caught:
            node.run(2, [hold("a1", GPU_A)], lock_timeout=0.2)
    assert "lock" in str(caught.value)
    assert holds_on_disk(node) == []


# --- retryable write failures --------------------------------------------------------------------------------


def test_a_spec_directory_that_cannot_be_written_leaves_the_pass_progressing(node):
    node.run(1, [hold("a1", GPU_B)])
    # /etc/cdi replaced by a file: as root, chmod would not stop a write
    os.rename(node.path("/etc/cdi"), node.path("/etc/cdi.saved"))
    node.write("/etc/cdi", "not a directory")
    result = node.run(2, [hold("a2", GPU_A)])
    assert result.section["state"] == "PROGRESSING"
    assert result.section["generation"] == 2
    assert result.section["observed_generation"] == 1  # not advancing
    assert "a2" in result.section["message"]
    assert reported(node, "AllocationBound", "a2") == 0
    os.unlink(node.path("/etc/cdi"))
    os.rename(node.path("/etc/cdi.saved"), node.path("/etc/cdi"))
    done = node.run(2, [hold("a2", GPU_A)])
    assert done.section == {"state": "CONVERGED", "generation": 2, "observed_generation": 2, "message": ""}
    assert holds_on_disk(node) == ["bcd-a2.json"]
    assert reported(node, "AllocationBound", "a2") == 1
    assert reported(node, "AllocationReleased", "a1") == 1


def test_an_env_directory_replaced_by_a_file_leaves_the_pass_progressing(node):
    node.run(1, [])
    os.makedirs(node.path("/run/bcd"), exist_ok=True)
    node.write("/run/bcd/allocations", "not a directory")
    result = node.run(2, [hold("a1", GPU_A)])
    assert result.section["state"] == "PROGRESSING"
    assert result.section["observed_generation"] == 1
    assert reported(node, "AllocationBound", "a1") == 0
    os.unlink(node.path("/run/bcd/allocations"))
    done = node.run(2, [hold("a1", GPU_A)])
    assert done.section["state"] == "CONVERGED"
    assert reported(node, "AllocationBound", "a1") == 1
    assert node.exists("/run/bcd/allocations/a1.env")


def test_a_full_disk_during_a_bind_reports_nothing_until_every_file_is_in_place(node, monkeypatch):
    real_write = DirectWriter.write_node_file

    def no_space_for_env(self, kind, allocation_id, content, hold=None, path=None):
        if kind == "allocation-env" and allocation_id == "a2":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, kind, allocation_id, content, hold, path=path)

    monkeypatch.setattr(DirectWriter, "write_node_file", no_space_for_env)
    result = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)])
    assert result.section["state"] == "PROGRESSING"
    assert result.section["observed_generation"] is None
    assert "No space left on device" in result.section["message"]
    assert reported(node, "AllocationBound", "a1") == 1  # the other hold is bound and reported
    assert reported(node, "AllocationBound", "a2") == 0
    assert not node.exists("/etc/cdi/bcd-a2.json")  # a hold is never live without its env file
    monkeypatch.setattr(DirectWriter, "write_node_file", real_write)
    done = node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)])
    assert done.section["state"] == "CONVERGED"
    # the env file comes before the spec, so the failed bind left no hold: the next pass binds it
    assert [(a["action"], a["allocation_id"]) for a in plan_of(done)] == [("bind", "a2")]
    assert reported(node, "AllocationBound", "a2") == 1
    assert node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)]).changed is False


# --- crashes between steps ---------------------------------------------------------------------------------------

GEN1 = [hold("a1", GPU_A), hold("a2", GPU_B)]
GEN2 = [hold("a2", GPU_B), hold("a3", GPU_A), hold("a4", GPU_GONE)]


def assert_reported_exactly_once(node):
    assert reported(node, "AllocationBound", "a1") == 1
    assert reported(node, "AllocationBound", "a2") == 1
    assert reported(node, "AllocationReleased", "a1") == 1
    assert reported(node, "AllocationBound", "a3") == 1
    assert reported(node, "AllocationFailed", "a4", 2) == 1
    assert holds_on_disk(node) == ["bcd-a2.json", "bcd-a3.json"]
    assert sorted(os.listdir(node.path("/run/bcd/allocations"))) == ["a2.env", "a3.env"]


def crash_once(monkeypatch, owner, name, at, after=False, exc=KeyboardInterrupt):
    """Make ``owner.name`` raise ``exc`` on its ``at``-th call (before or after doing its work), once."""
    real = getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] - 1 == at and not after:
            raise exc()
        result = real(*args, **kwargs)
        if calls[0] - 1 == at and after:
            raise exc()
        return result

    monkeypatch.setattr(owner, name, wrapper)
    return calls


# A pass journals its reports (release a1, bind a3, refuse a4) with one append, after its files.

@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_a_crash_before_journaling_the_passs_events_loses_nothing(node, monkeypatch, exc):
    node.run(1, GEN1)
    crash_once(monkeypatch, _events.Journal, "append_many", 0, after=False, exc=exc)
    with pytest.raises(exc):
        node.run(2, GEN2)
    monkeypatch.undo()
    assert [e["type"] for e in journal(node)] == ["AllocationBound", "AllocationBound"]  # nothing of GEN2 yet
    result = node.run(2, GEN2)
    assert result.section["state"] == "FAILED" and result.section["observed_generation"] == 2
    assert_reported_exactly_once(node)
    assert node.run(2, GEN2).changed is False


def test_a_crash_right_after_journaling_the_passs_events_does_not_report_them_twice(node, monkeypatch):
    node.run(1, GEN1)
    crash_once(monkeypatch, _events.Journal, "append_many", 0, after=True)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, GEN2)
    monkeypatch.undo()
    node.run(2, GEN2)
    assert_reported_exactly_once(node)


@pytest.mark.parametrize("kept", [0, 1, 2], ids=["none-whole", "one-whole", "two-whole"])
def test_a_crash_in_the_middle_of_the_journal_write_reports_each_event_once(node, monkeypatch, kept):
    # The append is one write of three lines; a crash may leave some whole lines and a torn one.
    node.run(1, GEN1)
    real = _events.Journal._append_line

    def torn(self, parsed, data):
        lines = data.split(b"\n")
        real(self, parsed, b"".join(line + b"\n" for line in lines[:kept]) + lines[kept][:7])
        raise KeyboardInterrupt()

    monkeypatch.setattr(_events.Journal, "_append_line", torn)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, GEN2)
    monkeypatch.undo()
    node.run(2, GEN2)
    assert_reported_exactly_once(node)
    assert node.run(2, GEN2).changed is False


def test_an_event_journaled_before_a_crash_and_then_acknowledged_is_not_reported_again(node, monkeypatch):
    # The control plane may collect and acknowledge the journal (bcd.devices.events) between the
    # crashed pass and the next one; what it acknowledged was reported and must not come again.
    node.run(1, GEN1)
    crash_once(monkeypatch, _events.Journal, "append_many", 0, after=True)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, GEN2)
    monkeypatch.undo()
    seen = journal(node)
    NodeState(node.state()).list_and_acknowledge(ack_through=seen[-1]["seq"])
    result = node.run(2, GEN2)
    delivered = seen + result.events
    for event_type, allocation_id in (("AllocationBound", "a1"), ("AllocationBound", "a2"),
                                      ("AllocationReleased", "a1"), ("AllocationBound", "a3"),
                                      ("AllocationFailed", "a4")):
        assert sum(1 for e in delivered if e["type"] == event_type
                   and e["body"]["allocation_id"] == allocation_id) == 1, (event_type, allocation_id)


def test_a_pass_journals_its_events_with_one_append_and_saves_the_ledger_at_most_twice(node, monkeypatch):
    node.run(1, GEN1)
    appends = crash_once(monkeypatch, _events.Journal, "_append_line", -1)
    saves = crash_once(monkeypatch, NodeState, "_write", -1)
    node.run(2, GEN2 + [hold("a%d" % i, "%s/s%d" % (GPU_B, i)) for i in range(5, 40)])
    assert appends[0] == 1
    # the releases recorded before anything is removed, then the reports: the ledger and nodespec.json,
    # and the pass's stamp (last-pass.json)
    assert saves[0] <= 4


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("at, after", [(0, False), (0, True), (1, False), (1, True)])
def test_a_crash_while_removing_a_released_holds_files(node, monkeypatch, at, after, exc):
    node.run(1, GEN1)
    crash_once(monkeypatch, DirectWriter, "remove_node_file", at, after=after, exc=exc)
    with pytest.raises(exc):
        node.run(2, GEN2)
    monkeypatch.undo()
    node.run(2, GEN2)
    assert_reported_exactly_once(node)


@pytest.mark.parametrize("at, after", [(0, False), (0, True), (1, False), (1, True)])
def test_a_crash_while_writing_a_new_holds_files(node, monkeypatch, at, after):
    node.run(1, GEN1)
    crash_once(monkeypatch, DirectWriter, "write_node_file", at, after=after)
    with pytest.raises(KeyboardInterrupt):
        node.run(2, GEN2)
    monkeypatch.undo()
    node.run(2, GEN2)
    assert_reported_exactly_once(node)


# --- VMs --------------------------------------------------------------------------------------------------------------


def test_a_gpu_a_running_vm_had_stays_its_own_until_the_vm_stops(make_node):
    node = make_node(vendor="mig", domains=[{"instance_id": "inst_1", "state": "running", "gpus": [GPU_C]}])
    first = node.run(1, [hold("a1", GPU_C)])
    assert [f.message for f in first.plan.failures] == ["%s is passed through to instance inst_1" % GPU_C]
    # the VM still runs; GPU_C is no longer in its spec, nor listed for it now
    node.set_hardware(domains=[{"instance_id": "inst_1", "state": "running", "gpus": []}])
    second = node.run(2, [hold("a1", GPU_C)], instances=[{"instance_id": "inst_1", "gpus": []}])
    assert [f.reason for f in second.plan.failures] == ["overlap"]
    node.set_hardware(domains=[])
    third = node.run(3, [hold("a1", GPU_C)])
    assert third.section["state"] == "CONVERGED"
    assert holds_on_disk(node) == ["bcd-a1.json"]


def test_a_gpu_in_an_instance_spec_is_refused(node):
    result = node.run(1, [hold("a1", MIG)], instances=[{"instance_id": "inst_9", "gpus": [GPU_A]}])
    assert result.to_dict()["failures"] == [{
        "allocation_id": "a1", "generation": 1, "reason": "overlap",
        "message": "%s is passed through to instance inst_9" % GPU_A}]


# --- hostile input -------------------------------------------------------------------------------------------------------


def test_hostile_assignments_are_refused_and_nothing_is_written_outside_root(node):
    devices = [
        hold("../../etc/passwd", GPU_A),
        {"allocation_id": "/etc/shadow", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]},
        hold("a_env", GPU_A, env=["A=1\nB=2"]),
        hold("a_nul", GPU_A, env=["A=\x00"]),
        hold("a_big", *(["%s/s%d" % (GPU_B, n) for n in range(5000)])),
        hold("a_types", GPU_A, devices="GPU-1"),
        hold("a_limits", GPU_A, limits=["0-3"]),
        hold("a_mem", GPU_A, limits={"memory_bytes": -1}),
        hold("a_cls", GPU_A, devices=[{"id": {"x": 1}, "device_class": "gpu"}]),
        42,
        None,
        "alloc",
        ["alloc"],
        hold("x" * 5000, GPU_A),
        hold("good", GPU_C),
    ]
    result = node.run(1, devices)
    reasons = dict((f.allocation_id, f.reason) for f in result.plan.failures)
    assert len(result.plan.failures) == len(devices) - 1
    assert set(reasons.values()) == {"invalid-assignment"}
    assert "good" not in reasons
    assert holds_on_disk(node) == ["bcd-good.json"]
    assert sorted(os.listdir(node.path("/run/bcd/allocations"))) == ["good.env"]
    # nothing outside root but the hardware file
    assert sorted(set(p.split(os.sep)[0] for p in node.listing())) == ["fakehw.json", "root"]
    assert not any("passwd" in p or "shadow" in p for p in node.listing())
    assert result.section["state"] == "FAILED"
    assert all(len(f.message) < 400 for f in result.plan.failures)


@pytest.mark.parametrize("allocation_id", ["alloc_1\n", "alloc_1\r\n"])
def test_an_allocation_id_with_a_line_break_names_no_file(node, allocation_id):
    result = node.run(1, [hold(allocation_id, GPU_A)])
    assert [f.reason for f in result.plan.failures] == ["invalid-assignment"]
    assert not any("\n" in p or "\r" in p for p in node.listing())
    assert holds_on_disk(node) == []


# --- a kept hold is not rendered again while nothing it is rendered from changed -------------------------------------

@pytest.fixture
def renders(monkeypatch):
    """Count the holds the planner renders (the kept holds' phase and the new holds')."""
    calls = []
    real = _keep.render_hold

    def counting(assignment, *args, **kwargs):
        calls.append(assignment.allocation_id)
        return real(assignment, *args, **kwargs)

    monkeypatch.setattr(_keep, "render_hold", counting)
    monkeypatch.setattr(_bind, "render_hold", counting)
    return calls


def test_a_pass_over_unchanged_holds_renders_none_of_them(node, renders):
    devices = [hold("a1", GPU_A), hold("a2", GPU_B + "/s1"), hold("k1", GPU_C, binding="BINDING_KUBERNETES")]
    node.run(1, devices)
    assert sorted(renders) == ["a1", "a2", "k1"]
    del renders[:]
    again = node.run(1, devices)
    assert again.changed is False and renders == []


@pytest.mark.parametrize("drift", ["spec edited", "env edited", "env gone", "vendor spec changed", "record forged"])
def test_a_kept_hold_is_rendered_again_when_its_files_or_inputs_changed(node, renders, drift):
    devices = [hold("a1", GPU_A), hold("a2", GPU_B)]
    node.run(1, devices)
    spec = node.read("/etc/cdi/bcd-a1.json")
    env = node.read("/run/bcd/allocations/a1.env")
    if drift == "spec edited":
        node.write("/etc/cdi/bcd-a1.json", spec.replace(b'"rsv_a1"', b'"rsv_evil"'))
    elif drift == "env edited":
        node.write("/run/bcd/allocations/a1.env", env + b"EXTRA=1\n")
    elif drift == "env gone":
        os.unlink(node.path("/run/bcd/allocations/a1.env"))
    elif drift == "vendor spec changed":
        path = node.path("/var/run/cdi/nvidia.yaml")
        with open(path, "a") as handle:
            handle.write("# regenerated\n")
    else:  # a record that claims what is on disk is current for other inputs
        ledger = json.loads(node.read("/var/lib/bcd/ledger.json"))
        ledger["renders"]["a1"]["key"] = "0" * 64
        node.write("/var/lib/bcd/ledger.json", json.dumps(ledger))
    del renders[:]
    result = node.run(1, devices)
    assert "a1" in renders
    assert node.read("/etc/cdi/bcd-a1.json") == spec and node.read("/run/bcd/allocations/a1.env") == env
    assert result.changed is (drift in ("spec edited", "env edited", "env gone"))
    del renders[:]
    assert node.run(1, devices).changed is False and renders == []


def test_a_note_the_render_made_is_said_again_on_every_pass(make_node, renders):
    node = make_node(vendor="mig")
    node.write("/var/run/cdi/nvidia.yaml", vendor_text("mig").replace(GPU_B, "GPU-not-this-node"))
    devices = [hold("a1", GPU_B)]
    note = "a1: the vendor spec /var/run/cdi/nvidia.yaml does not name %s; the device carries no vendor edits" % GPU_B
    assert note in node.run(1, devices).warnings
    del renders[:]
    again = node.run(1, devices)
    assert renders == [] and note in again.warnings


@pytest.mark.parametrize("plant", ["fifo", "sparse"])
def test_a_fifo_or_a_huge_file_in_a_holds_place_does_not_stop_a_pass(node, plant):
    """Found by make fuzz: reading the holds back waited forever on a FIFO named like a spec, and read a
    sparse terabyte whole. A FIFO is no hold; a huge file is a damaged one, set aside."""
    node.run(1, [hold("a1", GPU_B)])
    path = node.path("/etc/cdi/bcd-a1.json")
    os.unlink(path)
    if plant == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as handle:
            handle.truncate(1 << 40)

    result = node.run(2, [hold("a1", GPU_B)])

    assert result.section["state"] == "CONVERGED"
    assert json.loads(node.read("/etc/cdi/bcd-a1.json"))["annotations"]["bcd.dev/allocation-id"] == "a1"


def test_a_bind_fsyncs_each_directory_once_and_before_it_journals(node, monkeypatch):
    """Eight holds: sixteen files, each fsynced before its rename; /etc/cdi and the env directory fsynced once
    each (not once per file), and both before the journal's append that reports the binds."""
    calls = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.readlink("/proc/self/fd/%d" % fd))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "rename", lambda src, dst: (calls.append(("rename", src, dst)), real_rename(src, dst))[1])
    result = node.run(1, [hold("a%d" % i, "%s/s%d" % (GPU_B, i)) for i in range(8)])
    assert len(result.events) == 8
    cdi, env = node.path("/etc/cdi"), node.path("/run/bcd/allocations")
    syncs = [call[1] for call in calls if call[0] == "fsync"]
    assert syncs.count(cdi) == 1 and syncs.count(env) == 1
    holds = [call for call in calls if call[0] == "rename" and os.path.dirname(call[2]) in (cdi, env)]
    assert len(holds) == 16
    for call in holds:
        assert calls.index(("fsync", call[1])) < calls.index(call)
    journaled = syncs.index(node.state("events.jsonl"))
    assert syncs.index(cdi) < journaled and syncs.index(env) < journaled

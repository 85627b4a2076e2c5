# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's recovery on the node (issue 45): ``bcd.devices.gpu_reset`` resets only GPUs in maintenance that nothing
claims and reads their health again; ``bcd.devices.maintenance`` takes a recovery's lease so that two recoveries
never fight; every step is a signed event; a GPU a reset did not help raises ``GPUResetIneffective``; and a pass
raises ``GPUUnhealthy`` again for a GPU whose recovery stopped. Through the modules and real passes on fakehw
nodes (the playbook itself: tests/unit/extensions/test_rulebooks.py)."""

from __future__ import annotations

import copy
import json
import time

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.busy import reset_argv
from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import SIGNED_TYPES, TYPED_BODY_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.entry import busy as entry_busy
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import load_fakehw
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost, RealHost
from ansible_collections.bcd.devices.plugins.module_utils.state import events as journal_module
from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.modules import gpu_busy, gpu_reset
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_busy_and_maintenance import service
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call, info

ROW_REMAP = "row remapping failed (the GPU has no spare rows left)"
PAGES = "retired pages pending (reset the GPU)"
XID_48 = "Xid 48: double-bit ECC error (reset the GPU)"


def sick(node, index, **health):
    gpus = copy.deepcopy(DEFAULT_GPUS)
    gpus[index]["health"] = health
    node.set_hardware(gpus=gpus)


def reset(capsys, node, *gpus, check=False, diff=False, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return call(capsys, gpu_reset.main, dict(args, gpus=list(gpus)))


def health_of(capsys, node, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    return dict((g["uuid"], g) for g in call(capsys, gpu_busy.main, args)["gpus"])


def journal(node):
    """The node's journal, oldest first: ``[(seq, type, reason, message)]``; each event also checked signed."""
    key = NodeState(node.state()).public_key()
    found = []
    for line in (node.read("/var/lib/bcd/events.jsonl") or b"").splitlines():
        event = json.loads(line)
        if event["type"] in SIGNED_TYPES:
            assert verify_report(event, key), event  # signed by the node's key, the body naming its type
        body = event["body"]
        if event["type"] in TYPED_BODY_TYPES:  # a recovery's step or a GPU condition: the fields the gateway knows
            assert set(body) == {"type", "node_id", "boot_id", "generation", "device_ids", "reason", "message"}, body
            assert "{" not in body["message"] and "}" not in body["message"]
        found.append((event["seq"], event["type"], body.get("reason"), body.get("message")))
    return found


def records(node):
    return json.loads(node.read("/var/lib/bcd/maintenance.json") or b"{}")


# -- the reset -----------------------------------------------------------------------------------

def test_a_free_gpu_in_maintenance_is_reset_read_again_and_the_reset_is_journaled(capsys, node):
    sick(node, 1, retired_pages_pending=True, xids=[48])
    assert health_of(capsys, node)[GPU_B]["problems"] == [PAGES, XID_48]
    service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset")
    before = time.time()

    done = reset(capsys, node, GPU_B)

    assert done["changed"] is True and done.get("failed") is not True
    assert done["gpus"] == [{"uuid": GPU_B, "reset": True, "healthy": True, "problems": [], "error": None}]
    assert done["msg"] == "%s was reset and reads healthy" % GPU_B
    hw = load_fakehw(node.fakehw)  # the stand-in for the driver's reset: the faults are gone from the file
    assert [gpu.health for gpu in hw.inventory.gpus] == [(), (), ()]
    # the reset's time is recorded: XIDs logged before it no longer count; the GPU stays in maintenance
    assert before <= json.loads(node.read("/var/lib/bcd/health.json"))[GPU_B] <= time.time()
    assert records(node)[GPU_B]["reset"]["healthy"] is True
    entry = health_of(capsys, node)[GPU_B]
    assert entry["healthy"] is True and entry["claimed_by"][0]["kind"] == "maintenance"
    assert [(t, r) for _s, t, r, _m in journal(node)] == [
        ("GPUMaintenanceStarted", "MaintenanceStarted"), ("GPUReset", "ResetHealthy")]


def test_a_gpu_not_in_maintenance_or_busy_or_unknown_is_refused_and_nothing_is_reset(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A + "/gi1/ci0")])
    sick(node, 0, retired_pages_pending=True)  # after the hold took a part of it
    sick_hw = open(node.fakehw, "rb").read()
    refused = reset(capsys, node, GPU_A)
    assert refused.get("failed") is True and refused["msg"] == (
        "%s is not in maintenance: take it out of service first (bcd.devices.maintenance), so that no new hold takes "
        "it while it is reset; nothing was reset" % GPU_A)
    service(capsys, node, gpus=[GPU_A, GPU_C], reason="unhealthy, being reset")
    busy = reset(capsys, node, GPU_C, GPU_A)  # one busy GPU: neither is reset
    assert busy.get("failed") is True
    assert busy["msg"] == "%s is busy: MIG instance gi1/ci0 held by a1; nothing was reset" % GPU_A
    unknown = reset(capsys, node, "GPU-00000000-dead-4000-8000-000000000000")
    assert unknown["msg"] == "GPU-00000000-dead-4000-8000-000000000000 is not listed by the node's inventory; nothing was reset"
    assert reset(capsys, node, "nvidia0")["msg"] == "gpus[0]: must be a GPU UUID (GPU-...), not 'nvidia0'"
    assert open(node.fakehw, "rb").read() == sick_hw
    assert [t for _s, t, _r, _m in journal(node) if t == "GPUReset"] == []


def test_check_mode_and_diff_tell_what_a_reset_would_do_and_write_nothing(capsys, node):
    sick(node, 2, row_remap_failure=True)
    service(capsys, node, gpus=[GPU_C], reason="unhealthy, being reset")
    before = node.listing()
    planned = reset(capsys, node, GPU_C, check=True, diff=True)
    assert node.listing() == before
    assert planned["changed"] is True and planned["msg"] == "%s would be reset" % GPU_C
    assert planned["gpus"] == [{"uuid": GPU_C, "reset": False, "healthy": False, "problems": [ROW_REMAP], "error": None}]
    assert planned["diff"]["before"] == "%s: unhealthy: %s\n" % (GPU_C, ROW_REMAP)
    assert planned["diff"]["after"] == "%s: to be reset, then its health read again\n" % GPU_C
    done = reset(capsys, node, GPU_C, diff=True)
    assert done["diff"]["before"] == planned["diff"]["before"]
    assert done["diff"]["after"] == "%s: reset; healthy\n" % GPU_C


def test_a_reset_that_does_not_help_keeps_the_gpu_out_and_raises_gpu_reset_ineffective(capsys, node):
    sick(node, 1, row_remap_failure=True, xids=[48], reset_clears=False)
    run(capsys, node, generation=1, devices=[])  # the pass raises GPUUnhealthy
    service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset")

    done = reset(capsys, node, GPU_B)

    # the XID, logged before the reset, no longer counts; the row remapping failure stays
    assert done["gpus"] == [{"uuid": GPU_B, "reset": True, "healthy": False, "problems": [ROW_REMAP], "error": None}]
    assert done["msg"] == ("%s was reset and is still unhealthy: %s; it stays in maintenance (GPUResetIneffective): "
                           "reboot the node or replace the GPU" % (GPU_B, ROW_REMAP))
    assert json.loads(open(node.fakehw).read())["gpus"][1]["health"]["row_remap_failure"] is True
    entry = health_of(capsys, node)[GPU_B]
    assert (entry["healthy"], entry["reset_ineffective"], entry["recoverable"]) == (False, True, False)
    events = journal(node)
    assert [(t, r) for _s, t, r, _m in events] == [
        ("GPUUnhealthy", "GPUFaulted"), ("GPUMaintenanceStarted", "MaintenanceStarted"),
        ("GPUReset", "ResetIneffective"), ("GPUResetIneffective", "ResetIneffective")]
    assert events[-2][3] == (
        "%s was reset and is still unhealthy: %s; it stays in maintenance: reboot the node or replace the GPU, then "
        "put it back in service (bcd.devices.maintenance, state absent)" % (GPU_B, ROW_REMAP))
    assert events[-1][3].startswith("%s is still unhealthy after its reset at 20" % GPU_B)
    assert events[-1][3].endswith(": %s; it stays in maintenance: reboot the node or replace the GPU, then put it back "
                                  "in service (bcd.devices.maintenance, state absent)" % ROW_REMAP)
    # a pass finds the condition the reset raised: it says so, and journals nothing new
    result = run(capsys, node, generation=2, devices=[])
    [condition] = [c for c in result["conditions"] if c["type"] == "GPUResetIneffective"]
    assert condition["reason"] == "ResetIneffective" and GPU_B in condition["message"]
    assert len(journal(node)) == 4
    # after the reboot the GPU reads healthy: both conditions clear; it stays out until a person puts it back
    node.set_hardware(gpus=DEFAULT_GPUS)
    run(capsys, node, generation=3, devices=[])
    assert [t for _s, t, _r, _m in journal(node)[4:]] == ["GPUResetIneffectiveCleared", "GPUUnhealthyCleared"]
    assert [g["maintenance"] for g in info(capsys, node)["gpus"] if g["uuid"] == GPU_B] == ["unhealthy, being reset"]


class RealLikeHost(RealHost):
    """A real node (its reset goes through the command runner) whose GPUs and VMs are the fakehw file's."""

    def __init__(self, root, fakehw, runner):
        super().__init__(root, runner=runner)
        self._fakehw = fakehw

    def fresh(self):
        return RealLikeHost(self.root, self._fakehw, self.runner)

    def _read_inventory(self):
        return load_fakehw(self._fakehw).inventory

    def _read_domains(self):
        return FakeHwHost(self.root, self._fakehw).domains()


def test_a_real_node_runs_nvidia_smi_gpu_reset_with_the_uuid_and_reports_its_failure(node):
    ran = []

    def runner(argv):
        ran.append(list(argv))
        if argv[-1] == GPU_C:
            return 255, "", ("Unable to reset this GPU because it's being used by some other process "
                             "(e.g. CUDA application, graphics application like X server, {monitoring})\n")
        return 0, "GPU 00000000:3B:00.0 was successfully reset.\nAll done.\n", ""

    sick(node, 1, retired_pages_pending=True)
    for gpu in (GPU_B, GPU_C):
        entry_busy.set_maintenance(node.host(), [gpu], True, "unhealthy, being reset", node.state_dir)
    done = entry_busy.reset_gpus(RealLikeHost(node.root, node.fakehw, runner), [GPU_B, GPU_C], node.state_dir)

    # nvidia-smi(1): -r/--gpu-reset resets the GPUs -i names; without -i it would reset every GPU of the node
    assert reset_argv(GPU_B) == ["nvidia-smi", "--gpu-reset", "-i", GPU_B]
    assert ran == [["nvidia-smi", "--gpu-reset", "-i", GPU_B], ["nvidia-smi", "--gpu-reset", "-i", GPU_C]]
    assert done["failed"] is True
    assert [(g["uuid"], g["reset"]) for g in done["gpus"]] == [(GPU_B, True), (GPU_C, False)]
    assert done["gpus"][1]["error"].startswith("`nvidia-smi --gpu-reset -i %s` failed (rc 255): Unable to reset" % GPU_C)
    # GPU_B's NVML state stays (the runner reset nothing): a reset that did not help
    assert done["gpus"][0]["healthy"] is False
    reasons = [(t, r) for _s, t, r, _m in journal(node) if t == "GPUReset"]
    assert reasons == [("GPUReset", "ResetIneffective"), ("GPUReset", "ResetFailed")]
    failed = [m for _s, t, r, m in journal(node) if r == "ResetFailed"][0]
    assert "(monitoring)" in failed  # an error's braces never reach an event: a message is never a template
    # the failed GPU's faults still count, and it is not declared reset-ineffective: a later recovery tries again
    stored = records(node)
    assert "reset" not in stored[GPU_C] and stored[GPU_B]["reset"]["healthy"] is False
    assert GPU_C not in json.loads(node.read("/var/lib/bcd/health.json"))


def test_the_fakehw_reset_clears_field_is_checked_like_the_rest_of_the_file(capsys, node):
    sick(node, 0, retired_pages_pending=True, reset_clears="no")
    result = run(capsys, node, generation=1, devices=[])
    assert result.get("failed") is True and "gpus[0].health.reset_clears: must be true or false, not a string" in result["msg"]


def test_gpu_busy_without_gpus_lists_every_gpu_with_its_health_and_whether_a_recovery_takes_it(capsys, node):
    gpus = copy.deepcopy(DEFAULT_GPUS)
    gpus[1]["health"], gpus[2]["health"] = {"retired_pages_pending": True}, {"row_remap_failure": True}
    node.set_hardware(gpus=gpus)
    service(capsys, node, gpus=[GPU_C], reason="RMA")  # an operator's: no recovery takes it
    listed = call(capsys, gpu_busy.main, {"root": node.root, "fakehw": node.fakehw})
    assert [(g["uuid"], g["healthy"], g["problems"], g["recoverable"]) for g in listed["gpus"]] == [
        (GPU_A, True, [], False), (GPU_B, False, [PAGES], True), (GPU_C, False, [ROW_REMAP], False)]
    assert listed["changed"] is False and listed["msg"] == "%s, %s, %s are free" % (GPU_A, GPU_B, GPU_C)


# -- the lease -----------------------------------------------------------------------------------

def test_a_second_recovery_finds_the_first_s_lease_and_changes_nothing(capsys, node):
    first = service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="first", lease_seconds=60)
    assert first["changed"] is True and first["lease_holder"] is None and first["lease_until"]
    assert first["gpus"][0]["uuid"] == GPU_B and first["msg"] == "%s is free" % GPU_B
    stored = records(node)

    second = service(capsys, node, gpus=[GPU_C], reason="unhealthy, being reset", lease="second")

    assert second["changed"] is False and "gpus" not in second
    assert second["lease_holder"] == {"id": "first", "until": first["lease_until"], "gpus": [GPU_B]}
    assert second["msg"] == ("recovery first of this node is in progress (its lease on %s runs until %s); this one "
                             "changes nothing and ends here" % (GPU_B, first["lease_until"]))
    assert records(node) == stored
    # the first refreshes its lease while it waits: no change, a later end
    time.sleep(1.1)
    again = service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="first", lease_seconds=60)
    assert again["changed"] is False and again["lease_until"] > first["lease_until"]
    # the second cannot put the first's GPU back in service; the first can, and ends its lease
    refused = service(capsys, node, gpus=[GPU_B], state="absent", lease="second")
    assert refused.get("failed") is True and refused["msg"] == (
        "%s is under the lease of recovery first until %s; not put back in service" % (GPU_B, again["lease_until"]))
    done = service(capsys, node, gpus=[GPU_B], state="absent", lease="first")
    assert done["changed"] is True and done["maintenance"] == []
    assert [(t, r) for _s, t, r, _m in journal(node)] == [
        ("GPUMaintenanceStarted", "MaintenanceStarted"), ("GPUMaintenanceEnded", "MaintenanceEnded")]


def test_a_lease_nobody_refreshes_ends_by_itself_and_a_later_recovery_takes_over(capsys, node):
    service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="killed", lease_seconds=1)
    time.sleep(1.2)  # the engine running it died: nothing refreshes the lease
    later = service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="later")
    assert later["lease_holder"] is None and later["changed"] is True
    assert [m["lease"]["id"] for m in later["maintenance"]] == ["later"]


def test_ending_a_lease_keeps_the_gpus_left_in_maintenance_and_an_operator_s_change_keeps_leases(capsys, node):
    service(capsys, node, gpus=[GPU_B, GPU_C], reason="unhealthy, being reset", lease="r1")
    check = service(capsys, node, check=True, gpus=[], state="absent", lease="r1")
    assert check["changed"] is True and all(m["lease"]["live"] for m in records_listing(capsys, node))
    planned = service(capsys, node, check=True, diff=True, gpus=[GPU_B], reason="unhealthy, being reset", lease="r1")
    assert planned["diff"]["after"] == planned["diff"]["before"] == (
        "%s: unhealthy, being reset (recovery r1)\n%s: unhealthy, being reset (recovery r1)\n" % (GPU_B, GPU_C))
    ended = service(capsys, node, gpus=[], state="absent", lease="r1", diff=True)
    assert ended["diff"]["after"] == "%s: unhealthy, being reset\n%s: unhealthy, being reset\n" % (GPU_B, GPU_C)
    assert ended["changed"] is True
    assert [(m["uuid"], m["lease"]["id"], m["lease"]["live"]) for m in ended["maintenance"]] == [
        (GPU_B, "r1", False), (GPU_C, "r1", False)]
    assert service(capsys, node, gpus=[], state="absent", lease="r1")["changed"] is False
    operator = service(capsys, node, gpus=[GPU_B], reason="RMA")
    assert [m["lease"]["id"] for m in operator["maintenance"]] == ["r1", "r1"]
    for args, message in [
            ({"lease": "two words"}, "lease: must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter "
                                     "or a digit, not 'two words'"),
            ({"lease": "r2", "lease_seconds": 0}, "lease_seconds: must be a number of seconds from 1 to 3600, not 0.0"),
            ({"lease": "r2", "reraise_after": -1}, "reraise_after: must be a number of seconds from 0 to 604800, "
                                                   "not -1.0")]:
        result = service(capsys, node, gpus=[GPU_B], reason="x", **args)
        assert result.get("failed") is True and result["msg"] == message


def records_listing(capsys, node):
    return service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", check=True)["maintenance"]


def test_maintenance_journals_nothing_and_changes_nothing_when_the_journal_is_full(capsys, node, monkeypatch):
    monkeypatch.setattr(journal_module, "MAX_UNACKED", 0)
    result = service(capsys, node, gpus=[GPU_A], reason="firmware update")
    assert result.get("failed") is True
    assert result["msg"].startswith("the event journal is full: it holds 0 unacknowledged events in 0 bytes")
    assert "bcd.devices.maintenance would journal 1 more, so it changed nothing" in result["msg"]
    assert records(node) == {} and journal(node) == []


# -- raised again: a recovery that stopped ---------------------------------------------------------

def unhealthy_seqs(node):
    return [seq for seq, kind, _r, _m in journal(node) if kind == "GPUUnhealthy"]


def test_a_gpu_whose_recovery_stopped_has_its_gpu_unhealthy_raised_again_once(capsys, node):
    sick(node, 1, row_remap_failure=True)
    run(capsys, node, generation=1, devices=[])
    [first] = unhealthy_seqs(node)
    # the recovery took the GPU out of service, then its engine died: the lease is never refreshed
    service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="lost", lease_seconds=1,
            reraise_after=1)
    run(capsys, node, generation=2, devices=[])  # under the live lease: nothing
    assert unhealthy_seqs(node) == [first]
    time.sleep(2.2)  # the lease ended, and the re-raise interval went by

    result = run(capsys, node, generation=3, devices=[])

    [stalled] = [c for c in result["conditions"] if c["type"] == "GPURecoveryStalled"]
    assert stalled["reason"] == "RecoveryStalled" and "the recovery lost of %s ended at " % GPU_B in stalled["message"]
    events = journal(node)
    assert [(t, r) for _s, t, r, _m in events[-2:]] == [
        ("GPURecoveryStalled", "RecoveryStalled"), ("GPUUnhealthy", "GPUFaulted")]
    again = unhealthy_seqs(node)
    assert len(again) == 2 and again[1] > first  # a new occurrence: a rule keyed by (node, seq) runs again
    assert events[-1][3].startswith("%s is unhealthy: %s; raised again: its recovery lost ended at " % (GPU_B, ROW_REMAP))
    # once: the next pass finds what this one found
    run(capsys, node, generation=4, devices=[])
    assert unhealthy_seqs(node) == again
    # the recovery the event starts takes the lease: the stall clears
    service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="next")
    run(capsys, node, generation=5, devices=[])
    assert journal(node)[-1][1] == "GPURecoveryStalledCleared" and unhealthy_seqs(node) == again


@pytest.mark.parametrize("case", ["live lease", "reset ineffective", "operator's maintenance", "healthy"])
def test_no_gpu_unhealthy_is_raised_again_while_a_recovery_or_a_person_has_the_gpu(capsys, node, case):
    sick(node, 1, row_remap_failure=True, reset_clears=False)
    run(capsys, node, generation=1, devices=[])
    if case == "operator's maintenance":
        service(capsys, node, gpus=[GPU_B], reason="RMA")
    else:
        service(capsys, node, gpus=[GPU_B], reason="unhealthy, being reset", lease="r",
                lease_seconds=60 if case == "live lease" else 1, reraise_after=0)
    if case == "reset ineffective":
        reset(capsys, node, GPU_B)
    if case == "healthy":
        node.set_hardware(gpus=DEFAULT_GPUS)
    time.sleep(1.2)
    result = run(capsys, node, generation=2, devices=[])
    assert [c for c in result["conditions"] if c["type"] == "GPURecoveryStalled"] == []
    assert len(unhealthy_seqs(node)) == 1

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU's other users (issue 14, items 1 and 2): busy checks and maintenance, through
``bcd.devices.gpu_busy``, ``bcd.devices.maintenance``, ``bcd.devices.holds``, ``holds_info`` and
``bcd-holds busy``, on fakehw nodes."""

from __future__ import annotations

import calendar
import json
import re
import time

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_BUSY, EX_ERROR, EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import PassLock
from ansible_collections.bcd.devices.plugins.modules import gpu_busy, maintenance
from ansible_collections.bcd.devices.tests.unit.builders import hold, mig
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call, info

UNKNOWN = "GPU-00000000-dead-4000-8000-000000000000"


def service(capsys, node, check=False, diff=False, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return call(capsys, maintenance.main, args)


def busy(capsys, node, *gpus, **args):
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    return call(capsys, gpu_busy.main, dict(args, gpus=list(gpus)))


def fails(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


# -- maintenance ---------------------------------------------------------------------------------

def test_a_gpu_in_maintenance_takes_no_new_hold_and_keeps_the_ones_it_has(capsys, node):
    run(capsys, node, generation=1, devices=[hold("kept", GPU_A + "/s0")])
    put = service(capsys, node, gpus=[GPU_A], reason="firmware update")
    assert put["changed"] is True
    assert [(m["uuid"], m["reason"]) for m in put["maintenance"]] == [(GPU_A, "firmware update")]
    result = run(capsys, node, generation=2, devices=[hold("kept", GPU_A + "/s0"), hold("a1", GPU_A),
                                                      mig("a2", GPU_A + "/gi1/ci0"), hold("a3", GPU_B)])
    message = "%s is in maintenance (firmware update)" % GPU_A
    assert fails(result) == [("a1", "overlap", message), ("a2", "overlap", message)]
    assert [(p["action"], p["allocation_id"]) for p in result["plan"] if p["action"] != "refuse"] == [("bind", "a3")]
    assert node.exists("/etc/cdi/bcd-kept.json")  # releasing it is the control plane's decision
    # back in service: the next generation binds there again
    back = service(capsys, node, gpus=[GPU_A], state="absent")
    assert back["changed"] is True and back["maintenance"] == []
    again = run(capsys, node, generation=3, devices=[hold("kept", GPU_A + "/s0"), hold("a4", GPU_A + "/s1")])
    assert fails(again) == []


def test_maintenance_is_idempotent_honest_in_check_mode_and_shows_a_diff(capsys, node):
    before = node.listing()
    planned = service(capsys, node, check=True, diff=True, gpus=[GPU_B, GPU_C], reason="row remapping")
    assert planned["changed"] is True and node.listing() == before
    assert planned["diff"]["before"] == "" and planned["diff"]["after"] == (
        "%s: row remapping\n%s: row remapping\n" % (GPU_B, GPU_C))
    done = service(capsys, node, diff=True, gpus=[GPU_B, GPU_C], reason="row remapping")
    assert done["changed"] is True and done["diff"] == planned["diff"]
    since = dict((m["uuid"], m["since"]) for m in done["maintenance"])
    assert service(capsys, node, gpus=[GPU_C, GPU_B], reason="row remapping")["changed"] is False
    reworded = service(capsys, node, gpus=[GPU_B], reason="RMA")
    assert reworded["changed"] is True
    assert [(m["uuid"], m["reason"], m["since"]) for m in reworded["maintenance"]] == [
        (GPU_B, "RMA", since[GPU_B]), (GPU_C, "row remapping", since[GPU_C])]
    assert service(capsys, node, gpus=[GPU_A], state="absent")["changed"] is False
    shown = dict((g["uuid"], g["maintenance"]) for g in info(capsys, node)["gpus"])
    assert shown == {GPU_A: None, GPU_B: "RMA", GPU_C: "row remapping"}


def test_maintenance_says_since_in_iso_8601_utc_and_reads_the_old_epoch_seconds(capsys, node):
    before = time.time()
    put = service(capsys, node, gpus=[GPU_A], reason="firmware update")
    [record] = put["maintenance"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["since"]), record
    assert int(before) <= calendar.timegm(time.strptime(record["since"], "%Y-%m-%dT%H:%M:%SZ")) <= time.time()
    # the file keeps seconds since the epoch, as every release wrote it: an older bcd-holds reads it
    stored = json.loads(node.read("/var/lib/bcd/maintenance.json"))
    assert isinstance(stored[GPU_A]["since"], float)
    # a file an older release wrote (an integer, a float), or an ISO time, reads the same
    node.write("/var/lib/bcd/maintenance.json", json.dumps({
        GPU_A: {"reason": "old", "since": 1796300000}, GPU_B: {"reason": "older", "since": 1796300000.5},
        GPU_C: {"reason": "iso", "since": "2026-12-02T09:00:00Z"}}))
    listed = service(capsys, node, gpus=[GPU_A], reason="old")
    assert listed["changed"] is False
    assert [(m["uuid"], m["since"]) for m in listed["maintenance"]] == [
        (GPU_A, "2026-12-03T12:13:20Z"), (GPU_B, "2026-12-03T12:13:20Z"), (GPU_C, "2026-12-02T09:00:00Z")]
    # a since no time can be made of is null, not an error
    node.write("/var/lib/bcd/maintenance.json", json.dumps({GPU_A: {"reason": "x", "since": "yesterday"},
                                                            GPU_B: {"reason": "y", "since": 1e300}}))
    assert [m["since"] for m in service(capsys, node, gpus=[GPU_A], reason="x")["maintenance"]] == [None, None]


def test_maintenance_refuses_bad_input_clearly(capsys, node):
    for args, message in [
            ({"gpus": [GPU_A]}, "state is present but all of the following are missing: reason"),
            ({"gpus": ["nvidia0"], "reason": "x"}, "gpus[0]: must be a GPU UUID (GPU-...), not 'nvidia0'"),
            ({"gpus": [UNKNOWN], "reason": "x"}, "%s is not on this node" % UNKNOWN),
            ({"gpus": [GPU_A], "reason": "two\nlines"}, "reason: must be text of 1 to 256 characters without "
                                                        "control characters"),
            ({"gpus": [GPU_A] * 300, "reason": "x"}, "gpus: 300 GPUs; at most 256")]:
        result = service(capsys, node, **args)
        assert result.get("failed") is True and result["msg"] == message
    assert not node.exists("/var/lib/bcd/maintenance.json")


def test_the_node_command_and_timers_honour_maintenance(capsys, node):
    service(capsys, node, gpus=[GPU_C], reason="burn-in")
    code, out, _err = cli(capsys, node, "converge", "--json", "--spec", write_spec(node, 1, [hold("a1", GPU_C)]))
    assert code == EX_OK
    assert [(f["reason"], f["message"]) for f in json.loads(out)["failures"]] == [
        ("overlap", "%s is in maintenance (burn-in)" % GPU_C)]


def test_a_maintenance_file_that_cannot_be_read_is_said_and_not_overwritten(capsys, node):
    node.write("/var/lib/bcd/maintenance.json", "{not json")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert fails(result) == []
    assert any("maintenance.json is unreadable" in w for w in [str(x) for x in result.get("warnings", [])]
               + result["_stderr"].splitlines())
    refused = service(capsys, node, gpus=[GPU_B], reason="x")
    assert refused.get("failed") is True and "remove or fix it first" in refused["msg"]
    assert node.read("/var/lib/bcd/maintenance.json") == b"{not json"


# -- busy ----------------------------------------------------------------------------------------

def test_busy_names_every_claim_on_a_gpu(capsys, node):
    pod = {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_C]}
    node.set_hardware(domains=[{"instance_id": "inst_1", "state": "running", "gpus": [GPU_B]}],
                      kubelet={"reachable": True, "pods": [pod]})
    run(capsys, node, generation=1, devices=[mig("a_mig", GPU_A + "/gi1/ci0"), hold("a_slot", GPU_A + "/s0"),
                                             hold("k1", GPU_C, binding="BINDING_KUBERNETES")])
    run(capsys, node, generation=2, devices=[mig("a_mig", GPU_A + "/gi1/ci0"), hold("a_slot", GPU_A + "/s0")])
    service(capsys, node, gpus=[GPU_A], reason="reset")
    result = busy(capsys, node, GPU_A, GPU_B, GPU_C)
    assert result["changed"] is False
    assert [(g["uuid"], g["busy"], [c["text"] for c in g["claimed_by"]]) for g in result["gpus"]] == [
        (GPU_A, True, ["MIG instance gi1/ci0 held by a_mig", "slot s0 held by a_slot", "in maintenance (reset)"]),
        (GPU_B, True, ["passed through to VM inst_1"]),
        (GPU_C, True, ["Kubernetes release of k1 pending (%s)" % GPU_C]),
    ]
    first = result["gpus"][0]["claimed_by"][0]
    assert first == {"kind": "hold", "text": "MIG instance gi1/ci0 held by a_mig", "allocation_id": "a_mig",
                     "device_id": GPU_A + "/gi1/ci0"}
    # the same through bcd-holds busy: exit 3 when any is claimed
    code, out, _err = cli(capsys, node, "busy", GPU_B)
    assert code == EX_BUSY and out == "%s: busy: passed through to VM inst_1\n" % GPU_B
    assert [g["busy"] for g in info(capsys, node)["gpus"]] == [True, True, True]


def test_a_gpu_only_in_maintenance_is_free_to_reset(capsys, node):
    service(capsys, node, gpus=[GPU_B], reason="firmware")
    result = busy(capsys, node, GPU_B)
    assert result["gpus"] == [{"uuid": GPU_B, "busy": False, "claimed_by": [
        {"kind": "maintenance", "text": "in maintenance (firmware)", "reason": "firmware"}],
        "healthy": True, "problems": [], "reset_ineffective": False, "recoverable": False}]
    code, out, _err = cli(capsys, node, "busy", GPU_B, GPU_C)
    assert code == EX_OK
    assert out == "%s: free: in maintenance (firmware)\n%s: free\n" % (GPU_B, GPU_C)


def test_an_unreadable_hold_spec_makes_every_gpu_busy(capsys, node):
    node.write("/etc/cdi/bcd-odd.json", b"{")
    result = busy(capsys, node, GPU_C)
    assert result["gpus"][0]["busy"] is True
    assert result["gpus"][0]["claimed_by"][0]["kind"] == "hold-unreadable"


def test_busy_refuses_bad_input_with_exit_2(capsys, node):
    assert busy(capsys, node, "nvidia0")["msg"] == "gpus[0]: must be a GPU UUID (GPU-...), not 'nvidia0'"
    assert busy(capsys, node, UNKNOWN)["msg"] == "%s is not on this node" % UNKNOWN
    code, _out, err = cli(capsys, node, "busy", UNKNOWN)
    assert code == EX_ERROR and "%s is not on this node" % UNKNOWN in err


def test_busy_waits_for_a_pass_and_never_sees_half_of_one(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    state_dir = node.path("/var/lib/bcd")
    with PassLock(state_dir):  # a pass in progress
        result = busy(capsys, node, GPU_A, lock_timeout=0.2)
        assert result.get("failed") is True and "another pass holds the lock" in result["msg"]
    with PassLock(state_dir, shared=True, create=False):  # another busy check: both read at once
        assert busy(capsys, node, GPU_A, lock_timeout=0.2)["gpus"][0]["busy"] is True

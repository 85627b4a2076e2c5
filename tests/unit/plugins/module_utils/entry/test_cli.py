# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds``, the node command, run through ``main(argv)`` on fakehw nodes.

What a node's operator (and its timers) see: the plan and section a pass
prints, the exit codes (0 done, 1 doctor found problems, 2 error, 75 retry),
``status`` lines per GPU, ``doctor``'s checks, the event journal and its
acknowledgement, the unprivileged refusal and the same pass through the root
helper, and the events delivered to docs/examples/gateway.py.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_ERROR, EX_OK, EX_RETRY, main
from ansible_collections.bcd.devices.plugins.module_utils.state.events import NodeKey
from ansible_collections.bcd.devices.plugins.module_utils.entry.status import short_uuid
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost

from ansible_collections.bcd.devices.tests.unit.builders import hold, kube, mig, slot
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper
from ansible_collections.bcd.devices.tests.unit.conftest import DEFAULT_GPUS, GPU_A, GPU_B, GPU_C, MIG_A1, MIG_A2, open_to_all

REPO = Path(__file__).resolve().parents[5]
UNPRIVILEGED = ("bcd node runs without root and without [helper]: it cannot write /etc/cdi or create hold "
                "slices (run bcd node as root, or under bcd helper)")


def cli(capsys, node, *argv):
    """``bcd-holds ARGV --root … --fakehw …``: (exit code, stdout, stderr)."""
    code = main(list(argv) + ["--root", node.root, "--fakehw", node.fakehw])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def write_spec(node, generation, devices, name="spec.json"):
    path = os.path.join(node.base, name)
    with open(path, "w") as handle:
        json.dump({"generation": generation, "devices": devices}, handle)
    return path


def contents(node):
    """Every path under the node with its mode and content (not its mtime), but the stamp every real
    pass leaves of when it ran (``last-pass.json``, read by ``bcd-holds metrics``)."""
    return dict((path, (mode, content)) for path, (mode, _mtime, content) in node.listing().items()
                if not path.endswith("/var/lib/bcd/last-pass.json"))


def events_of(out):
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def as_user(monkeypatch):
    """The pass believes it runs as uid 1000 (an ordinary user)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.fixture
def helper(node):
    running = ServedHelper(FakeHwHost(node.root, node.fakehw), os.path.join(node.base, "helper.sock"))
    yield running
    running.close()


# -- converge --------------------------------------------------------------------------

def test_converge_binds_prints_the_plan_and_section_and_keeps_its_input(capsys, node):
    spec = write_spec(node, 1, [hold("a1", GPU_B), mig("a2", GPU_A + "/gi1/ci0")])
    code, out, err = cli(capsys, node, "converge", "--spec", spec)
    assert code == EX_OK
    assert out.splitlines()[0] == "plan:"
    assert "  bind a1: bcd.dev/gpu=%s -> /etc/cdi/bcd-a1.json, /run/bcd/allocations/a1.env" % GPU_B in out
    assert "  bind a2: bcd.dev/gpu=%s_gi1_ci0" % GPU_A in out
    assert out.splitlines()[-1] == "section: CONVERGED at generation 1 (observed 1)"
    assert node.mode("/etc/cdi/bcd-a1.json") == 0o644
    assert node.mode("/run/bcd/allocations/a2.env") == 0o644
    stored = json.loads(node.read("/var/lib/bcd/nodespec.json"))
    assert stored["generation"] == 1 and [d["allocation_id"] for d in stored["devices"]] == ["a1", "a2"]
    assert node.mode("/var/lib/bcd/nodespec.json") == 0o600
    assert err == ""

    # the timers' pass over the stored input: nothing to do, nothing changed
    before = contents(node)
    code, out, _err = cli(capsys, node, "converge", "--stored")
    assert code == EX_OK
    assert out.splitlines() == ["plan:", "  nothing to do", "section: CONVERGED at generation 1 (observed 1)"]
    assert contents(node) == before


def test_a_fakehw_host_without_meminfo_logs_that_it_binds_without_admission(capsys, node):
    assert not node.exists("/proc/meminfo")
    spec = write_spec(node, 1, [hold("a1", GPU_A, limits={"memory_bytes": 1 << 40}),
                                hold("a2", GPU_B, limits={"memory_bytes": 1 << 40})])
    code, out, err = cli(capsys, node, "converge", "--spec", spec)
    assert code == EX_OK and out.splitlines()[-1] == "section: CONVERGED at generation 1 (observed 1)"
    assert err == "WARNING: host memory unreadable; binding without host-side admission\n"  # once a pass
    # with meminfo the host is admitted: a terabyte more does not fit
    node.write("/proc/meminfo", b"MemTotal:       67108864 kB\nMemFree:        60000000 kB\nHugetlb:  0 kB\n")
    spec = write_spec(node, 2, [hold("a3", GPU_C, limits={"memory_bytes": 1 << 40})])
    code, out, err = cli(capsys, node, "converge", "--spec", spec)
    assert "host memory unreadable" not in err
    assert err == "ERROR: refused: a3: ResourcesExhausted: 1048576 MiB of memory needed, 64512 MiB left on this host\n"


def test_converge_check_prints_the_plan_and_writes_nothing(capsys, node):
    spec = write_spec(node, 1, [hold("a1", GPU_B)])
    before = node.listing()
    code, out, _err = cli(capsys, node, "converge", "--spec", spec, "--check")
    assert code == EX_OK
    assert out.splitlines()[0] == "plan (check mode, nothing written):"
    assert "bind a1" in out
    assert node.listing() == before


def test_converge_json_is_the_modules_result(capsys, node):
    spec = write_spec(node, 3, [hold("a1", GPU_B), hold("bad", "nic-0", device_class="nic.vf")])
    code, out, err = cli(capsys, node, "converge", "--spec", spec, "--json")
    assert code == EX_OK  # a FAILED section is an answer, not an error of the command
    result = json.loads(out)
    assert result["section"]["state"] == "FAILED"
    assert result["failures"] == [{"allocation_id": "bad", "generation": 3, "reason": "unsupported-device",
                                   "message": "device class nic.vf cannot be held"}]
    assert [e["type"] for e in result["events"]] == ["AllocationBound", "AllocationFailed"]
    assert {"cdi", "devices.limits", "binding.kubernetes", "nvml"} == set(result["capabilities"])
    assert "ERROR: refused: bad: device class nic.vf cannot be held" in err


def test_a_failed_section_says_how_much_of_the_pass_stands(capsys, node):
    spec = write_spec(node, 3, [hold("a1", GPU_B), hold("a2", GPU_C), hold("bad", "nic-0", device_class="nic.vf")])
    code, out, _err = cli(capsys, node, "converge", "--spec", spec)
    assert code == EX_OK
    assert out.splitlines()[-1] == ("section: FAILED at generation 3 (observed 3): 2 held, 1 refused: "
                                    "bad: device class nic.vf cannot be held")


def test_converge_without_stored_input_does_nothing(capsys, node):
    code, out, _err = cli(capsys, node, "converge", "--stored")
    assert code == EX_OK
    assert out.strip() == "no stored input in /var/lib/bcd/nodespec.json: nothing to converge"
    assert not node.exists("/var/lib/bcd")


@pytest.mark.parametrize("content", ["{not json", json.dumps({"generation": 1.5, "devices": []}),
                                     json.dumps({"generation": "1", "devices": []}),
                                     json.dumps({"generation": 1, "devices": {"a": 1}})])
def test_a_spec_file_that_cannot_be_read_is_an_error_with_a_message(capsys, node, content):
    path = os.path.join(node.base, "bad.json")
    Path(path).write_text(content)
    code, out, err = cli(capsys, node, "converge", "--spec", path)
    assert code == EX_ERROR
    assert err.startswith("ERROR: cannot read the spec %s: " % path)
    assert out == ""
    code, _out, err = cli(capsys, node, "converge", "--spec", os.path.join(node.base, "missing.json"))
    assert code == EX_ERROR and "No such file" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can hand files to another account")
def test_a_root_pass_leaves_every_state_file_to_the_owner_of_the_state_directory(capsys, node):
    os.makedirs(node.state(), mode=0o700)
    open_to_all(node.root)
    os.chown(node.state(), 65534, 65534)
    code, _out, _err = cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B)]))
    assert code == EX_OK
    owners = dict((name, os.stat(node.state(name)).st_uid) for name in os.listdir(node.state()))
    assert {"events.jsonl", "ledger.json", "node.key", "nodespec.json"} <= set(owners)
    assert set(owners.values()) == {65534}, owners


def test_a_spec_without_generation_is_numbered_by_the_node(capsys, node):
    path = os.path.join(node.base, "spec.json")
    for devices, generation in (([hold("a1", GPU_A)], 1), ([hold("a1", GPU_A)], 1), ([], 2)):
        Path(path).write_text(json.dumps({"devices": devices}))
        code, out, _err = cli(capsys, node, "converge", "--spec", path)
        assert code == EX_OK
        assert "section: CONVERGED at generation %d (observed %d)" % (generation, generation) in out
    code, _out, err = cli(capsys, node, "converge", "--spec", write_spec(node, 2, [hold("a1", GPU_B)]))
    assert code == EX_ERROR
    assert err == ("ERROR: generation 2 was already applied with a different devices section; raise generation, "
                   "or leave it out to let the node number its inputs\n")


def test_a_stale_generation_is_an_error(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 5, []))
    code, _out, err = cli(capsys, node, "converge", "--spec", write_spec(node, 4, [], "old.json"))
    assert code == EX_ERROR
    assert "ERROR: generation 4 is older than the observed generation 5" in err


def test_bad_usage_exits_2_with_argparse_message(capsys, node):
    with pytest.raises(SystemExit) as exc:
        main(["converge", "--root", node.root])            # neither --spec nor --stored
    assert exc.value.code == 2
    assert "one of the arguments --spec --stored is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_a_pass_that_cannot_write_exits_75_and_the_retry_pass_finishes_it(capsys, node):
    spec = write_spec(node, 1, [hold("a1", GPU_B)])
    # nothing to retry before any pass
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert code == EX_OK and out.startswith("nothing to retry: the last pass was never run")
    os.makedirs(node.path("/run/bcd"))
    node.write("/run/bcd/allocations", "a file where a directory belongs")
    code, out, err = cli(capsys, node, "converge", "--spec", spec)
    assert code == EX_RETRY
    assert "section: PROGRESSING at generation 1 (observed None)" in out
    assert "WARNING: retrying: " in err
    # the retry timer's pass runs, and still cannot finish
    code, _out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert code == EX_RETRY
    os.unlink(node.path("/run/bcd/allocations"))
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert code == EX_OK
    assert "section: CONVERGED at generation 1 (observed 1)" in out
    assert node.exists("/run/bcd/allocations/a1.env")
    # and once converged the retry timer's pass does nothing
    before = node.listing()
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert code == EX_OK and out.startswith("nothing to retry: the last pass was CONVERGED")
    assert node.listing() == before


# -- unprivileged ------------------------------------------------------------------------

def test_an_unprivileged_pass_claims_nothing_refuses_plain_holds_and_writes_no_hold(capsys, node, as_user):
    os.makedirs(node.state())                      # the pass account's own state directory
    spec = write_spec(node, 1, [hold("a1", GPU_B), hold("a2", GPU_C, limits={"cpus": "0-1"})])
    code, out, err = cli(capsys, node, "converge", "--spec", spec, "--json")
    assert code == EX_OK
    result = json.loads(out)
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "node-unprivileged", UNPRIVILEGED), ("a2", "node-unprivileged", UNPRIVILEGED)]
    assert result["section"]["state"] == "FAILED"
    assert not set(result["capabilities"]) & {"cdi", "devices.limits", "binding.kubernetes"}
    assert not node.exists("/etc/cdi") and not node.exists("/run/bcd")
    # logged at warning level (why), and the refusal itself with the spec page's message
    assert "WARNING: this pass runs without root and without the root helper" in err
    assert "ERROR: refused: a1: %s" % UNPRIVILEGED in err
    # and doctor says why
    code, out, _err = cli(capsys, node, "doctor")
    assert code == EX_CHECK
    assert out.splitlines()[0].split(None, 2)[:2] == ["WARN", "gpu-binding"]
    assert "every hold is refused with node-unprivileged" in out.splitlines()[0]


def test_the_same_unprivileged_pass_beside_the_root_helper_binds(capsys, node, helper, as_user):
    spec = write_spec(node, 1, [hold("a1", GPU_B), hold("a2", GPU_C, limits={"cpus": "0-1"})])
    code, out, _err = cli(capsys, node, "converge", "--spec", spec, "--helper-socket", helper.socket, "--json")
    assert code == EX_OK
    result = json.loads(out)
    assert result["section"]["state"] == "CONVERGED"
    assert {"cdi", "devices.limits", "binding.kubernetes"} <= set(result["capabilities"])
    assert node.exists("/etc/cdi/bcd-a1.json") and node.exists("/run/bcd/slices/bcd-alloc-a2.slice.json")
    code, out, _err = cli(capsys, node, "doctor", "--helper-socket", helper.socket)
    assert out.splitlines()[0] == ("OK      gpu-binding    passes run unprivileged through the root helper at %s"
                                   % helper.socket)


def test_a_helper_that_is_down_leaves_the_pass_progressing(capsys, node, as_user):
    os.makedirs(node.state())
    spec = write_spec(node, 1, [hold("a1", GPU_B)])
    missing = os.path.join(node.base, "no-helper.sock")
    code, out, err = cli(capsys, node, "converge", "--spec", spec, "--helper-socket", missing)
    assert code == EX_RETRY
    assert "the root helper at %s cannot be reached" % missing in err
    assert not node.exists("/etc/cdi/bcd-a1.json")
    code, out, _err = cli(capsys, node, "doctor", "--helper-socket", missing)
    assert code == EX_CHECK
    assert "WARN    gpu-binding    passes would be unprivileged: the root helper at %s cannot be reached" % missing in out


def test_the_helper_subcommand_refuses_to_run_without_root_on_a_real_host(capsys, node, as_user):
    code = main(["helper", "--socket", os.path.join(node.base, "h.sock"), "--root", node.root])
    assert code == EX_ERROR
    assert "ERROR: the root helper must run as root" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(node.base, "h.sock"))


def test_the_helper_subcommand_names_an_unknown_allowed_user(capsys, node):
    code = main(["helper", "--socket", os.path.join(node.base, "h.sock"), "--root", node.root,
                 "--fakehw", node.fakehw, "--allow-user", "no-such-user-bcd"])
    assert code == EX_ERROR
    assert "ERROR: no such user or group: " in capsys.readouterr().err


# -- status ----------------------------------------------------------------------------

def test_status_shows_each_gpu_its_mig_instances_and_slots_and_who_holds_them(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [
        mig("a_mig", GPU_A + "/gi2/ci0"), slot("a_slot", GPU_B + "/s1"),
        hold("a_whole", GPU_C)]))
    code, out, err = cli(capsys, node, "status")
    assert code == EX_OK and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["GPU", "UUID", "HELD", "BY", "RESET", "SERVICE", "MIG", "INSTANCES", "AND", "SLOTS"]
    assert lines[1].split(None, 5) == ["0", short_uuid(GPU_A), "-", "wait", "-", "gi1/ci0 free, gi2/ci0 a_mig"]
    assert lines[2].split(None, 5) == ["1", short_uuid(GPU_B), "-", "wait", "-", "s1 a_slot"]
    assert lines[3].split(None, 5) == ["2", short_uuid(GPU_C), "a_whole", "wait", "-", "-"]
    assert short_uuid(GPU_A) == "GPU-5f1c2a90…000001"
    assert lines[4:] == ["pending Kubernetes releases: none", "conditions: none",
                         "capabilities: cdi, devices.limits, binding.kubernetes, nvml"]

    code, out, _err = cli(capsys, node, "status", "--json")
    status = json.loads(out)
    gpus = dict((gpu["uuid"], gpu) for gpu in status["gpus"])
    assert gpus[GPU_C]["held_by"] == "a_whole"
    assert [(m["uuid"], m["held_by"]) for m in gpus[GPU_A]["mig"]] == [(MIG_A1, None), (MIG_A2, "a_mig")]
    assert gpus[GPU_B]["slots"] == [{"id": GPU_B + "/s1", "slot": 1, "held_by": "a_slot"}]
    assert status["node_public_key"] == NodeKey.load(node.state("node.key")).public_key_b64()


def test_status_counts_only_a_running_or_paused_vms_gpus(capsys, node):
    node.set_hardware(domains=[{"instance_id": "inst_up", "state": "paused", "gpus": [GPU_A]},
                               {"instance_id": "inst_down", "state": "shut off", "gpus": [GPU_B]}])
    code, out, _err = cli(capsys, node, "status", "--json")
    gpus = dict((gpu["uuid"], gpu) for gpu in json.loads(out)["gpus"])
    assert "inst_up" in json.dumps(gpus[GPU_A])
    assert "inst_down" not in out and gpus[GPU_B]["held_by"] is None


def test_status_marks_a_held_gpu_the_node_no_longer_has(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_C)]))
    node.set_hardware(gpus=[{"uuid": GPU_A, "index": 0, "minor": 0}])
    code, out, _err = cli(capsys, node, "status")
    assert code == EX_OK
    assert out.splitlines()[2].split() == ["-", "(missing)", short_uuid(GPU_C), "a1", "wait", "-", "-"]


def test_status_and_the_retry_pass_follow_a_pending_kubernetes_release(capsys, node):
    pod = {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_B]}
    node.set_hardware(kubelet={"reachable": True, "pods": [pod]})
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [kube("k1", GPU_B)]))
    cli(capsys, node, "converge", "--spec", write_spec(node, 2, [], "g2.json"))
    code, out, _err = cli(capsys, node, "status")
    lines = out.splitlines()
    assert lines[2].split(None, 2)[:2] == ["1", short_uuid(GPU_B)] and "k1 (release pending)" in lines[2]
    assert lines[4].startswith("pending Kubernetes releases: k1 (") and lines[4].endswith("s)")
    status = json.loads(cli(capsys, node, "status", "--json")[1])
    assert [p["allocation_id"] for p in status["pending_releases"]] == ["k1"]
    # the retry timer's pass runs while the release is pending, and reports it once the pod is gone
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert code == EX_OK and "nothing to do" in out
    node.set_hardware(kubelet={"reachable": True, "pods": []})
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert "report k1 released: no pod holds its devices any more" in out
    _code, out, _err = cli(capsys, node, "events")
    assert [e["type"] for e in events_of(out)] == ["AllocationBound", "AllocationReleased"]
    code, out, _err = cli(capsys, node, "converge", "--stored", "--retry-only")
    assert out.startswith("nothing to retry: the last pass was CONVERGED")
    assert "pending Kubernetes releases: none" in cli(capsys, node, "status")[1]


def test_status_shows_maintenance_and_reset_readiness_within_100_columns(capsys, make_node):
    gpus = [{"uuid": GPU_A, "index": 0, "minor": 0, "mig": [
        {"gi": gi, "ci": 0, "uuid": "MIG-7089d0f3-293f-58c9-8f8c-5ea666eed%03d" % gi} for gi in range(1, 8)]},
        {"uuid": GPU_B, "index": 1, "minor": 1}]
    node = make_node(gpus=gpus)
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [
        mig("allocation_%d" % gi, GPU_A + "/gi%d/ci0" % gi) for gi in range(1, 8)]))
    state = node.path("/var/lib/bcd/maintenance.json")
    with open(state, "w") as handle:
        json.dump({GPU_B: {"reason": "firmware update", "since": 0}}, handle)
    code, out, _err = cli(capsys, node, "status")
    assert code == EX_OK
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    assert lines[1].split()[:5] == ["0", short_uuid(GPU_A), "-", "wait", "-"]
    assert lines[2].startswith(" " * 20) and "allocation_" in lines[2]  # the parts go on, indented
    gpu_b = [line for line in lines if short_uuid(GPU_B) in line][0]
    assert gpu_b.split()[:7] == ["1", short_uuid(GPU_B), "-", "ok", "maintenance:", "firmware", "update"]


def test_status_reads_without_writing(capsys, node):
    before = node.listing()
    code, _out, _err = cli(capsys, node, "status")
    assert code == EX_OK
    assert node.listing() == before


# -- doctor ----------------------------------------------------------------------------

def test_doctor_on_a_healthy_node_passes_every_check(capsys, make_node):
    node = make_node(gpus=DEFAULT_GPUS[:2], vendor="mig")    # NVIDIA's spec names both GPUs and the MIG devices
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B)]))
    code, out, _err = cli(capsys, node, "doctor")
    assert code == EX_OK
    levels = dict(line.split()[1::-1] for line in out.splitlines())
    assert set(levels.values()) == {"OK"}
    assert {"gpu-binding", "inventory", "vendor-spec", "holds", "slices", "state"} <= set(levels)
    assert "last pass CONVERGED; 1 events not yet acknowledged" in out
    code, out, _err = cli(capsys, node, "doctor", "--json")
    assert code == EX_OK
    assert set(check["level"] for check in json.loads(out)) == {"OK"}


def test_doctor_warns_gpu_binding_when_passes_would_be_unprivileged(capsys, node, as_user):
    code, out, _err = cli(capsys, node, "doctor", "--json")
    assert code == EX_CHECK
    checks = dict((check["name"], check) for check in json.loads(out))
    assert checks["gpu-binding"]["level"] == "WARN"
    assert "without root and without the root helper" in checks["gpu-binding"]["message"]


def test_doctor_does_not_warn_gpu_binding_on_a_host_without_gpus(capsys, make_node, as_user):
    node = make_node(gpus=[])
    code, out, _err = cli(capsys, node, "doctor")
    assert out.splitlines()[0] == "OK      gpu-binding    no GPUs; nothing to bind"


def test_doctor_warns_without_a_vendor_spec_and_with_a_stale_one(capsys, make_node):
    bare = make_node()
    code, out, _err = cli(capsys, bare, "doctor")
    assert code == EX_CHECK
    assert "WARN    vendor-spec    no NVIDIA CDI spec in /etc/cdi or /var/run/cdi" in out
    stale = make_node(vendor="full")   # names GPU_A only: GPU_B, GPU_C and the MIG devices are missing
    code, out, _err = cli(capsys, stale, "doctor")
    assert code == EX_CHECK
    line = [line for line in out.splitlines() if line.startswith("WARN    vendor-spec")][0]
    assert "is stale: it does not name" in line and GPU_B in line and MIG_A1 in line


def test_doctor_warns_about_holds_on_devices_the_node_no_longer_has(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_C),
                                                                 mig("a2", GPU_A + "/gi1/ci0")]))
    gpus = json.loads(Path(node.fakehw).read_text())["gpus"]
    gpus[0]["mig"] = [gpus[0]["mig"][1]]          # gi1/ci0 deleted
    node.set_hardware(gpus=gpus[:2])              # GPU_C gone
    node.write("/etc/cdi/.bcd-a3.json.tmp-0123", "left by a crash")
    code, out, _err = cli(capsys, node, "doctor")
    assert code == EX_CHECK
    line = [line for line in out.splitlines() if line.startswith("WARN    holds")][0]
    assert "a1 holds %s, which the inventory does not list" % GPU_C in line
    assert "a2 holds %s/gi1/ci0, a MIG instance that no longer exists" % GPU_A in line
    assert "temporary files left in /etc/cdi: .bcd-a3.json.tmp-0123" in line


def test_doctor_warns_when_the_last_pass_is_still_progressing(capsys, node):
    os.makedirs(node.path("/run/bcd"))
    node.write("/run/bcd/allocations", "a file")
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B)]))
    code, out, _err = cli(capsys, node, "doctor")
    assert code == EX_CHECK
    assert "WARN    state          last pass PROGRESSING" in out


def test_doctor_as_root_checks_the_helper_the_timers_use(capsys, node):
    missing = os.path.join(node.base, "no-helper.sock")
    code, out, _err = cli(capsys, node, "doctor", "--helper-socket", missing, "--json")
    assert code == EX_CHECK
    checks = dict((check["name"], check) for check in json.loads(out))
    assert checks["helper"]["level"] == "ERROR"
    assert "the root helper at %s does not answer" % missing in checks["helper"]["message"]
    assert "(no such socket: no helper listens there)" in checks["helper"]["message"]


# -- events ----------------------------------------------------------------------------

def test_events_lists_the_journal_and_acknowledges_through_a_seq(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B), hold("a2", GPU_C)]))
    cli(capsys, node, "converge", "--spec", write_spec(node, 2, [hold("a2", GPU_C)], "g2.json"))
    code, out, _err = cli(capsys, node, "events")
    assert code == EX_OK
    listed = events_of(out)
    assert [(e["seq"], e["type"], e["body"]["allocation_id"]) for e in listed] == [
        (1, "AllocationBound", "a1"), (2, "AllocationBound", "a2"), (3, "AllocationReleased", "a1")]
    assert all(e["purpose"] == "attested-report" and e["signature"] for e in listed)

    code, out, err = cli(capsys, node, "events", "--ack-through", "2")
    assert code == EX_OK
    assert err.strip() == "INFO: acknowledged 2 events"
    assert [e["seq"] for e in events_of(out)] == [3]
    # listing again: the acknowledged ones are gone for good, seq keeps growing
    cli(capsys, node, "converge", "--spec", write_spec(node, 3, [], "g3.json"))
    code, out, _err = cli(capsys, node, "events")
    assert [e["seq"] for e in events_of(out)] == [3, 4]


def test_events_on_a_node_that_never_ran_a_pass_is_empty_and_writes_nothing(capsys, node):
    before = node.listing()
    code, out, _err = cli(capsys, node, "events")
    assert (code, out) == (EX_OK, "")
    assert node.listing() == before


def test_events_refuses_a_negative_ack(capsys, node):
    code, _out, err = cli(capsys, node, "events", "--ack-through", "-1")
    assert code == EX_ERROR
    assert "ERROR: ack_through must not be negative" in err


# -- delivery to the example gateway -------------------------------------------------

def load_gateway():
    spec = importlib.util.spec_from_file_location("bcd_example_gateway", str(REPO / "docs" / "examples" / "gateway.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def gateway(tmp_path):
    module = load_gateway()
    keys = tmp_path / "keys"
    keys.mkdir()
    store = tmp_path / "accepted.jsonl"
    server = module.make_server("127.0.0.1", 0, module.Gateway(keys_dir=str(keys), store=str(store), fail_first=1))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    server.keys = keys
    server.stored = store
    server.url = "http://127.0.0.1:%d/events" % server.server_address[1]
    yield server
    server.shutdown()
    server.server_close()


def post(url, events):
    request = urllib.request.Request(url, data=json.dumps({"events": events}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def accepted_prefix(events, accepted):
    """What the role acknowledges: through the highest seq of the contiguous accepted prefix."""
    through = None
    for seq in sorted(e["seq"] for e in events):
        if seq not in accepted:
            break
        through = seq
    return through


def test_events_delivered_to_the_example_gateway_and_acknowledged(capsys, node, gateway):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B), hold("bad", "x", device_class="nic.vf")]))
    key = NodeKey.load(node.state("node.key")).public_key_b64()
    (gateway.keys / "node-a.pub").write_text(key + "\n")
    _code, out, _err = cli(capsys, node, "events")
    events = events_of(out)

    # the first request fails: nothing is acknowledged, nothing is lost
    status, answer = post(gateway.url, events)
    assert (status, answer) == (503, None)
    _code, out, _err = cli(capsys, node, "events")
    assert events_of(out) == events

    status, answer = post(gateway.url, events)
    assert status == 200
    assert answer["accepted"] == [1, 2]
    code, out, _err = cli(capsys, node, "events", "--ack-through", str(accepted_prefix(events, answer["accepted"])))
    assert (code, out) == (EX_OK, "")
    stored = [json.loads(line) for line in gateway.stored.read_text().splitlines()]
    assert [(e["seq"], e["type"]) for e in stored] == [(1, "AllocationBound"), (2, "AllocationFailed")]
    # delivered again (a lost answer): accepted again, stored once
    assert post(gateway.url, events)[1]["accepted"] == [1, 2]
    assert len(gateway.stored.read_text().splitlines()) == 2


def test_the_gateway_rejects_forged_and_foreign_events_and_only_the_prefix_is_acknowledged(capsys, node, gateway):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_B), hold("a2", GPU_C)]))
    (gateway.keys / "node-a.pub").write_text(NodeKey.load(node.state("node.key")).public_key_b64())
    _code, out, _err = cli(capsys, node, "events")
    events = events_of(out)
    forged = json.loads(json.dumps(events))
    forged[0]["body"]["device_ids"] = [GPU_C]                 # a bind moved to another GPU
    post(gateway.url, [])                                     # uses up the failing first request
    status, answer = post(gateway.url, forged)
    assert status == 200
    assert answer["accepted"] == [2]
    assert [r["seq"] for r in answer["rejected"]] == [1]
    assert "signature" in answer["rejected"][0]["reason"]
    # seq 2 was accepted but seq 1 was not: nothing may be acknowledged yet
    assert accepted_prefix(forged, answer["accepted"]) is None

    stranger = json.loads(json.dumps(events))
    for event in stranger:
        event["body"]["node_id"] = "node-zz"
    _status, answer = post(gateway.url, stranger)
    assert answer["accepted"] == []
    assert all("unknown node" in r["reason"] for r in answer["rejected"])


@pytest.mark.parametrize("body, status", [(b"{not json", 400), (b"[1]", 400), (b'{"events": 3}', 400),
                                          (b'{"events": [1, {"seq": "x"}]}', 200)])
def test_the_gateway_answers_malformed_requests_without_falling_over(gateway, body, status):
    post(gateway.url, [])
    request = urllib.request.Request(gateway.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            got, content = answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        got, content = exc.code, json.loads(exc.read())
    assert got == status
    if status == 200:
        assert content["accepted"] == [] and len(content["rejected"]) == 2
    else:
        assert "error" in content
    assert post(gateway.url, [])[0] == 200


def test_the_gateway_reads_node_keys_from_the_command_line_too():
    module = load_gateway()
    key = base64.b64encode(b"\x01" * 32).decode()
    gateway = module.Gateway(keys=["node-q=" + key])
    assert gateway.key_for("node-q") == key
    assert gateway.key_for("node-r") is None
    with pytest.raises(ValueError, match="NODE_ID=BASE64"):
        module.Gateway(keys=["no-equals-sign"])

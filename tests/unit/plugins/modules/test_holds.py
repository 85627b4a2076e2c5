# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bcd.devices.holds module as a playbook task sees it: its result, check
mode, --diff, refusals, retryable failures and bad input, never a traceback."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from ansible_collections.bcd.devices.tests.unit.module_args import run_main

from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.modules import holds

from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C, open_to_all

NODE_ID = "node-a"  # the fixture node's id, which every warning starts with
GPU_GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"
NODE_UNPRIVILEGED = ("bcd node runs without root and without [helper]: it cannot write /etc/cdi or create hold "
                     "slices (run bcd node as root, or under bcd helper)")


UNPRIVILEGED_MSG = ("add become: true to the task or play, or set helper_socket to the root helper's socket (the role "
                    "bcd.devices.bcd_holds runs one): this pass ran without root and without the root helper, so it "
                    "refused every new hold and wrote nothing; refused: a1: node-unprivileged: %s; a2: node-unprivileged: "
                    "%s" % (NODE_UNPRIVILEGED, NODE_UNPRIVILEGED))


def run(capsys, node, check=False, diff=False, **args):
    """Run the module's main() and return its JSON result."""
    args.setdefault("root", node.root)
    args.setdefault("fakehw", node.fakehw)
    args["lock_timeout"] = args.get("lock_timeout", 5)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    out, err = run_main(capsys, holds.main, args)
    result = json.loads(out)
    result["_stderr"] = err
    return result


def warnings(result, node=None):
    """The warning texts of a result, each without the name of the node it must start with: ansible-core 2.19
    returns them as structured summaries, or, once controller code is loaded in the same process (another
    test file), shows them on stderr at once."""
    texts = []
    for warning in result.get("warnings", []):
        texts.append(warning["event"]["msg"] if isinstance(warning, dict) else warning)
    texts.extend(line.split("]: ", 1)[1] for line in result["_stderr"].splitlines() if line.startswith("[WARNING]: "))
    return without_node(texts, node or NODE_ID)


REFUSED = "assignments refused (the others of the pass are held): "


def refusals_shown(result, node=None):
    """Each refusal as a person reads it, ``<allocation> refused (<reason>): <message><hint>``: the warnings of a
    task that succeeded (``on_refusal: report``), else the failed task's ``msg``, which lists them all, hints
    included (``<allocation>: <reason>: <message><hint>``, in ``failures``' order) while no warning says
    them again."""
    failures = result["failures"]
    if not result.get("failed"):
        return [text for text in warnings(result, node)
                if any(text.startswith(f["allocation_id"] + " refused") for f in failures)]
    assert not [text for text in warnings(result, node) if " refused (" in text], warnings(result, node)
    msg = result["msg"]
    msg = msg[msg.index(REFUSED) + len(REFUSED):]
    heads = ["%s: %s: %s" % (f["allocation_id"], f["reason"], f["message"]) for f in failures]
    starts = []
    for head in heads:
        starts.append(msg.index(head, starts[-1] if starts else 0))
    shown = []
    for number, (failure, head) in enumerate(zip(failures, heads)):
        end = starts[number + 1] - 2 if number + 1 < len(starts) else len(msg)  # "; " before the next
        hint = msg[starts[number] + len(head):end]
        shown.append("%s refused (%s): %s%s" % (failure["allocation_id"], failure["reason"], failure["message"], hint))
    return shown


def without_node(texts, node=NODE_ID):
    """Warning texts without the node's name, which each must start with (on a fleet, the node that said it)."""
    for text in texts:
        assert text.startswith(node + ": "), text
    return [text[len(node) + 2:] for text in texts]


def test_a_run_binds_and_returns_plan_section_events_and_holds(capsys, node):
    result = run(capsys, node, generation=42, devices=[hold("a1", GPU_A)])
    assert not result.get("failed")
    assert result["changed"] is True
    assert [(p["action"], p["allocation_id"]) for p in result["plan"]] == [("bind", "a1")]
    assert all(p["text"] for p in result["plan"])
    assert result["section"] == {"state": "CONVERGED", "generation": 42, "observed_generation": 42, "message": ""}
    assert result["failures"] == []
    assert [e["type"] for e in result["events"]] == ["AllocationBound"]
    assert verify_report(result["events"][0], NodeState(node.state()).public_key())
    assert result["holds"][0]["cdi_devices"] == ["bcd.dev/gpu=" + GPU_A]
    assert "cdi" in result["capabilities"] and "binding.kubernetes" in result["capabilities"]
    assert node.exists("/etc/cdi/bcd-a1.json") and node.exists("/run/bcd/allocations/a1.env")


def test_a_second_run_is_not_changed(capsys, node):
    devices = [hold("a1", GPU_A), hold("a2", GPU_GONE)]
    first = run(capsys, node, generation=1, devices=devices)
    second = run(capsys, node, generation=1, devices=devices)
    assert second["changed"] is False
    assert second["plan"] == []
    # a2's refusal fails both tasks: a failed result shows its own pass's events, and counts the older ones
    assert [e["type"] for e in first["events"]] == ["AllocationBound", "AllocationFailed"]
    assert second["events"] == [] and second["events_not_shown"] == 2


def test_check_mode_writes_nothing_and_shows_what_a_real_run_does(capsys, node):
    before = node.listing()
    checked = run(capsys, node, check=True, generation=1, devices=[hold("a1", GPU_A), hold("a2", GPU_GONE)])
    assert node.listing() == before
    assert checked["changed"] is True
    assert checked["events"] == []
    real = run(capsys, node, generation=1, devices=[hold("a1", GPU_A), hold("a2", GPU_GONE)])
    assert checked["plan"] == real["plan"]
    assert checked["holds"] == real["holds"]
    assert checked["failures"] == real["failures"]


def test_diff_shows_each_files_before_and_after_and_the_plan(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    old_spec = node.read("/etc/cdi/bcd-a1.json").decode()
    result = run(capsys, node, diff=True, check=True, generation=2, devices=[hold("a2", GPU_B, env=["TEAM=x"])])
    diffs = result["diff"]
    files = dict((d["before_header"].split(" ")[0], d) for d in diffs if "before_header" in d)
    assert set(files) == {"/etc/cdi/bcd-a1.json", "/run/bcd/allocations/a1.env",
                          "/etc/cdi/bcd-a2.json", "/run/bcd/allocations/a2.env"}
    # what bcd decides whole; NVIDIA's common edits (every hold carries the same) as one line with a digest
    old = json.loads(old_spec)
    shown = json.loads(files["/etc/cdi/bcd-a1.json"]["before"])
    assert shown["devices"] == old["devices"] and shown["annotations"] == old["annotations"]
    vendor = dict((key, value) for key, value in old["containerEdits"].items() if key != "env")
    assert sorted(vendor) == ["deviceNodes", "hooks", "mounts"]
    digest = hashlib.sha256(json.dumps(vendor, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert shown["containerEdits"] == {"env": old["containerEdits"]["env"], "vendor common edits": (
        "%d device nodes, 1 mount, 1 hook from /var/run/cdi/nvidia.yaml, sha256 %s (diff_detail: full shows them)"
        % (len(vendor["deviceNodes"]), digest))}
    assert files["/etc/cdi/bcd-a1.json"]["after"] == ""
    # diff_detail: full shows the spec as it is on disk
    full = run(capsys, node, diff=True, check=True, generation=2, diff_detail="full",
               devices=[hold("a2", GPU_B, env=["TEAM=x"])])
    assert [d for d in full["diff"] if d.get("before_header") == "/etc/cdi/bcd-a1.json"][0]["before"] == old_spec
    assert full["plan"] == result["plan"]
    assert files["/etc/cdi/bcd-a2.json"]["before"] == ""
    assert json.loads(files["/etc/cdi/bcd-a2.json"]["after"])["devices"][0]["name"] == GPU_B
    assert files["/run/bcd/allocations/a2.env"]["after"].endswith("TEAM=x\n")
    (prepared,) = [d["prepared"] for d in diffs if "prepared" in d]
    assert diffs[0] == {"prepared": prepared}  # the plan comes first, the files after it
    assert "release a1" in prepared and "bind a2" in prepared
    assert prepared.index("release a1") < prepared.index("bind a2")
    # check mode: the diff described changes that were not made
    assert node.read("/etc/cdi/bcd-a1.json").decode() == old_spec


def test_refusals_are_warned_and_with_on_refusal_report_the_task_succeeds(capsys, node):
    result = run(capsys, node, generation=3, on_refusal="report", devices=[hold("a1", GPU_GONE), hold("a2", GPU_A)])
    assert not result.get("failed")
    assert result["section"]["state"] == "FAILED"
    assert result["section"]["message"] == "a1: %s not present" % GPU_GONE
    assert result["failures"] == [{"allocation_id": "a1", "generation": 3, "reason": "device-missing",
                                   "message": "%s not present" % GPU_GONE}]
    assert any("a1" in w and "device-missing" in w for w in warnings(result))
    assert node.exists("/etc/cdi/bcd-a2.json")


def test_a_refusal_fails_the_task_by_default(capsys, node):
    result = run(capsys, node, generation=3, devices=[hold("a1", GPU_GONE), hold("a2", GPU_A)])
    assert result["failed"] is True
    assert result["msg"] == ("assignments refused (the others of the pass are held): a1: device-missing: %s not present"
                             "; this node has GPU 0 %s, GPU 1 %s, GPU 2 %s" % (GPU_GONE, GPU_A, GPU_B, GPU_C))
    assert result["failures"][0]["reason"] == "device-missing"
    assert [text for text in warnings(result) if "refused" in text] == []  # the msg says it: no warning again
    assert node.exists("/etc/cdi/bcd-a2.json")  # the others of the pass are bound anyway


@pytest.mark.parametrize("fail_on_refusal, failed", [(True, True), (False, False)])
def test_the_deprecated_fail_on_refusal_still_says_fail_or_report(capsys, node, fail_on_refusal, failed):
    result = run(capsys, node, generation=3, fail_on_refusal=fail_on_refusal, devices=[hold("a1", GPU_GONE)])
    assert bool(result.get("failed")) is failed
    assert result["section"]["state"] == "FAILED"


def test_on_refusal_and_fail_on_refusal_together_are_an_argument_error(capsys, node):
    result = run(capsys, node, generation=3, on_refusal="report", fail_on_refusal=True, devices=[])
    assert result["failed"] is True
    assert result["msg"] == "parameters are mutually exclusive: on_refusal|fail_on_refusal"


def test_an_unprivileged_run_refuses_every_hold_and_writes_none(capsys, node, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    before = node.listing()
    result = run(capsys, node, generation=1, on_refusal="report", devices=[hold("a1", GPU_A), hold("a2", GPU_B + "/s1")])
    assert result["failed"] is True and result["changed"] is False  # whatever on_refusal says
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "node-unprivileged", NODE_UNPRIVILEGED), ("a2", "node-unprivileged", NODE_UNPRIVILEGED)]
    assert node.listing() == before  # no hold, and no state file either
    assert result["events"] == []
    assert not {"cdi", "devices.limits", "binding.kubernetes"} & set(result["capabilities"])
    assert result["msg"].startswith("add become: true") and NODE_UNPRIVILEGED in result["msg"]
    assert not any(NODE_UNPRIVILEGED in w for w in warnings(result))  # said once, in msg


def test_a_write_failure_fails_the_task_as_progressing(capsys, node):
    node.write("/etc/cdi", "not a directory")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result["failed"] is True
    assert result["section"]["state"] == "PROGRESSING"
    assert "retried" in result["msg"]
    assert result["events"] == []
    os.unlink(node.path("/etc/cdi"))
    retried = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert not retried.get("failed")
    assert retried["section"]["state"] == "CONVERGED"


@pytest.mark.parametrize("content, words", [
    ("gpus: [", "fakehw"),
    ('{"gpus": [{"uuid": "not-a-gpu"}]}', "gpus[0].uuid"),
    ('{"gpus": [], "disks": []}', "disks"),
    ('{"gpus": "GPU-1"}', "gpus"),
])
def test_a_bad_fakehw_file_fails_with_a_clear_message(capsys, node, content, words):
    with open(node.fakehw, "w") as handle:
        handle.write(content)
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result["failed"] is True
    assert words in result["msg"]
    assert not node.exists("/etc/cdi/bcd-a1.json")


def test_a_missing_fakehw_file_fails_with_a_clear_message(capsys, node):
    result = run(capsys, node, generation=1, devices=[], fakehw=node.fakehw + ".missing")
    assert result["failed"] is True
    assert node.fakehw + ".missing" in result["msg"]


def test_a_stale_generation_fails_the_task(capsys, node):
    run(capsys, node, generation=5, devices=[])
    result = run(capsys, node, generation=4, devices=[])
    assert result["failed"] is True
    assert "older" in result["msg"]


@pytest.mark.parametrize("args, words", [
    ({"generation": "latest", "devices": []}, "generation"),
    ({"generation": 1}, "devices"),
])
def test_malformed_options_fail_with_ansibles_argument_error(capsys, node, args, words):
    result = run(capsys, node, **args)
    assert result["failed"] is True
    assert words in result["msg"]


def test_a_damaged_event_journal_fails_clearly(capsys, node):
    os.makedirs(os.path.join(node.state(), "events.jsonl"))  # not a file
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    assert result["failed"] is True
    assert "events.jsonl" in result["msg"]


def test_hostile_input_is_refused_not_crashed_on(capsys, node):
    devices = [hold("../../etc/passwd", GPU_A), "x", {"allocation_id": "a2", "devices": [{"id": GPU_A}],
                                                      "binding": "BINDING_HOLD", "env": ["A=1\nB=2"]}, hold("a3", GPU_B)]
    result = run(capsys, node, generation=1, on_refusal="report", devices=devices)
    assert not result.get("failed")
    assert [f["reason"] for f in result["failures"]] == ["invalid-assignment"] * 3
    assert [h["allocation_id"] for h in result["holds"]] == ["a3"]


@pytest.mark.parametrize("instances", [
    [{"gpus": [GPU_A]}],  # instance_id missing
    [{"instance_id": "inst_1", "gpus": [GPU_A], "domain": "vm1"}],  # an unknown field
])
def test_malformed_instances_fail_the_task_with_an_argument_error(capsys, node, instances):
    # DESIGN: a malformed option outside the assignments fails the task with Ansible's usual
    # argument error, never a traceback.
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)], instances=instances)
    assert result.get("failed") is True
    assert "instances" in result["msg"]
    assert not node.exists("/etc/cdi/bcd-a1.json")


def test_a_state_dir_outside_root_is_refused(capsys, node):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A)], state_dir="/../../outside")
    assert result["failed"] is True
    assert "outside root" in result["msg"]
    assert sorted(os.listdir(node.base)) == ["fakehw.json", "root"]
    assert not os.path.exists(os.path.join(os.path.dirname(node.base), "outside"))


def test_diff_shows_the_slice_a_run_creates_and_stops_beside_the_files(capsys, node):
    limits = {"cpus": "0-3", "memory_bytes": 1 << 30}
    created = run(capsys, node, diff=True, generation=1, devices=[hold("a1", GPU_A, limits=limits)])
    slices = [d for d in created["diff"] if d.get("before_header", "").startswith("slice ")]
    assert slices == [{"before_header": "slice bcd-alloc-a1.slice (absent)", "after_header": "slice bcd-alloc-a1.slice",
                       "before": "", "after": "AllowedCPUs=0-3\nMemoryMax=1073741824\nMemoryHigh=966367641\n"}]
    assert [d["before_header"] for d in created["diff"] if "before_header" in d][:2] == [
        "/run/bcd/allocations/a1.env (absent)", "/etc/cdi/bcd-a1.json (absent)"]
    assert created["plan"][0]["slice"] == {"op": "apply", "name": "bcd-alloc-a1.slice", "hugetlb_max": {},
                                           "properties": {"AllowedCPUs": "0-3", "MemoryMax": "1073741824",
                                                          "MemoryHigh": "966367641"}}
    released = run(capsys, node, diff=True, check=True, generation=2, devices=[])
    (stopped,) = [d for d in released["diff"] if d.get("before_header", "").startswith("slice ")]
    assert stopped["after_header"] == "slice bcd-alloc-a1.slice (stopped)"
    assert stopped["before"].startswith("AllowedCPUs=0-3\n") and stopped["after"] == ""
    assert released["plan"][0]["slice"] == {"op": "remove", "name": "bcd-alloc-a1.slice"}
    assert node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json")  # check mode stopped nothing


def test_a_hostile_cpulist_is_refused_alone_and_the_others_bind(capsys, node):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"mems": "0-30000000"}),
                                                      hold("a2", GPU_B)])
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "invalid-assignment", "limits.mems: NUMA node 30000000 is beyond 1023, the most any host has")]
    assert [h["allocation_id"] for h in result["holds"]] == ["a2"]


def run_as(uid, capsys, node, check=False, **args):
    """``run`` in a forked child that has dropped root for ``uid``: a real unprivileged process (the
    permission bits hold for it), which needs no interpreter another account could start."""
    # The interpreter may lie where the other account cannot read (pyenv under /root): what the child
    # imports late is imported now.
    import encodings.utf_8_sig  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, run the module, send its result, never return
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = run(capsys, node, check=check, **args)
            os.write(write_end, json.dumps(result).encode("utf-8"))
        except BaseException:  # pylint: disable=broad-except  # reported to the parent, which fails
            import traceback  # pylint: disable=import-outside-toplevel
            os.write(write_end, json.dumps({"child_error": traceback.format_exc()}).encode("utf-8"))
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks).decode("utf-8"))
    assert "child_error" not in result, result
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop it in a child")
def test_without_become_the_real_run_refuses_as_check_mode_said(capsys, node):
    """Forgetting become on a node the role never set up: no helper, and no state directory this
    account may create. Check mode and the real run give the same refusals, the real run writes nothing,
    both fail the task, and the message says first what an Ansible user does."""
    open_to_all(node.root)
    os.makedirs(node.path("/var/lib"), mode=0o755)  # root's, as on a real node: /var/lib/bcd cannot be made
    before = node_tree(node.base)
    devices = [hold("a1", GPU_A), hold("a2", GPU_B + "/s1")]
    planned = run_as(65534, capsys, node, check=True, generation=1, devices=devices)
    done = run_as(65534, capsys, node, generation=1, devices=devices)
    for result in (planned, done):
        assert result["failed"] is True
        assert result["msg"] == UNPRIVILEGED_MSG
        assert result["changed"] is False
        assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
            ("a1", "node-unprivileged", NODE_UNPRIVILEGED), ("a2", "node-unprivileged", NODE_UNPRIVILEGED)]
        assert result["events"] == []
        texts = warnings(result)
        assert not [text for text in texts if "refused" in text]  # msg says what to do first, and lists them
        assert ("state_dir /var/lib/bcd does not exist and uid 65534 cannot create it: this pass wrote nothing "
                "and journaled no event") in texts
    assert planned["plan"] == done["plan"] and planned["holds"] == done["holds"]
    assert node_tree(node.base) == before


def node_tree(base):
    """Every path under ``base`` with its content (files) or None (directories)."""
    tree = {}
    for directory, names, files in os.walk(base):
        for name in names:
            tree[os.path.join(directory, name)] = None
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                tree[path] = handle.read()
    return tree


def test_a_typo_in_an_assignment_is_refused_and_the_others_are_bound(capsys, node):
    typo = hold("a1", GPU_A)
    typo["reservaton_id"] = typo.pop("reservation_id")
    mig = hold("a2", GPU_B)
    mig["devices"] = [{"id": GPU_B, "device_clas": "gpu.mig"}]
    result = run(capsys, node, generation=1, devices=[typo, mig, hold("a3", GPU_C)])
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "invalid-assignment", "reservaton_id: unknown field; did you mean reservation_id?"),
        ("a2", "invalid-assignment", "devices[0].device_clas: unknown field; did you mean device_class?")]
    assert "a1 refused (invalid-assignment): reservaton_id: unknown field; did you mean reservation_id?" \
        in refusals_shown(result)
    assert not node.exists("/etc/cdi/bcd-a1.json") and not node.exists("/etc/cdi/bcd-a2.json")
    assert node.exists("/etc/cdi/bcd-a3.json")


def test_a_bad_id_or_class_keeps_the_spec_message_and_the_warning_says_what_the_node_has(capsys, node):
    """The refusals keep the spec's exact messages; what the task shows of them (its msg, failing; its
    warnings, on_refusal: report) adds the GPUs the node has (index and UUID), the GPU's MIG instances, or the
    device classes a hold may name."""
    gpus = "this node has GPU 0 %s, GPU 1 %s, GPU 2 %s" % (GPU_A, GPU_B, GPU_C)
    devices = [hold("a1", "nvidia0"), hold("a2", GPU_A), hold("a3", GPU_A + "/gi3/ci0"), hold("a4", GPU_C)]
    devices[3]["devices"][0]["device_class"] = "GPU"
    failed = run(capsys, node, generation=1, devices=devices)
    reported = run(capsys, node, generation=1, devices=devices, on_refusal="report")
    assert refusals_shown(failed) == refusals_shown(reported)
    result = failed
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a1", "device-missing", "nvidia0 not present"),
        ("a3", "device-missing", "%s has no MIG instance gi3/ci0" % GPU_A),
        ("a4", "unsupported-device", "device class GPU cannot be held")]
    texts = refusals_shown(result)
    assert "a1 refused (device-missing): nvidia0 not present; " + gpus in texts
    assert "a3 refused (device-missing): %s has no MIG instance gi3/ci0; %s has gi1/ci0, gi2/ci0" % (GPU_A, GPU_A) \
        in texts
    assert ("a4 refused (unsupported-device): device class GPU cannot be held; did you mean gpu? a device_class is "
            "one of gpu, gpu.mig, gpu.slot (empty reads as gpu)") in texts
    assert [e["body"]["message"] for e in result["events"] if e["type"] == "AllocationFailed"] == [
        "nvidia0 not present", "%s has no MIG instance gi3/ci0" % GPU_A, "device class GPU cannot be held"]

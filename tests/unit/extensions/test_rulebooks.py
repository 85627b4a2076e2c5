# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rulebooks in extensions/eda/rulebooks and the playbooks they run (playbooks/): the rulebooks are what
ansible-rulebook takes (its schema, as ansible-lint carries it), they react to the fields the source
bcd.devices.gateway puts on its events, run their rules in parallel, and render no event field into anything but
a message; the playbooks they name exist, pass ``--syntax-check`` and read nothing of the event; and the GPU
recovery runs on fakehw nodes as ansible-rulebook runs it (the event passed as extra vars): it asks the node which
GPUs are unhealthy, takes them out of service under its lease, waits for their holds, resets them, reads them
again and puts back only those that read healthy, a second recovery of the node ends at once, a hostile event
runs nothing, and a recovery that stopped is raised again by the node."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import SIGNED_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import busy_check
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState

# ansible-lint carries the rulebook schema; it is in .venv (ansible-core 2.19), not in the other cores' venvs, so
# the rulebooks are checked against it once, under 2.19 (make units), and their other tests run under each core.
try:
    from ansiblelint import schemas
except ImportError:  # pragma: no cover - the 2.20 to 2.22 venvs
    schemas = None
needs_schema = pytest.mark.skipif(schemas is None, reason="ansible-lint (and its rulebook schema) is in .venv only")

REPO = Path(__file__).resolve().parents[3]
RULEBOOKS = sorted((REPO / "extensions" / "eda" / "rulebooks").glob("*.yml"))
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# The fields of the source's events (docs/event-driven.md, "The events on the queue").
EVENT_FIELDS = {"type", "node", "seq", "allocation", "devices", "reason", "generation", "signed", "body"}


def env_for(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
                ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))


def test_there_are_the_two_rulebooks():
    assert [path.name for path in RULEBOOKS] == ["allocation_failed.yml", "gpu_life.yml"]


@needs_schema
@pytest.mark.parametrize("path", RULEBOOKS, ids=lambda p: p.name)
def test_a_rulebook_is_valid_by_the_rulebook_schema(path):
    schema = json.loads((Path(schemas.__file__).parent / "rulebook.json").read_text())
    jsonschema.validate(yaml.safe_load(path.read_text()), schema)


@pytest.mark.parametrize("path", RULEBOOKS, ids=lambda p: p.name)
def test_a_rulebook_is_what_ansible_rulebook_takes(path):
    rulebook = yaml.safe_load(path.read_text())
    for ruleset in rulebook:
        [source] = ruleset["sources"]
        assert set(source) == {"name", "bcd.devices.gateway"}
        assert "port" in source["bcd.devices.gateway"]
        for rule in ruleset["rules"]:
            used = set(re.findall(r"event\.bcd\.([a-z_]+)", json.dumps(rule)))
            assert used and used <= EVENT_FIELDS, (rule["name"], used - EVENT_FIELDS)
            actions = rule.get("actions") or [rule["action"]]
            for action in actions:
                if "run_playbook" in action:
                    name = action["run_playbook"]["name"]
                    assert name.startswith("bcd.devices."), name
                    # where ansible-rulebook looks for a collection's playbook: <collection>/playbooks/<name>.yml
                    assert (REPO / "playbooks" / (name.split(".", 2)[2] + ".yml")).is_file(), name


def test_the_gpu_rulebook_recovers_a_signed_gpuunhealthy_and_reports_the_rest():
    [ruleset] = yaml.safe_load((REPO / "extensions/eda/rulebooks/gpu_life.yml").read_text())
    by_name = {rule["name"]: rule for rule in ruleset["rules"]}
    assert by_name["A hold was refused"]["condition"] == 'event.bcd.type == "AllocationFailed"'
    assert "debug" in by_name["A hold was refused"]["action"]
    unhealthy = by_name["A GPU is unhealthy"]
    assert unhealthy["condition"] == 'event.bcd.type == "GPUUnhealthy" and event.bcd.signed == true'
    # nothing of the event but its node (meta.hosts, which ansible-rulebook limits the run to) reaches the playbook
    assert unhealthy["action"] == {"run_playbook": {"name": "bcd.devices.gpu_recover"}}


def test_the_gpu_rulebook_runs_its_rules_in_parallel():
    """Sequential (ansible-rulebook's default), one node's recovery waiting up to an hour for a hold to go held up
    every other node's recovery and every report behind it."""
    [ruleset] = yaml.safe_load((REPO / "extensions/eda/rulebooks/gpu_life.yml").read_text())
    assert ruleset["execution_strategy"] == "parallel"


def templates(value):
    """Every string of ``value`` (a rule's action, a play) that Jinja would render, with where it is."""
    if isinstance(value, dict):
        return [(path, text) for key, item in value.items() for path, text in
                [("%s.%s" % (key, sub) if sub else str(key), text) for sub, text in templates(item)]]
    if isinstance(value, list):
        return [("[%d]%s" % (index, "." + sub if sub else ""), text) for index, item in enumerate(value)
                for sub, text in templates(item)]
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return [("", value)]
    return []


@pytest.mark.parametrize("path", RULEBOOKS, ids=lambda p: p.name)
def test_a_rulebook_renders_event_data_only_into_a_printed_message(path):
    """ansible-rulebook renders an action's arguments with Jinja (its own NativeTemplate, once: util.render_string
    in 1.1.7 and 1.3.0), the event among its variables. A debug message is printed and goes no further; anything
    else that carries a rendered event field onwards (a playbook's or a module's extra_vars, a job template's, a
    fact posted back) hands it to ansible-core, which renders extra vars as templates: code on the controller."""
    for ruleset in yaml.safe_load(path.read_text()):
        for rule in ruleset["rules"]:
            for action in rule.get("actions") or [rule["action"]]:
                [(name, args)] = action.items()
                for where, text in templates(args):
                    if re.search(r"\bevents?\b", text):
                        assert (name, where) == ("debug", "msg"), (rule["name"], name, where, text)
                if name in ("run_playbook", "run_module", "run_job_template", "run_workflow_template"):
                    assert "extra_vars" not in args and "job_args" not in args and "module_args" not in args, rule


@pytest.mark.parametrize("path", PLAYBOOKS, ids=lambda p: p.name)
def test_a_shipped_playbook_reads_nothing_of_an_event(path):
    """ansible-rulebook passes the event to a playbook as the extra var ansible_eda, which ansible-core renders as a
    template wherever it is read: a shipped playbook never reads it, nor any variable named after an event."""
    text = path.read_text()
    assert "ansible_eda" not in text
    for where, template in templates(yaml.safe_load(text)):
        assert not re.search(r"\b(ansible_eda|events?)\b", template), (where, template)


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook")
def test_the_playbooks_pass_the_syntax_check(tmp_path):
    books = [str(p) for p in PLAYBOOKS]
    assert [Path(b).name for b in books] == ["gpu_recover.yml"]
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", "localhost,"] + books, env=env_for(tmp_path),
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the recovery on a fakehw node -----------------------------------------------------------------------

GPU_1 = "GPU-5f1c2a90-0001-4000-8000-000000000001"
GPU_2 = "GPU-5f1c2a90-0001-4000-8000-000000000002"
ROW_REMAP = "row remapping failed (the GPU has no spare rows left)"
needs_playbook = pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(),
                                    reason="needs root and ansible-playbook")


class FakeNode:
    """A fakehw node of two GPUs (hack/fakehw_node.py) in an inventory, as the rulebook's inventory names it."""

    def __init__(self, tmp_path, sick=None, **health):
        self.tmp = tmp_path
        self.root = tmp_path / "node-a"
        subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(self.root), "--compact",
                        "--gpus", "2"], check=True, capture_output=True)
        self.fakehw = self.root / "fakehw.yml"
        if sick:
            self.set_health(sick, health or {"retired_pages_pending": True, "xids": [48]})
        (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"node-a": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "bcd_root": str(self.root), "bcd_fakehw": str(self.fakehw)}}}}))

    def hardware(self):
        return yaml.safe_load(self.fakehw.read_text())

    def set_health(self, gpu, health):
        hw = self.hardware()
        for entry in hw["gpus"]:
            if entry["uuid"] == gpu:
                entry["health"] = health
                if not health:
                    entry.pop("health")
        self.fakehw.write_text(yaml.safe_dump(hw, sort_keys=False))

    def host(self):
        return FakeHwHost(str(self.root), str(self.fakehw))

    def converge(self, generation, devices=()):
        """A pass, as the node's timers run one (it journals the conditions that appeared or cleared)."""
        return run_pass(self.host(), generation, list(devices), lock_timeout=30).to_dict()

    def gpus(self):
        """``{uuid: (healthy, in maintenance (its reason), busy)}``, as the node reads them now."""
        return dict((entry["uuid"], (entry["healthy"], next((c["reason"] for c in entry["claimed_by"]
                                                             if c["kind"] == "maintenance"), None), entry["busy"]))
                    for entry in busy_check(self.host()))

    def journal(self):
        """``[(seq, type, reason)]`` of the node's journal, each signed event checked against the node's key."""
        state = self.root / "var/lib/bcd"
        key = NodeState(str(state)).public_key()
        found = []
        for line in (state / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            if event["type"] in SIGNED_TYPES:
                assert verify_report(event, key), event
            found.append((event["seq"], event["type"], event["body"].get("reason")))
        return found

    def records(self):
        path = self.root / "var/lib/bcd/maintenance.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def recover(self, *extra, background=False):
        """``ansible-playbook bcd.devices.gpu_recover`` on the node, ``-e`` each of ``extra`` (a dict as JSON, or an
        ``@file``), as ansible-rulebook's run_playbook runs it: ``(returncode, output)``, or the process."""
        command = [str(ANSIBLE_PLAYBOOK), "-i", str(self.tmp / "hosts.yml"), "bcd.devices.gpu_recover"]
        for value in extra:
            command += ["-e", value if isinstance(value, str) else json.dumps(value)]
        if background:
            return subprocess.Popen(command, env=env_for(self.tmp), cwd=str(self.tmp), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        done = subprocess.run(command, env=env_for(self.tmp), cwd=str(self.tmp), capture_output=True, text=True,
                              timeout=300, check=False)
        return done.returncode, done.stdout + done.stderr


def the_event(gpu, devices=None):
    """What ansible-rulebook passes a playbook it runs for the rule's event (its run_playbook: extra vars)."""
    return {"ansible_eda": {"ruleset": "GPU nodes' events", "rule": "A GPU is unhealthy", "event": {
        "bcd": {"type": "GPUUnhealthy", "node": "node-a", "seq": 1, "devices": [gpu] if devices is None else devices,
                "signed": True}, "meta": {"hosts": "node-a"}}}}


def ran(output, task, outcome="(changed|ok)"):
    return re.search(r"TASK \[%s[^\]]*\][^\n]*\n%s: \[node-a\]" % (re.escape(task), outcome), output) is not None


@needs_playbook
def test_gpu_recover_asks_the_node_resets_a_free_unhealthy_gpu_and_puts_it_back_healthy(tmp_path):
    node = FakeNode(tmp_path, sick=GPU_2)
    node.converge(1)  # the node's pass journals the GPUUnhealthy the rulebook acts on
    assert node.gpus() == {GPU_1: (True, None, False), GPU_2: (False, None, False)}

    # the event names another GPU: the playbook takes nothing from it, and asks the node
    code, output = node.recover(the_event(GPU_1))

    assert code == 0, output
    assert node.gpus() == {GPU_1: (True, None, False), GPU_2: (True, None, False)}
    assert [gpu.get("health") for gpu in node.hardware()["gpus"]] == [None, None]  # the reset cleared the file
    for task in ("Ask the node which GPUs are unhealthy", "Take the GPUs out of service under this recovery's lease",
                 "Wait until no hold claims them", "Reset them and read their health again",
                 "Every GPU reads healthy after its reset", "Put back in service the GPUs that read healthy"):
        assert ran(output, task), task
    assert [(kind, reason) for _seq, kind, reason in node.journal()] == [
        ("GPUUnhealthy", "GPUFaulted"), ("GPUMaintenanceStarted", "MaintenanceStarted"),
        ("GPUReset", "ResetHealthy"), ("GPUMaintenanceEnded", "MaintenanceEnded")]
    node.converge(2)
    assert node.journal()[-1][1:] == ("GPUUnhealthyCleared", "ConditionCleared")


@needs_playbook
def test_gpu_recover_keeps_a_gpu_its_reset_does_not_help_out_of_service(tmp_path):
    node = FakeNode(tmp_path, sick=GPU_2, row_remap_failure=True, reset_clears=False)
    node.converge(1)

    code, output = node.recover(the_event(GPU_2), {"bcd_reraise_after": 0})

    assert code != 0
    assert ("%s was reset and is still unhealthy: %s; it stays in maintenance (GPUResetIneffective): reboot the node "
            "or replace the GPU" % (GPU_2, ROW_REMAP)) in output
    assert node.gpus()[GPU_2] == (False, "unhealthy, being reset", False)
    assert node.records()[GPU_2]["reset"]["healthy"] is False
    assert node.records()[GPU_2]["lease"]["until"] <= time.time()  # the lease ended with the run
    assert [(kind, reason) for _seq, kind, reason in node.journal()] == [
        ("GPUUnhealthy", "GPUFaulted"), ("GPUMaintenanceStarted", "MaintenanceStarted"),
        ("GPUReset", "ResetIneffective"), ("GPUResetIneffective", "ResetIneffective")]
    # it waits for a person: no pass raises it again, no recovery takes it again
    time.sleep(0.2)
    node.converge(2)
    assert len(node.journal()) == 4
    code, output = node.recover(the_event(GPU_2))
    assert code == 0 and "no GPU of node-a is to be recovered" in output, output
    assert len(node.journal()) == 4


@needs_playbook
def test_gpu_recover_does_not_reset_a_held_gpu_and_the_node_raises_it_again_once_the_recovery_stopped(tmp_path):
    node = FakeNode(tmp_path)
    node.converge(1, [{"allocation_id": "a1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD",
                       "devices": [{"id": GPU_1}]}])
    node.set_health(GPU_1, {"row_remap_failure": True})  # after the hold took it
    node.converge(2, [{"allocation_id": "a1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD",
                       "devices": [{"id": GPU_1}]}])
    health = node.hardware()["gpus"][0]["health"]

    code, output = node.recover(the_event(GPU_1), {"bcd_wait_retries": 1, "bcd_wait_delay": 0,
                                                   "bcd_reraise_after": 1})

    assert code != 0
    assert "%s is busy: held whole by a1" % GPU_1 in output
    assert node.gpus()[GPU_1] == (False, "unhealthy, being reset", True)
    assert node.hardware()["gpus"][0]["health"] == health  # not reset under a hold
    assert "GPUReset" not in [kind for _seq, kind, _reason in node.journal()]
    [raised] = [seq for seq, kind, _reason in node.journal() if kind == "GPUUnhealthy"]

    # nothing acts on it any more (the wait ran out; or the engine died): a pass raises it again after the interval
    time.sleep(1.2)
    node.converge(3, [{"allocation_id": "a1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD",
                       "devices": [{"id": GPU_1}]}])
    assert [kind for _seq, kind, _reason in node.journal()][-2:] == ["GPURecoveryStalled", "GPUUnhealthy"]
    again = [seq for seq, kind, _reason in node.journal() if kind == "GPUUnhealthy"]
    assert len(again) == 2 and again[1] > raised  # a genuine new occurrence: the rulebook runs the recovery again

    # the control plane releases the hold; the recovery that event runs ends the job
    node.converge(4)
    code, output = node.recover(the_event(GPU_1))
    assert code == 0, output
    assert node.gpus()[GPU_1] == (True, None, False)


@needs_playbook
def test_gpu_recover_runs_nothing_a_hostile_event_carries(tmp_path):
    """A device id (or any event field) holding a template: ansible-core would render it wherever the playbook read
    ansible_eda; the playbook never does, as extra vars given inline or in a file (ansible-runner's way)."""
    node = FakeNode(tmp_path, sick=GPU_2)
    node.converge(1)
    marker = tmp_path / "pwned"
    payload = "{{ lookup('pipe', 'touch %s') }}" % marker
    hostile = the_event(payload, devices=[payload, GPU_1])
    hostile["ansible_eda"]["event"]["bcd"]["node"] = payload
    hostile["ansible_eda"]["event"]["bcd"]["body"] = {"message": payload}
    (tmp_path / "extravars.json").write_text(json.dumps(hostile))

    code, output = node.recover(hostile, "@%s" % (tmp_path / "extravars.json"))

    assert code == 0, output
    assert not marker.exists()
    assert node.gpus()[GPU_2] == (True, None, False)  # recovered from what the node said, not from the event
    # the payload is live: a playbook that reads the event does run it, which is what the recovery never does
    (tmp_path / "reads.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n"
        "        msg: \"{{ ansible_eda.event.bcd.devices }}\"\n")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "reads.yml"),
                           "-e", json.dumps(hostile)], env=env_for(tmp_path), cwd=str(tmp_path), capture_output=True,
                          text=True, timeout=300, check=False)
    assert marker.exists(), done.stdout + done.stderr


@needs_playbook
def test_a_second_recovery_of_the_node_finds_the_first_s_lease_and_ends_at_once(tmp_path):
    node = FakeNode(tmp_path)
    hold = [{"allocation_id": "a1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_1}]}]
    node.converge(1, hold)
    node.set_health(GPU_1, {"retired_pages_pending": True})
    first = node.recover(the_event(GPU_1), {"bcd_wait_retries": 120, "bcd_wait_delay": 1}, background=True)
    try:
        deadline = time.time() + 120
        while not node.records().get(GPU_1, {}).get("lease") and time.time() < deadline:
            time.sleep(0.2)
        lease = node.records()[GPU_1]["lease"]["id"]

        code, output = node.recover(the_event(GPU_1))

        assert code == 0, output
        assert "recovery %s of this node is in progress" % lease in output
        assert not ran(output, "Wait until no hold claims them") and not ran(output, "Reset them and read their health")
        # the first goes on once the hold is gone
        node.converge(2)
        output, _err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, output
    assert node.gpus()[GPU_1] == (True, None, False)
    kinds = [kind for _seq, kind, _reason in node.journal()]
    assert kinds.count("GPUMaintenanceStarted") == 1 and kinds.count("GPUReset") == 1

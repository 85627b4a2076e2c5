# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rulebooks in extensions/eda/rulebooks and the playbooks they run (playbooks/): the rulebooks are what
ansible-rulebook takes (its schema, as ansible-lint carries it), they react to the fields the source
bcd.devices.gateway puts on its events, the playbooks they name exist and pass ``--syntax-check``, and the GPU
recovery runs on a fakehw node as ansible-rulebook runs it (the event in ``ansible_eda.event``): maintenance,
the wait for the holds, the reset, back in service; and the role's own delivery, posted to the running source,
is acknowledged on the node."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

# ansible-lint carries the rulebook schema; it is in .venv (ansible-core 2.19), not in the other cores' venvs, so
# the rulebooks are checked against it once, under 2.19 (make units), and their other tests run under each core.
try:
    from ansiblelint import schemas
except ImportError:  # pragma: no cover - the 2.20 to 2.22 venvs
    schemas = None
needs_schema = pytest.mark.skipif(schemas is None, reason="ansible-lint (and its rulebook schema) is in .venv only")

REPO = Path(__file__).resolve().parents[3]
RULEBOOKS = sorted((REPO / "extensions" / "eda" / "rulebooks").glob("*.yml"))
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
    assert unhealthy["action"] == {"run_playbook": {"name": "bcd.devices.gpu_recover"}}


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="needs ansible-playbook")
def test_the_playbooks_pass_the_syntax_check(tmp_path):
    books = sorted(str(p) for p in (REPO / "playbooks").glob("*.yml"))
    assert [Path(b).name for b in books] == ["gpu_recover.yml"]
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", "localhost,"] + books, env=env_for(tmp_path),
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def make_node(tmp_path, unhealthy_gpu):
    root = tmp_path / "node-a"
    subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(root), "--compact",
                    "--gpus", "2"], check=True, capture_output=True)
    fakehw = root / "fakehw.yml"
    hw = yaml.safe_load(fakehw.read_text())
    for gpu in hw["gpus"]:
        if gpu["uuid"] == unhealthy_gpu:
            gpu["health"] = {"retired_pages_pending": True, "xids": [48]}
    fakehw.write_text(yaml.safe_dump(hw, sort_keys=False))
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "bcd_root": str(root), "bcd_fakehw": str(fakehw)}}}}))
    return root, fakehw


def run_playbook(tmp_path, playbook, extra):
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), playbook, "-e", json.dumps(extra)],
                          env=env_for(tmp_path), cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          check=False)
    return done.returncode, done.stdout + done.stderr


def gpu_info(tmp_path, root, fakehw):
    (tmp_path / "info.yml").write_text("""
- hosts: all
  gather_facts: false
  tasks:
    - bcd.devices.holds_info: {root: "%s", fakehw: "%s"}
      register: info
    - ansible.builtin.copy: {content: "{{ info.gpus | to_json }}", dest: "%s/info.json", mode: "0600"}
""" % (root, fakehw, tmp_path))
    code, output = run_playbook(tmp_path, str(tmp_path / "info.yml"), {})
    assert code == 0, output
    return {gpu["uuid"]: gpu for gpu in json.loads((tmp_path / "info.json").read_text())}


# ansible-rulebook passes the matching event to the playbook as ansible_eda.event (its run_playbook action)
def eda_event(gpu):
    return {"ansible_eda": {"event": {"bcd": {"type": "GPUUnhealthy", "node": "node-a", "devices": [gpu]},
                                      "meta": {"hosts": "node-a"}}}}


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_gpu_recover_resets_a_free_unhealthy_gpu_and_puts_it_back(tmp_path):
    gpu = "GPU-5f1c2a90-0001-4000-8000-000000000002"
    root, fakehw = make_node(tmp_path, gpu)
    before = gpu_info(tmp_path, root, fakehw)[gpu]
    assert before["health"] and before["maintenance"] is None

    code, output = run_playbook(tmp_path, "bcd.devices.gpu_recover", eda_event(gpu))

    assert code == 0, output
    after = gpu_info(tmp_path, root, fakehw)
    assert after[gpu]["health"] == [] and after[gpu]["maintenance"] is None and not after[gpu]["busy"]
    hw = json.loads(fakehw.read_text())  # the stand-in rewrote the hardware file, JSON (which fakehw reads)
    assert [g.get("health") for g in hw["gpus"]] == [None, {}]
    for task in ("Keep new holds off the GPUs", "Wait until no hold claims them", "Clear the GPUs' faults",
                 "End their maintenance"):
        assert re.search(r"TASK \[%s[^\]]*\][^\n]*\n(changed|ok): \[node-a\]" % re.escape(task), output), task


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_gpu_recover_does_not_reset_a_gpu_a_hold_still_claims(tmp_path):
    gpu = "GPU-5f1c2a90-0001-4000-8000-000000000001"
    root, fakehw = make_node(tmp_path, gpu)
    (tmp_path / "bind.yml").write_text("""
- hosts: all
  gather_facts: false
  tasks:
    - bcd.devices.holds:
        root: "%s"
        fakehw: "%s"
        generation: 1
        devices: [{allocation_id: a1, reservation_id: rsv_1, binding: BINDING_HOLD, devices: [{id: "%s"}]}]
""" % (root, fakehw, gpu))
    # the GPU turns unhealthy only after the hold took it
    hw = yaml.safe_load(fakehw.read_text())
    health = hw["gpus"][0].pop("health")
    fakehw.write_text(yaml.safe_dump(hw, sort_keys=False))
    code, output = run_playbook(tmp_path, str(tmp_path / "bind.yml"), {})
    assert code == 0, output
    hw["gpus"][0]["health"] = health
    fakehw.write_text(yaml.safe_dump(hw, sort_keys=False))

    code, output = run_playbook(tmp_path, "bcd.devices.gpu_recover",
                                dict(eda_event(gpu), bcd_wait_retries=1, bcd_wait_delay=0))

    assert code != 0
    assert "%s is busy: held whole by a1" % gpu in output
    info = gpu_info(tmp_path, root, fakehw)[gpu]
    assert info["maintenance"] == "unhealthy, being reset" and info["busy"] and info["health"]
    assert yaml.safe_load(fakehw.read_text())["gpus"][0]["health"] == health  # not reset under a hold

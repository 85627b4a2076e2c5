# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's ``--check --diff`` is a plan a person reviews (issue 32): on fakehw nodes carrying NVIDIA's real
spec (48 mounts, 4 hooks, 4 device nodes), each new hold's diff shows what bcd decides and the vendor's common
edits as one line; 200 more vendor mounts add no line, only change that one; ``diff_detail: full`` shows every
line; check mode still predicts the real run, and the files written are whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
NODES = 3
HOLDS = 3


def play_text():
    """The play, its devices built in YAML (no filter plugin of the test's own)."""
    devices = [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
                "devices": [{"id": "{{ gpu_prefix }}%d" % (i + 1)}]} for i in range(HOLDS)]
    return yaml.safe_dump([{"hosts": "nodes", "gather_facts": False, "tasks": [{
        "name": "Converge", "bcd.devices.holds": {
            "root": "{{ node_root }}", "fakehw": "{{ node_root }}/fakehw.yml", "generation": 1,
            "diff_detail": "{{ detail | default('summary') }}", "devices": devices}}]}], sort_keys=False)


def ansible_playbook(tmp_path, *extra):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
                          + list(extra), env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done.stdout


def add_vendor_mounts(root, count):
    path = root / "var" / "run" / "cdi" / "nvidia.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["containerEdits"]["mounts"] += [{"hostPath": "/usr/lib/x86_64-linux-gnu/libextra%d.so" % i,
                                          "containerPath": "/usr/lib/x86_64-linux-gnu/libextra%d.so" % i,
                                          "options": ["ro", "nosuid", "nodev", "bind"]} for i in range(count)]
    path.write_text(yaml.safe_dump(spec))


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_a_fleets_check_diff_is_a_few_lines_a_hold_and_vendor_mounts_add_none(tmp_path):
    hosts = {}
    for number in range(NODES):
        root = tmp_path / ("node-%d" % number)
        subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(root),
                        "--node-number", str(number)], check=True, capture_output=True)
        hardware = yaml.safe_load((root / "fakehw.yml").read_text())
        hosts["node-%d" % number] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                     "node_root": str(root), "gpu_prefix": hardware["gpus"][0]["uuid"][:-1]}
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(play_text())
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")

    plain = ansible_playbook(tmp_path, "--check").splitlines()
    summary = ansible_playbook(tmp_path, "--check", "--diff").splitlines()
    # measured: 31 lines a new hold (its plan line, the env file, the spec's annotations, a line a device, its env
    # lines and the vendor line, the diff headers), against 300 here with the 48 mounts shown (some 600 on a
    # real node)
    per_hold = (len(summary) - len(plain)) / (NODES * HOLDS)
    assert per_hold <= 35, per_hold
    assert sum("vendor common edits" in line and "48 mounts, 4 hooks from /var/run/cdi/nvidia.yaml" in line
               for line in summary) == NODES * HOLDS, "\n".join(summary)

    for number in range(NODES):
        add_vendor_mounts(tmp_path / ("node-%d" % number), 200)
    more = ansible_playbook(tmp_path, "--check", "--diff").splitlines()
    assert len(more) == len(summary)  # 200 more vendor mounts: not one line more
    assert sum("248 mounts, 4 hooks" in line for line in more) == NODES * HOLDS
    full = ansible_playbook(tmp_path, "--check", "--diff", "-e", "detail=full").splitlines()
    assert len(full) - len(plain) > NODES * HOLDS * 248 * 4  # every mount of every hold, 5 lines or more each

    # check mode wrote nothing; the real run writes specs carrying every vendor edit
    assert not (tmp_path / "node-0" / "etc" / "cdi").exists()
    ansible_playbook(tmp_path)
    spec = json.loads((tmp_path / "node-0" / "etc" / "cdi" / "bcd-a0.json").read_text())
    assert len(spec["containerEdits"]["mounts"]) == 248 and len(spec["containerEdits"]["hooks"]) == 4

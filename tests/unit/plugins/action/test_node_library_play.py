# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A playbook runs bcd.devices.holds on two fakehw nodes with the same devices: one has the library as the
role installs it and runs it (``ran_from: node-library``), the other has none and runs the module as Ansible
ships it (``ran_from: bundled``, with a warning naming why). Both bind the same holds and return the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
sys.path.insert(0, str(REPO / "hack"))
import node_library as installer  # noqa: E402  pylint: disable=wrong-import-position

GPU = "GPU-5f1c2a90-0001-4000-8000-00000000000%d"
PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Converge
      bcd.devices.holds:
        root: "{{ node_root }}"
        fakehw: "{{ node_fakehw }}"
        generation: 1
        devices: "{{ node_devices }}"
      register: result
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ result | to_json }}"
        dest: "{{ node_root }}/../result-{{ pass_number }}.json"
"""
DEVICES = [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
            "devices": [{"id": "%s/s0" % (GPU % (i + 1)), "device_class": "gpu.slot"}]} for i in range(3)]


def fakehw_node(base, library):
    root = base / "root"
    root.mkdir(parents=True)
    (base / "fakehw.json").write_text(json.dumps({
        "node_id": base.name, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
        "gpus": [{"uuid": GPU % (i + 1), "index": i, "minor": i, "numa_node": 0} for i in range(4)],
        "domains": [], "kubelet": {"reachable": True, "pods": []}}))
    if library:
        installer.install(str(root))
    return {"node_root": str(root), "node_fakehw": str(base / "fakehw.json"), "node_devices": DEVICES}


def play(tmp_path, number):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), "-e", "pass_number=%d" % number,
                           str(tmp_path / "play.yml")], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def comparable(result):
    """The result less what differs between two nodes by design: the events' ids, times and signatures, and
    which code ran (the bundled run's warning says why)."""
    result = dict(result)
    result.pop("ran_from")
    result.pop("warnings", None)
    result["events"] = [event["type"] + " " + event.get("allocation_id", "") for event in result["events"]]
    text = json.dumps(result, sort_keys=True)
    for name in ("with-library", "without-library"):
        text = text.replace(name, "NODE")
    return json.loads(text)


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_the_node_library_runs_where_installed_and_returns_what_the_bundled_module_returns(tmp_path):
    hosts = {"with-library": fakehw_node(tmp_path / "with-library", True),
             "without-library": fakehw_node(tmp_path / "without-library", False)}
    for variables in hosts.values():
        variables.update(ansible_connection="local", ansible_python_interpreter=sys.executable)
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    for number in (1, 2):
        output = play(tmp_path, number)
        assert output.count("bcd.devices.holds ran as Ansible ships it, not from the node's library: ") == 1, output
        assert "without-library/root/usr/local/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils" \
               " is not installed" in output.replace("\n", "")
        results = dict((name, json.loads((tmp_path / name / ("result-%d.json" % number)).read_text()))
                       for name in hosts)
        assert results["with-library"]["ran_from"] == "node-library"
        assert results["without-library"]["ran_from"] == "bundled"
        assert "is not installed" in results["without-library"]["warnings"][0]
        assert "warnings" not in results["with-library"]
        assert results["with-library"]["changed"] is (number == 1)
        assert sorted(hold["allocation_id"] for hold in results["with-library"]["holds"]) == ["a0", "a1", "a2"]
        assert comparable(results["with-library"]) == comparable(results["without-library"])
    for name in hosts:
        assert sorted(os.listdir(tmp_path / name / "root" / "etc" / "cdi")) == ["bcd-a0.json", "bcd-a1.json", "bcd-a2.json"]

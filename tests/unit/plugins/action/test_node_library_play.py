# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A playbook runs bcd.devices.holds twice on five fakehw nodes with the same devices, with Ansible's pipelining
on and off (docs/performance.md, "The node library"):

* ``role-fact``: the library as the role installs it and the role's local fact, read by fact gathering: it runs
  from the library (``ran_from: node-library``) with no host variable;
* ``variable``: the library and ``bcd_devices_node_library`` set, no fact: from the library;
* ``no-role``: nothing: the module as Ansible ships it, one module execution a task (no node_library run), and
  no warning, only a ``-v`` line;
* ``skewed``: the role's fact, but an installed file differs from the controller's: the shipped module, with
  a warning naming the reason;
* ``missing``: ``bcd_devices_node_library: true`` but nothing installed: the shipped module, with a warning.

Every node binds the same holds and returns the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
sys.path.insert(0, str(REPO / "hack"))
import node_library as installer  # noqa: E402  pylint: disable=wrong-import-position

GPU = "GPU-5f1c2a90-0001-4000-8000-00000000000%d"
FACT = {"node_library": "/usr/local/lib/bcd-holds"}
PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Gather the local facts (under each fakehw root)
      ansible.builtin.setup:
        gather_subset: ["!all"]
        fact_path: "{{ node_root }}/etc/ansible/facts.d"
    - name: Converge
      bcd.devices.holds:
        root: "{{ node_root }}"
        fakehw: "{{ node_fakehw }}"
        generation: 1
        devices: "{{ node_devices }}"
      register: first
    - name: Converge again
      bcd.devices.holds:
        root: "{{ node_root }}"
        fakehw: "{{ node_fakehw }}"
        generation: 1
        devices: "{{ node_devices }}"
      register: second
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ [first, second] | to_json }}"
        dest: "{{ node_root }}/../results.json"
        mode: "0644"
"""
DEVICES = [{"allocation_id": "a%d" % i, "reservation_id": "rsv_%d" % i, "binding": "BINDING_HOLD",
            "devices": [{"id": "%s/s0" % (GPU % (i + 1)), "device_class": "gpu.slot"}]} for i in range(3)]
# name: (library installed, local fact written, host variables)
NODES = {
    "role-fact": (True, True, {}),
    "variable": (True, False, {"bcd_devices_node_library": "/usr/local/lib/bcd-holds"}),
    "no-role": (False, False, {}),
    "skewed": (True, True, {}),
    "missing": (False, False, {"bcd_devices_node_library": True}),
}
FROM_LIBRARY = {"role-fact", "variable"}
WARNING = "bcd.devices.holds ran as Ansible ships it, not from the node's library: "


def fakehw_node(base, library, fact):
    root = base / "root"
    root.mkdir(parents=True)
    (base / "fakehw.json").write_text(json.dumps({
        "node_id": base.name, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
        "gpus": [{"uuid": GPU % (i + 1), "index": i, "minor": i, "numa_node": 0} for i in range(4)],
        "domains": [], "kubelet": {"reachable": True, "pods": []}}))
    if library:
        installed = Path(installer.install(str(root)))
        if base.name == "skewed":
            with open(installed / "domain" / "atoms.py", "a") as handle:
                handle.write("# changed on the node\n")
    if fact:
        facts = root / "etc" / "ansible" / "facts.d"
        facts.mkdir(parents=True)
        (facts / "bcd_holds.fact").write_text(json.dumps(FACT))
    return {"node_root": str(root), "node_fakehw": str(base / "fakehw.json"), "node_devices": DEVICES}


def play(tmp_path, pipelining):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PIPELINING=str(pipelining), ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-v", "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, done.stderr


def counting_python(base):
    """A Python for the node that counts its starts in ``base/starts``: one per module run, piped or not."""
    wrapper = base / "python"
    wrapper.write_text("#!/bin/sh\necho started >> '%s'\nexec '%s' \"$@\"\n" % (base / "starts", sys.executable))
    wrapper.chmod(0o755)
    return str(wrapper)


def comparable(result):
    """The result less what differs between two nodes by design: the events' ids, times and signatures, and
    which code ran (the bundled run's warning says why)."""
    result = dict(result)
    result.pop("ran_from")
    result.pop("warnings", None)
    result["events"] = [event["type"] + " " + event.get("allocation_id", "") for event in result["events"]]
    text = json.dumps(result, sort_keys=True)
    for name in NODES:
        text = text.replace("/%s/" % name, "/NODE/")
    return json.loads(text)


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelining", "no-pipelining"])
def test_the_node_library_runs_where_the_controller_knows_it_is_and_nothing_extra_runs_where_it_is_not(
        tmp_path, pipelining):
    hosts = {}
    for name, (library, fact, variables) in NODES.items():
        hosts[name] = fakehw_node(tmp_path / name, library, fact)
        hosts[name].update(variables, ansible_connection="local",
                           ansible_python_interpreter=counting_python(tmp_path / name))
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    output, errors = play(tmp_path, pipelining)
    flat = errors.replace("\n", "")

    # Module runs per node over the play (setup, two holds tasks, copy's two): a node with the library, and one
    # without the role, run each holds task once; a node whose library is named but refused runs it twice.
    starts = dict((name, len((tmp_path / name / "starts").read_text().splitlines())) for name in NODES)
    assert starts["no-role"] == starts["role-fact"] == starts["variable"], starts
    assert starts["skewed"] == starts["missing"] == starts["role-fact"] + 2, starts
    # The node without the role: no warning at all, a -v line saying why.
    assert "<no-role> bcd.devices.holds ran as Ansible ships it: no node library (neither the variable " \
           "bcd_devices_node_library nor the local fact ansible_local.bcd_holds names one)" in output
    assert "[WARNING]" not in output
    warnings = re.findall(r"\[WARNING\]: (.*)", errors)
    # Ansible shows a warning once per run: one for skewed, one for missing (both tasks gave the same).
    assert len(warnings) == 2, warnings
    assert all(warning.startswith(WARNING) for warning in warnings), warnings
    assert "missing/root/usr/local/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils is not installed" \
        in flat
    assert "skewed/root/usr/local/lib/bcd-holds/" in flat and "/no-role/" not in flat

    results = dict((name, json.loads((tmp_path / name / "results.json").read_text())) for name in NODES)
    for number, index in ((1, 0), (2, 1)):
        for name, (first, second) in ((n, r) for n, r in results.items()):
            result = (first, second)[index]
            assert result["ran_from"] == ("node-library" if name in FROM_LIBRARY else "bundled"), (name, result)
            assert ("warnings" in result) is (name in ("skewed", "missing")), (name, result.get("warnings"))
            assert result["changed"] is (number == 1), (name, number)
            assert sorted(hold["allocation_id"] for hold in result["holds"]) == ["a0", "a1", "a2"]
            assert comparable(result) == comparable(results["role-fact"][index]), name
    for name in NODES:
        assert sorted(os.listdir(tmp_path / name / "root" / "etc" / "cdi")) == ["bcd-a0.json", "bcd-a1.json", "bcd-a2.json"]

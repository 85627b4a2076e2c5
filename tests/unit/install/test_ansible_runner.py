# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job as AWX and Automation Platform run it: ansible-runner, on a private data directory.

AWX does not call ``ansible-playbook`` itself: it hands ansible-runner a private data directory
(``project/``, ``inventory/``, ``env/``), and ansible-runner runs the playbook with its own callback
and writes every job event as JSON under ``artifacts/<ident>/job_events``; AWX's job page is made of
those events. This test does the same through ansible-runner's Python API (``ansible_runner.run``)
with process isolation off (an execution environment's own runs), the collection installed from the
built artifact into the job's collections path as an EE build installs it, and the EE's Python
requirements (requirements.txt, which meta/execution-environment.yml names) installed in this venv.

The job converges two fakehw GPU nodes. It checks what AWX would show: the job's status and stats,
one ``runner_on_ok`` event per host for the module's task, with ``event_data.res.changed`` and the
module's return (its ``events``, each host's own, signed by that node), the loop's per-item events
of the controller-side signature check (the filter ``bcd.devices.verify_report``), the task's
``stdout`` line per host, and then the holds on the nodes. A callback of the test's own lists the
Python distributions the controller had loaded by the end of the job: beyond ansible-core's and
ansible-runner's own, each must be one requirements.txt names (cryptography, for the filter), so
the execution environment's definition lists what the job needed.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

import ansible_runner
from ansible_collections.bcd.devices.tests.unit.install.artifact import REPO, UNSUPPORTED, clean_env, install

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a pass binds only with root's rights, on fakehw as on a real node")

PLAYBOOK = """
- name: Converge the GPU nodes' holds
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Converge the node's holds
      bcd.devices.holds:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
        generation: 1
        devices: "{{ bcd_devices }}"
        on_refusal: report  # node-b's VF is refused on purpose; the job goes on, as a control plane's would
      register: converged

    - name: Read the node's public key
      bcd.devices.holds_info:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
      register: info

    - name: Check each bind's signature on the controller
      ansible.builtin.assert:
        that: item | bcd.devices.verify_report(info.node_public_key)
        quiet: true
      loop: "{{ converged.events | selectattr('type', 'equalto', 'AllocationBound') | list }}"
      loop_control:
        label: "{{ item.seq }} {{ item.type }} {{ item.body.allocation_id }}"
"""


# An aggregate callback: at the end of the job, the distributions of every module the controller loaded.
LOADED_CALLBACK = '''
import json
import os
import sys
from importlib import metadata

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bcd_loaded"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_stats(self, stats):
        owners = metadata.packages_distributions()
        tops = {name.split(".")[0] for name in list(sys.modules)}
        with open(os.environ["BCD_LOADED"], "w") as handle:
            json.dump(sorted({dist for top in tops for dist in owners.get(top, [])}), handle)
'''


# Loaded when present, needed by nobody: ansible-core's compat layers import them if they are there,
# and setuptools' start-up hook is loaded by a .pth file of any venv that has it.
OPPORTUNISTIC = {
    "typing-extensions",  # ansible.module_utils.compat.typing
    "distro",             # ansible.module_utils.distro prefers an installed one
    "setuptools",         # _distutils_hack
    "argcomplete",        # ansible.cli imports it for tab completion when it is there (nox, in .venv, brings it)
}


def canonical(name):
    return name.lower().replace("_", "-").replace(".", "-")


def closure(*names):
    """The distributions ``names`` need, themselves included, as installed here."""
    seen, todo = set(), [canonical(name) for name in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonical(requirement.name))
    return seen


def ee_requirements():
    lines = [line.split("#", 1)[0].strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    return [Requirement(line) for line in lines if line]


def assignment(allocation_id, device, device_class="gpu"):
    return {"allocation_id": allocation_id, "reservation_id": "rsv_" + allocation_id, "binding": "BINDING_HOLD",
            "devices": [{"id": device, "device_class": device_class}]}


def test_the_ee_requirements_are_installed_here():
    """The job below runs with what an execution environment of this collection has: each line of
    requirements.txt (what meta/execution-environment.yml names) is satisfied in this venv."""
    meta = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text(encoding="utf-8"))
    assert meta["dependencies"]["python"] == "requirements.txt"
    requirements = ee_requirements()
    assert requirements, "requirements.txt names no Python requirement"
    for requirement in requirements:
        have = metadata.version(requirement.name)
        assert requirement.specifier.contains(have, prereleases=True), "%s is %s here" % (requirement, have)


def test_a_job_through_ansible_runner_holds_gpus_on_two_nodes_and_shows_each_host(artifact, make_node, tmp_path):
    collections = install(artifact, Path(sys.executable).parent, tmp_path / "ee")[0]
    nodes = {"node-a": make_node(vendor="mig", node_id="node-a"), "node-b": make_node(node_id="node-b")}
    gpus = {name: [gpu["uuid"] for gpu in json.loads(Path(node.fakehw).read_text())["gpus"]] for name, node in nodes.items()}
    wanted = {
        "node-a": [assignment("a_whole", gpus["node-a"][1]), assignment("a_mig", gpus["node-a"][0] + "/gi1/ci0", "gpu.mig")],
        "node-b": [assignment("b_whole", gpus["node-b"][2]), assignment("b_vf", "vf-0", "nic.vf")],  # b_vf is refused
    }

    data = tmp_path / "job"
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    (data / "project" / "site.yml").write_text(PLAYBOOK)
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "bcd_root": node.root, "bcd_fakehw": node.fakehw, "bcd_devices": wanted[name]}
             for name, node in nodes.items()}
    (data / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts}}))
    env = clean_env(tmp_path, collections)
    envvars = {key: value for key, value in env.items() if key.startswith("ANSIBLE_") or key == "PATH"}
    callbacks = tmp_path / "callbacks"
    callbacks.mkdir()
    (callbacks / "bcd_loaded.py").write_text(LOADED_CALLBACK)
    loaded = tmp_path / "loaded.json"
    envvars.update(ANSIBLE_CALLBACK_PLUGINS=str(callbacks), ANSIBLE_CALLBACKS_ENABLED="bcd_loaded", BCD_LOADED=str(loaded))

    runner = ansible_runner.run(private_data_dir=str(data), playbook="site.yml", ident="job-1", envvars=envvars,
                                process_isolation=False, quiet=True, timeout=300)
    stdout = runner.stdout.read()
    assert (runner.status, runner.rc) == ("successful", 0), stdout
    for text in UNSUPPORTED:
        assert text not in stdout, stdout
    events = list(runner.events)
    assert (data / "artifacts" / "job-1" / "job_events").is_dir()  # what AWX reads the job's events from
    assert events[0]["event"] == "playbook_on_start" and events[-1]["event"] == "playbook_on_stats"
    assert [event["counter"] for event in events] == sorted(event["counter"] for event in events)

    # the job's summary, as AWX shows it for the job and per host
    stats = events[-1]["event_data"]
    assert stats["changed"] == {"node-a": 1, "node-b": 1}, stats
    assert stats["ok"] == {"node-a": 3, "node-b": 3}, stats
    assert not stats["failures"] and not stats["dark"], stats
    assert runner.stats["changed"] == {"node-a": 1, "node-b": 1}

    # the module's task: one start and one ok per host, with what the module returned
    converge = [event for event in events if event["event_data"].get("task") == "Converge the node's holds"]
    assert sorted(e["event_data"]["host"] for e in converge if e["event"] == "runner_on_start") == ["node-a", "node-b"]
    ok = {e["event_data"]["host"]: e for e in converge if e["event"] == "runner_on_ok"}
    assert sorted(ok) == ["node-a", "node-b"]
    for host, event in ok.items():
        data_ = event["event_data"]
        assert data_["task_action"] in ("bcd.devices.holds", "holds"), data_["task_action"]
        assert data_["resolved_action"] == "bcd.devices.holds"
        res = data_["res"]
        assert res["changed"] is True
        assert "changed: [%s]" % host in event["stdout"]
        bound = [e for e in res["events"] if e["type"] == "AllocationBound"]
        assert sorted(e["body"]["allocation_id"] for e in bound) == sorted(
            a["allocation_id"] for a in wanted[host] if a["devices"][0]["device_class"] != "nic.vf")
        assert {e["body"]["node_id"] for e in res["events"]} == {host}  # each host's own events, from its node
        assert all(e["signature"] for e in bound)
    assert [f["allocation_id"] for f in ok["node-b"]["event_data"]["res"]["failures"]] == ["b_vf"]
    assert ok["node-a"]["event_data"]["res"]["failures"] == []
    assert [e["type"] for e in ok["node-b"]["event_data"]["res"]["events"]] == ["AllocationBound", "AllocationFailed"]

    # the controller-side check, one item event per bind and host
    items = [e for e in events if e["event"] == "runner_item_on_ok"
             and e["event_data"].get("task") == "Check each bind's signature on the controller"]
    assert sorted(e["event_data"]["host"] for e in items) == ["node-a", "node-a", "node-b"]

    # what the controller loaded: ansible-core's and ansible-runner's own, and what requirements.txt names
    named = {canonical(requirement.name) for requirement in ee_requirements()}
    others = {canonical(name) for name in json.loads(loaded.read_text())} - closure("ansible-core", "ansible-runner") - OPPORTUNISTIC
    assert "cryptography" in {canonical(name) for name in json.loads(loaded.read_text())}  # the filter's
    assert others <= named, "the job loaded %s, which requirements.txt does not name" % sorted(others - named)

    # and the holds are on the nodes
    for host, node in nodes.items():
        specs = sorted(p.name for p in Path(node.path("/etc/cdi")).glob("bcd-*.json"))
        expected = sorted("bcd-%s.json" % a["allocation_id"] for a in wanted[host] if a["allocation_id"] != "b_vf")
        assert specs == expected, (host, specs)
        for name in expected:
            allocation = name[len("bcd-"):-len(".json")]
            assert b"BCD_ALLOCATION_ID=%s" % allocation.encode() in node.read("/run/bcd/allocations/%s.env" % allocation)

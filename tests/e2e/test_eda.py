# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Event-Driven Ansible with the real engine: ansible-rulebook (pinned in requirements/tools/ansible-rulebook.txt,
its venv made by hack/e2e.sh, which exports BCD_E2E_RULEBOOK) runs the shipped rulebook bcd.devices.gpu_life with
the source bcd.devices.gateway; two fakehw nodes bind, refuse and release holds and deliver their journals with the
role's own delivery (bcd.devices.bcd_holds, tasks_from: deliver); what the rulebook ran is read back from its
output and from the nodes.

One rulebook process serves the whole module (the fixture ``run``): each test asserts one thing it did. The
scenario, in order:

1. node-a binds a_train on its GPU 0 and delivers; node-b binds b_train on its GPU 0, is refused b_also on the same
   GPU, and delivers (generation 1, one node after the other); node-a releases a_train and delivers (generation 2).
   Each play reads the node's public key with holds_info and enrolls it in the source's keys directory first.
2. node-a's delivery is posted again, as a role run that died before its acknowledgement would post it.
3. Someone with the token but no node key posts a GPUUnhealthy for node-b's GPU 0: signed by a key of its own, and
   signed by node-a's key.
4. node-a's GPU 1 turns unhealthy (its fakehw faults) and a GPUUnhealthy signed by node-a's key is delivered:
   the rule runs bcd.devices.gpu_recover on node-a.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, ".build"))

from ansible_collections.bcd.devices.plugins.module_utils.state import events as node_events  # noqa: E402
from ansible_collections.bcd.devices.plugins.module_utils.state.events import NodeKey  # noqa: E402

# Whether a node's pass journals its conditions (GPUUnhealthy, ...) as events (issue 36, item 2; docs/events.md,
# "Conditions"). Until it does, the test makes the GPUUnhealthy itself, as the node will, signed with its key.
NODE_SENDS_CONDITIONS = "GPUUnhealthy" in node_events.EVENT_TYPES

VENV_BIN = os.path.join(REPO, ".venv", "bin")
RULEBOOK = os.environ.get("BCD_E2E_RULEBOOK", "")
TOKEN = "eda-e2e-7c1d4b9a02f3"
UNHEALTHY = {"retired_pages_pending": True, "xids": [48]}
RECOVERED = "the GPUs are back in service"

pytestmark = pytest.mark.skipif(not RULEBOOK or not os.access(RULEBOOK, os.X_OK),
                                reason="needs ansible-rulebook: hack/e2e.sh builds it and sets BCD_E2E_RULEBOOK")

NODE_PLAY = """
- name: Holds, enrolment and the role's delivery
  hosts: "{{ bcd_limit }}"
  gather_facts: false
  serial: 1
  tasks:
    - name: Converge the node's holds
      bcd.devices.holds:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
        generation: "{{ bcd_generation }}"
        devices: "{{ bcd_holds[inventory_hostname] }}"
      register: bcd_pass
      # a refusal fails the task (its AllocationFailed is journalled all the same): only that is let through
      failed_when: bcd_pass.failed | default(false) and bcd_pass.failures | default([]) | length == 0
    - name: Read the node's public key
      bcd.devices.holds_info:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
      register: bcd_info
    - name: Enrol the node with the gateway
      ansible.builtin.copy:
        content: "{{ bcd_info.node_public_key }}\\n"
        dest: "{{ bcd_keys_dir }}/{{ bcd_info.node_id | default(inventory_hostname) }}.pub"
        mode: "0644"
    - name: Read what the delivery will post
      bcd.devices.events:
        root: "{{ bcd_root }}"
      register: bcd_posted
    - name: Deliver the events
      ansible.builtin.include_role:
        name: bcd.devices.bcd_holds
        tasks_from: deliver
      vars:
        bcd_holds_root: "{{ bcd_root }}"
        bcd_holds_gateway_url: "{{ bcd_gateway_url }}"
        bcd_holds_gateway_headers: {Authorization: "Bearer {{ bcd_token }}"}
        bcd_holds_gateway_required: true
    - name: Read the events left
      bcd.devices.events:
        root: "{{ bcd_root }}"
      register: bcd_left
    - name: Keep what was posted and answered
      ansible.builtin.copy:
        content: >-
          {{ {'posted': bcd_posted.events, 'accepted': bcd_holds_delivery.accepted,
              'left': bcd_left.events | map(attribute='seq') | list} | to_json }}
        dest: "{{ bcd_work }}/{{ inventory_hostname }}-{{ bcd_generation }}.json"
        mode: "0600"
"""

INFO_PLAY = """
- name: What the node says of its GPUs
  hosts: all
  gather_facts: false
  tasks:
    - name: Read them
      bcd.devices.holds_info:
        root: "{{ bcd_root }}"
        fakehw: "{{ bcd_fakehw }}"
      register: bcd_info
    - name: Keep them
      ansible.builtin.copy:
        content: "{{ bcd_info | to_json }}"
        dest: "{{ bcd_work }}/{{ inventory_hostname }}-info.json"
        mode: "0600"
"""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Scenario:
    """The nodes, the running rulebook and what each step answered."""

    def __init__(self, work):
        self.work = str(work)
        self.keys = os.path.join(self.work, "keys")
        os.makedirs(self.keys)
        self.home = os.path.join(self.work, "ansible-home")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/v1/events" % self.port
        self.log = os.path.join(self.work, "rulebook.log")
        self.nodes = {}
        self.answers = {}
        self.timings = {}
        for number, name in enumerate(("node-a", "node-b"), start=1):
            root = os.path.join(self.work, name)
            subprocess.run([os.path.join(VENV_BIN, "python"), os.path.join(REPO, "hack", "fakehw_node.py"),
                            "--root", root, "--node-id", name, "--node-number", str(number), "--gpus", "2",
                            "--compact"], check=True, capture_output=True)
            with open(os.path.join(root, "fakehw.yml")) as handle:
                gpus = [gpu["uuid"] for gpu in yaml.safe_load(handle)["gpus"]]
            self.nodes[name] = {"root": root, "fakehw": os.path.join(root, "fakehw.yml"), "gpus": gpus,
                                "state": os.path.join(root, "var", "lib", "bcd")}
        self.inventory = os.path.join(self.work, "hosts.yml")
        with open(self.inventory, "w") as handle:
            json.dump({"all": {"hosts": {name: {
                "ansible_connection": "local", "ansible_python_interpreter": os.path.join(VENV_BIN, "python"),
                "bcd_root": node["root"], "bcd_fakehw": node["fakehw"]} for name, node in self.nodes.items()}}},
                handle)
        with open(os.path.join(self.work, "ansible.cfg"), "w") as handle:
            handle.write("[defaults]\n")
        self.env = dict(os.environ, PATH=os.pathsep.join((VENV_BIN, os.path.dirname(RULEBOOK), os.environ["PATH"])),
                        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build"), ANSIBLE_HOME=self.home,
                        ANSIBLE_LOCAL_TEMP=os.path.join(self.home, "tmp"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_CONFIG=os.path.join(self.work, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                        BCD_GATEWAY_PORT=str(self.port), BCD_GATEWAY_TOKEN=TOKEN, BCD_NODE_KEYS_DIR=self.keys)
        self.rulebook = None

    # --- the rulebook ---------------------------------------------------------------------------------------------

    def start_rulebook(self):
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.rulebook = subprocess.Popen(  # pylint: disable=consider-using-with
                [RULEBOOK, "--rulebook", "bcd.devices.gpu_life", "--inventory", self.inventory,
                 "--env-vars", "BCD_GATEWAY_PORT,BCD_GATEWAY_TOKEN,BCD_NODE_KEYS_DIR"],
                env=self.env, cwd=self.work, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.rulebook.poll() is None, "ansible-rulebook stopped:\n" + self.output()[-6000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                self.timings["rulebook start"] = time.monotonic() - started
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail("the source did not listen on %d in 120 s:\n%s" % (self.port, self.output()[-6000:]))

    def stop_rulebook(self):
        if self.rulebook is None or self.rulebook.poll() is not None:
            return
        self.rulebook.send_signal(signal.SIGINT)
        try:
            self.rulebook.wait(30)
        except subprocess.TimeoutExpired:
            self.rulebook.kill()
            self.rulebook.wait(10)

    def output(self):
        with open(self.log, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def debug_lines(self):
        """The messages of the rulebook's debug actions, in the order it ran them."""
        lines = self.output().splitlines()
        return [lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                if re.match(r"^\*\* .*\[debug\] \*+$", line)]

    def wait_for(self, pattern, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            assert self.rulebook.poll() is None, "ansible-rulebook stopped:\n" + self.output()[-6000:]
            time.sleep(0.2)
        pytest.fail("ansible-rulebook did not print %r in %d s:\n%s" % (pattern, timeout, self.output()[-8000:]))

    # --- the nodes ------------------------------------------------------------------------------------------------

    def playbook(self, text, name, extra):
        path = os.path.join(self.work, name)
        with open(path, "w") as handle:
            handle.write(text)
        done = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.inventory, path,
                               "-e", json.dumps(dict(extra, bcd_work=self.work))],
                              env=self.env, cwd=self.work, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]

    def converge_and_deliver(self, limit, generation, holds):
        self.playbook(NODE_PLAY, "node.yml", {
            "bcd_limit": limit, "bcd_generation": generation, "bcd_holds": holds, "bcd_keys_dir": self.keys,
            "bcd_gateway_url": self.url, "bcd_token": TOKEN})
        for name in limit.split(","):
            with open(os.path.join(self.work, "%s-%d.json" % (name, generation))) as handle:
                self.answers[(name, generation)] = json.load(handle)

    def info(self, name):
        self.playbook(INFO_PLAY, "info.yml", {})
        with open(os.path.join(self.work, name + "-info.json")) as handle:
            return json.load(handle)

    def gpu(self, name, index):
        info = self.info(name)
        return next(g for g in info["gpus"] if g["uuid"] == self.nodes[name]["gpus"][index])

    def set_faults(self, name, index, health):
        path = self.nodes[name]["fakehw"]
        with open(path) as handle:
            hw = yaml.safe_load(handle)
        hw["gpus"][index]["health"] = health
        with open(path, "w") as handle:
            yaml.safe_dump(hw, handle, sort_keys=False)

    def key(self, name):
        return NodeKey.load(os.path.join(self.nodes[name]["state"], "node.key"))

    def post(self, events):
        request = urllib.request.Request(self.url, data=json.dumps({"events": events}).encode(), method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": "Bearer " + TOKEN})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


def unhealthy_event(seq, node, gpu, key):
    """A GPUUnhealthy as docs/event-driven.md says a node condition is sent: signed, its type named in its body."""
    body = {"node_id": node, "type": "GPUUnhealthy", "generation": 2, "device_ids": [gpu],
            "reason": "xid 48: double bit ECC error; retired pages pending"}
    return {"seq": seq, "type": "GPUUnhealthy", "body": body, "purpose": "attested-report", "signature": key.sign(body)}


@pytest.fixture(scope="module", name="run")
def fixture_run(tmp_path_factory, request):
    started = time.monotonic()
    scenario = Scenario(tmp_path_factory.mktemp("eda"))
    a_gpus, b_gpus = scenario.nodes["node-a"]["gpus"], scenario.nodes["node-b"]["gpus"]
    try:
        scenario.start_rulebook()
        # 1. binds, a refusal and a release, delivered by the role
        hold = {"reservation_id": "rsv", "binding": "BINDING_HOLD"}
        scenario.converge_and_deliver("node-a,node-b", 1, {
            "node-a": [dict(hold, allocation_id="a_train", devices=[{"id": a_gpus[0], "device_class": "gpu"}])],
            "node-b": [dict(hold, allocation_id="b_train", devices=[{"id": b_gpus[0], "device_class": "gpu"}]),
                       dict(hold, allocation_id="b_also", devices=[{"id": b_gpus[0], "device_class": "gpu"}])]})
        scenario.converge_and_deliver("node-a", 2, {"node-a": []})
        scenario.wait_for(r"2 AllocationReleased a_train on node-a")
        # 2. node-a's deliveries posted again, as a retry would
        posted = scenario.answers[("node-a", 1)]["posted"] + scenario.answers[("node-a", 2)]["posted"]
        scenario.answers["again"] = scenario.post(posted)
        # 3. forged conditions for node-b
        scenario.answers["forged"] = scenario.post([
            unhealthy_event(3, "node-b", b_gpus[0], NodeKey.load_or_create(os.path.join(scenario.work, "other.key"))),
            unhealthy_event(4, "node-b", b_gpus[0], scenario.key("node-a"))])
        # 4. node-a's GPU 1 turns unhealthy; the signed condition reaches the rulebook
        scenario.set_faults("node-a", 1, UNHEALTHY)
        scenario.answers["unhealthy-info"] = scenario.gpu("node-a", 1)
        loop_started = time.monotonic()
        if NODE_SENDS_CONDITIONS:  # the node's pass journals it, the role delivers it
            scenario.converge_and_deliver("node-a", 3, {"node-a": []})
            scenario.answers["unhealthy"] = (200, {"accepted": scenario.answers[("node-a", 3)]["accepted"],
                                                   "rejected": []})
        else:  # made here as the node will make it, signed with node-a's own key
            seq = max(e["seq"] for e in posted) + 1
            scenario.answers["unhealthy"] = scenario.post([
                unhealthy_event(seq, "node-a", a_gpus[1], scenario.key("node-a"))])
        scenario.wait_for(r"PLAY RECAP \*+\s*\nnode-a\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0")
        scenario.timings["unhealthy loop"] = time.monotonic() - loop_started
        if NODE_SENDS_CONDITIONS:  # the next pass finds the GPU healthy: its clearing is delivered too
            scenario.converge_and_deliver("node-a", 4, {"node-a": []})
        scenario.answers["recovered"] = scenario.info("node-a")
        scenario.answers["node-b-info"] = scenario.info("node-b")
    finally:
        scenario.stop_rulebook()
    scenario.timings["scenario"] = time.monotonic() - started
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\neda: %s" % ", ".join("%s %.1f s" % item for item in scenario.timings.items()))
    return scenario


def test_the_rulebook_ran_each_event_once_in_order(run):
    a, b = run.nodes["node-a"]["gpus"], run.nodes["node-b"]["gpus"]
    assert run.answers[("node-a", 1)]["accepted"] == [1] and run.answers[("node-a", 1)]["left"] == []
    assert run.answers[("node-b", 1)]["accepted"] == [1, 2] and run.answers[("node-b", 1)]["left"] == []
    assert run.answers[("node-a", 2)]["accepted"] == [2] and run.answers[("node-a", 2)]["left"] == []
    refused = [e for e in run.answers[("node-b", 1)]["posted"] if e["type"] == "AllocationFailed"]
    assert [e["body"]["allocation_id"] for e in refused] == ["b_also"]
    assert run.debug_lines() == [
        "1 AllocationBound a_train on node-a: %s (generation 1)" % a[0],
        "1 AllocationBound b_train on node-b: %s (generation 1)" % b[0],
        "node-b refused b_also (generation 1): overlap: %s" % refused[0]["body"]["message"],
        "2 AllocationReleased a_train on node-a: %s (generation 2)" % a[0],
    ], run.output()[-8000:]


def test_a_delivery_posted_again_is_accepted_and_not_run_twice(run):
    assert run.answers["again"] == (200, {"accepted": [1, 2], "rejected": []})
    output = run.output()
    assert output.count("AllocationBound a_train on node-a") == 1
    assert output.count("AllocationReleased a_train on node-a") == 1


def test_a_forged_condition_is_rejected_in_the_answer_and_not_run(run):
    status, answer = run.answers["forged"]
    assert status == 200 and answer["accepted"] == []
    assert answer["rejected"] == [
        {"seq": 3, "node": "node-b", "reason": "bad signature: the GPUUnhealthy is not signed by the key of node node-b"},
        {"seq": 4, "node": "node-b", "reason": "bad signature: the GPUUnhealthy is not signed by the key of node node-b"}]
    assert not re.search(r"\[node-b\]", run.output()), "a playbook ran on node-b"
    gpu = next(g for g in run.answers["node-b-info"]["gpus"] if g["uuid"] == run.nodes["node-b"]["gpus"][0])
    assert gpu["maintenance"] is None


def test_an_unhealthy_gpu_is_taken_out_reset_and_put_back_on_its_node(run):
    gpu = run.nodes["node-a"]["gpus"][1]
    before = run.answers["unhealthy-info"]
    assert before["health"] and before["maintenance"] is None
    status, answer = run.answers["unhealthy"]
    assert status == 200 and answer["accepted"] == [3] and answer["rejected"] == []
    if NODE_SENDS_CONDITIONS:  # each step left its event on the node, and the role delivered it
        [unhealthy] = run.answers[("node-a", 3)]["posted"]
        assert (unhealthy["type"], unhealthy["body"]["device_ids"]) == ("GPUUnhealthy", [gpu])
        [cleared] = run.answers[("node-a", 4)]["posted"]
        assert (cleared["type"], cleared["body"]["device_ids"]) == ("GPUUnhealthyCleared", [gpu])
        assert run.answers[("node-a", 4)]["accepted"] == [4] and run.answers[("node-a", 4)]["left"] == []
    assert len(re.findall(r"PLAY RECAP \*+\s*\nnode-a\s", run.output())) == 1, "gpu_recover ran more than once"
    output = run.output()
    # the playbook ran on node-a alone, each step in turn
    steps = [("Keep new holds off the GPUs", "changed"), ("Wait until no hold claims them", "ok"),
             ("Clear the GPUs' faults", "changed"), ("End their maintenance", "changed")]
    at = 0
    for task, outcome in steps:
        match = re.compile(r"TASK \[%s[^\]]*\][^\n]*\n%s: \[node-a\]" % (re.escape(task), outcome)).search(output, at)
        assert match, (task, output[-8000:])
        at = match.end()
    after = next(g for g in run.answers["recovered"]["gpus"] if g["uuid"] == gpu)
    assert after["health"] == [] and after["maintenance"] is None and not after["busy"]
    with open(run.nodes["node-a"]["fakehw"]) as handle:
        assert [g.get("health") for g in yaml.safe_load(handle)["gpus"]] == [None, {}]

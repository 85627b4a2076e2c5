# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Event-Driven Ansible with the real engine, under each ansible-rulebook hack/e2e.sh built (the floor, 1.1.7, and
the current 1.3; ``BCD_E2E_RULEBOOKS``): the engine runs the shipped rulebook bcd.devices.gpu_life with the source
bcd.devices.gateway (its state in a directory, as docs/event-driven.md asks); two fakehw nodes bind, refuse and
release holds and deliver their journals with the role's own delivery (bcd.devices.bcd_holds, tasks_from:
deliver); what the rulebook ran is read back from its output and from the nodes.

One engine run serves a whole scenario (the fixture ``run``, once per engine): each test asserts one thing it did.
The scenario, in order:

1. node-a binds a_train on its GPU 0 and delivers; node-b binds b_train on its GPU 0, is refused b_also on the same
   GPU, and delivers (generation 1); node-a releases a_train and delivers (generation 2). Each play reads the node's
   public key with holds_info and enrolls it in the source's keys directory first.
2. node-a's deliveries are posted again, as a role run that died before its acknowledgement would post them.
3. Attacks with the token: a GPUUnhealthy for node-b sealed by a key of its own, and by node-a's key (a
   compromised node speaking for another); a GPUUnhealthy of node-a's own, sealed by its own key, whose device
   holds a template that would run a command on the controller; an unsealed AllocationFailed naming node-a at the
   seq its next real event takes; node-a's signed release posted again under a new seq.
4. No node waits behind another: node-b's held GPU 0 turns unhealthy (its recovery waits for the hold), then
   node-a's free GPU 1 does: node-a's recovery ends, and a refusal of node-b is reported, while node-b's waits.
5. The engine is killed (its whole process group) in the middle of node-b's recovery and started again: node-b's
   GPUUnhealthy posted again is not run again; once the hold is released, the node raises its GPUUnhealthy again
   (the lease of the killed recovery ran out) and the recovery runs, once, to the end.
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

from ansible_collections.bcd.devices.plugins.module_utils.state.events import NodeKey  # noqa: E402

VENV_BIN = os.path.join(REPO, ".venv", "bin")


def rulebooks(value):
    """``[(version, path)]`` out of ``BCD_E2E_RULEBOOKS`` (``1.1.7=PATH 1.3.2=PATH``), in order."""
    found = []
    for entry in value.split():
        version, sep, path = entry.partition("=")
        if not sep or not version or not path:
            raise ValueError("BCD_E2E_RULEBOOKS: %r is not VERSION=PATH" % entry)
        found.append((version, path))
    return found


RULEBOOKS = rulebooks(os.environ.get("BCD_E2E_RULEBOOKS", ""))
TOKEN = "eda-e2e-7c1d4b9a02f3"
UNHEALTHY = {"retired_pages_pending": True, "xids": [48]}
# How long the recovery's steps take here (the playbook's defaults are minutes): the wait's delay, the lease, and how
# long after a lease ran out the node raises a GPU's GPUUnhealthy again.
WAIT_DELAY, LEASE_SECONDS, RERAISE_AFTER = 2, 8, 2

pytestmark = pytest.mark.skipif(not RULEBOOKS or not all(os.access(path, os.X_OK) for _v, path in RULEBOOKS),
                                reason="needs ansible-rulebook: hack/e2e.sh builds it and sets BCD_E2E_RULEBOOKS")

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

    def __init__(self, work, engine):
        self.work = str(work)
        self.engine = engine
        self.keys = os.path.join(self.work, "keys")
        self.state = os.path.join(self.work, "gateway-state")
        os.makedirs(self.keys)
        os.makedirs(self.state)
        self.marker = os.path.join(self.work, "the-controller-ran-a-node-s-template")
        self.home = os.path.join(self.work, "ansible-home")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/v1/events" % self.port
        self.logs = []
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
                "bcd_root": node["root"], "bcd_fakehw": node["fakehw"], "bcd_wait_delay": WAIT_DELAY,
                "bcd_wait_retries": 300, "bcd_lease_seconds": LEASE_SECONDS, "bcd_reraise_after": RERAISE_AFTER}
                for name, node in self.nodes.items()}}}, handle)
        with open(os.path.join(self.work, "ansible.cfg"), "w") as handle:
            handle.write("[defaults]\n")
        self.env = dict(os.environ, PATH=os.pathsep.join((VENV_BIN, os.path.dirname(engine), os.environ["PATH"])),
                        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".build"), ANSIBLE_HOME=self.home,
                        ANSIBLE_LOCAL_TEMP=os.path.join(self.home, "tmp"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_CONFIG=os.path.join(self.work, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                        BCD_GATEWAY_PORT=str(self.port), BCD_GATEWAY_TOKEN=TOKEN, BCD_NODE_KEYS_DIR=self.keys,
                        BCD_GATEWAY_STATE_DIR=self.state)
        self.rulebook = None

    # --- the rulebook ---------------------------------------------------------------------------------------------

    def start_rulebook(self):
        started = time.monotonic()
        self.logs.append(os.path.join(self.work, "rulebook-%d.log" % (len(self.logs) + 1)))
        with open(self.logs[-1], "wb") as log:
            # a session of its own: killing the engine kills what it runs too, as a node's or a pod's death would
            self.rulebook = subprocess.Popen(  # pylint: disable=consider-using-with
                [self.engine, "--rulebook", "bcd.devices.gpu_life", "--inventory", self.inventory,
                 "--env-vars", "BCD_GATEWAY_PORT,BCD_GATEWAY_TOKEN,BCD_NODE_KEYS_DIR,BCD_GATEWAY_STATE_DIR"],
                env=self.env, cwd=self.work, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.rulebook.poll() is None, "ansible-rulebook stopped:\n" + self.output()[-6000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                self.timings.setdefault("rulebook start", time.monotonic() - started)
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail("the source did not listen on %d in 120 s:\n%s" % (self.port, self.output()[-6000:]))

    def kill_rulebook(self):
        """SIGKILL to the engine's whole process group: the engine and the playbook it runs die at once."""
        os.killpg(self.rulebook.pid, signal.SIGKILL)
        self.rulebook.wait(30)

    def stop_rulebook(self):
        if self.rulebook is None or self.rulebook.poll() is not None:
            return
        self.rulebook.send_signal(signal.SIGINT)
        try:
            self.rulebook.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.rulebook.pid, signal.SIGKILL)
            self.rulebook.wait(10)

    def output(self, index=-1):
        with open(self.logs[index], encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def debug_lines(self, index=-1):
        """The messages of the rulebook's debug actions, in the order it ran them."""
        lines = self.output(index).splitlines()
        return [lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                if re.match(r"^\*\* .*\[debug\] \*+$", line)]

    def wait_for(self, pattern, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output(), re.MULTILINE)
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

    def converge_and_deliver(self, limit, generation, holds, step=None):
        self.playbook(NODE_PLAY, "node.yml", {
            "bcd_limit": limit, "bcd_generation": generation, "bcd_holds": holds, "bcd_keys_dir": self.keys,
            "bcd_gateway_url": self.url, "bcd_token": TOKEN})
        for name in limit.split(","):
            with open(os.path.join(self.work, "%s-%d.json" % (name, generation))) as handle:
                self.answers[(name, step or generation)] = json.load(handle)
        return self.answers[(limit.split(",")[0], step or generation)]

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


def recaps(output, node):
    """The PLAY RECAP lines of ``node`` in an engine's output (one per playbook run there; runs in parallel may
    interleave their other lines, never these)."""
    return re.findall(r"^%s\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)" % re.escape(node), output,
                      re.MULTILINE)


def forged_unhealthy(seq, node, gpu, key, generation=2):
    """A GPUUnhealthy as a node journals one, signed and sealed by ``key``."""
    body = {"type": "GPUUnhealthy", "node_id": node, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
            "generation": generation, "device_ids": [gpu], "reason": "GPUFaulted",
            "message": "%s is unhealthy: Xid 48: double-bit ECC error (reset the GPU)" % gpu}
    return {"seq": seq, "type": "GPUUnhealthy", "body": body, "purpose": "attested-report",
            "signature": key.sign(body), "format": 2, "seal": key.seal(seq, "GPUUnhealthy", body)}


def wait_until(what, check, timeout=120, every=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    pytest.fail("%s did not happen in %d s" % (what, timeout))


@pytest.fixture(scope="module", name="run", params=[path for _v, path in RULEBOOKS] or [""],
                ids=["ansible-rulebook " + v for v, _p in RULEBOOKS] or ["no engine"])
def fixture_run(tmp_path_factory, request):
    started = time.monotonic()
    scenario = Scenario(tmp_path_factory.mktemp("eda"), request.param)
    a_gpus, b_gpus = scenario.nodes["node-a"]["gpus"], scenario.nodes["node-b"]["gpus"]
    hold = {"reservation_id": "rsv", "binding": "BINDING_HOLD"}
    b_train = dict(hold, allocation_id="b_train", devices=[{"id": b_gpus[0], "device_class": "gpu"}])
    try:
        scenario.start_rulebook()
        # 1. binds, a refusal and a release, delivered by the role
        scenario.converge_and_deliver("node-a,node-b", 1, {
            "node-a": [dict(hold, allocation_id="a_train", devices=[{"id": a_gpus[0], "device_class": "gpu"}])],
            "node-b": [b_train,
                       dict(hold, allocation_id="b_also", devices=[{"id": b_gpus[0], "device_class": "gpu"}])]})
        scenario.converge_and_deliver("node-a", 2, {"node-a": []})
        scenario.wait_for(r"2 AllocationReleased a_train on node-a")
        # 2. node-a's deliveries posted again, as a retry would
        posted = scenario.answers[("node-a", 1)]["posted"] + scenario.answers[("node-a", 2)]["posted"]
        scenario.answers["again"] = scenario.post(posted)
        # 3. attacks, with the token
        a_key = scenario.key("node-a")
        other = NodeKey.load_or_create(os.path.join(scenario.work, "other.key"))
        scenario.answers["forged"] = scenario.post([forged_unhealthy(3, "node-b", b_gpus[0], other),
                                                    forged_unhealthy(4, "node-b", b_gpus[0], a_key)])
        scenario.answers["template"] = scenario.post([forged_unhealthy(
            3, "node-a", "{{ lookup('pipe', 'touch %s') }}" % scenario.marker, a_key)])
        released = posted[-1]
        scenario.answers["unsealed"] = scenario.post([
            {"seq": 3, "type": "AllocationFailed", "body": {
                "node_id": "node-a", "allocation_id": "a_fake", "generation": 2, "reason": "overlap",
                "message": "%s is assigned to a_other" % a_gpus[1]}},
            dict(released, seq=99)])
        # 4. node-b's held GPU turns unhealthy: its recovery waits for the hold; meanwhile node-a's free GPU 1 turns
        # unhealthy (its GPUUnhealthy takes seq 3, the unsealed one's) and is recovered, and node-b's refusal is
        # reported
        scenario.set_faults("node-b", 0, UNHEALTHY)
        scenario.converge_and_deliver("node-b", 3, {"node-b": [b_train]})
        wait_until("node-b's recovery taking GPU 0 out of service",
                   lambda: scenario.gpu("node-b", 0)["maintenance"] is not None, every=0.5)
        scenario.set_faults("node-a", 1, UNHEALTHY)
        scenario.answers["unhealthy-info"] = scenario.gpu("node-a", 1)
        loop_started = time.monotonic()
        scenario.converge_and_deliver("node-a", 3, {"node-a": []})
        scenario.wait_for(r"^node-a\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0")
        scenario.timings["node-a's recovery"] = time.monotonic() - loop_started
        scenario.answers["node-b recaps, node-a recovered"] = recaps(scenario.output(), "node-b")
        scenario.converge_and_deliver("node-b", 4, {"node-b": [b_train, dict(
            hold, allocation_id="b_late", devices=[{"id": b_gpus[0], "device_class": "gpu"}])]})
        scenario.wait_for(r"node-b refused b_late")
        scenario.answers["node-b recaps, b_late reported"] = recaps(scenario.output(), "node-b")
        scenario.answers["node-b during its wait"] = scenario.gpu("node-b", 0)
        # 5. the engine dies in the middle of node-b's recovery, and comes back
        scenario.kill_rulebook()
        scenario.start_rulebook()
        [unhealthy_b] = [e for e in scenario.answers[("node-b", 3)]["posted"] if e["type"] == "GPUUnhealthy"]
        scenario.answers["b again after the restart"] = scenario.post([unhealthy_b])
        scenario.converge_and_deliver("node-b", 5, {"node-b": []}, step="released")
        reraised_at = time.monotonic()

        def reraised():
            delivered = scenario.converge_and_deliver("node-b", 5, {"node-b": []}, step="reraise")
            return [e for e in delivered["posted"] if e["type"] == "GPUUnhealthy"]
        scenario.answers["reraised"] = wait_until("node-b's GPUUnhealthy raised again", reraised, timeout=120)
        scenario.wait_for(r"^node-b\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", timeout=180)
        scenario.timings["node-b's re-raise and recovery"] = time.monotonic() - reraised_at
        scenario.converge_and_deliver("node-a,node-b", 6, {"node-a": [], "node-b": []})
        scenario.answers["a recovered"] = scenario.info("node-a")
        scenario.answers["b recovered"] = scenario.info("node-b")
    finally:
        scenario.stop_rulebook()
    scenario.timings["scenario"] = time.monotonic() - started
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\neda (%s): %s" % (os.path.basename(os.path.dirname(os.path.dirname(request.param))),
                                  ", ".join("%s %.1f s" % item for item in scenario.timings.items())))
    return scenario


def test_the_rulebook_ran_each_event_once_in_order(run):
    a, b = run.nodes["node-a"]["gpus"], run.nodes["node-b"]["gpus"]
    assert run.answers[("node-a", 1)]["accepted"] == [1] and run.answers[("node-a", 1)]["left"] == []
    assert run.answers[("node-b", 1)]["accepted"] == [1, 2] and run.answers[("node-b", 1)]["left"] == []
    assert run.answers[("node-a", 2)]["accepted"] == [2] and run.answers[("node-a", 2)]["left"] == []
    refused = [e for e in run.answers[("node-b", 1)]["posted"] if e["type"] == "AllocationFailed"]
    assert [e["body"]["allocation_id"] for e in refused] == ["b_also"]
    assert run.debug_lines(0)[:4] == [
        "1 AllocationBound a_train on node-a: %s (generation 1)" % a[0],
        "1 AllocationBound b_train on node-b: %s (generation 1)" % b[0],
        "node-b refused b_also (generation 1): overlap: %s" % refused[0]["body"]["message"],
        "2 AllocationReleased a_train on node-a: %s (generation 2)" % a[0],
    ], run.output(0)[-8000:]


def test_every_event_the_nodes_delivered_was_sealed(run):
    posted = [e for key, answer in run.answers.items() if isinstance(key, tuple) for e in answer["posted"]]
    assert posted and all(e.get("format") == 2 and e.get("seal") for e in posted)


def test_a_delivery_posted_again_is_accepted_and_not_run_twice(run):
    assert run.answers["again"] == (200, {"accepted": [1, 2], "rejected": []})
    output = run.output(0)
    assert output.count("AllocationBound a_train on node-a") == 1
    assert output.count("AllocationReleased a_train on node-a") == 1


def test_a_node_cannot_speak_for_another_and_a_forged_condition_runs_nothing(run):
    status, answer = run.answers["forged"]
    assert status == 200 and answer["accepted"] == []
    assert [(r["seq"], r["node"]) for r in answer["rejected"]] == [(3, "node-b"), (4, "node-b")]
    assert all("seal" in r["reason"] for r in answer["rejected"]), answer
    gpu = next(g for g in run.answers["b recovered"]["gpus"] if g["uuid"] == run.nodes["node-b"]["gpus"][1])
    assert gpu["maintenance"] is None


def test_a_template_in_a_node_s_own_sealed_event_is_rejected_and_runs_nothing_on_the_controller(run):
    status, answer = run.answers["template"]
    assert status == 200 and answer["accepted"] == [] and len(answer["rejected"]) == 1
    assert "device_ids" in answer["rejected"][0]["reason"], answer
    assert not os.path.exists(run.marker)


def test_an_unsealed_event_and_a_signed_event_under_a_new_seq_are_rejected_and_take_no_place(run):
    status, answer = run.answers["unsealed"]
    assert status == 200 and answer["accepted"] == []
    assert [r["seq"] for r in answer["rejected"]] == [3, 99]
    assert "a_fake" not in run.output(0)
    # node-a's own event at seq 3, after the unsealed one, was taken and acted on
    [unhealthy] = run.answers[("node-a", 3)]["posted"]
    assert (unhealthy["seq"], unhealthy["type"]) == (3, "GPUUnhealthy")
    assert run.answers[("node-a", 3)]["accepted"] == [3]


def test_no_node_waits_behind_another(run):
    # node-a's recovery ran to its end, and node-b's refusal was reported, while node-b's recovery waited
    assert recaps(run.output(0), "node-a") == ["0"]
    assert run.answers["node-b recaps, node-a recovered"] == []
    assert run.answers["node-b recaps, b_late reported"] == []
    during = run.answers["node-b during its wait"]
    assert during["maintenance"] is not None and during["busy"], during


def test_an_unhealthy_gpu_is_taken_out_reset_and_put_back_on_its_node(run):
    gpu = run.nodes["node-a"]["gpus"][1]
    before = run.answers["unhealthy-info"]
    assert before["health"] and before["maintenance"] is None
    after = next(g for g in run.answers["a recovered"]["gpus"] if g["uuid"] == gpu)
    assert after["health"] == [] and after["maintenance"] is None and not after["busy"]
    with open(run.nodes["node-a"]["fakehw"]) as handle:
        assert [g.get("health") for g in yaml.safe_load(handle)["gpus"]] == [None, None]  # the reset cleared its faults
    types = [e["type"] for e in run.answers[("node-a", 6)]["posted"]]
    # the recovery's steps, journaled and signed on the node, delivered by the next run
    assert "GPUMaintenanceStarted" in types and "GPUMaintenanceEnded" in types and "GPUUnhealthyCleared" in types, types


def test_a_killed_engine_loses_no_recovery_and_runs_none_twice(run):
    gpu = run.nodes["node-b"]["gpus"][0]
    assert recaps(run.output(0), "node-b") == []  # killed in the middle of node-b's recovery
    status, answer = run.answers["b again after the restart"]
    assert status == 200 and answer["rejected"] == [] and len(answer["accepted"]) == 1
    [reraised] = run.answers["reraised"]
    assert reraised["body"]["device_ids"] == [gpu] and reraised["seq"] > answer["accepted"][0]
    assert recaps(run.output(1), "node-b") == ["0"]  # once, after the restart: for the raise, not the old event
    after = next(g for g in run.answers["b recovered"]["gpus"] if g["uuid"] == gpu)
    assert after["health"] == [] and after["maintenance"] is None and not after["busy"]

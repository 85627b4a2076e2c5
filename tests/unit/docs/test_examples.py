# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every example a reader is given works as written.

Collected: the EXAMPLES of every module in plugins/modules and of the filter in plugins/filter
(what ``ansible-doc`` shows), every fenced ```yaml block of docs/ (and of README.md and
roles/*/README.md), and every file in docs/examples/. Each one has an entry below, in ``SPECS``
(run), ``COVERED`` (run by another's test) or ``SYNTAX_ONLY``, keyed by its file and its first
line (a new example, or one whose first line changed, fails ``test_every_example_has_an_entry``
until it gets one).

An example runs with the real ``ansible-playbook`` (the one beside ``sys.executable``) against
fakehw nodes that ``hack/fakehw_node.py`` makes in the test's ``tmp_path``, on ``localhost``
with a local connection and this Python as ``ansible_python_interpreter``. A fragment (tasks,
an assignment list, a part of a hardware file) is put in a play by its entry; an example meant
for a real node runs with the bcd.devices modules' ``root``/``fakehw`` options pointing at a
fakehw node (``module_defaults``) and with become off, as the fakehw root replaces real root.
Node paths an example names (``/tmp/node-a``, ``/tmp/bcd-nodes/...``) are replaced by the
test's own. Each entry then checks that the example did what its text says (a file on the
node, a returned field, a line of output).

``SYNTAX_ONLY`` lists the few that cannot run here, with the reason; they are syntax-checked
(``ansible-playbook --syntax-check``), all in one call.

A pass binds only with root's rights (or beside the root helper), on a fakehw node as on a real
one, so the examples that bind run as root only (CI runs as root); as another user they are
skipped and only the syntax checks run.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.tests.unit.builders import NO_CLASS, device, hold, kube, mig

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = BIN / "ansible-playbook"
FAKEHW_NODE = REPO / "hack" / "fakehw_node.py"
GATEWAY = REPO / "docs" / "examples" / "gateway.py"
_spec = importlib.util.spec_from_file_location("fakehw_node", FAKEHW_NODE)
fakehw_node = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakehw_node)
MODULES = ["bcd.devices.%s" % path.stem for path in sorted((REPO / "plugins" / "modules").glob("*.py"))]

needs_ansible = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not beside %s" % sys.executable)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a pass binds only with root's rights, on fakehw as on a real node")


# -- collecting the examples ----------------------------------------------------------------------

def plugin_examples(path):
    """The EXAMPLES string of a plugin file, read without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXAMPLES" for t in node.targets):
            return node.value.value
    return None


def yaml_blocks(path):
    """(first line, text) of every ```yaml block of a Markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```yaml":
            end = index + 1
            while lines[end].strip() != "```":
                end += 1
            text = "\n".join(lines[index + 1:end]) + "\n"
            blocks.append((next(line.strip() for line in text.splitlines() if line.strip()), text))
            index = end
        index += 1
    return blocks


def collect():
    """{(file, first line, or "EXAMPLES", or "file"): text}; the n-th of several yaml blocks of a page that
    start with the same line is "<line> #n"."""
    found = {}
    for folder in ("plugins/modules", "plugins/filter"):
        for path in sorted((REPO / folder).glob("*.py")):
            text = plugin_examples(path)
            if text is not None:
                found[(str(path.relative_to(REPO)), "EXAMPLES")] = text
    pages = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"] + sorted((REPO / "roles").glob("*/README.md"))
    for page in pages:
        blocks = yaml_blocks(page)
        firsts = [block[0] for block in blocks]
        count = {}
        for first, text in blocks:
            count[first] = count.get(first, 0) + 1
            key = (str(page.relative_to(REPO)), first if firsts.count(first) == 1 else "%s #%d" % (first, count[first]))
            found[key] = text
    for path in sorted((REPO / "docs" / "examples").iterdir()):
        if path.is_file() and path.suffix != ".md":
            found[(str(path.relative_to(REPO)), "file")] = path.read_text(encoding="utf-8")
    return found


ALL = collect()


# -- running one ----------------------------------------------------------------------------------

# A callback that keeps every registered result (and every set_fact) of a run, by name, and writes
# them to $BCD_CAPTURE at the end: what an example registered, without a task of the test's own.
CAPTURE_CALLBACK = '''
import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bcd_capture"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._bcd_vars = {}

    def _bcd_keep(self, result, *args, **kwargs):
        task = getattr(result, "task", None) or result._task
        data = getattr(result, "result", None)
        if data is None:
            data = result._result
        # A name (ansible-core 2.19, 2.20), or {name: what it keeps} (2.21, where register may project).
        names = task.register if isinstance(task.register, dict) else [task.register] if task.register else []
        for name in names:
            self._bcd_vars[name] = data
        if task.action in ("set_fact", "ansible.builtin.set_fact"):
            self._bcd_vars.update(data.get("ansible_facts", {}))

    v2_runner_on_ok = v2_runner_on_failed = v2_runner_on_skipped = _bcd_keep

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["BCD_CAPTURE"], "w") as handle:
            json.dump(self._bcd_vars, handle, default=repr)
'''


class Run(object):
    """One example's nodes, inventory, playbook and results, under tmp_path."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.nodes = {}
        self.captured = {}
        self.out = ""
        self.stub_log = tmp_path / "stubs.log"
        stubs = tmp_path / "bin"
        stubs.mkdir()
        # nvidia-smi, as an example that resets a GPU calls it: it logs its arguments.
        stub = stubs / "nvidia-smi"
        stub.write_text('#!/bin/sh\necho "nvidia-smi $*" >> %s\n' % self.stub_log)
        stub.chmod(0o755)
        self.env = dict(
            os.environ,
            PATH="%s:%s:%s" % (stubs, BIN, os.environ.get("PATH", "")),
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"),
            ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-home" / "remote-tmp"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_GATHERING="explicit",   # no example needs facts; the role gathers what it needs
            ANSIBLE_PIPELINING="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_LOCALHOST_WARNING="0",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
            ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        )
        (tmp_path / "ansible.cfg").write_text("[defaults]\n")
        callbacks = tmp_path / "callbacks"
        callbacks.mkdir()
        (callbacks / "bcd_capture.py").write_text(CAPTURE_CALLBACK)
        self.env.update(ANSIBLE_CALLBACK_PLUGINS=str(callbacks), ANSIBLE_CALLBACKS_ENABLED="bcd_capture",
                        BCD_CAPTURE=str(tmp_path / "captured.json"))

    def node(self, name, *args, at=None):
        """Make a fakehw node with hack/fakehw_node.py (its options as given) and return its path."""
        root = Path(at) if at else self.tmp / "nodes" / name
        assert fakehw_node.main(["--root", str(root)] + list(args)) == 0
        self.nodes[name] = root
        return root

    def bind(self, name, generation, devices):
        """Set up a node's holds in this process, with the code the module runs (faster than a task)."""
        host = FakeHwHost(str(self.nodes[name]), str(self.nodes[name] / "fakehw.yml"))
        result = run_pass(host, generation, devices, lock_timeout=10).to_dict()
        assert not result["section"]["state"] == "PROGRESSING", result
        return result

    def public_key(self, name):
        return NodeState(str(self.path(name, "/var/lib/bcd")), "/var/lib/bcd").public_key()

    def path(self, name, node_path=""):
        return self.nodes[name] / node_path.lstrip("/")

    def read(self, name, node_path):
        return self.path(name, node_path).read_text(encoding="utf-8")

    def defaults(self, name="node-a"):
        """module_defaults that point every bcd.devices module at a fakehw node."""
        root = str(self.nodes[name])
        return {module: {"root": root, "fakehw": root + "/fakehw.yml"} for module in MODULES}

    def inventory(self, host_vars=None):
        host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                "bcd_root": str(self.nodes.get("node-a", ""))}
        host.update(host_vars or {})
        groups = {group: {"hosts": {"node-a": None}} for group in ("gpu_nodes", "test_nodes")}
        text = yaml.safe_dump({"all": {"hosts": {"node-a": host}, "children": groups}}, sort_keys=False)
        path = self.tmp / "inventory.yml"
        path.write_text(text)
        return path

    def play(self, tasks, name="the example", defaults="node-a", vars=None):
        play = {"name": name, "hosts": "node-a", "gather_facts": False, "tasks": tasks}
        if defaults:
            play["module_defaults"] = self.defaults(defaults)
        if vars:
            play["vars"] = vars
        return play

    def playbook(self, plays, capture=(), inventory=None, extra=()):
        """Run plays (a list, or YAML text) with ansible-playbook; what they registered is then in
        self.captured, which must hold every name in capture."""
        if isinstance(plays, str):
            plays = yaml.safe_load(plays)
        book = self.tmp / "playbook.yml"
        book.write_text(yaml.safe_dump(plays, sort_keys=False, width=1000))
        command = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory or self.inventory()), str(book),
                   "-e", "ansible_become=false"] + list(extra)
        done = subprocess.run(command, cwd=str(self.tmp), env=self.env, capture_output=True, text=True,
                              timeout=120, check=False)
        self.out, self.err = done.stdout, done.stderr
        assert done.returncode == 0, "ansible-playbook failed (%d):\n%s\n%s\n--- playbook:\n%s" % (
            done.returncode, done.stdout[-6000:], done.stderr[-3000:], book.read_text())
        self.captured = json.loads((self.tmp / "captured.json").read_text())
        missing = [name for name in capture if name not in self.captured]
        assert missing == [], "the run registered no %s" % missing
        return self


def tasks_of(text, subs=None):
    """An example's tasks, its node paths replaced; a fragment indented as under `tasks:` is dedented."""
    for old, new in (subs or {}).items():
        text = text.replace(old, str(new))
    return yaml.safe_load(textwrap.dedent(text))


def holds_task(generation, devices, register="setup_pass", **extra):
    args = {"generation": generation, "devices": devices}
    args.update(extra)
    return {"name": "Set up: generation %d" % generation, "bcd.devices.holds": args, "register": register}


def plan(result):
    return [step["text"] for step in result["plan"]]


def gpu(node, index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (node, index + 1)


# -- the plugins' EXAMPLES ------------------------------------------------------------------------

def run_holds_examples(run, text):
    run.node("node-a", "--node-number", "0")            # the UUIDs of the real-node examples
    run.node("fakehw-a", at=run.tmp / "doc" / "node-a")   # hack/fakehw_node.py --root /tmp/bcd-nodes/node-a
    tasks = tasks_of(text, {"/tmp/bcd-nodes/node-a": run.nodes["fakehw-a"]})
    node_devices = tasks[0]["bcd.devices.holds"]["devices"]  # the first example's, again
    run.playbook([run.play(tasks, vars={"node_devices": node_devices})], capture=["pass_result", "retried"])
    first = run.captured["pass_result"]
    assert plan(first)[0].startswith("bind alloc_01jz8k2v: bcd.dev/gpu=%s -> " % gpu(0, 0))
    assert plan(first)[1].startswith("bind alloc_01jz8k3a: bcd.dev/gpu=%s_gi1_ci0 -> " % gpu(0, 1))
    assert first["failures"] == [] and first["section"]["state"] == "CONVERGED"
    assert run.captured["retried"]["changed"] is False  # the same input again: nothing to do
    # generation 43 released both; the fakehw example bound GPU 0 of its own node
    assert sorted(p.name for p in run.path("node-a", "/etc/cdi").glob("bcd-*")) == []
    assert (run.path("fakehw-a", "/etc/cdi/bcd-alloc_demo.json")).exists()
    assert "BCD_ALLOCATION_ID=alloc_demo" in run.read("fakehw-a", "/run/bcd/allocations/alloc_demo.env")


def run_holds_info_examples(run, text):
    run.node("node-a", "--node-number", "0")
    run.bind("node-a", 1, [hold("alloc_train", gpu(0, 0), device_class=NO_CLASS), hold("alloc_notebook", gpu(0, 1) + "/gi1/ci0")])
    run.playbook([run.play(tasks_of(text))], capture=["node_public_key", "info"])
    assert len(run.captured["node_public_key"]) == 44
    assert "GPU 0 %s: alloc_train" % gpu(0, 0) in run.out
    assert "GPU 1 %s: %s/gi1/ci0" % (gpu(0, 1), gpu(0, 1)) in run.out  # not free: one of its MIG instances is held
    assert "GPU 2 %s: free" % gpu(0, 2) in run.out


def run_events_examples(run, text):
    run.node("node-a", "--node-number", "0")
    run.node("fakehw-a", at=run.tmp / "doc" / "node-a")
    run.bind("node-a", 1, [hold("alloc_train", gpu(0, 0), device_class=NO_CLASS), hold("alloc_vf", "vf-0", device_class="nic.vf")])
    tasks = tasks_of(text, {"/tmp/bcd-nodes/node-a": run.nodes["fakehw-a"]})
    run.playbook([run.play(tasks)], capture=["journal"])
    assert [e["type"] for e in run.captured["journal"]["events"]] == ["AllocationBound", "AllocationFailed"]
    assert "ok: [node-a] => (item=1 AllocationBound)" in run.out  # its signature was checked
    assert run.read("node-a", "/var/lib/bcd/events.jsonl").strip() == ""  # acknowledged


def run_verify_report_examples(run, text):
    run.node("node-a", "--node-number", "0")
    run.bind("node-a", 1, [hold("alloc_train", gpu(0, 0), device_class=NO_CLASS)])
    run.bind("node-a", 2, [])
    run.playbook([run.play(tasks_of(text))], capture=["journal"])
    types = [e["type"] for e in run.captured["journal"]["events"]]
    assert types == ["AllocationBound", "AllocationReleased"]
    assert "ok: [node-a] => (item=1)" in run.out and "ok: [node-a] => (item=2)" in run.out


def run_gpu_busy_examples(run, text):
    run.node("node-a", "--node-number", "0")
    run.playbook([run.play(tasks_of(text), vars={"gpus_to_reset": [gpu(0, 0)]})], capture=["busy"])
    assert run.captured["busy"]["gpus"][0]["uuid"] == gpu(0, 0) and not run.captured["busy"]["gpus"][0]["busy"]
    assert run.stub_log.read_text() == "nvidia-smi --gpu-reset -i %s\n" % gpu(0, 0)
    assert "firmware update" in run.read("node-a", "/var/lib/bcd/maintenance.json")


def run_gpu_reset_examples(run, text):
    root = run.node("node-a", "--node-number", "0")
    hardware = yaml.safe_load((root / "fakehw.yml").read_text())
    hardware["gpus"][0]["health"] = {"retired_pages_pending": True, "xids": [48]}
    (root / "fakehw.yml").write_text(yaml.safe_dump(hardware, sort_keys=False))
    run.playbook([run.play(tasks_of(text))], capture=["busy", "reset"])
    assert run.captured["reset"]["gpus"] == [
        {"uuid": gpu(0, 0), "reset": True, "healthy": True, "problems": [], "error": None}]
    assert json.loads(run.read("node-a", "/var/lib/bcd/maintenance.json")) == {}
    assert not run.stub_log.exists()  # a fakehw node: no nvidia-smi ran
    events = [json.loads(line) for line in run.read("node-a", "/var/lib/bcd/events.jsonl").splitlines()]
    assert [(e["type"], e["body"]["reason"]) for e in events] == [
        ("GPUMaintenanceStarted", "MaintenanceStarted"), ("GPUReset", "ResetHealthy"),
        ("GPUMaintenanceEnded", "MaintenanceEnded")]


def run_event_driven_enrolment(run, text):
    """The enrolment play of docs/event-driven.md, its gateway this machine: the node's key lands in the keys
    directory under the node's name, as the source bcd.devices.gateway reads it."""
    run.node("node-a", "--node-number", "0")
    run.bind("node-a", 1, [hold("alloc_train", gpu(0, 0), device_class=NO_CLASS)])  # the key is made at the first bind
    keys = run.tmp / "node-keys"
    keys.mkdir()
    [play] = tasks_of(text)
    assert play["hosts"] == "gpu_nodes" and play["become"] is True  # as the page has it; here node-a, as its user
    play = dict(run.play(play["tasks"]), vars=dict(play["vars"], bcd_gateway_host="node-a",
                                                   bcd_gateway_keys_dir=str(keys)))
    run.playbook([play], capture=["bcd_info"])
    assert (keys / "node-a.pub").read_text() == run.captured["bcd_info"]["node_public_key"] + "\n"


def run_maintenance_examples(run, text):
    run.node("node-a", "--node-number", "0")
    run.playbook([run.play(tasks_of(text))])
    assert run.out.count("changed: [node-a]") == 2  # out of service, then back
    assert json.loads(run.read("node-a", "/var/lib/bcd/maintenance.json")) == {}


def run_node_library_examples(run, text):
    """The example's node has no library (the role is not run here) and nothing says it has: the module runs
    as shipped, once, with no warning."""
    run.node("node-a", "--node-number", "0")
    run.playbook([run.play(tasks_of(text), vars={"devices": [hold("alloc_a", gpu(0, 0))]})], capture=["converged"])
    assert run.captured["converged"]["ran_from"] == "bundled" and run.captured["converged"]["changed"]
    assert "warnings" not in run.captured["converged"]
    assert "WARNING" not in run.out + run.err


def mig_node(run, **gpu0):
    """node-a with four NVIDIA A100-SXM4-80GB, MIG off and no instance (the profiles the MIG examples name);
    ``gpu0``: more fields of GPU 0 (``mig_mode_needs_reset``)."""
    root = run.node("node-a", "--node-number", "0", "--mig-gpu", "9")  # no GPU 9: no MIG instance anywhere
    hardware = yaml.safe_load((root / "fakehw.yml").read_text())
    for entry in hardware["gpus"]:
        entry.update(name="NVIDIA A100-SXM4-80GB", mig_mode=False)
    hardware["gpus"][0].update(gpu0)
    (root / "fakehw.yml").write_text(yaml.safe_dump(hardware, sort_keys=False))
    return root


def mig_layout_now(run):
    """``{GPU index: [(gi, ci, GI profile, start)]}`` and ``{GPU index: MIG mode}`` as node-a's file has them."""
    from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import read_mig_file
    found = read_mig_file(str(run.path("node-a", "fakehw.yml")))
    assert found.error is None, found.error
    return (dict((gpu.index, sorted((inst.gi, ci.ci, inst.profile, inst.placement.start)
                                    for inst in gpu.instances for ci in inst.compute)) for gpu in found.gpus),
            dict((gpu.index, gpu.mode) for gpu in found.gpus))


def mig_events(run):
    """``[(type, reason, device_id)]`` of node-a's journaled MIG events."""
    events = [json.loads(line) for line in run.read("node-a", "/var/lib/bcd/events.jsonl").splitlines()]
    return [(e["type"], e["body"]["reason"], e["body"]["device_ids"][0]) for e in events if e["type"].startswith("MIG")]


def run_mig_layout_examples(run, text):
    """The module's examples in order on four A100 80GB: GPU 0 cut in three and GPU 1 in seven; then mig-parted's
    all-3g.40gb on every GPU, which keeps GPU 0's 3g.40gb at 4 and makes the rest; then MIG off on GPU 2."""
    mig_node(run)
    run.playbook([run.play(tasks_of(text))], capture=["mig"])
    first = run.captured["mig"]  # what the first example made
    assert not first.get("failed") and first["changed"]
    assert [(item["gi"], item["gi_profile"], item["placement"]) for item in first["gpus"][0]["after"]] == [
        (1, "3g.40gb", 4), (2, "2g.20gb", 0), (3, "2g.20gb", 2)]
    assert [(item["gi"], item["gi_profile"], item["placement"]) for item in first["gpus"][1]["after"]] == [
        (gi, "1g.10gb", gi - 1) for gi in range(1, 8)]
    layout, mode = mig_layout_now(run)
    two = [(1, 0, "3g.40gb", 0), (2, 0, "3g.40gb", 4)]
    assert layout == {0: [(1, 0, "3g.40gb", 4), (2, 0, "3g.40gb", 0)], 1: two, 2: [], 3: two}
    assert mode == {0: True, 1: True, 2: False, 3: True}
    events = mig_events(run)
    assert set(reason for _type, reason, _id in events) == {"LayoutApplied"}
    assert [e for e in events if e[0] == "MIGModeChanged"] == [
        ("MIGModeChanged", "LayoutApplied", gpu(0, index)) for index in (0, 1, 2, 3, 2)]  # GPU 2 on, then off
    assert ("MIGInstanceDestroyed", "LayoutApplied", gpu(0, 0) + "/gi2/ci0") in events  # a 2g.20gb went
    assert ("MIGInstanceDestroyed", "LayoutApplied", gpu(0, 0) + "/gi1/ci0") not in events  # the 3g.40gb stayed
    assert "mig-layout.json" in [p.name for p in run.path("node-a", "/var/lib/bcd").iterdir()]


# -- README.md and roles/*/README.md --------------------------------------------------------------

def run_readme_playbook(run, text):
    run.node("node-a", "--node-number", "0", "--domain", "inst_9:3")
    plays = yaml.safe_load(text)
    for play in plays:
        play["module_defaults"] = run.defaults()
    nodespec = {"generation": 1, "instances": [{"instance_id": "inst_9", "gpus": [gpu(0, 3)]}],
                "devices": [hold("alloc_ok", gpu(0, 0), device_class=NO_CLASS), hold("alloc_vm", gpu(0, 3), device_class=NO_CLASS)]}
    run.playbook(plays, capture=["holds"], extra=["-e", json.dumps({"nodespec": nodespec})])
    assert [f["allocation_id"] for f in run.captured["holds"]["failures"]] == ["alloc_vm"]
    assert "alloc_vm" in run.out.split("TASK [Show what was refused and why]", 1)[1]
    assert run.path("node-a", "/etc/cdi/bcd-alloc_ok.json").exists()


def run_assignment_list(run, text):
    """An assignment (a list of DeviceAssignments) given to bcd.devices.holds as its devices."""
    run.node("node-a", "--node-number", "0")
    devices = yaml.safe_load(text)
    run.playbook([run.play([holds_task(1, devices, register="pass_result")])], capture=["pass_result"])
    result = run.captured["pass_result"]
    assert result["failures"] == [] and result["section"]["state"] == "CONVERGED", result["failures"]
    ids = [a["allocation_id"] for a in devices]
    assert sorted(h["allocation_id"] for h in result["holds"]) == sorted(ids)
    for assignment in devices:
        env = run.read("node-a", "/run/bcd/allocations/%s.env" % assignment["allocation_id"])
        for line in assignment.get("env", []):
            assert line in env.splitlines()
    return run, result


def run_readme_assignment(run, text):
    run, result = run_assignment_list(run, text)
    record = json.loads(run.read("node-a", "/run/bcd/slices/bcd-alloc-alloc_01jz8k2v.slice.json"))
    assert record["properties"]["AllowedCPUs"] == "0-7" and record["properties"]["MemoryMax"] == "68719476736"


# -- docs/ ----------------------------------------------------------------------------------------

def run_events_md_playbook(run, text):
    run.node("node-a")
    # what the user guide's first playbook bound
    run.bind("node-a", 1, [hold("alloc_train", gpu(1, 0), device_class=NO_CLASS), mig("alloc_notebook", gpu(1, 1) + "/gi1/ci0")])
    run.playbook(text, capture=["acked"])
    assert run.captured["acked"]["acknowledged"] == 2
    assert '"msg": "acknowledged 2, 0 left"' in run.out
    assert '"msg": "1 AllocationBound alloc_train generation 1"' in run.out


def run_events_md_filter_lines(run, text):
    """events.md's lines of a debug task, on a node's journal with a bind and a refusal: pass_result
    (that pass), journal (bcd.devices.events) and info (bcd.devices.holds_info) as the page has them."""
    run.node("node-a")
    pass_result = run.bind("node-a", 1, [hold("alloc_train", gpu(1, 0), device_class=NO_CLASS), hold("alloc_vf", "vf-0", device_class="nic.vf")])
    journal = [json.loads(line) for line in run.read("node-a", "/var/lib/bcd/events.jsonl").splitlines()]
    assert [event["type"] for event in journal] == ["AllocationBound", "AllocationFailed"]
    facts = run.tmp / "registered.json"
    facts.write_text(json.dumps({"pass_result": pass_result, "journal": {"events": journal},
                                 "info": {"node_public_key": run.public_key("node-a")}}))
    shown = {"name": "The example's lines", "ansible.builtin.debug": {"msg": yaml.safe_load(text)}, "register": "shown"}
    run.playbook([run.play([shown])], capture=["shown"], extra=["-e", "@%s" % facts])
    return run.captured["shown"]["msg"]


def run_events_md_accepts_and_rejects(run, text):
    assert run_events_md_filter_lines(run, text) == [
        "bound: True", "failed event: False", "bound passed off as released: False", "seq changed: True"]


def run_events_md_tampered(run, text):
    assert run_events_md_filter_lines(run, text) == ["tampered: False"]


def run_fakehw_md_hardware_file(run, text):
    root = run.node("node-a", "--domain", "inst_7:3")
    assert yaml.safe_load((root / "fakehw.yml").read_text()) == yaml.safe_load(text)


def run_kubelet_fragment(run, kubelet, node_number, device_ids, pods, mig_gpu="1"):
    """A kubelet section of a hardware file: a Kubernetes hold bound before the pods appear is not
    reported released while they hold its devices."""
    root = run.node("node-a", "--node-number", str(node_number), "--mig-gpu", mig_gpu)
    hardware = yaml.safe_load((root / "fakehw.yml").read_text())
    hardware["kubelet"] = kubelet
    with_pods = run.tmp / "fakehw-with-pods.yml"
    with_pods.write_text(yaml.safe_dump(hardware))
    devices = [kube("alloc_kube", devices=[device(d, "gpu.mig" if "/gi" in d else NO_CLASS) for d in device_ids])]
    assert run.bind("node-a", 1, devices)["section"]["state"] == "CONVERGED"
    with_pods.replace(root / "fakehw.yml")  # the pods start
    run.playbook([run.play([holds_task(2, [], register="released")])], capture=["released"])
    release = plan(run.captured["released"])
    assert len(release) == 1 and release[0].startswith("release alloc_kube (no longer wanted, Kubernetes)")
    assert release[0].endswith("report it once no pod holds its devices (held by %s)" % pods), release[0]
    assert "AllocationReleased" not in [e["type"] for e in run.captured["released"]["events"]]
    assert "alloc_kube" in run.read("node-a", "/var/lib/bcd/releasing.json")


def run_fakehw_md_pods(run, text):
    run_kubelet_fragment(run, yaml.safe_load(text)["kubelet"], 7, [gpu(7, 2)], "default/train-0 (main)")


def run_fakehw_md_dra_pod(run, text):
    pod = yaml.safe_load(textwrap.dedent(text))
    run_kubelet_fragment(run, {"reachable": True, "pods": pod}, 7, [gpu(7, 0) + "/gi1/ci0"], "ml/infer-1 (server)",
                         mig_gpu="0")


def run_kubernetes_md_pods(run, text):
    run_kubelet_fragment(run, yaml.safe_load(text)["kubelet"], 7, [gpu(7, 3), gpu(7, 1) + "/gi1/ci0"],
                         "default/train-0 (main), ml/infer-1 (server)")


def run_slices_worked_example(run, text):
    """Generation 2 of slices-and-admission.md's worked example, on node-s as the page makes it."""
    root = run.node("node-s", "--node-id", "node-s", "--gpus", "4", "--mig-gpu", "-1", "--vendor", "none",
                    "--domain", "inst_1:3")
    run.nodes["node-a"] = root
    files = {"proc/meminfo": "MemTotal:       67108864 kB\nHugetlb:         4194304 kB\n"}
    for size, free, node0, node1 in (("2048", 1024, 512, 512), ("1048576", 2, 2, 0)):
        files["sys/kernel/mm/hugepages/hugepages-%skB/resv_hugepages" % size] = "0\n"
        files["sys/kernel/mm/hugepages/hugepages-%skB/free_hugepages" % size] = "%d\n" % free
        files["sys/devices/system/node/node0/hugepages/hugepages-%skB/free_hugepages" % size] = "%d\n" % node0
        files["sys/devices/system/node/node1/hugepages/hugepages-%skB/free_hugepages" % size] = "%d\n" % node1
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    generation_1 = [  # gen1.yml of the page
        {"allocation_id": "alloc_train", "binding": "BINDING_HOLD", "reservation_id": "rsv_train",
         "devices": [{"id": gpu(1, 0)}],
         "limits": {"cpus": "0-15", "mems": "0", "cpu_millis": 1234, "memory_bytes": 34359738368,
                    "hugepages_2mi": 256, "hugepages_1gi": 1}},
        {"allocation_id": "alloc_kube", "reservation_id": "rsv_kube", "binding": "BINDING_KUBERNETES",
         "devices": [{"id": gpu(1, 1)}], "limits": {"cpus": "16-23", "memory_bytes": 17179869184}}]
    generation_2 = generation_1 + yaml.safe_load(textwrap.dedent(text))
    assert run.bind("node-s", 1, generation_1)["failures"] == []
    run.playbook([run.play([holds_task(2, generation_2, register="second", on_refusal="report")])], capture=["second"])
    assert plan(run.captured["second"]) == [
        "bind alloc_small: bcd.dev/gpu=%s_s0 -> /etc/cdi/bcd-alloc_small.json, /run/bcd/allocations/alloc_small.env, "
        "in bcd-alloc-alloc_small.slice (MemoryMax=2147483648, MemoryHigh=1932735283)" % gpu(1, 2),
        "refuse alloc_more: ResourcesExhausted: 4096 MiB of memory needed, 512 MiB left on this host",
        "refuse alloc_huge: ResourcesExhausted: 2 hugepages of 1048576 KiB needed, 1 free",
        "refuse alloc_numa1: ResourcesExhausted: 600 hugepages of 2048 KiB needed, 512 free"]


def run_node_md_reset(run, text):
    run.node("node-a")
    gpus = [gpu(1, 2)]
    run.playbook([run.play(tasks_of(text), vars={"gpus_to_reset": gpus})], capture=["busy"])
    assert run.captured["busy"]["gpus"] == [dict(run.captured["busy"]["gpus"][0], uuid=gpus[0], busy=False)]
    assert run.stub_log.read_text() == "nvidia-smi --gpu-reset -i %s\n" % gpus[0]
    assert json.loads(run.read("node-a", "/var/lib/bcd/maintenance.json")) == {}  # back in service


@contextlib.contextmanager
def gateway(run):
    """docs/examples/gateway.py on loopback, for this run: yields (its URL, its keys dir, its store)."""
    keys, store, port_file = run.tmp / "keys", run.tmp / "events.jsonl", run.tmp / "port"
    keys.mkdir()
    process = subprocess.Popen([sys.executable, str(GATEWAY), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                                "--keys-dir", str(keys), "--store", str(store)], env=run.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text().strip()):
            assert process.poll() is None and time.monotonic() < deadline, "gateway.py did not start"
            time.sleep(0.05)
        yield "http://127.0.0.1:%s/events" % port_file.read_text().strip(), keys, store
    finally:
        process.terminate()
        process.wait(10)


def run_node_md_delivery(run, text):
    """The delivery-only play against docs/examples/gateway.py, with the node's key enrolled."""
    root = run.node("node-a")
    with gateway(run) as (url, keys, store):
        run.bind("node-a", 1, [hold("alloc_train", gpu(1, 0), device_class=NO_CLASS)])
        (keys / "node-a.pub").write_text(run.public_key("node-a"))  # the node enrolled
        plays = yaml.safe_load(text.replace("http://127.0.0.1:46283/events", url))
        run.playbook(plays, capture=["bcd_holds_delivery"],
                     inventory=run.inventory({"bcd_holds_root": str(root)}))
    delivery = run.captured["bcd_holds_delivery"]
    assert delivery["posted"] == [1] and delivery["accepted"] == [1] and int(delivery["ack_through"]) == 1
    assert [json.loads(line)["type"] for line in store.read_text().splitlines()] == ["AllocationBound"]
    assert run.read("node-a", "/var/lib/bcd/events.jsonl").strip() == ""


def run_delivery_examples(run, text):
    """The filter's example against docs/examples/gateway.py with the node's key enrolled: it takes both
    events, so both are acknowledged."""
    run.node("node-a", "--node-number", "0")
    run.bind("node-a", 1, [hold("alloc_train", gpu(0, 0), device_class=NO_CLASS), hold("alloc_vf", "vf-0", device_class="nic.vf")])
    with gateway(run) as (url, keys, store):
        (keys / "node-a.pub").write_text(run.public_key("node-a"))
        run.playbook([run.play(tasks_of(text, {"https://gateway.example/events": url}))], capture=["journal", "post"])
    assert [e["type"] for e in run.captured["journal"]["events"]] == ["AllocationBound", "AllocationFailed"]
    assert [json.loads(line)["seq"] for line in store.read_text().splitlines()] == [1, 2]
    assert run.read("node-a", "/var/lib/bcd/events.jsonl").strip() == ""  # acknowledged through 2


def run_install_digest_examples(run, text):
    """The filter over the role's own directory (``role_path`` in the role): one SHA-256, another for another input."""
    role = str(Path(__file__).resolve().parents[3] / "roles" / "bcd_holds")
    tasks = tasks_of(text, {"role_path": "'%s'" % role})
    other = copy.deepcopy(tasks[0])
    other["ansible.builtin.debug"]["msg"] = other["ansible.builtin.debug"]["msg"].replace("'bcd'", "'gpu'")
    run.playbook([run.play(tasks + [other], defaults=None)])
    digests = re.findall(r'"msg": "([0-9a-f]{64})"', run.out)
    assert len(digests) == 2 and digests[0] != digests[1], run.out


def run_mig_layout_md_first(run, text):
    """docs/mig-layout.md's first layout: its mig-parted file (the page's block before) as config.yaml beside the
    playbook, applied to four A100 80GB."""
    mig_node(run)
    (run.tmp / "config.yaml").write_text(ALL[("docs/mig-layout.md", "version: v1")])
    plays = yaml.safe_load(text)
    for play in plays:
        play["module_defaults"] = run.defaults()   # the fakehw root instead of become
    run.playbook(plays, capture=["mig"])
    placed = [(1, 0, "3g.40gb", 4), (2, 0, "2g.20gb", 0), (3, 0, "1g.10gb", 2), (4, 0, "1g.10gb", 3)]
    assert mig_layout_now(run)[0] == dict((index, placed) for index in range(4))
    shown = ["%s/gi%d/ci0" % (gpu(0, index), gi) for index in range(4) for gi in (1, 2, 3, 4)]
    assert '"msg": %s' % json.dumps(shown, indent=4).replace("\n", "\n    ") in run.out


def run_mig_layout_md_reset(run, text):
    """docs/mig-layout.md's reset.yml: GPU 0 waits for a reset to enter MIG mode; the play resets it and cuts it."""
    mig_node(run, mig_mode_needs_reset=True)
    plays = yaml.safe_load(text)
    for play in plays:
        play["module_defaults"] = run.defaults()
    run.playbook(plays, capture=["mig"])
    assert run.captured["mig"]["gpus"][0]["reset_needed"] and not run.captured["mig"].get("failed")
    assert mig_layout_now(run)[0][0] == [(1, 0, "3g.40gb", 0), (2, 0, "3g.40gb", 4)]
    events = [json.loads(line) for line in run.read("node-a", "/var/lib/bcd/events.jsonl").splitlines()]
    assert [(e["type"], e["body"]["reason"]) for e in events] == [
        ("GPUMaintenanceStarted", "MaintenanceStarted"), ("MIGModeChanged", "LayoutApplied"),
        ("GPUReset", "ResetHealthy"),  # the reset made the pending mode the mode: journaled once, when asked for
        ("MIGInstanceCreated", "LayoutApplied"), ("MIGInstanceCreated", "LayoutApplied"),
        ("GPUMaintenanceEnded", "MaintenanceEnded")]
    assert json.loads(run.read("node-a", "/var/lib/bcd/maintenance.json")) == {}


def run_user_guide_real(run, text):
    run.node("node-a", "--node-number", "0")
    plays = yaml.safe_load(text)
    for play in plays:
        play["module_defaults"] = run.defaults()   # the fakehw root instead of become
    run.playbook(plays, capture=["pass_result"])
    assert run.captured["pass_result"]["section"]["state"] == "CONVERGED"
    assert run.path("node-a", "/etc/cdi/bcd-alloc_train.json").exists()


def user_guide_inventory(run):
    """docs/user-guide.md's inventory.yml, its /tmp/bcd-nodes replaced by the test's."""
    text = ALL[("docs/user-guide.md", "# inventory.yml")].replace("/tmp/bcd-nodes/", "%s/" % (run.tmp / "bcd-nodes"))
    path = run.tmp / "inventory.yml"
    path.write_text(text)
    return path


def run_user_guide_first(run, text):
    run.node("node-a", "--compact", at=run.tmp / "bcd-nodes" / "node-a")  # as the guide makes it
    run.playbook(text, capture=["pass_result"], inventory=user_guide_inventory(run))
    result = run.captured["pass_result"]
    assert result["section"] == {"generation": 1, "message": "", "observed_generation": 1, "state": "CONVERGED"}
    assert plan(result) == [
        "bind alloc_train: bcd.dev/gpu=%s -> /etc/cdi/bcd-alloc_train.json, /run/bcd/allocations/alloc_train.env" % gpu(1, 0),
        "bind alloc_notebook: bcd.dev/gpu=%s_gi1_ci0 -> /etc/cdi/bcd-alloc_notebook.json, "
        "/run/bcd/allocations/alloc_notebook.env" % gpu(1, 1)]
    assert "TEAM=vision" in run.read("node-a", "/run/bcd/allocations/alloc_train.env").splitlines()


def run_user_guide_retry(run, text):
    run.node("node-c", "--node-number", "3", "--node-id", "node-c", at=run.tmp / "bcd-nodes" / "node-a")
    play = {"name": "retry.yml", "hosts": "node-a", "gather_facts": False, "tasks": tasks_of(text)}
    run.playbook([play], capture=["pass_result"], inventory=user_guide_inventory(run), extra=["-e", "gen=1"])
    assert run.captured["pass_result"]["section"]["state"] == "CONVERGED"
    assert run.path("node-c", "/etc/cdi/bcd-alloc_train.json").exists()


def run_user_guide_defaults(run, text):
    """The group's module_defaults reach every module: none of the tasks names the node, each acts on it."""
    for name in ("node-a", "node-b"):  # the guide's two nodes
        run.node(name, "--compact", at=run.tmp / "bcd-nodes" / name)
    run.playbook(text, capture=["pass_result", "info", "journal"], inventory=user_guide_inventory(run))
    assert run.captured["pass_result"]["section"]["state"] == "CONVERGED"
    assert run.path("node-a", "/etc/cdi/bcd-alloc_train.json").exists()
    assert run.path("node-b", "/etc/cdi/bcd-alloc_train.json").exists()
    assert [hold["allocation_id"] for hold in run.captured["info"]["holds"]] == ["alloc_train"]
    assert [event["type"] for event in run.captured["journal"]["events"]] == ["AllocationBound"]


def run_user_guide_numbered(run, text):
    run.node("node-a", "--node-number", "0")
    [task] = tasks_of(text)
    task["register"] = "pass_result"
    edited = json.loads(json.dumps(task))
    edited["bcd.devices.holds"]["devices"][0]["reservation_id"] = "rsv_edited"
    play = run.play([task, dict(task, register="again"), dict(edited, register="edited")])
    run.playbook([play], capture=["pass_result", "again", "edited"])
    assert run.captured["pass_result"]["section"]["generation"] == 1
    assert run.captured["again"]["section"]["generation"] == 1 and run.captured["again"]["changed"] is False
    assert run.captured["edited"]["section"]["generation"] == 2  # an edited input: the next number
    assert run.path("node-a", "/etc/cdi/bcd-alloc_train.json").exists()


# -- the registry ---------------------------------------------------------------------------------

SPECS = {
    ("plugins/modules/holds.py", "EXAMPLES"): run_holds_examples,
    ("plugins/modules/holds_info.py", "EXAMPLES"): run_holds_info_examples,
    ("plugins/modules/events.py", "EXAMPLES"): run_events_examples,
    ("plugins/modules/gpu_busy.py", "EXAMPLES"): run_gpu_busy_examples,
    ("plugins/modules/gpu_reset.py", "EXAMPLES"): run_gpu_reset_examples,
    ("docs/event-driven.md", "- name: Enrol the GPU nodes with the gateway"): run_event_driven_enrolment,
    ("plugins/modules/maintenance.py", "EXAMPLES"): run_maintenance_examples,
    ("plugins/modules/node_library.py", "EXAMPLES"): run_node_library_examples,
    ("plugins/modules/mig_layout.py", "EXAMPLES"): run_mig_layout_examples,
    ("plugins/filter/verify_report.py", "EXAMPLES"): run_verify_report_examples,
    ("plugins/filter/delivery.py", "EXAMPLES"): run_delivery_examples,
    ("plugins/filter/install_digest.py", "EXAMPLES"): run_install_digest_examples,
    ("README.md", "- name: Hold what the control plane booked on each GPU node"): run_readme_playbook,
    ("README.md", "- allocation_id: alloc_01jz8k2v"): run_readme_assignment,
    ("docs/events.md", "# events.yml"): run_events_md_playbook,
    ("docs/events.md", "- \"bound: {{ journal.events[0] | bcd.devices.verify_report(info.node_public_key) }}\""):
        run_events_md_accepts_and_rejects,
    ("docs/events.md", "- \"tampered: {{ pass_result.events[0] | combine({'body': {'generation': 3}}, recursive=true) "
                       "| bcd.devices.verify_report(info.node_public_key) }}\""): run_events_md_tampered,
    ("docs/fakehw.md", "node_id: node-a"): run_fakehw_md_hardware_file,
    ("docs/fakehw.md", "kubelet:"): run_fakehw_md_pods,
    ("docs/fakehw.md", "- namespace: ml"): run_fakehw_md_dra_pod,
    ("docs/kubernetes.md", "kubelet:"): run_kubernetes_md_pods,
    ("docs/slices-and-admission.md", "- allocation_id: alloc_small"): run_slices_worked_example,
    ("docs/node.md", "- name: Keep new holds off the GPU"): run_node_md_reset,
    ("docs/node.md", "- hosts: gpu_nodes", 2): run_node_md_delivery,
    ("docs/mig-layout.md", "# mig.yml"): run_mig_layout_md_first,
    ("docs/mig-layout.md", "# reset.yml"): run_mig_layout_md_reset,
    ("docs/user-guide.md", "# real.yml"): run_user_guide_real,
    ("docs/user-guide.md", "# first.yml"): run_user_guide_first,
    ("docs/user-guide.md", "# retry.yml"): run_user_guide_retry,
    ("docs/user-guide.md", "# numbered.yml"): run_user_guide_numbered,
    ("docs/user-guide.md", "# defaults.yml"): run_user_guide_defaults,
}

# Examples that are not run on their own, and what runs them.
COVERED = {
    ("docs/user-guide.md", "# inventory.yml"): "the inventory of first.yml and retry.yml, whose tests use it as written",
    ("docs/mig-layout.md", "version: v1"): "the config.yaml of the page's mig.yml, whose test uses it as written, and "
                                           "of tests/unit/docs/test_mig_layout_page.py",
    ("docs/examples/gateway.py", "file"): "the gateway of docs/node.md's delivery example here, of molecule/delivery, "
                                          "and tests/unit/plugins/module_utils/entry/test_cli.py",
    ("docs/fakehw.md", "gpus:"): "the MIG section's GPU entry, read and changed (its real errors too) by "
                                 "tests/unit/plugins/module_utils/node/test_fakehw_mig.py",
    ("roles/bcd_holds/README.md", "bcd_holds_mig_layout:"): "the role's MIG layout, made as written on two A100 80GB "
                                                            "by tests/unit/roles/test_mig_layout_role.py",
}

# Examples that cannot run here: syntax-checked only.
SYNTAX_ONLY = {
    ("README.md", "- hosts: gpu_nodes"): "the role creates the bcd system account and installs bcd-holds on the "
                                         "host itself; molecule/role runs it on a fakehw node",
    ("docs/node.md", "- hosts: gpu_nodes", 1): "the role, as above (molecule/role)",
    ("roles/bcd_holds/README.md", "- hosts: gpu_nodes", 1): "the role, as above (molecule/role), posting to a "
                                                            "gateway on the internet",
    ("roles/bcd_holds/README.md", "- hosts: gpu_nodes", 2): "posts to https://gateway.example; docs/node.md's "
                                                            "same play runs here against docs/examples/gateway.py",
}


def resolve(key):
    """A registry key to the collected example's key: (file, first line, n) is the n-th block of
    that file starting with that line (plays that all start with `- hosts: gpu_nodes`)."""
    if len(key) == 2:
        return key
    path, first, number = key
    return (path, "%s #%d" % (first, number))


RUN = {resolve(key): run for key, run in SPECS.items()}
SYNTAX = {resolve(key): why for key, why in SYNTAX_ONLY.items()}
COVER = {resolve(key): why for key, why in COVERED.items()}


def test_every_example_has_an_entry():
    known = set(RUN) | set(SYNTAX) | set(COVER)
    assert len(known) == len(RUN) + len(SYNTAX) + len(COVER), "an example is listed twice"
    missing = sorted(set(ALL) - known)
    stale = sorted(known - set(ALL))
    assert missing == [], "examples no test runs (add each to SPECS, or with a reason to SYNTAX_ONLY): %s" % missing
    assert stale == [], "entries whose example is gone or whose first line changed: %s" % stale
    assert len(SYNTAX) <= 4, "prefer making an example runnable against fakehw to syntax-checking it"


@needs_ansible
@needs_root
@pytest.mark.parametrize("key", sorted(RUN), ids=lambda key: "%s:%s" % (key[0], key[1][:40]))
def test_the_example_works_as_written(key, tmp_path):
    RUN[key](Run(tmp_path), ALL[key])


@needs_ansible
def test_the_examples_that_cannot_run_here_are_valid_playbooks(tmp_path):
    run = Run(tmp_path)
    run.nodes["node-a"] = tmp_path / "node-a"
    books = []
    for number, key in enumerate(sorted(SYNTAX)):
        book = tmp_path / ("example-%d.yml" % number)
        book.write_text(ALL[key])
        books.append(str(book))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", str(run.inventory())] + books,
                          cwd=str(tmp_path), env=run.env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("playbook: ") == len(books), done.stdout


def test_module_examples_use_the_uuids_fakehw_node_makes():
    """The fakehw example of bcd.devices.holds names GPUs of a node hack/fakehw_node.py makes as it says."""
    text = ALL[("plugins/modules/holds.py", "EXAMPLES")]
    fakehw = text.split("Converge a fakehw host", 1)[1]
    assert "root: /tmp/bcd-nodes/node-a" in fakehw and "hack/fakehw_node.py --root /tmp/bcd-nodes/node-a" in text
    assert re.findall(r"GPU-5f1c2a90-[0-9a-f-]+", fakehw) == [gpu(1, 0)]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A failure shows the failure (issue 46, item 3), through ``ansible-playbook`` as an operator runs it.

One refusal printed the 16 oldest unacknowledged events of earlier generations, signatures and all, on every
node it failed on (16 KB a host, 3.8 KB on a fresh node; three refusals on 20 nodes printed 154 KB). Now a
failed task prints this pass's events, counts the older ones (``events_not_shown``) and says where to read them
(``events_elsewhere``): on a node with a long journal it prints at most 3 times what a fresh node prints, plus
4 KB. A task with ``on_refusal: report`` (not failed) still carries the 16 oldest and counts the rest, and
``bcd.devices.events`` still returns the whole journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run

REPO = Path(__file__).resolve().parents[4]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
GPUS = 8
GPU = "GPU-5f1c2a90-0000-4000-8000-%012x"
MISSING = "GPU-00000000-dead-4000-8000-000000000000"
# The pass every node is sent: one hold it binds, one it refuses (device-missing); the report's refuses another.
REFUSED = [hold("a1", GPU % 1), hold("bad", MISSING)]
REPORTED = [hold("a1", GPU % 1), hold("bad2", MISSING)]
PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Refuse in check mode
      bcd.devices.holds: {root: "{{ node_root }}", fakehw: "{{ node_fakehw }}", devices: "{{ refused }}"}
      check_mode: true
      ignore_errors: true
      register: checked
    - name: Refuse
      bcd.devices.holds: {root: "{{ node_root }}", fakehw: "{{ node_fakehw }}", devices: "{{ refused }}"}
      ignore_errors: true
      register: failed
    - name: Refuse and report
      bcd.devices.holds: {root: "{{ node_root }}", fakehw: "{{ node_fakehw }}", devices: "{{ reported }}",
                          on_refusal: report}
      register: reported_result
    - name: List the journal
      bcd.devices.events: {root: "{{ node_root }}"}
      register: journal
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ {'checked': checked, 'failed': failed, 'reported': reported_result, 'journal': journal} | to_json }}"
        dest: "{{ node_root }}/../results.json"
        mode: "0644"
"""


def fakehw_node(base):
    root = base / "root"
    root.mkdir(parents=True)
    (base / "fakehw.json").write_text(json.dumps({
        "node_id": base.name, "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001",
        "gpus": [{"uuid": GPU % (i + 1), "index": i, "minor": i, "numa_node": 0} for i in range(GPUS)],
        "domains": []}))
    return root


class LongJournal:
    """What ``run`` (the module in this process) needs of a node."""

    def __init__(self, base, root):
        self.base, self.root, self.fakehw = str(base), str(root), str(base / "fakehw.json")


def long_journal(capsys, base, root):
    """Twenty generations nobody acknowledged: each binds a hold of all eight GPUs (signed, every device named)
    beside a refused one, the next releases it. ``(events, bytes of the 16 oldest)``."""
    node = LongJournal(base, root)
    everything = hold("big", *[GPU % (i + 1) for i in range(GPUS)], limits={"cpus": "0-1"})
    for generation in range(1, 41, 2):
        bound = run(capsys, node, generation=generation, on_refusal="report",
                    devices=[everything, hold("old%d" % generation, MISSING)])
        assert bound["changed"] is True and len(bound["failures"]) == 1
        released = run(capsys, node, generation=generation + 1, devices=[])
        assert released["changed"] is True
    events = NodeState(os.path.join(node.root, "var/lib/bcd")).unacked()
    assert len(events) == 60
    return events, len(json.dumps(events[:16]))


def printed(output, task, host):
    """The bytes ``ansible-playbook`` printed of ``host``'s result of ``task``."""
    section = output.split("TASK [%s]" % task, 1)[1].split("\nTASK [", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith(("fatal: [%s]" % host, "ok: [%s]" % host))]
    assert len(lines) == 1, section
    return len(lines[0].encode("utf-8"))


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_a_refusal_on_a_node_with_a_long_journal_prints_this_passs_events_and_says_where_the_rest_are(
        tmp_path, capsys):
    roots = dict((name, fakehw_node(tmp_path / name)) for name in ("fresh", "long"))
    journal, sixteen_oldest = long_journal(capsys, tmp_path / "long", roots["long"])
    hosts = dict((name, {"node_root": str(root), "node_fakehw": str(root.parent / "fakehw.json"),
                         "ansible_connection": "local", "ansible_python_interpreter": sys.executable})
                 for name, root in roots.items())
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": hosts, "vars": {
        "refused": REFUSED, "reported": REPORTED}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "home" / "tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout
    results = dict((name, json.loads((tmp_path / name / "results.json").read_text())) for name in roots)

    # The failed task, run and check mode alike: printed within 3 times a fresh node's, plus 4 KB; the 16
    # oldest events alone are more than that allowance (the old result printed them).
    for task in ("Refuse", "Refuse in check mode"):
        fresh, long = printed(output, task, "fresh"), printed(output, task, "long")
        assert long <= 3 * fresh + 4096, (task, fresh, long)
        assert sixteen_oldest > 2 * fresh + 4096, (task, fresh, sixteen_oldest)

    # Its fields: this pass's events only, the older ones counted, and where to read them.
    failed = results["long"]["failed"]
    assert failed["failed"] is True and failed["changed"] is True
    assert "bad: device-missing" in failed["msg"]
    assert [(e["type"], e["body"]["allocation_id"]) for e in failed["events"]] == [
        ("AllocationBound", "a1"), ("AllocationFailed", "bad")]
    assert [e["seq"] for e in failed["events"]] == [61, 62] and failed["events_not_shown"] == 60
    assert failed["events_elsewhere"] == ("60 unacknowledged events of earlier passes not shown: bcd.devices.events "
                                          "lists them all (bcd-holds events on the node)")
    fresh = results["fresh"]["failed"]
    assert [(e["type"], e["body"]["allocation_id"]) for e in fresh["events"]] == [
        ("AllocationBound", "a1"), ("AllocationFailed", "bad")]
    assert fresh["events_not_shown"] == 0 and "events_elsewhere" not in fresh
    # Check mode tells the same: it journals nothing, so it shows no event, and counts the older ones.
    checked = results["long"]["checked"]
    assert checked["failed"] is True and "bad: device-missing" in checked["msg"]
    assert checked["events"] == [] and checked["events_not_shown"] == 60
    assert checked["events_elsewhere"] == failed["events_elsewhere"]

    # on_refusal: report is not a failure: it keeps the 16 oldest unacknowledged events and counts the rest.
    reported = results["long"]["reported"]
    assert not reported.get("failed") and "events_elsewhere" not in reported
    assert [e["seq"] for e in reported["events"]] == list(range(1, 17)) + [63]
    assert reported["events"][:16] == journal[:16]
    assert reported["events"][-1]["type"] == "AllocationFailed" and reported["events_not_shown"] == 62 - 16
    # and bcd.devices.events returns the whole journal
    assert [e["seq"] for e in results["long"]["journal"]["events"]] == list(range(1, 64))
    assert results["long"]["journal"]["events"][:60] == journal

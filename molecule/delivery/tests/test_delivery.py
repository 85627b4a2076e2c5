# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""After delivery: what the gateway stored, what the nodes still keep, and the failed first requests."""

import json
import os
import sys

try:
    from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report
except ImportError:  # the collection through ANSIBLE_COLLECTIONS_PATH (hack/molecule.sh sets it)
    sys.path[:0] = [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if p]
    from ansible_collections.bcd.devices.plugins.module_utils.state.events import verify_report

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "delivery")
GATEWAY = BASE + "/gateway"
ROOTS = {"node-a": BASE + "/node-a", "node-b": BASE + "/node-b"}


def lines(host, path):
    return [json.loads(line) for line in host.file(path).content_string.splitlines() if line.strip()]


def test_the_gateway_failed_the_first_two_requests_and_answered_the_rest(host):
    log = host.file(GATEWAY + "/gateway.log").content_string
    statuses = [line.split('" ')[1].split()[0] for line in log.splitlines() if '"POST /events ' in line]
    assert statuses[:2] == ["503", "503"]
    assert set(statuses[2:]) == {"200"} and len(statuses) >= 4


def test_the_gateway_stored_each_accepted_event_once_and_they_verify(host):
    stored = lines(host, GATEWAY + "/accepted.jsonl")
    summary = [(e["body"]["node_id"], e["seq"], e["type"]) for e in stored]
    assert sorted(summary) == [("node-a", 1, "AllocationBound"), ("node-a", 2, "AllocationBound"),
                               ("node-a", 3, "AllocationFailed"), ("node-b", 2, "AllocationFailed")]
    key = host.file(GATEWAY + "/keys/node-a.pub").content_string.strip()
    assert all(verify_report(e, key) for e in stored if e["type"] == "AllocationBound")


def test_node_a_acknowledged_everything_it_delivered(host):
    root = ROOTS["node-a"]
    assert host.file(root + "/var/lib/bcd/events.jsonl").content_string == ""
    assert host.file(root + "/var/lib/bcd/events.seq").content_string.strip() == "3"


def test_node_b_keeps_every_event_behind_the_rejected_one(host):
    kept = lines(host, ROOTS["node-b"] + "/var/lib/bcd/events.jsonl")
    assert [(e["seq"], e["type"]) for e in kept] == [(1, "AllocationBound"), (2, "AllocationFailed")]

# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the reset playbook (side_effect.yml) left: refused while held, done after the release."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared"))  # snapshot.py, shared by scenarios
from snapshot import snapshot  # noqa: E402

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "reset")
ROOT = BASE + "/node-x"
GPU = "GPU-5f1c2a90-000b-4000-8000-000000000001"


@pytest.fixture(scope="module")
def node(host):
    return snapshot(host, ROOT)


def test_the_reset_was_refused_while_the_hold_existed_naming_it(node):
    assert "/reset-while-held" not in node
    refused = json.loads(node["/reset-refused.json"]["text"])
    assert [(c["kind"], c["text"]) for c in refused["claimed_by"]] == [
        ("hold", "held whole by x_whole"), ("maintenance", "in maintenance (scheduled reset)")]
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in refused["refused_hold"]] == [
        ("x_new", "overlap", "%s is in maintenance (scheduled reset)" % GPU)]


def test_the_reset_went_through_after_the_release_and_the_gpu_is_back_in_service(node):
    assert node["/reset-done"]["text"] == "reset after the release\n"
    assert "/etc/cdi/bcd-x_whole.json" not in node
    assert "/etc/cdi/bcd-x_mig.json" in node  # the other GPU's hold was never touched
    assert json.loads(node["/var/lib/bcd/maintenance.json"]["text"]) == {}
    events = [json.loads(line) for line in node["/var/lib/bcd/events.jsonl"]["text"].splitlines() if line.strip()]
    assert ("AllocationReleased", "x_whole") in [(e["type"], e["body"].get("allocation_id")) for e in events]
    # taking the GPU out of service and putting it back are signed events of their own, naming the GPU
    assert [(e["type"], e["body"]["device_ids"]) for e in events if e["type"].startswith("GPUMaintenance")] == [
        ("GPUMaintenanceStarted", [GPU]), ("GPUMaintenanceEnded", [GPU])]

# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nodes hold after side_effect (generation 2), checked on the nodes' files."""

import base64
import json
import os

import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "default")
ROOTS = {"node-a": BASE + "/node-a", "node-b": BASE + "/node-b"}


def gpu(node_number, index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (node_number, index + 1)


@pytest.fixture
def root(host):
    return ROOTS[host.backend.get_hostname()]


def journal(host, root):
    content = host.file(root + "/var/lib/bcd/events.jsonl").content_string
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def test_node_a_holds_the_moved_gpu_and_the_slot(host):
    root = ROOTS["node-a"]
    if host.backend.get_hostname() != "node-a":
        pytest.skip("node-a only")
    spec = host.file(root + "/etc/cdi/bcd-a_moved.json")
    assert spec.exists and spec.mode == 0o644
    data = json.loads(spec.content_string)
    assert data["kind"] == "bcd.dev/gpu"
    assert data["annotations"]["bcd.dev/generation"] == "2"
    assert [d["annotations"]["bcd.dev/device-id"] for d in data["devices"]] == [gpu(1, 0)]
    # NVIDIA's per-device edits for GPU 0, and the common edits without NVIDIA_VISIBLE_DEVICES=void
    assert {"path": "/dev/nvidia0"} in data["devices"][0]["containerEdits"]["deviceNodes"]
    assert "NVIDIA_VISIBLE_DEVICES=void" not in data["containerEdits"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=%s" % gpu(1, 0) in data["containerEdits"]["env"]
    env = host.file(root + "/run/bcd/allocations/a_moved.env")
    assert env.mode == 0o644
    assert env.content_string.splitlines() == [
        "BCD_ALLOCATION_ID=a_moved", "BCD_RESERVATION_ID=r5", "NVIDIA_VISIBLE_DEVICES=%s" % gpu(1, 0)]
    slot = json.loads(host.file(root + "/etc/cdi/bcd-a_slot.json").content_string)
    assert slot["devices"][0]["name"] == gpu(1, 2) + "_s0"
    assert slot["annotations"]["bcd.dev/generation"] == "1"  # kept, not re-bound


def test_released_holds_are_gone(host, root):
    gone = {"node-a": ["a_whole", "a_mig", "a_clash"], "node-b": ["b_whole", "b_vm", "b_bad"]}
    for allocation in gone[host.backend.get_hostname()]:
        assert not host.file("%s/etc/cdi/bcd-%s.json" % (root, allocation)).exists
        assert not host.file("%s/run/bcd/allocations/%s.env" % (root, allocation)).exists


def test_no_temporary_file_is_left_where_runtimes_look(host, root):
    names = host.run("ls -A %s/etc/cdi" % root).stdout.split()
    assert all(name.endswith((".json", ".yaml")) for name in names), names
    assert not [name for name in names if name.startswith(".")]


def test_every_bind_and_release_is_journaled_once_and_signed(host, root):
    events = journal(host, root)
    seqs = [event["seq"] for event in events]
    assert seqs == list(range(1, len(events) + 1))
    summary = [(event["type"], event["body"]["allocation_id"], event["body"]["generation"]) for event in events]
    expected = {
        "node-a": [("AllocationBound", "a_whole", 1), ("AllocationBound", "a_mig", 1),
                   ("AllocationBound", "a_slot", 1), ("AllocationFailed", "a_clash", 1),
                   ("AllocationReleased", "a_mig", 2), ("AllocationReleased", "a_whole", 2),
                   ("AllocationBound", "a_moved", 2)],
        "node-b": [("AllocationBound", "b_whole", 1), ("AllocationFailed", "b_vm", 1),
                   ("AllocationFailed", "b_bad", 1), ("AllocationReleased", "b_whole", 2)],
    }[host.backend.get_hostname()]
    assert summary == expected
    key_file = host.file(root + "/var/lib/bcd/node.key")
    assert key_file.mode == 0o600
    public = load_pem_private_key(key_file.content, password=None).public_key()
    for event in events:
        if event["type"] == "AllocationFailed":
            assert "signature" not in event
            continue
        body = json.dumps(event["body"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        public.verify(base64.b64decode(event["signature"]), b"attested-report\n" + body)
        assert event["body"]["node_id"] == host.backend.get_hostname()


def test_state_files_are_private(host, root):
    assert host.file(root + "/var/lib/bcd").mode == 0o700
    for name in ("events.jsonl", "ledger.json"):
        assert host.file("%s/var/lib/bcd/%s" % (root, name)).mode == 0o600

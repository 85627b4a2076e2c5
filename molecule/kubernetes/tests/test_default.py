# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What node-k holds after side_effect (generation 6): the Kubernetes hold k_keep, the plain
holds that took the released and the quarantined GPUs, the releases file set aside, and the
journal of the whole scenario."""

import json
import os

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "kubernetes")
ROOT = BASE + "/node-k"
STATE = ROOT + "/var/lib/bcd"


def gpu(index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (6, index + 1)


def load(host, path):
    return json.loads(host.file(ROOT + path).content_string)


def test_the_kubernetes_hold_is_bare(host):
    spec = load(host, "/etc/cdi/bcd-k_keep.json")
    assert spec["annotations"]["bcd.dev/binding"] == "kubernetes"
    assert spec["containerEdits"] == {"env": ["BCD_ALLOCATION_ID=k_keep"]}
    assert [d["annotations"]["bcd.dev/device-id"] for d in spec["devices"]] == [gpu(2)]
    edits = spec["devices"][0]["containerEdits"]
    assert list(edits) == ["env"] and len(edits["env"]) == 1 and edits["env"][0].endswith("=" + gpu(2))
    env = host.file(ROOT + "/run/bcd/allocations/k_keep.env").content_string.splitlines()
    assert env == ["BCD_ALLOCATION_ID=k_keep", "BCD_RESERVATION_ID=r_keep", "NVIDIA_VISIBLE_DEVICES=" + gpu(2)]


def test_the_plain_holds_carry_the_vendor_edits(host):
    for allocation, index in (("p_take", 0), ("p_late", 1)):
        spec = load(host, "/etc/cdi/bcd-%s.json" % allocation)
        assert "bcd.dev/binding" not in spec["annotations"]
        assert "NVIDIA_VISIBLE_DEVICES=" + gpu(index) in spec["containerEdits"]["env"]
        assert {"path": "/dev/nvidia%d" % index} in spec["devices"][0]["containerEdits"]["deviceNodes"]


def test_the_released_hold_is_gone(host):
    assert not host.file(ROOT + "/etc/cdi/bcd-k_train.json").exists
    assert not host.file(ROOT + "/run/bcd/allocations/k_train.env").exists


def test_the_unreadable_releases_file_is_kept_aside(host):
    names = sorted(host.run("ls -A %s" % STATE).stdout.split())
    assert "releasing.json" not in names
    assert "releasing.unreadable" not in names
    aside = [name for name in names if name.startswith("releasing.json.unreadable-")]
    assert len(aside) == 1
    assert host.file("%s/%s" % (STATE, aside[0])).content_string == '{"releases": {"k_lost": '


def test_the_journal(host):
    content = host.file(STATE + "/events.jsonl").content_string
    events = [json.loads(line) for line in content.splitlines() if line.strip()]
    summary = [(e["type"], e["body"].get("allocation_id"), e["body"]["generation"]) for e in events]
    assert summary == [
        ("AllocationBound", "k_train", 1),
        ("AllocationBound", "k_keep", 1),
        ("AllocationFailed", "p_take", 3),
        ("AllocationReleased", "k_train", 2),
        ("AllocationBound", "p_take", 4),
        ("AllocationFailed", "p_late", 5),
        ("KubernetesReleasesUnreadable", None, 5),  # the condition, signed, when it appears and when it clears
        ("AllocationBound", "p_late", 6),
        ("KubernetesReleasesUnreadableCleared", None, 6),
    ]
    assert [e["body"]["type"] for e in events if "Kubernetes" in e["type"]] == [
        "KubernetesReleasesUnreadable", "KubernetesReleasesUnreadableCleared"]
    released = events[3]["body"]
    assert released["device_ids"] == [gpu(0), gpu(1) + "/gi1/ci0"]
    failed = dict((e["body"]["allocation_id"], e["body"]["message"]) for e in events if e["type"] == "AllocationFailed")
    assert failed == {"p_take": gpu(0) + " is assigned to k_train",
                      "p_late": gpu(1) + " is assigned to (pending Kubernetes releases that could not be read)"}

# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What node-s holds after side_effect (generation 3): the plain hold in its recreated
slice, the Kubernetes hold without one, and the journal of the whole scenario."""

import json
import os

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "slices")
ROOT = BASE + "/node-s"
SLICE = "bcd-alloc-s_plain.slice"
GIB = 1 << 30


def gpu(index):
    return "GPU-5f1c2a90-%04x-4000-8000-%012x" % (5, index + 1)


def load(host, path):
    return json.loads(host.file(ROOT + path).content_string)


def test_the_slice_record_carries_the_limits(host):
    record = load(host, "/run/bcd/slices/%s.json" % SLICE)
    assert record["name"] == SLICE
    assert record["properties"] == {
        "AllowedCPUs": "0-3",
        "AllowedMemoryNodes": "0",
        "CPUQuota": "124%",  # 1234 millis as whole percents of one CPU, rounded up
        "MemoryMax": str(8 * GIB),
        "MemoryHigh": str(8 * GIB * 9 // 10),  # 90% of MemoryMax
    }
    # every size the node has is limited, the unbooked one to 0: its workload cannot fault in pages promised to others
    assert record["hugetlb_max"] == {"1GB": 2 * GIB, "2MB": 0}
    assert record["populated"] is False


def test_the_spec_and_env_file_name_the_slice(host):
    spec = load(host, "/etc/cdi/bcd-s_plain.json")
    assert spec["annotations"]["bcd.dev/cgroup-parent"] == SLICE
    assert spec["annotations"]["bcd.dev/generation"] == "3"
    assert "BCD_CGROUP_PARENT=%s" % SLICE in spec["containerEdits"]["env"]
    env = host.file(ROOT + "/run/bcd/allocations/s_plain.env").content_string.splitlines()
    assert env == ["BCD_ALLOCATION_ID=s_plain", "BCD_CGROUP_PARENT=%s" % SLICE, "BCD_RESERVATION_ID=r_plain",
                   "NVIDIA_VISIBLE_DEVICES=%s" % gpu(0)]


def test_the_kubernetes_hold_has_no_slice(host):
    spec = load(host, "/etc/cdi/bcd-s_kube.json")
    assert spec["annotations"]["bcd.dev/binding"] == "kubernetes"
    assert "bcd.dev/cgroup-parent" not in spec["annotations"]
    assert not [line for line in spec["containerEdits"]["env"] if line.startswith("BCD_CGROUP_PARENT=")]
    assert "BCD_CGROUP_PARENT" not in host.file(ROOT + "/run/bcd/allocations/s_kube.env").content_string
    assert host.run("ls %s/run/bcd/slices" % ROOT).stdout.split() == [SLICE + ".json"]


def test_the_refused_holds_left_nothing(host):
    for allocation in ("s_mem", "s_huge"):
        assert not host.file("%s/etc/cdi/bcd-%s.json" % (ROOT, allocation)).exists
        assert not host.file("%s/run/bcd/allocations/%s.env" % (ROOT, allocation)).exists


def test_the_journal(host):
    content = host.file(ROOT + "/var/lib/bcd/events.jsonl").content_string
    events = [json.loads(line) for line in content.splitlines() if line.strip()]
    summary = [(e["type"], e["body"]["allocation_id"], e["body"]["generation"], e["body"].get("cgroup_parent"))
               for e in events]
    assert summary == [
        ("AllocationBound", "s_plain", 1, SLICE),
        ("AllocationBound", "s_kube", 1, None),
        ("AllocationFailed", "s_mem", 1, None),
        ("AllocationFailed", "s_huge", 1, None),
        ("AllocationReleased", "s_plain", 2, None),
        ("AllocationBound", "s_plain", 3, SLICE),
    ]
    failed = dict((e["body"]["allocation_id"], e["body"]) for e in events if e["type"] == "AllocationFailed")
    assert failed["s_mem"]["reason"] == failed["s_huge"]["reason"] == "resources-exhausted"
    assert failed["s_mem"]["message"] == "ResourcesExhausted: 4096 MiB of memory needed, 1024 MiB left on this host"
    assert failed["s_huge"]["message"] == "ResourcesExhausted: 8 hugepages of 1048576 KiB needed, 2 free"

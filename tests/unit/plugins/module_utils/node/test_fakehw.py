# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the fakehw hardware file: the documented format loads, and
every kind of bad content is a FakeHwError naming the field."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.node import fakehw
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeHwError, load_fakehw
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Domain,
    MigInstance,
    PodDevices,
)

# The example of DESIGN.md, "The hosts: real and fakehw", as written there.
DESIGN_EXAMPLE = """\
node_id: node-a                       # optional
boot_id: 6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10   # optional
gpus:
  - uuid: GPU-5f1c2a90-0000-4000-8000-000000000001
    index: 0
    minor: 0                          # /dev/nvidia<minor>
    numa_node: 0                      # optional
    mig:                              # MIG instances that exist now
      - {gi: 1, ci: 0, uuid: MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde}
domains:                              # running or paused VMs the node manages
  - {instance_id: inst_1, state: running, memory_bytes: 8589934592, hugepages: false,
     gpus: [GPU-5f1c2a90-0000-4000-8000-000000000002]}
kubelet:
  reachable: true                     # false: every kube release counts as held
  pods:
    - {namespace: default, name: train-0, container: main,
       device_ids: [GPU-5f1c2a90-0000-4000-8000-000000000003]}
"""

GPU1 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU2 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
GPU3 = "GPU-5f1c2a90-0000-4000-8000-000000000003"
MIG1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"


def write(tmp_path, text, name="hw.yaml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def check_design_example(hw):
    assert (hw.node_id, hw.boot_id) == ("node-a", "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10")
    assert hw.inventory.source == "fakehw" and hw.inventory.error is None
    (gpu,) = hw.inventory.gpus
    assert (gpu.uuid, gpu.index, gpu.minor, gpu.numa_node) == (GPU1, 0, 0, 0)
    assert gpu.mig == (MigInstance(gi=1, ci=0, uuid=MIG1),)
    assert hw.domains == [Domain(instance_id="inst_1", state="running", memory_bytes=8589934592,
                                 hugepages=False, gpus=(GPU2,))]
    assert hw.kubelet_reachable is True
    assert hw.pods == [PodDevices(namespace="default", name="train-0", container="main",
                                  device_ids=(GPU3,))]


def test_design_example_as_yaml(tmp_path):
    check_design_example(load_fakehw(write(tmp_path, DESIGN_EXAMPLE)))


def test_design_example_as_json(tmp_path):
    import yaml

    data = yaml.safe_load(DESIGN_EXAMPLE)
    check_design_example(load_fakehw(write(tmp_path, json.dumps(data), "hw.json")))


def test_json_does_not_need_pyyaml(tmp_path, monkeypatch):
    monkeypatch.setattr(fakehw, "HAS_YAML", False)
    hw = load_fakehw(write(tmp_path, json.dumps({"gpus": [{"uuid": GPU1}]})))
    assert [g.uuid for g in hw.inventory.gpus] == [GPU1]


def test_yaml_without_pyyaml_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(fakehw, "HAS_YAML", False)
    with pytest.raises(FakeHwError, match="not valid JSON .*PyYAML is not installed"):
        load_fakehw(write(tmp_path, DESIGN_EXAMPLE))


def test_defaults(tmp_path):
    hw = load_fakehw(write(tmp_path, "gpus:\n  - uuid: %s\n  - uuid: %s\n" % (GPU1, GPU2)))
    assert [g.index for g in hw.inventory.gpus] == [0, 1]  # the list position
    assert [g.minor for g in hw.inventory.gpus] == [None, None]
    assert (hw.node_id, hw.boot_id, hw.domains, hw.pods, hw.kubelet_reachable) == (None, None, [], [], True)


def test_empty_file_is_a_host_without_hardware(tmp_path):
    hw = load_fakehw(write(tmp_path, ""))
    assert hw.inventory.gpus == [] and hw.inventory.source == "fakehw"


def test_unreachable_kubelet_and_paused_domain(tmp_path):
    hw = load_fakehw(write(tmp_path, json.dumps({
        "kubelet": {"reachable": False},
        "domains": [{"instance_id": "vm", "state": "paused", "hugepages": True}],
    })))
    assert hw.kubelet_reachable is False
    assert (hw.domains[0].state, hw.domains[0].hugepages, hw.domains[0].memory_bytes) == ("paused", True, 0)


def test_pci_bus_id_is_normalised(tmp_path):
    hw = load_fakehw(write(tmp_path, json.dumps({"gpus": [{"uuid": GPU1, "pci_bus_id": "00000000:3B:00.0"}]})))
    assert hw.inventory.gpus[0].pci_bus_id == "0000:3b:00.0"


def gpu(**fields):
    item = {"uuid": GPU1}
    item.update(fields)
    return item


@pytest.mark.parametrize(
    "data,message",
    [
        ([], "the top level must be a mapping, not a list"),
        ({"gpu": []}, "unknown field 'gpu'"),
        ({"gpus": {"uuid": GPU1}}, "gpus: must be a list, not a mapping"),
        ({"gpus": ["GPU-x"]}, r"gpus\[0\]: must be a mapping, not a string"),
        ({"gpus": [gpu(), {"index": 1}]}, r"gpus\[1\]\.uuid: required"),
        ({"gpus": [gpu(uuid="")]}, r"gpus\[0\]\.uuid: required"),
        ({"gpus": [gpu(uuid=7)]}, r"gpus\[0\]\.uuid: must be a string, not an integer"),
        ({"gpus": [gpu(uuid="GPU-a/gi1/ci0")]}, r"gpus\[0\]\.uuid: must be a GPU UUID"),
        ({"gpus": [gpu(uuid="MIG-abc")]}, r"gpus\[0\]\.uuid: must be a GPU UUID"),
        ({"gpus": [gpu(), gpu(index=1)]}, r"gpus\[1\]\.uuid: duplicate UUID .* gpus\[0\]\.uuid"),
        ({"gpus": [gpu(index=-1)]}, r"gpus\[0\]\.index: must be a non-negative integer, not -1"),
        ({"gpus": [gpu(index=True)]}, r"gpus\[0\]\.index: must be a non-negative integer, not a boolean"),
        ({"gpus": [gpu(index=1.5)]}, r"gpus\[0\]\.index: must be a non-negative integer, not a number"),
        ({"gpus": [gpu(index="0")]}, r"gpus\[0\]\.index: must be a non-negative integer, not a string"),
        ({"gpus": [gpu(index=2 ** 64)]}, r"gpus\[0\]\.index: is too large"),
        ({"gpus": [gpu(), {"uuid": GPU2, "index": 0}]}, r"gpus\[1\]\.index: duplicate index 0"),
        ({"gpus": [gpu(minor=1), {"uuid": GPU2, "minor": 1}]}, r"gpus\[1\]\.minor: duplicate minor 1"),
        ({"gpus": [gpu(numa_node=-1)]}, r"gpus\[0\]\.numa_node: must be a non-negative"),
        ({"gpus": [gpu(pci_bus_id="3b:00")]}, r"gpus\[0\]\.pci_bus_id: must be a PCI address"),
        ({"gpus": [gpu(colour="red")]}, r"gpus\[0\]: unknown field 'colour'"),
        ({"gpus": [gpu(mig=[{"gi": 1, "ci": 0}])]}, r"gpus\[0\]\.mig\[0\]\.uuid: required"),
        ({"gpus": [gpu(mig=[{"gi": 1, "uuid": MIG1}])]}, r"gpus\[0\]\.mig\[0\]\.ci: required"),
        ({"gpus": [gpu(mig=[{"gi": -1, "ci": 0, "uuid": MIG1}])]}, r"gpus\[0\]\.mig\[0\]\.gi: must be a non-neg"),
        ({"gpus": [gpu(mig=[{"gi": 1, "ci": 0, "uuid": "GPU-x"}])]}, r"gpus\[0\]\.mig\[0\]\.uuid: must be a MIG UUID"),
        ({"gpus": [gpu(mig=[{"gi": 1, "ci": 0, "uuid": MIG1}, {"gi": 1, "ci": 0, "uuid": "MIG-b"}])]},
         r"gpus\[0\]\.mig\[1\]: duplicate gi 1 ci 0"),
        ({"gpus": [gpu(mig=[{"gi": 1, "ci": 0, "uuid": MIG1}]), {"uuid": GPU2, "mig": [{"gi": 1, "ci": 0, "uuid": MIG1}]}]},
         r"gpus\[1\]\.mig\[0\]\.uuid: duplicate UUID"),
        ({"domains": [{"state": "running"}]}, r"domains\[0\]\.instance_id: required"),
        ({"domains": [{"instance_id": "a"}, {"instance_id": "a"}]}, r"domains\[1\]\.instance_id: duplicate"),
        ({"domains": [{"instance_id": "a", "state": "shutoff"}]},
         r"domains\[0\]\.state: must be a libvirt domain state \(running, idle, paused, in shutdown, shut off, "
         r"crashed, pmsuspended, no state\), not 'shutoff'"),
        ({"domains": [{"instance_id": "a", "memory_bytes": -1}]}, r"domains\[0\]\.memory_bytes: must be a non-neg"),
        ({"domains": [{"instance_id": "a", "hugepages": "yes"}]}, r"domains\[0\]\.hugepages: must be true or false"),
        ({"domains": [{"instance_id": "a", "gpus": [GPU1, 3]}]}, r"domains\[0\]\.gpus\[1\]: must be a string"),
        ({"domains": [{"instance_id": "a", "gpus": [GPU1, GPU1]}]}, r"domains\[0\]\.gpus\[1\]: duplicate GPU"),
        ({"domains": [{"instance_id": "a\nb"}]}, r"domains\[0\]\.instance_id: must be a non-empty string"),
        ({"kubelet": []}, "kubelet: must be a mapping, not a list"),
        ({"kubelet": {"reachable": "no"}}, "kubelet.reachable: must be true or false, not a string"),
        ({"kubelet": {"pods": [{"namespace": "d", "name": "p"}]}}, r"kubelet\.pods\[0\]\.container: required"),
        ({"kubelet": {"pods": [{"namespace": "d", "name": "p", "container": "c", "device_ids": [""]}]}},
         r"kubelet\.pods\[0\]\.device_ids\[0\]: required"),
        ({"kubelet": {"pods": [{"namespace": "d", "name": "p", "container": "c", "dynamic_resources": {}}]}},
         r"kubelet\.pods\[0\]\.dynamic_resources: must be a list, not a mapping"),
        ({"kubelet": {"pods": [{"namespace": "d", "name": "p", "container": "c",
                                "dynamic_resources": [{"claim_resources": [{"device": "x"}]}]}]}},
         r"kubelet\.pods\[0\]\.dynamic_resources\[0\]\.claim_resources\[0\]: unknown field 'device'"),
        ({"kubelet": {"pods": [{"namespace": "d", "name": "p", "container": "c",
                                "dynamic_resources": [{"claim_resources": [{"cdi_devices": ["a", 3]}]}]}]}},
         r"kubelet\.pods\[0\]\.dynamic_resources\[0\]\.claim_resources\[0\]\.cdi_devices\[1\]: must be a string"),
        ({"node_id": ["a"]}, "node_id: must be a string, not a list"),
    ],
)
def test_bad_content_names_the_field(tmp_path, data, message):
    path = write(tmp_path, json.dumps(data), "hw.json")
    with pytest.raises(FakeHwError, match=message):
        load_fakehw(path)


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"gpus": [], "gpus": []}', "duplicate key 'gpus'"),
        ("gpus: []\ngpus: []\n", "duplicate key 'gpus'"),
        ("gpus: [\n", "neither valid JSON nor valid YAML"),
        ("boot_id: 2024-01-01\n", "boot_id: must be a string, not a date"),
        ("domains:\n  - instance_id: 0123\n", r"domains\[0\]\.instance_id: must be a string, not an integer"),
        ("!!python/object/apply:os.system ['true']\n", "neither valid JSON nor valid YAML"),
        ("[" * 100000 + "]" * 100000, "nested too deeply|neither valid JSON nor valid YAML"),
        # found by make fuzz: PyYAML's int() of 10 000 digits raised ValueError, a traceback
        ("node_id: a\nboot_id: " + "7" * 10000 + "\n", "neither valid JSON nor valid YAML: Exceeds the limit"),
        ("? %s\n: 1\n" % ("1" * 10000), "neither valid JSON nor valid YAML: Exceeds the limit"),
        # YAML flow nesting is refused before PyYAML reads ahead through every bracket (a second per 100 000)
        ("gpus: " + "[" * 100000 + "\n", "nested too deeply"),
    ],
)
def test_bad_files(tmp_path, text, message):
    with pytest.raises(FakeHwError, match=message):
        load_fakehw(write(tmp_path, text))


@pytest.mark.parametrize("make", [os.mkfifo, lambda path: os.symlink("/dev/zero", path)], ids=["fifo", "dev-zero"])
def test_a_fifo_or_a_device_is_refused_without_waiting(tmp_path, make):
    """Found by make fuzz: a FIFO in the file's place blocked every pass in open(), a link to /dev/zero read
    16 MiB of zeros first."""
    path = str(tmp_path / "hw.yaml")
    make(path)
    with pytest.raises(FakeHwError, match="fakehw file .*hw.yaml is not a regular file"):
        load_fakehw(path)


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    text = (
        "domains:\n"
        "  - &base {instance_id: a, state: paused, memory_bytes: 1}\n"
        "  - {<<: *base, instance_id: b}\n"
    )
    hw = load_fakehw(write(tmp_path, text))
    assert [(d.instance_id, d.state) for d in hw.domains] == [("a", "paused"), ("b", "paused")]


def test_missing_file(tmp_path):
    with pytest.raises(FakeHwError, match="cannot read fakehw file .*nope.yaml"):
        load_fakehw(str(tmp_path / "nope.yaml"))


def test_not_utf8(tmp_path):
    with pytest.raises(FakeHwError, match="is not UTF-8"):
        load_fakehw(write(tmp_path, b"node_id: \xff\xfe\n"))


def test_too_large(tmp_path, monkeypatch):
    monkeypatch.setattr(fakehw, "MAX_FILE_BYTES", 10)
    with pytest.raises(FakeHwError, match="larger than 10 bytes"):
        load_fakehw(write(tmp_path, "node_id: a-long-node-name\n"))

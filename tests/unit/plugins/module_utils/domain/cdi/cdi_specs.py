# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI specs the tests of ``domain/cdi`` share: good ones (the spec page's hold, a Kubernetes hold, every field
the schema knows, the schema's own good test data, real NVIDIA specs), and the builders of the bad ones (a
minimal spec with a change made to it)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import _load_yaml

DATA = Path(__file__).resolve().parents[5] / "data"
SCHEMA_DIR = DATA / "cdi-schema"
NVIDIA_DIR = DATA / "nvidia-cdi"

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"


def load_any(path):
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text) if text.strip() else None
    return _load_yaml(text)  # device names such as 1:0 stay strings


# --- specs that must pass ---------------------------------------------------

# The hold of the spec page ("The CDI spec"), with env given as absent rather
# than null (the schema wants an array).
HOLD = {
    "cdiVersion": "0.7.0",
    "kind": "bcd.dev/gpu",
    "annotations": {
        "bcd.dev/allocation-id": "alloc_01jz8k2v",
        "bcd.dev/reservation-id": "rsv_01jz8k1q",
        "bcd.dev/generation": "42",
        "bcd.dev/cgroup-parent": "bcd-alloc-alloc_01jz8k2v.slice",
    },
    "devices": [{
        "name": GPU,
        "annotations": {"bcd.dev/device-id": GPU},
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
    }],
    "containerEdits": {
        "env": [
            "BCD_ALLOCATION_ID=alloc_01jz8k2v",
            "BCD_CGROUP_PARENT=bcd-alloc-alloc_01jz8k2v.slice",
            "NVIDIA_VISIBLE_DEVICES=" + GPU,
        ],
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
        "mounts": [{
            "hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
            "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
            "options": ["ro", "nosuid", "nodev", "bind"],
        }],
        "hooks": [{
            "hookName": "createContainer",
            "path": "/usr/bin/nvidia-cdi-hook",
            "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
            "env": ["NVIDIA_CTK_DEBUG=false"],
        }],
        "additionalGids": [44],
    },
}

# A Kubernetes hold: devices carry no vendor edits, one env edit each instead.
KUBE_HOLD = {
    "cdiVersion": "0.6.0",
    "kind": "bcd.dev/gpu",
    "annotations": {"bcd.dev/allocation-id": "a1", "bcd.dev/binding": "kubernetes"},
    "devices": [
        {"name": GPU + "_gi1_ci0", "annotations": {"bcd.dev/device-id": GPU + "/gi1/ci0"},
         "containerEdits": {"env": ["BCD_DEVICE_ID=" + GPU + "/gi1/ci0"]}},
        {"name": GPU + "_s3", "annotations": {"bcd.dev/device-id": GPU + "/s3"},
         "containerEdits": {"env": ["BCD_DEVICE_ID=" + GPU + "/s3"]}},
    ],
    "containerEdits": {"env": ["BCD_ALLOCATION_ID=a1"]},
}

# Every field the schema knows, at the version that allows them all.
EVERYTHING = {
    "cdiVersion": "1.1.0",
    "kind": "vendor.example.com/class.sub_x-y",
    "annotations": {"plain": "", "vendor.example.com/Key_1.x": "v"},
    "devices": [
        {"name": "0:1", "containerEdits": {"additionalGids": [0, 4294967295]}},
        {"name": "a", "containerEdits": {"intelRdt": {}}},
        {"name": "Z.9_x-y:z", "containerEdits": {
            "netDevices": [{"hostInterfaceName": "eth0", "name": "net0"},
                           {"hostInterfaceName": "eth1", "name": "net1"}],
        }},
        {"name": "hooks", "containerEdits": {"hooks": [
            {"hookName": name, "path": "/bin/true", "args": [], "env": ["A=", "B==c"], "timeout": 0}
            for name in ("prestart", "createRuntime", "createContainer", "startContainer",
                         "poststart", "poststop")
        ]}},
    ],
    "containerEdits": {
        "env": ["X=1"],
        "deviceNodes": [{
            "path": "/dev/card1", "hostPath": "/vendorroot/dev/card1", "type": "c",
            "major": 226, "minor": 0, "fileMode": 0o660, "permissions": "rwm",
            "uid": 0, "gid": 4294967295,
        }, {"path": "/dev/fifo", "type": "p", "permissions": ""}],
        "mounts": [{"hostPath": "/a", "containerPath": "/b", "options": [], "type": "bind"}],
        "intelRdt": {"closID": "clos1", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=50",
                     "schemata": ["L3:0=f"], "enableMonitoring": True},
        "additionalGids": [44],
        "netDevices": [],
    },
}

OLD_RDT = {
    "cdiVersion": "0.7.0",
    "kind": "vendor.com/device",
    "devices": [{"name": "d", "containerEdits": {
        "intelRdt": {"closID": "/", "enableCMT": True, "enableMBM": False}}}],
}

V_PREFIXED = {
    "cdiVersion": "v0.3.0",
    "kind": "vendor.com/device",
    "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}],
}

GOOD_SPECS = {
    "hold": HOLD,
    "kube-hold": KUBE_HOLD,
    "everything": EVERYTHING,
    "old-intel-rdt": OLD_RDT,
    "v-prefixed-version": V_PREFIXED,
}
for _path in sorted((SCHEMA_DIR / "testdata" / "good").glob("*.json")):
    GOOD_SPECS["schema-good/" + _path.name] = load_any(_path)
for _path in sorted(NVIDIA_DIR.glob("*.*")):
    GOOD_SPECS["nvidia/" + _path.name] = load_any(_path)


def setting(path, value):
    def mutate(spec):
        target = spec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def deleting(path):
    def mutate(spec):
        target = spec
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return mutate


MINIMAL = {
    "cdiVersion": "0.3.0",
    "kind": "vendor.com/device",
    "devices": [{"name": "dev", "containerEdits": {"deviceNodes": [{"path": "/dev/card1"}]}}],
}
DEV = ("devices", 0)
EDITS = ("devices", 0, "containerEdits")
NODE = ("devices", 0, "containerEdits", "deviceNodes", 0)


def with_base(base, *mutations):
    def build():
        spec = copy.deepcopy(base)
        for mutate in mutations:
            mutate(spec)
        return spec
    return build


def on_minimal(*mutations):
    return with_base(MINIMAL, *mutations)


MOUNT = {"hostPath": "/a", "containerPath": "/b"}
HOOK = {"hookName": "createContainer", "path": "/bin/true"}
NETDEV = {"hostInterfaceName": "eth0", "name": "net0"}

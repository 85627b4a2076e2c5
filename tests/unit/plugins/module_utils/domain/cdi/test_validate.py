# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CDI spec validator: the schema's test data, real NVIDIA specs, a good and
a bad spec for every rule, the version rules, and a cross-check against the
official JSON schema run by ``jsonschema``."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import _load_yaml
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.validate import (
    CdiVersionError,
    KNOWN_VERSIONS,
    minimum_version,
    validate_spec,
    version_key,
)

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


@pytest.mark.parametrize("name", sorted(GOOD_SPECS))
def test_good_specs_have_no_problems(name):
    assert validate_spec(GOOD_SPECS[name]) == []


def test_the_real_nvidia_fixtures_are_all_checked():
    assert len([n for n in GOOD_SPECS if n.startswith("nvidia/")]) == 5


def test_a_device_name_read_as_a_number_is_refused():
    # What plain YAML 1.1 makes of the MIG fixture: "1:0" becomes 60.
    mig = yaml.safe_load((NVIDIA_DIR / "constructed_mig_nvidia.yaml").read_text())
    assert validate_spec(mig) == ["devices[4].name: must be a string, not an integer"]


# --- specs that must fail ---------------------------------------------------


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

BAD = [
    # the document
    ("not-an-object", lambda: ["cdiVersion"], "the spec must be an object"),
    ("empty-document", lambda: None, "the spec must be an object, not null"),
    ("unknown-top-field", on_minimal(setting(("kindShort",), ["x"])), "kindShort: unknown field"),
    ("missing-cdiVersion", on_minimal(deleting(("cdiVersion",))), "missing required field 'cdiVersion'"),
    ("missing-kind", on_minimal(deleting(("kind",))), "missing required field 'kind'"),
    ("missing-devices", on_minimal(deleting(("devices",))), "missing required field 'devices'"),
    # versions
    ("version-number", on_minimal(setting(("cdiVersion",), 0.3)), "cdiVersion: must be a string"),
    ("version-unknown", on_minimal(setting(("cdiVersion",), "0.9.0")), "not a known CDI version"),
    ("version-short", on_minimal(setting(("cdiVersion",), "0.3")), "not a known CDI version"),
    ("version-0.2.0", on_minimal(setting(("cdiVersion",), "0.2.0")), "0.2.0 is below 0.3.0"),
    ("mount-type-needs-0.4.0", on_minimal(
        setting(EDITS + ("mounts",), [dict(MOUNT, type="bind")])), "0.3.0 is below 0.4.0"),
    ("hostPath-needs-0.5.0", on_minimal(
        setting(("cdiVersion",), "0.4.0"), setting(NODE + ("hostPath",), "/x")), "0.4.0 is below 0.5.0"),
    ("digit-name-needs-0.5.0", on_minimal(
        setting(("cdiVersion",), "0.4.0"), setting(DEV + ("name",), "0")), "0.4.0 is below 0.5.0"),
    ("annotations-need-0.6.0", on_minimal(
        setting(("cdiVersion",), "0.5.0"), setting(("annotations",), {"a": "b"})), "0.5.0 is below 0.6.0"),
    ("device-annotations-need-0.6.0", on_minimal(
        setting(DEV + ("annotations",), {"a": "b"})), "0.3.0 is below 0.6.0"),
    ("dot-in-class-needs-0.6.0", on_minimal(
        setting(("cdiVersion",), "0.5.0"), setting(("kind",), "vendor.com/dev.ice")), "0.5.0 is below 0.6.0"),
    ("additionalGids-need-0.7.0", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("containerEdits",), {"additionalGids": [44]})),
     "0.6.0 is below 0.7.0"),
    ("intelRdt-needs-0.7.0", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(EDITS + ("intelRdt",), {})), "0.6.0 is below 0.7.0"),
    ("netDevices-need-1.1.0", on_minimal(
        setting(("cdiVersion",), "1.0.0"), setting(EDITS + ("netDevices",), [NETDEV])), "1.0.0 is below 1.1.0"),
    ("empty-netDevices-need-1.1.0", on_minimal(
        setting(("cdiVersion",), "0.8.0"), setting(EDITS + ("netDevices",), [])), "requires cdiVersion 1.1.0"),
    ("schemata-needs-1.1.0", on_minimal(
        setting(("cdiVersion",), "0.8.0"), setting(EDITS + ("intelRdt",), {"schemata": []})),
     "0.8.0 is below 1.1.0"),
    ("enableMonitoring-false-needs-1.1.0", on_minimal(
        setting(("cdiVersion",), "0.8.0"), setting(EDITS + ("intelRdt",), {"enableMonitoring": False})),
     "requires cdiVersion 1.1.0"),
    ("enableCMT-gone-in-1.1.0", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("intelRdt",), {"enableCMT": True})),
     "not valid from cdiVersion 1.1.0"),
    # kind
    ("kind-number", on_minimal(setting(("kind",), 7)), "kind: must be a string"),
    ("kind-no-slash", on_minimal(setting(("kind",), "vendor.com")), "not of the form vendor/class"),
    ("kind-empty-class", on_minimal(setting(("kind",), "vendor.com/")), "not of the form vendor/class"),
    ("kind-two-slashes", on_minimal(setting(("kind",), "vendor.com/a/b")), "class 'a/b'"),
    ("kind-vendor-digit-first", on_minimal(setting(("kind",), "1vendor.com/gpu")), "vendor '1vendor.com'"),
    ("kind-class-trailing-dash", on_minimal(setting(("kind",), "vendor.com/gpu-")), "class 'gpu-'"),
    ("kind-class-space", on_minimal(setting(("kind",), "vendor.com/g pu")), "class 'g pu'"),
    ("kind-one-letter-vendor", on_minimal(setting(("kind",), "v/gpu")), "at least 2 characters"),
    # annotations
    ("annotations-list", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), ["a=b"])), "annotations: must be an object"),
    ("annotations-null", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), None)), "annotations: must be an object, not null"),
    ("annotation-value-number", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"bcd.dev/generation": 42})),
     "must be a string, not an integer"),
    ("annotation-key-two-slashes", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"a/b/c": "x"})), "at most one '/'"),
    ("annotation-key-empty-prefix", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"/x": "x"})), "prefix before '/'"),
    ("annotation-key-bad-prefix", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"bcd_dev/x": "x"})), "DNS subdomain"),
    ("annotation-key-empty-name", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"bcd.dev/": "x"})), "name part must not be empty"),
    ("annotation-key-long-name", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"a" * 64: "x"})), "at most 63"),
    ("annotation-key-bad-char", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"bcd.dev/a b": "x"})), "name part 'a b'"),
    ("annotation-key-long-prefix", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {("a" * 250) + ".com/x": "x"})),
     "at most 253"),
    ("annotations-too-big", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(("annotations",), {"a": "x" * (256 * 1024)})),
     "more than 262144"),
    ("device-annotation-bad", on_minimal(
        setting(("cdiVersion",), "0.6.0"), setting(DEV + ("annotations",), {"-x": "y"})),
     "devices[0].annotations['-x']"),
    # devices
    ("devices-object", on_minimal(setting(("devices",), {"dev": {}})), "devices: must be an array"),
    ("devices-empty", on_minimal(setting(("devices",), [])), "at least one device"),
    ("device-string", on_minimal(setting(DEV, "dev")), "devices[0]: must be an object"),
    ("device-unknown-field", on_minimal(setting(DEV + ("Name",), "x")), "devices[0].Name: unknown field"),
    ("device-no-name", on_minimal(deleting(DEV + ("name",))), "missing required field 'name'"),
    ("device-name-number", on_minimal(setting(DEV + ("name",), 0)), "name: must be a string"),
    ("device-name-slash", on_minimal(setting(DEV + ("name",), GPU + "/gi1/ci0")), "not a CDI device name"),
    ("device-name-empty", on_minimal(setting(DEV + ("name",), "")), "not a CDI device name"),
    ("device-name-leading-dash", on_minimal(setting(DEV + ("name",), "-a")), "not a CDI device name"),
    ("device-name-trailing-colon", on_minimal(setting(DEV + ("name",), "a:")), "not a CDI device name"),
    ("device-name-newline", on_minimal(setting(DEV + ("name",), "a\n")), "not a CDI device name"),
    ("device-name-duplicate", on_minimal(
        lambda s: s["devices"].append(copy.deepcopy(s["devices"][0]))), "already the name of devices[0]"),
    ("device-no-edits-field", on_minimal(deleting(EDITS)), "missing required field 'containerEdits'"),
    ("device-edits-null", on_minimal(setting(EDITS, None)), "containerEdits: must be an object, not null"),
    ("device-edits-empty", on_minimal(setting(EDITS, {})), "at least one edit"),
    ("device-edits-only-empty-lists", on_minimal(setting(EDITS, {
        "env": [], "deviceNodes": [], "mounts": [], "hooks": [], "additionalGids": []})), "at least one edit"),
    ("edits-unknown-field", on_minimal(setting(EDITS + ("devices",), [])), "containerEdits.devices: unknown field"),
    ("spec-edits-list", on_minimal(setting(("containerEdits",), [])), "containerEdits: must be an object"),
    # env
    ("env-null", on_minimal(setting(EDITS + ("env",), None)), "env: must be an array, not null"),
    ("env-string", on_minimal(setting(EDITS + ("env",), "A=1")), "env: must be an array"),
    ("env-entry-number", on_minimal(setting(EDITS + ("env",), [1])), "env[0]: must be a string"),
    ("env-no-equals", on_minimal(setting(("containerEdits",), {"env": ["A=1", "NOVALUE"]})),
     "containerEdits.env[1]: 'NOVALUE' is not KEY=VALUE"),
    ("env-equals-first", on_minimal(setting(EDITS + ("env",), ["=x"])), "'=x' is not KEY=VALUE"),
    # device nodes
    ("nodes-object", on_minimal(setting(EDITS + ("deviceNodes",), {"path": "/dev/x"})), "deviceNodes: must be an array"),
    ("node-string", on_minimal(setting(NODE, "/dev/card1")), "deviceNodes[0]: must be an object"),
    ("node-no-path", on_minimal(setting(NODE, {"hostPath": "/dev/x"})), "missing required field 'path'"),
    ("node-empty-path", on_minimal(setting(NODE + ("path",), "")), "path: must not be empty"),
    ("node-unknown-field", on_minimal(setting(NODE + ("mode",), 0o666)), "deviceNodes[0].mode: unknown field"),
    ("node-bad-type", on_minimal(setting(NODE + ("type",), "char")), "not a device type"),
    ("node-bad-permissions", on_minimal(setting(NODE + ("permissions",), "rwx")), "may hold only r, w and m"),
    ("node-negative-major", on_minimal(setting(NODE + ("major",), -1)), "major: -1 is out of range"),
    ("node-float-minor", on_minimal(setting(NODE + ("minor",), 1.0)), "minor: must be an integer, not a number"),
    ("node-string-minor", on_minimal(setting(NODE + ("minor",), "1")), "minor: must be an integer, not a string"),
    ("node-big-uid", on_minimal(setting(NODE + ("uid",), 2 ** 32)), "uid: 4294967296 is out of range"),
    ("node-bool-gid", on_minimal(setting(NODE + ("gid",), True)), "gid: must be an integer, not a boolean"),
    ("node-null-hostPath", on_minimal(setting(NODE + ("hostPath",), None)), "hostPath: must be a string, not null"),
    ("node-negative-fileMode", on_minimal(setting(NODE + ("fileMode",), -1)), "fileMode: -1 is out of range"),
    # mounts
    ("mount-no-hostPath", on_minimal(setting(EDITS + ("mounts",), [{"containerPath": "/b"}])),
     "missing required field 'hostPath'"),
    ("mount-no-containerPath", on_minimal(setting(EDITS + ("mounts",), [{"hostPath": "/a"}])),
     "missing required field 'containerPath'"),
    ("mount-empty-hostPath", on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, hostPath="")])),
     "hostPath: must not be empty"),
    ("mount-options-string", on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, options="ro")])),
     "options: must be an array"),
    ("mount-option-number", on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, options=[1])])),
     "options[0]: must be a string"),
    ("mount-type-number", on_minimal(
        setting(("cdiVersion",), "0.4.0"), setting(EDITS + ("mounts",), [dict(MOUNT, type=1)])),
     "type: must be a string"),
    ("mount-unknown-field", on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, readOnly=True)])),
     "mounts[0].readOnly: unknown field"),
    # hooks
    ("hook-no-name", on_minimal(setting(EDITS + ("hooks",), [{"path": "/bin/true"}])),
     "missing required field 'hookName'"),
    ("hook-bad-name", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, hookName="preStart")])),
     "'preStart' is not a hook name"),
    ("hook-no-path", on_minimal(setting(EDITS + ("hooks",), [{"hookName": "poststop"}])),
     "missing required field 'path'"),
    ("hook-empty-path", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, path="")])),
     "path: must not be empty"),
    ("hook-args-number", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, args=["x", 2])])),
     "args[1]: must be a string"),
    ("hook-env-bad", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, env=["DEBUG"])])),
     "hooks[0].env[0]: 'DEBUG' is not KEY=VALUE"),
    ("hook-negative-timeout", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, timeout=-5)])),
     "timeout: -5 is out of range"),
    ("hook-unknown-field", on_minimal(setting(EDITS + ("hooks",), [dict(HOOK, when="always")])),
     "hooks[0].when: unknown field"),
    # additional gids
    ("gids-number", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("additionalGids",), 44)),
     "additionalGids: must be an array"),
    ("gids-negative", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("additionalGids",), [-1])),
     "additionalGids[0]: -1 is out of range"),
    ("gids-string", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("additionalGids",), ["44"])),
     "additionalGids[0]: must be an integer"),
    # intel RDT
    ("rdt-list", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("intelRdt",), [])),
     "intelRdt: must be an object"),
    ("rdt-closID-dotdot", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("intelRdt",), {"closID": ".."})),
     "'..' is not a valid file name"),
    ("rdt-closID-slash", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("intelRdt",), {"closID": "a/b"})),
     "'a/b' is not a valid file name"),
    ("rdt-enableMonitoring-string", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("intelRdt",), {"enableMonitoring": "yes"})),
     "enableMonitoring: must be a boolean"),
    ("rdt-schemata-string", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("intelRdt",), {"schemata": "L3:0=f"})),
     "schemata: must be an array"),
    ("rdt-unknown-field", on_minimal(setting(("cdiVersion",), "0.7.0"), setting(EDITS + ("intelRdt",), {"clos": "x"})),
     "intelRdt.clos: unknown field"),
    # net devices
    ("netdev-no-name", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("netDevices",), [{"hostInterfaceName": "eth0"}])),
     "missing required field 'name'"),
    ("netdev-empty-host", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("netDevices",), [dict(NETDEV, hostInterfaceName="")])),
     "hostInterfaceName: must not be empty"),
    ("netdev-duplicate-host", on_minimal(
        setting(("cdiVersion",), "1.1.0"),
        setting(EDITS + ("netDevices",), [NETDEV, dict(NETDEV, name="net1")])),
     "'eth0' is already used"),
    ("netdev-unknown-field", on_minimal(
        setting(("cdiVersion",), "1.1.0"), setting(EDITS + ("netDevices",), [dict(NETDEV, mac="x")])),
     "netDevices[0].mac: unknown field"),
]


@pytest.mark.parametrize("build, expected", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_specs_are_refused_with_a_message_naming_the_problem(build, expected):
    problems = validate_spec(build())
    assert problems, "accepted a bad spec"
    assert any(expected in problem for problem in problems), problems


def test_bad_case_ids_are_unique():
    ids = [case[0] for case in BAD]
    assert len(ids) == len(set(ids))


def test_the_schema_testdata_bad_files_are_refused():
    empty = load_any(SCHEMA_DIR / "testdata" / "bad" / "empty.json")
    assert validate_spec(empty) == ["the spec must be an object, not null"]
    assert validate_spec(load_any(SCHEMA_DIR / "testdata" / "bad" / "explicit-empty.json")) == [
        "missing required field 'cdiVersion'",
        "missing required field 'kind'",
        "missing required field 'devices'",
    ]


def test_every_problem_is_reported_not_just_the_first():
    spec = copy.deepcopy(MINIMAL)
    spec["kind"] = "vendor.com"
    spec["devices"].append({"name": "a/b", "containerEdits": {"env": ["X"]}})
    spec["devices"].append({"name": "dev", "containerEdits": {}})

    problems = validate_spec(spec)

    assert len(problems) == 5, problems
    joined = "\n".join(problems)
    for part in ("not of the form vendor/class", "'a/b' is not a CDI device name",
                 "'X' is not KEY=VALUE", "already the name of devices[0]", "at least one edit"):
        assert part in joined


def test_the_spec_page_example_with_env_null_is_refused():
    # The spec page writes "env": null in a device; the schema wants an array.
    spec = copy.deepcopy(HOLD)
    spec["devices"][0]["containerEdits"]["env"] = None
    assert validate_spec(spec) == [
        "devices[0].containerEdits.env: must be an array, not null",
    ]


def test_minimum_message_names_what_raises_the_version():
    spec = copy.deepcopy(HOLD)
    spec["cdiVersion"] = "0.6.0"
    assert validate_spec(spec) == [
        "cdiVersion: 0.6.0 is below 0.7.0, the minimum this content requires "
        "(containerEdits.additionalGids)",
    ]


# --- minimum_version and version_key ----------------------------------------


@pytest.mark.parametrize("build, expected", [
    (on_minimal(), "0.3.0"),
    (on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, type="bind")])), "0.4.0"),
    (on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, type="")])), "0.3.0"),
    (on_minimal(setting(("containerEdits",), {"mounts": [dict(MOUNT, type="bind")]})), "0.4.0"),
    (on_minimal(setting(DEV + ("name",), "0")), "0.5.0"),
    (on_minimal(setting(DEV + ("name",), "a0")), "0.3.0"),
    (on_minimal(setting(NODE + ("hostPath",), "/h")), "0.5.0"),
    (on_minimal(setting(("annotations",), {"a": "b"})), "0.6.0"),
    (on_minimal(setting(("annotations",), {})), "0.3.0"),
    (on_minimal(setting(DEV + ("annotations",), {"a": "b"})), "0.6.0"),
    (on_minimal(setting(("kind",), "vendor.com/dev.ice")), "0.6.0"),
    (on_minimal(setting(("kind",), "vendor.com/device")), "0.3.0"),
    (on_minimal(setting(EDITS + ("additionalGids",), [1])), "0.7.0"),
    (on_minimal(setting(EDITS + ("additionalGids",), [])), "0.3.0"),
    (on_minimal(setting(("containerEdits",), {"intelRdt": {}})), "0.7.0"),
    (on_minimal(setting(EDITS + ("netDevices",), [NETDEV])), "1.1.0"),
    (on_minimal(setting(EDITS + ("intelRdt",), {"schemata": []})), "1.1.0"),
    (on_minimal(setting(EDITS + ("intelRdt",), {"enableMonitoring": True})), "1.1.0"),
    (with_base(HOLD), "0.7.0"),
    (with_base(KUBE_HOLD), "0.6.0"),
    (with_base(EVERYTHING), "1.1.0"),
    (lambda: GOOD_SPECS["nvidia/salilkadam_nvidia.yaml"], "0.5.0"),
    (lambda: GOOD_SPECS["nvidia/crazymax-buildx_wsl_nvidia-gpu.yaml"], "0.3.0"),
    (lambda: "garbage", "0.3.0"),
    (lambda: {"devices": "garbage", "containerEdits": 5}, "0.3.0"),
])
def test_minimum_version(build, expected):
    assert minimum_version(build()) == expected


def test_the_highest_requirement_wins():
    spec = on_minimal(
        setting(DEV + ("name",), "0"),
        setting(("annotations",), {"a": "b"}),
        setting(EDITS + ("mounts",), [dict(MOUNT, type="bind")]),
    )()
    assert minimum_version(spec) == "0.6.0"


@pytest.mark.parametrize("text, key", [
    ("0.3.0", (0, 3, 0)), ("0.10.0", (0, 10, 0)), ("1.1.0", (1, 1, 0)), ("v0.6.0", (0, 6, 0)),
])
def test_version_key(text, key):
    assert version_key(text) == key


def test_version_key_orders_numerically_not_as_text():
    assert sorted(["0.10.0", "0.9.0", "1.0.0", "0.6.0"], key=version_key) == [
        "0.6.0", "0.9.0", "0.10.0", "1.0.0",
    ]
    assert max(["0.6.0", "0.5.0", "0.7.0"], key=version_key) == "0.7.0"


@pytest.mark.parametrize("bad", ["", "0.6", "0.6.0.1", "x.y.z", "0.6.0-rc1", " 0.6.0", "01.0.0", None, 6, "0.6.0\n"])
def test_version_key_refuses_what_is_not_a_version(bad):
    with pytest.raises(CdiVersionError):
        version_key(bad)
    assert issubclass(CdiVersionError, ValueError)


def test_known_versions_are_ascending():
    assert list(KNOWN_VERSIONS) == sorted(KNOWN_VERSIONS, key=version_key)


# --- cross-check with the official schema -----------------------------------

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")


@pytest.fixture(scope="module")
def official():
    """The official schema as the CDI validator loads it: schema.json at
    file:///schema.json, its "defs.json#/..." references resolving to defs.json.
    defs.json's env items use "ref" (a typo for "$ref"), so the schema does not
    check env entries; jsonschema ignores the unknown keyword just like Go."""
    from referencing.jsonschema import DRAFT7

    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = referencing.Registry().with_resources([
        ("file:///schema.json", DRAFT7.create_resource(schema)),
        ("file:///defs.json", DRAFT7.create_resource(defs)),
    ])
    validator = jsonschema.Draft7Validator({"$ref": "file:///schema.json"}, registry=registry)
    return validator


def schema_errors(validator, spec):
    return [e.message for e in validator.iter_errors(spec)]


def test_the_official_schema_is_loaded_with_its_definitions(official):
    # Sanity: the schema and defs.json both take effect, so the checks below can fail.
    assert schema_errors(official, {}) != []
    node_without_path = on_minimal(setting(NODE, {"hostPath": "/x"}))()
    assert schema_errors(official, node_without_path) != []
    gid_too_big = on_minimal(setting(EDITS + ("additionalGids",), [2 ** 32]))()
    assert schema_errors(official, gid_too_big) != []
    # ...and the "ref" typo: env items are unchecked by the schema, not by us.
    env_number = on_minimal(setting(EDITS + ("env",), [1]))()
    assert schema_errors(official, env_number) == []
    assert validate_spec(env_number) != []


@pytest.mark.parametrize("name", sorted(GOOD_SPECS))
def test_every_spec_the_validator_accepts_passes_the_official_schema(official, name):
    spec = GOOD_SPECS[name]
    assert validate_spec(spec) == []
    assert schema_errors(official, spec) == []


@pytest.mark.parametrize("build", [case[1] for case in BAD], ids=[case[0] for case in BAD])
def test_what_the_official_schema_refuses_the_validator_refuses(official, build):
    spec = build()
    if schema_errors(official, spec):
        assert validate_spec(spec) != []


_JUNK = [None, True, 0, -1, 2 ** 33, 1.5, "", "x", "A=1", [], [1], ["s"], {}, {"path": "/x"}]


def _nodes(value, path=()):
    """Every (path, container) position in a JSON value."""
    out = []
    if isinstance(value, dict):
        for key in value:
            out.append(path + (key,))
            out.extend(_nodes(value[key], path + (key,)))
    elif isinstance(value, list):
        for idx, item in enumerate(value):
            out.append(path + (idx,))
            out.extend(_nodes(item, path + (idx,)))
    return out


def test_random_damage_never_gets_past_the_validator_when_the_schema_sees_it(official):
    """Damage good specs at random (drop a field, put junk in it, add an
    unknown field): whenever the official schema refuses the result, the
    validator must refuse it too; whatever the validator accepts, the schema
    must accept."""
    rng = random.Random(20240611)
    bases = [GOOD_SPECS[n] for n in sorted(GOOD_SPECS) if not n.startswith("nvidia/salil")]
    refused_by_schema = 0
    for attempt in range(3000):
        spec = copy.deepcopy(rng.choice(bases))
        positions = _nodes(spec)
        path = rng.choice(positions)
        parent = spec
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.25 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.35 and isinstance(parent, dict):
            parent["unknownField"] = "x"
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(_JUNK))
        ours = validate_spec(spec)
        theirs = schema_errors(official, spec)
        if theirs:
            refused_by_schema += 1
            assert ours, "schema refuses %s (%s) but the validator accepts it" % (path, theirs)
        if not ours:
            assert not theirs
    assert refused_by_schema > 300  # the damage really exercised the schema


def test_a_lone_surrogate_in_an_annotation_is_validated_not_a_traceback():
    """Found by make fuzz: JSON's "\\ud800" read into an annotation made the size count raise
    UnicodeEncodeError; the writer refuses it (domain/cdi/hold_spec.render_hold), the validator only counts."""
    spec = copy.deepcopy(MINIMAL)
    spec["cdiVersion"] = "0.6.0"
    spec["annotations"] = {"bcd.dev/reservation-id": "r\ud800"}
    assert validate_spec(spec) == []

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CDI spec validator (``validate.py``, with the rules of ``rules.py``): the schema's test data, real
NVIDIA specs, a good and a bad spec for every rule, the version rule, and a cross-check against the
official JSON schema run by ``jsonschema``. The versions themselves are ``test_versions.py``'s."""

from __future__ import annotations

import copy
import json
import random

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.validate import validate_spec
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.cdi.cdi_specs import (
    DEV,
    EDITS,
    GOOD_SPECS,
    GPU,
    HOLD,
    HOOK,
    MINIMAL,
    MOUNT,
    NETDEV,
    NODE,
    NVIDIA_DIR,
    SCHEMA_DIR,
    deleting,
    load_any,
    on_minimal,
    setting,
)

# --- specs that must pass (cdi_specs.py) ------------------------------------


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

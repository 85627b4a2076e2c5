# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading NVIDIA's CDI spec: real toolkit output (YAML, JSON, WSL), a MIG
spec built from the toolkit's layout, which file wins, and bad files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import vendor as _cdi_vendor
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
from ansible_collections.bcd.devices.plugins.module_utils.node.vendor_spec import load_vendor_spec

DATA = Path(__file__).resolve().parents[5] / "data" / "nvidia-cdi"

FULL_YAML = DATA / "salilkadam_nvidia.yaml"
FULL_JSON = DATA / "ramalama_fullgpu_cdi.json"
WSL_YAML = DATA / "crazymax-buildx_wsl_nvidia-gpu.yaml"
WSL_JSON = DATA / "ramalama_wsl_cdi.json"
MIG_YAML = DATA / "constructed_mig_nvidia.yaml"

FULL_YAML_GPU = "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e"
FULL_JSON_GPU = "GPU-08b3c2e8-cb7b-ea3f-7711-a042c580b3e8"
MIG_GPU0 = "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
MIG_GPU1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
MIG_0_0 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"
MIG_0_1 = "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"
MIG_1_0 = "MIG-2a5c6f10-8e3b-5f4e-9c1d-7b0e4d3a2f91"
OTHER_GPU = "GPU-11111111-2222-3333-4444-555555555555"


def put(root, node_path, content):
    """Write ``content`` (a fixture Path, bytes, str or dict) at ``node_path`` under ``root``."""
    target = root / node_path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, Path):
        content = content.read_bytes()
    elif isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, str):
        content = content.encode("utf-8")
    target.write_bytes(content)
    return target


def node_paths(edits):
    return [node["path"] for node in edits.get("deviceNodes", [])]


def small_spec(devices, common=None, version="0.5.0", kind="nvidia.com/gpu"):
    spec = {"cdiVersion": version, "kind": kind, "devices": [
        {"name": name, "containerEdits": edits} for name, edits in devices
    ]}
    if common is not None:
        spec["containerEdits"] = common
    return spec


# --- real full-GPU specs ----------------------------------------------------


def test_full_gpu_yaml_spec_gives_the_gpu_edits_and_common_edits_without_void(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    source = yaml.safe_load(FULL_YAML.read_text())

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yaml"
    assert spec.path is not None and not spec.is_wsl
    assert spec.cdi_version == "0.5.0"
    assert set(spec.devices) == {"0", FULL_YAML_GPU, "all"}
    assert spec.digest == hashlib.sha256(FULL_YAML.read_bytes()).hexdigest()
    assert spec.warnings == []
    # Common edits: everything NVIDIA has, except env, whose only entry was void.
    assert "env" not in spec.common_edits
    assert node_paths(spec.common_edits) == [
        "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl",
    ]
    assert spec.common_edits["mounts"] == source["containerEdits"]["mounts"]
    assert spec.common_edits["hooks"] == source["containerEdits"]["hooks"]

    edits = spec.edits_for_gpu(FULL_YAML_GPU)
    assert node_paths(edits) == ["/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"]
    assert [hook["args"][1] for hook in edits["hooks"]] == ["create-symlinks", "chmod"]
    # YAML's quoted "755" stays a string inside hook args.
    assert "755" in edits["hooks"][1]["args"]


def test_full_gpu_json_spec_read_from_var_run(tmp_path):
    put(tmp_path, "/var/run/cdi/nvidia.json", FULL_JSON)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/var/run/cdi/nvidia.json"
    assert spec.cdi_version == "0.5.0"
    # The (trimmed) fixture's common edits hold only the void env entry.
    assert spec.common_edits == {}
    assert node_paths(spec.edits_for_gpu(FULL_JSON_GPU)) == [
        "/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128",
    ]
    assert spec.warnings == []


def test_a_gpu_or_mig_device_the_spec_does_not_name_has_no_edits(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    spec = load_vendor_spec(str(tmp_path))

    assert spec.edits_for_gpu(OTHER_GPU) is None
    assert spec.edits_for_mig(MIG_0_0) is None
    # Index names and "all" are not reachable through the UUID lookups.
    assert spec.edits_for_gpu("0") is None
    assert spec.edits_for_gpu("all") is None
    assert spec.edits_for_mig(FULL_YAML_GPU) is None


def test_lookup_tolerates_upper_case_uuids(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    spec = load_vendor_spec(str(tmp_path))

    upper = "GPU-" + FULL_YAML_GPU[4:].upper()
    assert spec.edits_for_gpu(upper) == spec.edits_for_gpu(FULL_YAML_GPU)


def test_returned_edits_are_copies(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    spec = load_vendor_spec(str(tmp_path))

    edits = spec.edits_for_gpu(FULL_YAML_GPU)
    edits["deviceNodes"].append({"path": "/dev/evil"})
    edits["hooks"][0]["args"].clear()

    again = spec.edits_for_gpu(FULL_YAML_GPU)
    assert "/dev/evil" not in node_paths(again)
    assert again["hooks"][0]["args"][0] == "nvidia-cdi-hook"


def test_a_v_prefixed_version_is_given_without_the_v(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.json", small_spec(
        [(MIG_GPU0, {"deviceNodes": [{"path": "/dev/nvidia0"}]})], version="v0.5.0",
    ))

    spec = load_vendor_spec(str(tmp_path))

    assert spec.cdi_version == "0.5.0"
    assert spec.warnings == []


def test_void_is_removed_and_other_common_env_kept(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.json", small_spec(
        [(MIG_GPU0, {"deviceNodes": [{"path": "/dev/nvidia0"}]})],
        common={"env": ["A=1", "NVIDIA_VISIBLE_DEVICES=void", "B=2"], "additionalGids": [44]},
        version="0.7.0",
    ))

    spec = load_vendor_spec(str(tmp_path))

    assert spec.common_edits == {"env": ["A=1", "B=2"], "additionalGids": [44]}
    assert spec.cdi_version == "0.7.0"


# --- WSL --------------------------------------------------------------------


@pytest.mark.parametrize("fixture, node_path", [
    (WSL_YAML, "/etc/cdi/nvidia-gpu.yaml"),
    (WSL_JSON, "/var/run/cdi/nvidia.json"),
])
def test_wsl_all_device_stands_for_every_gpu_and_mig_has_none(tmp_path, fixture, node_path):
    put(tmp_path, node_path, fixture)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.is_wsl
    assert spec.cdi_version == "0.3.0"
    for gpu in (FULL_YAML_GPU, OTHER_GPU):
        assert spec.edits_for_gpu(gpu) == {"deviceNodes": [{"path": "/dev/dxg"}]}
    assert spec.edits_for_mig(MIG_0_0) is None
    assert "env" not in spec.common_edits
    assert spec.warnings == []


def test_wsl_yaml_keeps_its_driver_store_mounts_and_hooks(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", WSL_YAML)
    spec = load_vendor_spec(str(tmp_path))

    assert sorted(spec.common_edits) == ["hooks", "mounts"]
    assert all(
        mount["hostPath"].startswith("/usr/lib/wsl/") for mount in spec.common_edits["mounts"]
    )
    edits = spec.edits_for_gpu(OTHER_GPU)
    edits["deviceNodes"][0]["path"] = "/dev/changed"
    assert spec.edits_for_gpu(OTHER_GPU) == {"deviceNodes": [{"path": "/dev/dxg"}]}


def test_an_index_named_spec_is_not_taken_for_wsl(tmp_path):
    # nvidia-ctk --device-name-strategy=index: "0" and "all", no UUID names.
    # Handing out "all" for a GPU would grant every GPU: there are no edits instead.
    put(tmp_path, "/etc/cdi/nvidia.json", small_spec([
        ("0", {"deviceNodes": [{"path": "/dev/nvidia0"}]}),
        ("all", {"deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]}),
    ]))

    spec = load_vendor_spec(str(tmp_path))

    assert not spec.is_wsl
    assert spec.edits_for_gpu(MIG_GPU0) is None
    assert any("device-name-strategy" in w for w in spec.warnings)


# --- MIG and YAML numbers ---------------------------------------------------


def test_mig_fixture_really_has_a_name_yaml_1_1_reads_as_a_number():
    names = [d["name"] for d in yaml.safe_load(MIG_YAML.read_text())["devices"]]
    assert 60 in names  # "1:0", base 60: what this module must avoid


def test_mig_spec_names_stay_strings_and_mig_edits_are_found(tmp_path):
    put(tmp_path, "/var/run/cdi/nvidia.yaml", MIG_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert {"0:0", "0:1", "1:0", "0", "1"} <= set(spec.devices)
    assert all(isinstance(name, str) for name in spec.devices)
    assert "60" not in spec.devices
    assert spec.warnings == []

    assert node_paths(spec.edits_for_mig(MIG_0_0)) == [
        "/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap426", "/dev/nvidia-caps/nvidia-cap427",
    ]
    assert node_paths(spec.edits_for_mig(MIG_0_1)) == [
        "/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap435", "/dev/nvidia-caps/nvidia-cap436",
    ]
    assert node_paths(spec.edits_for_mig(MIG_1_0)) == [
        "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap147", "/dev/nvidia-caps/nvidia-cap148",
    ]
    assert node_paths(spec.edits_for_gpu(MIG_GPU1)) == ["/dev/nvidia1"]
    assert spec.edits_for_mig(MIG_GPU0) is None
    assert spec.edits_for_gpu(MIG_0_0) is None


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_parser(request, monkeypatch):
    """Each YAML parser a node may have: libyaml's (used where PyYAML has it) and PyYAML's own."""
    import yaml
    if request.param == "libyaml" and not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML here has no libyaml")
    if request.param == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    monkeypatch.setattr(_cdi_vendor, "_YAML", {})
    return request.param


@pytest.mark.parametrize("written", ["1:0", "59:59", "010", "1_0", "0x1f", "12"])
def test_device_names_are_kept_as_written(tmp_path, written, yaml_parser):
    put(tmp_path, "/etc/cdi/nvidia.yaml", (
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        "- name: %s\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
        "- name: %s\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
    ) % (written, MIG_GPU0))

    spec = load_vendor_spec(str(tmp_path))

    assert written in spec.devices, spec.devices


@pytest.mark.skipif(not _cdi_vendor.HAS_YAML, reason="needs PyYAML")
def test_yaml_loader_has_no_base_60_but_keeps_real_numbers():
    data = _cdi_vendor._load_yaml(
        "a: 1:0\nb: 1:30:00\nc: 12\nd: -3\ne: 1.5\nf: 190:20:30.15\ng: true\nh: '7'\n"
    )
    assert data == {
        "a": "1:0", "b": "1:30:00", "c": 12, "d": -3, "e": 1.5, "f": "190:20:30.15",
        "g": True, "h": "7",
    }


def test_numbers_in_a_yaml_spec_stay_numbers(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", (
        "cdiVersion: 0.7.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  additionalGids: [44]\n"
        "devices:\n- name: %s\n  containerEdits:\n    deviceNodes:\n"
        "    - {path: /dev/nvidia0, type: c, major: 195, minor: 0}\n"
    ) % MIG_GPU0)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.common_edits == {"additionalGids": [44]}
    assert spec.edits_for_gpu(MIG_GPU0)["deviceNodes"][0] == {
        "path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0,
    }
    assert spec.warnings == []


# --- which file -------------------------------------------------------------


def test_var_run_cdi_wins_over_etc_cdi(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    put(tmp_path, "/var/run/cdi/nvidia.yaml", MIG_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/var/run/cdi/nvidia.yaml"
    assert spec.digest == hashlib.sha256(MIG_YAML.read_bytes()).hexdigest()
    assert spec.edits_for_gpu(FULL_YAML_GPU) is None
    assert spec.edits_for_mig(MIG_0_0) is not None
    assert spec.warnings == []


def test_etc_cdi_is_used_when_var_run_cdi_has_no_nvidia_spec(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)
    put(tmp_path, "/var/run/cdi/net.json", small_spec(
        [("eth0", {"netDevices": [{"hostInterfaceName": "eth0", "name": "net0"}]})],
        version="1.1.0", kind="example.com/net",
    ))

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yaml"
    assert spec.warnings == []  # another vendor's spec is no concern of ours


def test_our_own_hold_specs_are_never_read_as_nvidia_spec(tmp_path):
    # Even one that claims NVIDIA's kind: bcd-*.json are holds, not the vendor spec.
    put(tmp_path, "/var/run/cdi/bcd-alloc_1.json", small_spec(
        [(FULL_YAML_GPU, {"deviceNodes": [{"path": "/dev/from-a-hold"}]})]
    ))
    put(tmp_path, "/etc/cdi/bcd-alloc_2.json", small_spec(
        [(FULL_YAML_GPU, {"deviceNodes": [{"path": "/dev/from-a-hold"}]})]
    ))
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yaml"
    assert "/dev/from-a-hold" not in node_paths(spec.edits_for_gpu(FULL_YAML_GPU))


def test_only_json_and_yaml_files_are_read(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.yaml.tmp", FULL_YAML)
    put(tmp_path, "/etc/cdi/nvidia.json.bak", FULL_JSON)
    put(tmp_path, "/etc/cdi/nvidia.yml", MIG_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yml"


def test_two_nvidia_specs_in_one_directory_use_the_first_by_name_and_warn(tmp_path):
    put(tmp_path, "/var/run/cdi/nvidia.json", FULL_JSON)
    put(tmp_path, "/var/run/cdi/nvidia.yaml", FULL_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/var/run/cdi/nvidia.json"
    assert len(spec.warnings) == 1
    assert "/var/run/cdi/nvidia.json" in spec.warnings[0]
    assert "/var/run/cdi/nvidia.yaml" in spec.warnings[0]


def test_no_spec_at_all(tmp_path):
    spec = load_vendor_spec(str(tmp_path))

    assert spec == VendorSpec()
    assert spec.path is None
    assert spec.digest is None and spec.cdi_version == ""
    assert spec.edits_for_gpu(FULL_YAML_GPU) is None
    assert spec.edits_for_mig(MIG_0_0) is None


def test_digest_follows_the_file_content(tmp_path):
    target = put(tmp_path, "/etc/cdi/nvidia.json", FULL_JSON)
    first = load_vendor_spec(str(tmp_path)).digest
    assert load_vendor_spec(str(tmp_path)).digest == first

    data = json.loads(target.read_text())
    data["devices"][1]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/nvidia1"
    target.write_text(json.dumps(data))
    second = load_vendor_spec(str(tmp_path))

    assert second.digest != first
    assert node_paths(second.edits_for_gpu(FULL_JSON_GPU))[0] == "/dev/nvidia1"


# --- bad files become warnings ----------------------------------------------


BAD_FILES = [
    ("not-yaml", "cdiVersion: [unclosed\n", "not valid YAML"),
    ("not-json", '{"cdiVersion": "0.5.0",', "not valid JSON"),
    ("top-level-list", "- a\n- b\n", "no CDI spec"),
    ("empty-file", "", "no CDI spec"),
    ("not-utf8", b"\xff\xfe\x00bad", "not UTF-8"),
    ("two-documents", "kind: nvidia.com/gpu\n---\nkind: nvidia.com/gpu\n", "not valid YAML"),
    ("bad-version", json.dumps(small_spec([(FULL_YAML_GPU, {"env": ["A=1"]})], version="five")),
     "not a CDI version"),
    ("no-version", json.dumps({"kind": "nvidia.com/gpu", "devices": []}), "not a CDI version"),
    ("devices-not-list", json.dumps({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
                                     "devices": {"a": 1}}), "devices are not a list"),
]


@pytest.mark.parametrize("content, expected", [case[1:] for case in BAD_FILES],
                         ids=[case[0] for case in BAD_FILES])
def test_a_bad_file_is_a_warning_and_a_lower_priority_spec_is_used(tmp_path, content, expected):
    name = "nvidia.json" if expected == "not valid JSON" else "nvidia.yaml"
    put(tmp_path, "/var/run/cdi/" + name, content)
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yaml"
    assert len(spec.warnings) == 1, spec.warnings
    assert "/var/run/cdi/" + name in spec.warnings[0]
    assert expected in spec.warnings[0]


def test_an_unreadable_file_is_a_warning(tmp_path):
    link = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    link.parent.mkdir(parents=True)
    os.symlink(str(tmp_path / "nowhere.yaml"), str(link))

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path is None
    assert len(spec.warnings) == 1
    assert "cannot read CDI spec /etc/cdi/nvidia.yaml" in spec.warnings[0]


@pytest.mark.parametrize("make, expected", [
    (os.mkfifo, "not a regular file"),
    (lambda path: os.symlink("/dev/zero", path), "not a regular file"),
    (lambda path: Path(path).write_bytes(b" " * (256 * 1024 + 1)), "larger than 256 KiB"),
    (lambda path: Path(path).write_text("x: " + "[" * 100000), "nested deeper than 64 levels"),
], ids=["fifo", "dev-zero", "too-large", "deep"])
def test_a_fifo_a_device_a_huge_or_deep_file_is_a_warning_and_never_waited_on(tmp_path, make, expected):
    """Found by make fuzz: a FIFO blocked the pass in open(), /dev/zero ran it out of memory, and 100 000
    brackets cost PyYAML a second before it failed."""
    (tmp_path / "var" / "run" / "cdi").mkdir(parents=True)
    make(str(tmp_path / "var" / "run" / "cdi" / "nvidia.yaml"))
    put(tmp_path, "/etc/cdi/nvidia.yaml", FULL_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.yaml"
    assert len(spec.warnings) == 1 and "cannot read CDI spec /var/run/cdi/nvidia.yaml" in spec.warnings[0]
    assert expected in spec.warnings[0], spec.warnings


def test_a_spec_directory_that_is_a_file_is_a_warning(tmp_path):
    put(tmp_path, "/etc/cdi", "not a directory")
    put(tmp_path, "/var/run/cdi/nvidia.yaml", FULL_YAML)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/var/run/cdi/nvidia.yaml"
    assert spec.warnings == ["/etc/cdi is not a directory; no CDI specs read from it"]


def test_broken_devices_are_skipped_with_warnings_and_the_rest_used(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.json", {
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "containerEdits": ["not", "a", "mapping"],
        "devices": [
            "not a device",
            {"name": MIG_GPU1, "containerEdits": None},
            {"name": MIG_GPU0, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {"name": MIG_GPU0, "containerEdits": {"deviceNodes": [{"path": "/dev/second"}]}},
        ],
    })

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.json"
    assert node_paths(spec.edits_for_gpu(MIG_GPU0)) == ["/dev/nvidia0"]
    assert spec.edits_for_gpu(MIG_GPU1) is None
    assert spec.common_edits == {}
    text = "\n".join(spec.warnings)
    assert "devices[0] has no name" in text
    assert "%r has no containerEdits" % MIG_GPU1 in text
    assert "%r is defined twice" % MIG_GPU0 in text
    assert "containerEdits are not a mapping" in text
    assert "not valid CDI" in text


def test_an_nvidia_spec_runtimes_would_refuse_is_used_with_a_warning(tmp_path):
    put(tmp_path, "/etc/cdi/nvidia.json", small_spec(
        [(MIG_GPU0, {"deviceNodes": [{"path": "/dev/nvidia0"}], "env": ["NOEQUALS"]})]
    ))

    spec = load_vendor_spec(str(tmp_path))

    assert spec.edits_for_gpu(MIG_GPU0)["env"] == ["NOEQUALS"]
    assert len(spec.warnings) == 1
    assert "/etc/cdi/nvidia.json is not valid CDI" in spec.warnings[0]
    assert "NOEQUALS" in spec.warnings[0]


# --- without PyYAML ---------------------------------------------------------


def test_without_pyyaml_a_yaml_spec_is_a_warning_and_json_still_works(tmp_path, monkeypatch):
    monkeypatch.setattr(_cdi_vendor, "HAS_YAML", False)
    monkeypatch.setattr(_cdi_vendor, "YAML_IMPORT_ERROR", "No module named 'yaml'")
    put(tmp_path, "/var/run/cdi/nvidia.yaml", FULL_YAML)
    put(tmp_path, "/etc/cdi/nvidia.json", FULL_JSON)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/etc/cdi/nvidia.json"
    assert len(spec.warnings) == 1
    assert "/var/run/cdi/nvidia.yaml" in spec.warnings[0]
    assert "PyYAML is not installed" in spec.warnings[0]


def test_without_pyyaml_a_yaml_file_holding_json_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(_cdi_vendor, "HAS_YAML", False)
    put(tmp_path, "/var/run/cdi/nvidia.yaml", FULL_JSON)

    spec = load_vendor_spec(str(tmp_path))

    assert spec.path == "/var/run/cdi/nvidia.yaml"
    assert spec.edits_for_gpu(FULL_JSON_GPU) is not None
    assert spec.warnings == []

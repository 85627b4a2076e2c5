# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Specs every runtime on the node loads, and that stay true across driver upgrades (issue 13),
through the modules, ``bcd-holds`` and the root helper, on fakehw nodes.

The default node's vendor spec (tests/data/nvidia-cdi/constructed_mig_nvidia.yaml) is written for
driver 580.65.06: its common edits name four control nodes and ``libcuda.so.580.65.06``; GPU_A is
``/dev/nvidia3`` (its MIG devices add two ``nvidia-cap`` nodes each), GPU_B ``/dev/nvidia1``.
"""

from __future__ import annotations

import json
import re

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_OK
from ansible_collections.bcd.devices.tests.unit.builders import hold, mig, request
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run, warnings
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import info


VENDOR = "/var/run/cdi/nvidia.yaml"
LIBCUDA_OLD = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"
LIBCUDA_NEW = "/usr/lib/x86_64-linux-gnu/libcuda.so.590.44.01"
CONTROL = ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]
NODES = dict([(path, "195:%d" % (250 + i)) for i, path in enumerate(CONTROL)]
             + [("/dev/nvidia3", "195:3"), ("/dev/nvidia1", "195:1")]
             + [("/dev/nvidia-caps/nvidia-cap%d" % n, "237:%d" % n) for n in (426, 427, 435, 436, 147, 148)])


def driver(version="580.65.06", files=(LIBCUDA_OLD,), drop=()):
    return {"version": version, "files": list(files),
            "device_nodes": dict((path, number) for path, number in NODES.items() if path not in drop)}


def spec_of(node, allocation_id):
    return json.loads(node.read("/etc/cdi/bcd-%s.json" % allocation_id))


def mounts_of(spec):
    return [m["hostPath"] for m in spec["containerEdits"].get("mounts", [])]


def fails(result):
    return [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]]


def set_vendor_version(node, version):
    text = node.read(VENDOR).decode("utf-8")
    node.write(VENDOR, re.sub(r"(?m)^cdiVersion: .*$", "cdiVersion: %s" % version, text))


# -- 1. runtime-aware cdiVersion -------------------------------------------------------------------

def test_a_spec_is_written_at_a_version_the_oldest_runtime_loads_and_follows_a_runtime_upgrade(capsys, node):
    set_vendor_version(node, "1.0.0")  # a toolkit that writes 1.0.0, which Podman 5.4's library does not know
    devices = [hold("a1", GPU_B)]
    podman_54 = [{"name": "podman", "version": "5.4.2"}, {"name": "containerd", "version": "2.1.4"}]
    first = run(capsys, node, generation=1, devices=devices, cdi_runtimes=podman_54)
    assert fails(first) == []
    assert spec_of(node, "a1")["cdiVersion"] == "0.8.0"
    assert run(capsys, node, generation=1, devices=devices, cdi_runtimes=podman_54)["changed"] is False
    # Podman upgraded to 5.5 (library 1.0.0): the kept hold is rewritten at the vendor's version
    podman_55 = [{"name": "podman", "version": "5.5.0"}, {"name": "containerd", "version": "2.1.4"}]
    upgraded = run(capsys, node, generation=1, devices=devices, cdi_runtimes=podman_55)
    assert upgraded["changed"] is True
    assert [p["action"] for p in upgraded["plan"]] == ["rerender"]
    assert spec_of(node, "a1")["cdiVersion"] == "1.0.0"


def test_a_hold_that_needs_a_newer_version_than_a_runtime_loads_is_refused_naming_it(capsys, node):
    old = [{"name": "podman", "version": "4.3.1"}]  # Debian bookworm's: its library knows 0.5.0 at most
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)], cdi_runtimes=old)
    assert fails(result) == [(
        "a1", "invalid-assignment",
        "its CDI spec needs cdiVersion 0.6.0 (annotations, devices[0].annotations), and podman 4.3.1 on this "
        "node loads at most 0.5.0")]
    assert not node.exists("/etc/cdi/bcd-a1.json") and not node.exists("/run/bcd/allocations/a1.env")
    assert "a1: invalid-assignment: its CDI spec needs cdiVersion 0.6.0" in result["msg"]  # once: no warning again
    assert "a1 refused" not in " ".join(warnings(result))
    # check mode says the same, and writes nothing
    before = node.listing()
    checked = run(capsys, node, check=True, generation=2, devices=[hold("a2", GPU_A)], cdi_runtimes=old)
    assert [f[:2] for f in fails(checked)] == [("a2", "invalid-assignment")]
    assert node.listing() == before


def test_the_fakehw_file_lists_the_runtimes_auto_finds_and_holds_info_returns_them(capsys, node):
    node.set_hardware(runtimes=[{"name": "containerd", "version": "1.7.20"}, {"name": "crio", "version": "1.31.0"},
                                {"name": "docker", "version": "24.0.7"}])
    set_vendor_version(node, "0.8.0")
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert fails(result) == []
    assert spec_of(node, "a1")["cdiVersion"] == "0.7.0"  # containerd 1.7.20 loads 0.7.0 at most
    shown = info(capsys, node)
    assert shown["runtimes"] == [
        {"name": "containerd", "version": "1.7.20", "max_cdi_version": "0.7.0"},
        {"name": "cri-o", "version": "1.31.0", "max_cdi_version": "0.8.0"},
        {"name": "docker", "version": "24.0.7", "max_cdi_version": None},  # before Docker's CDI support
    ]
    named = info(capsys, node, cdi_runtimes=[{"name": "podman", "version": "5.5.1"}])
    assert named["runtimes"] == [{"name": "podman", "version": "5.5.1", "max_cdi_version": "1.0.0"}]


def test_a_cdi_runtimes_value_that_is_not_auto_or_a_list_of_name_and_version_fails_the_task_clearly(capsys, node):
    for value, message in [
            ([{"name": "runc", "version": "1.1"}],
             "cdi_runtimes[0].name: must be one of containerd, docker, podman, cri-o, not 'runc'"),
            ([{"name": "podman", "version": "5.4.2", "socket": "/x"}],
             "cdi_runtimes[0].socket: unknown field (known: name, version)"),
            ([{"name": "podman", "version": "latest"}],
             "cdi_runtimes[0].version: must be a version like 5.4.2, not 'latest'"),
            ("podman", "cdi_runtimes: must be auto or a list of {name, version}, not 'podman'"),
            ([{"name": "podman", "version": "5.4"}] * 9, "cdi_runtimes: lists 9 runtimes; at most 8")]:
        result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)], cdi_runtimes=value)
        assert result.get("failed") is True and result["msg"] == message
    assert not node.exists("/etc/cdi/bcd-a1.json")


def test_the_timers_passes_use_the_runtimes_the_last_run_named(capsys, node):
    set_vendor_version(node, "1.0.0")
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)], cdi_runtimes=[{"name": "podman", "version": "5.4.2"}],
        state_dir="/var/lib/bcd")
    stored = json.loads(node.read("/var/lib/bcd/nodespec.json"))
    assert stored["cdi_runtimes"] == [{"name": "podman", "version": "5.4.2"}]
    node.write("/etc/cdi/bcd-a1.json", node.read("/etc/cdi/bcd-a1.json").replace(b'"0.8.0"', b'"1.0.0"'))  # drift
    code, out, _err = cli(capsys, node, "converge", "--stored")
    assert code == EX_OK and "re-render /etc/cdi/bcd-a1.json" in out
    assert spec_of(node, "a1")["cdiVersion"] == "0.8.0"
    # a spec file given to bcd-holds converge may name them too
    code, out, _err = cli(capsys, node, "converge", "--check", "--json", "--spec", _spec_with_runtimes(node))
    assert code == EX_OK
    assert [f["reason"] for f in json.loads(out)["failures"]] == ["invalid-assignment"]


def _spec_with_runtimes(node):
    path = write_spec(node, 2, [hold("a1", GPU_B), hold("a2", GPU_A)], name="runtimes.json")
    with open(path) as handle:
        data = json.load(handle)
    data["cdi_runtimes"] = [{"name": "podman", "version": "4.3.1"}]
    with open(path, "w") as handle:
        json.dump(data, handle)
    return path


def test_the_helper_renders_at_the_version_the_pass_named_runtimes_allow(capsys, make_node):
    from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.conftest import Helper
    import shutil
    import tempfile
    base = tempfile.mkdtemp(prefix="bcd-helper-test-")
    try:
        helper = Helper(base)
        try:
            node_spec = make_node(vendor="mig")
            text = node_spec.read(VENDOR).decode("utf-8").replace("cdiVersion: 0.5.0", "cdiVersion: 1.0.0")
            path = helper.node(VENDOR)
            import os
            os.makedirs(os.path.dirname(path))
            with open(path, "w") as handle:
                handle.write(text)
            data = request("a1", GPU_B, runtimes=[{"name": "podman", "version": "5.4.2"}])
            assert helper.request({"op": "hold.write", "kind": "cdi", "hold": data}) == {"ok": True}
            with open(helper.node("/etc/cdi/bcd-a1.json")) as handle:
                assert json.load(handle)["cdiVersion"] == "0.8.0"
            # root maps the names by its own table: a runtime it cannot place is refused, not trusted
            bad = request("a2", GPU_A, runtimes=[{"name": "podman", "version": "5.4.2", "max_cdi_version": "1.1.0"}])
            reply = helper.request({"op": "hold.write", "kind": "cdi", "hold": bad})
            assert reply["ok"] is False and "hold.runtimes[0].max_cdi_version: unknown field" in reply["error"]
            old = request("a3", GPU_A, runtimes=[{"name": "podman", "version": "4.3.1"}])
            reply = helper.request({"op": "hold.write", "kind": "cdi", "hold": old})
            assert reply["ok"] is False and "podman 4.3.1 on this node loads at most 0.5.0" in reply["error"]
            assert not os.path.exists(helper.node("/etc/cdi/bcd-a3.json"))
        finally:
            helper.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- 2. a stale vendor spec ------------------------------------------------------------------------

def test_a_fresh_vendor_spec_raises_no_condition(capsys, node):
    node.set_hardware(driver=driver())
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert fails(result) == [] and result["conditions"] == []
    assert mounts_of(spec_of(node, "a1")) == [LIBCUDA_OLD]
    assert [h["stale_edits"] for h in info(capsys, node)["holds"]] == [[]]


def test_after_a_driver_upgrade_new_holds_get_only_true_edits_and_kept_ones_are_marked(capsys, node):
    node.set_hardware(driver=driver())
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    kept = node.read("/etc/cdi/bcd-a1.json")
    # the driver is upgraded; NVIDIA's spec is not regenerated yet
    node.set_hardware(driver=driver(version="590.44.01", files=[LIBCUDA_NEW]))
    result = run(capsys, node, generation=2, devices=[hold("a1", GPU_B), hold("a2", GPU_A)])
    assert fails(result) == []
    assert [(p["action"], p["allocation_id"], p.get("event")) for p in result["plan"]] == [
        ("bind", "a2", "AllocationBound"), ("report-condition", "", "VendorSpecStale")]
    assert node.read("/etc/cdi/bcd-a1.json") == kept  # a kept hold is not rewritten for the driver alone
    new = spec_of(node, "a2")
    assert mounts_of(new) == []  # the stale libcuda mount is left out: the runtime would refuse to start
    assert [n["path"] for n in new["containerEdits"]["deviceNodes"]] == CONTROL
    assert [n["path"] for n in new["devices"][0]["containerEdits"]["deviceNodes"]] == ["/dev/nvidia3"]
    condition = [c for c in result["conditions"] if c["type"] == "VendorSpecStale"]
    assert condition and condition[0]["message"] == (
        "%s does not match the node: generated for driver 580.65.06, the node runs 590.44.01; mount source %s is "
        "gone; new holds get only its true edits (regenerate it: nvidia-ctk cdi generate, or restart "
        "nvidia-cdi-refresh)" % (VENDOR, LIBCUDA_OLD))
    holds = dict((h["allocation_id"], h["stale_edits"]) for h in info(capsys, node)["holds"])
    assert holds == {"a1": ["generated for driver 580.65.06, the node runs 590.44.01",
                            "mount source %s is gone" % LIBCUDA_OLD], "a2": []}
    assert [c["type"] for c in info(capsys, node)["conditions"]] == ["VendorSpecStale"]
    assert run(capsys, node, generation=2, devices=[hold("a1", GPU_B), hold("a2", GPU_A)])["changed"] is False
    # nvidia-ctk cdi generate runs for the new driver: the kept hold is rewritten, nothing is stale
    node.write(VENDOR, node.read(VENDOR).replace(b"580.65.06", b"590.44.01"))
    fresh = run(capsys, node, generation=2, devices=[hold("a1", GPU_B), hold("a2", GPU_A)])
    assert sorted(p["allocation_id"] for p in fresh["plan"] if p["action"] != "report-condition") == ["a1", "a2"]
    assert [p["event"] for p in fresh["plan"] if p["action"] == "report-condition"] == ["VendorSpecStaleCleared"]
    assert mounts_of(spec_of(node, "a1")) == [LIBCUDA_NEW] and mounts_of(spec_of(node, "a2")) == [LIBCUDA_NEW]
    assert fresh["conditions"] == []
    assert [h["stale_edits"] for h in info(capsys, node)["holds"]] == [[], []]


def test_a_device_whose_every_node_is_gone_is_refused_as_missing(capsys, node):
    node.set_hardware(driver=driver(drop=["/dev/nvidia1"]))
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B), mig("a2", GPU_A + "/gi1/ci0")])
    assert fails(result) == [(
        "a1", "device-missing",
        "%s has none of the device nodes the vendor spec %s names for it (device node /dev/nvidia1 is missing); "
        "regenerate the spec (nvidia-ctk cdi generate)" % (GPU_B, VENDOR))]
    assert not node.exists("/etc/cdi/bcd-a1.json") and node.exists("/etc/cdi/bcd-a2.json")
    assert "device node /dev/nvidia1 is missing" in result["conditions"][0]["message"]


def test_a_mig_change_leaves_a_new_mig_hold_with_only_the_nodes_that_are_there(capsys, node):
    node.set_hardware(driver=driver(drop=["/dev/nvidia-caps/nvidia-cap426"]))
    run(capsys, node, generation=1, devices=[mig("a1", GPU_A + "/gi1/ci0")])
    nodes = [n["path"] for n in spec_of(node, "a1")["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap427"]


def test_a_fakehw_driver_entry_is_checked_like_network_input(capsys, node):
    node.set_hardware(driver={"version": "580.65.06", "device_nodes": {"/dev/nvidia1": "one"}})
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert result.get("failed") is True
    assert "driver.device_nodes['/dev/nvidia1']: must be major:minor like 195:0, not 'one'" in result["msg"]


# -- 3. bcd-holds doctor ---------------------------------------------------------------------------

def doctor(capsys, node):
    code, out, _err = cli(capsys, node, "doctor", "--json")
    return code, dict((check["name"], check) for check in json.loads(out))


def test_doctor_names_each_runtime_its_version_whether_cdi_is_on_and_what_it_loads(capsys, node):
    node.set_hardware(runtimes=[{"name": "containerd", "version": "1.7.27"}, {"name": "podman", "version": "5.4.2"}])
    code, checks = doctor(capsys, node)
    assert code == EX_CHECK
    check = checks["cdi-runtimes"]
    assert check["level"] == "WARN"
    assert check["message"] == (
        "containerd 1.7.27 loads cdiVersion up to 0.8.0, but CDI is off: containerd 1.7 has CDI off unless "
        "enable_cdi = true is set in /etc/containerd/config.toml; podman 5.4.2 loads cdiVersion up to 0.8.0; "
        "holds are written at cdiVersion 0.8.0 at most")
    node.write("/etc/containerd/config.toml", '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n')
    _code, checks = doctor(capsys, node)
    assert checks["cdi-runtimes"]["level"] == "OK"
    assert "enable_cdi = true in /etc/containerd/config.toml" in checks["cdi-runtimes"]["message"]
    set_vendor_version(node, "1.0.0")
    _code, checks = doctor(capsys, node)
    assert checks["cdi-runtimes"]["level"] == "WARN"
    assert ("containerd 1.7.27 cannot load %s (cdiVersion 1.0.0): regenerate it with nvidia-ctk cdi generate "
            "--spec-version 0.8.0 or upgrade the runtime" % VENDOR) in checks["cdi-runtimes"]["message"]


def test_doctor_sees_debians_docker_26_its_cdi_switch_and_that_it_limits_holds_to_0_7_0(capsys, node):
    """Docker 26.1.5 (Debian trixie, as the e2e suite runs it): CDI is off without daemon.json's
    features.cdi, loads 0.7.0 at most (it refuses 0.8.0, which Podman 5.4 loads), so it sets the limit."""
    node.set_hardware(runtimes=[{"name": "podman", "version": "5.4.2"}, {"name": "docker", "version": "26.1.5+dfsg1"}])
    code, checks = doctor(capsys, node)
    assert code == EX_CHECK
    assert checks["cdi-runtimes"]["level"] == "WARN"
    assert checks["cdi-runtimes"]["message"] == (
        "podman 5.4.2 loads cdiVersion up to 0.8.0; docker 26.1.5+dfsg1 loads cdiVersion up to 0.7.0, but CDI is "
        'off: Docker before 28.2 has CDI off: set "features": {"cdi": true} in /etc/docker/daemon.json and '
        "restart dockerd; holds are written at cdiVersion 0.7.0 at most")
    node.write("/etc/docker/daemon.json", '{"features": {"cdi": true}, "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi"]}')
    _code, checks = doctor(capsys, node)
    assert checks["cdi-runtimes"]["level"] == "OK"
    assert checks["cdi-runtimes"]["message"] == (
        "podman 5.4.2 loads cdiVersion up to 0.8.0; docker 26.1.5+dfsg1 loads cdiVersion up to 0.7.0 "
        "(features.cdi is true in /etc/docker/daemon.json); holds are written at cdiVersion 0.7.0 at most")
    set_vendor_version(node, "0.8.0")  # NVIDIA's own spec at a version Docker 26 drops
    _code, checks = doctor(capsys, node)
    assert checks["cdi-runtimes"]["level"] == "WARN"
    assert ("docker 26.1.5+dfsg1 cannot load %s (cdiVersion 0.8.0): regenerate it with nvidia-ctk cdi generate "
            "--spec-version 0.7.0 or upgrade the runtime" % VENDOR) in checks["cdi-runtimes"]["message"]
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    assert fails(result) == [] and spec_of(node, "a1")["cdiVersion"] == "0.7.0"  # not the vendor's 0.8.0


def test_doctor_says_a_vendor_spec_is_stale_and_which_file_wins(capsys, node):
    node.write("/etc/cdi/nvidia.yaml", node.read(VENDOR))  # an old manual spec next to the refreshed one
    node.set_hardware(driver=driver(version="590.44.01", files=[]))
    _code, checks = doctor(capsys, node)
    message = checks["vendor-spec"]["message"]
    assert checks["vendor-spec"]["level"] == "WARN"
    assert message.startswith("%s (it wins over /etc/cdi/nvidia.yaml: /var/run/cdi has priority; remove the one "
                              "not refreshed) is stale: generated for driver 580.65.06, the node runs 590.44.01; "
                              "mount source %s is gone" % (VENDOR, LIBCUDA_OLD))
    # cdi-lint sees the two files define the same NVIDIA devices, but that is not our kind
    assert checks["cdi-lint"]["level"] == "OK"


def test_doctor_lints_the_spec_directories_as_a_runtime_loads_them(capsys, node):
    run(capsys, node, generation=1, devices=[hold("a1", GPU_B)])
    ours = node.read("/etc/cdi/bcd-a1.json")
    node.write("/etc/cdi/other-tool.json", ours)            # a foreign file claiming bcd.dev/gpu, same device
    node.write("/etc/cdi/.bcd-a9.json.tmp-0123456789ab", b"{")  # a crashed write
    node.write("/etc/cdi/broken.yaml", b"cdiVersion: 0.6.0\nkind: example.com/x\ndevices: []\n")
    _code, checks = doctor(capsys, node)
    check = checks["cdi-lint"]
    assert check["level"] == "ERROR"
    message = check["message"]
    assert "/etc/cdi/broken.yaml: is not valid CDI, so runtimes refuse the whole file" in message
    assert ("/etc/cdi/bcd-a1.json: bcd.dev/gpu=%s is also defined by /etc/cdi/other-tool.json at the same priority: "
            "the CDI library drops it from both" % GPU_B) in message
    assert "/etc/cdi/other-tool.json: claims kind bcd.dev/gpu but is no hold of bcd's" in message
    assert "/etc/cdi/.bcd-a9.json.tmp-0123456789ab: a temporary file a crashed write left" in message
    assert message.index("broken.yaml") < message.index("tmp-0123456789ab")  # errors first

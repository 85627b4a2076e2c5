# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real CDI consumers accept the specs bcd.devices writes.

Four fakehw nodes are converged through ansible-playbook (tests/e2e/converge.yml) with
holds of every kind: whole GPUs, a MIG instance, slots, a hold with limits, a Kubernetes
hold. Then:

* podman 5 (Debian trixie) starts one container per hold with ``--device
  bcd.dev/gpu=<name>`` and the container is checked against what the fakehw file and
  NVIDIA's vendor spec say it must get: BCD_ALLOCATION_ID, NVIDIA_VISIBLE_DEVICES with
  the right UUIDs, BCD_CGROUP_PARENT when the spec names a slice, exactly the granted
  device nodes (right major:minor, allowed by the device cgroup, the others refused),
  the additional GIDs, the library mounts and the hooks;
* podman loads every spec without an error (its debug log is searched for the CDI
  registry's load errors, and a broken spec proves that search finds one);
* the reference CDI Go library (tests/e2e/cdicheck, built on Debian's package) loads
  every spec written, with the official JSON schema, and injects every device;
* after a release the released device no longer resolves, and a moved GPU resolves to
  its new hold.

Run with `bash hack/e2e.sh`; see docs/verified-consumers.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import bcd_e2e
from bcd_e2e import KIND, cdi_name, expected_for, stub_content

ENXIO = "No such device or address"  # open() of a node the cgroup allows, with no driver
EPERM = "Operation not permitted"  # open() of a node the device cgroup does not allow


def hold_cases(generation):
    cases = []
    for node in bcd_e2e.NODES:
        for hold in generation.get(node.name, []):
            cases.append(pytest.param(node.name, hold["allocation_id"], id="%s-%s" % (node.name, hold["allocation_id"])))
    return cases


GEN1_CASES = hold_cases(bcd_e2e.holds_generation_1({n.name: n for n in bcd_e2e.NODES}))


def hold_of(holds, allocation_id):
    return next(h for h in holds if h["allocation_id"] == allocation_id)


def read_spec(node, allocation_id):
    with open(os.path.join(node.etc_cdi, "bcd-%s.json" % allocation_id)) as handle:
        return json.load(handle)


def spec_env(spec, device_names):
    env = list(spec.get("containerEdits", {}).get("env") or [])
    for device in spec["devices"]:
        if "%s=%s" % (KIND, device["name"]) in device_names:
            env += device.get("containerEdits", {}).get("env") or []
    return env


def run_hold(e2e, node, exp, etc_cdi=None):
    """Start a container with the hold's devices on this node; return what it saw.
    With etc_cdi, podman reads that directory as /etc/cdi instead of the node's."""
    if etc_cdi:
        e2e.mount_cdi(etc_cdi, node.run_cdi)
    else:
        e2e.use_node(node)
    return e2e.podman_run(exp.devices, node_paths=sorted(e2e.numbers), numbers=sorted(set(e2e.numbers.values())),
                          mount_paths=bcd_e2e.vendor_mount_paths(bcd_e2e.NODES))


def check_container(e2e, node, exp, obs, spec, groups=None):
    """``groups``: the supplementary groups the container must have, when not the hold's GIDs
    (Docker 26 drops a spec's additionalGids: tests/e2e/test_docker_cdi.py)."""
    said = obs.runtime_said()
    assert obs.rc == 0, "%s could not start a container for %s:%s" % (obs.cmd[0], exp.allocation_id, said)
    assert not obs.refresh_errors(), "podman could not load a CDI spec:%s" % said

    # The environment.
    assert obs.env.get("BCD_ALLOCATION_ID") == exp.allocation_id, said
    if exp.visible is None:
        assert "NVIDIA_VISIBLE_DEVICES" not in obs.env, said
    else:
        shown = obs.env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")
        assert sorted(shown) == sorted(exp.visible), "NVIDIA_VISIBLE_DEVICES=%s, expected %s%s" % (
            obs.env.get("NVIDIA_VISIBLE_DEVICES"), ",".join(exp.visible), said)
    parent = spec.get("annotations", {}).get("bcd.dev/cgroup-parent")
    if parent:
        assert parent == "bcd-alloc-%s.slice" % exp.allocation_id
        assert obs.env.get("BCD_CGROUP_PARENT") == parent, said
    else:
        assert "BCD_CGROUP_PARENT" not in obs.env, said
        if exp.limits and not exp.kubernetes:
            e2e.notes.append("%s/%s has limits but its spec names no bcd.dev/cgroup-parent (slices not applied "
                             "yet): BCD_CGROUP_PARENT is asserted as soon as the spec carries it" % (
                                 node.name, exp.allocation_id))
    for entry in spec_env(spec, exp.devices):
        key, _sep, value = entry.partition("=")
        assert obs.env.get(key) == value, "the spec's %s did not reach the container%s" % (entry, said)

    # Device nodes: exactly the granted ones, each the right node, allowed by the cgroup.
    granted = {path: e2e.numbers[path] for path in exp.node_paths}
    for path, (major, minor) in granted.items():
        assert obs.nodes.get(path) == ("character special file", major, minor), (
            "%s: expected char %d:%d, got %s%s" % (path, major, minor, obs.nodes.get(path), said))
        assert obs.opens.get(path) == ENXIO, "%s could not be opened (device cgroup?): %s%s" % (
            path, obs.opens.get(path), said)
    assert sorted(set(obs.present) - set(granted)) == [], "device nodes the hold was not granted:%s" % said
    assert sorted(obs.probes) == sorted(set(e2e.numbers.values())), said
    for number, result in obs.probes.items():
        want = ENXIO if number in granted.values() else EPERM
        assert result == want, "opening a node %d:%d made in the container gave %r, expected %r%s" % (
            number[0], number[1], result, want, said)

    # Additional GIDs, library mounts, hooks.
    want_groups = exp.gids if groups is None else groups
    assert sorted(set(obs.groups)) == sorted(set(want_groups)), "supplementary groups %s, expected %s%s" % (
        obs.groups, sorted(set(want_groups)), said)
    for container_path, content in obs.mounts.items():
        if container_path in exp.mounts:
            assert content == stub_content(exp.mounts[container_path]), (
                "%s in the container: %r%s" % (container_path, content, said))
        else:
            assert content.endswith("No such file or directory"), (
                "%s is in the container but the hold grants no such mount: %r%s" % (container_path, content, said))
    assert sorted(obs.hooks) == sorted(exp.hooks), "hooks run %s, expected %s%s" % (obs.hooks, exp.hooks, said)


# ---------------------------------------------------------------------------------------
# The checks can fail: a broken spec is caught by the checker and by the podman log search.

BROKEN_SPECS = {
    "bcd-unknown_field.json": {"cdiVersion": "0.6.0", "kind": KIND, "bogus": 1,
                               "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}]},
    "bcd-empty_edits.json": {"cdiVersion": "0.6.0", "kind": KIND, "devices": [{"name": "b", "containerEdits": {}}]},
    "bcd-version_too_low.json": {"cdiVersion": "0.6.0", "kind": KIND,
                                 "devices": [{"name": "c", "containerEdits": {"env": ["C=1"]}}],
                                 "containerEdits": {"additionalGids": [44]}},
}


def write_broken_specs(directory):
    os.makedirs(directory, exist_ok=True)
    for name, spec in BROKEN_SPECS.items():
        with open(os.path.join(directory, name), "w") as handle:
            json.dump(spec, handle)


def test_the_checker_rejects_broken_specs(e2e):
    bad = e2e.inside("/srv/bad-specs")
    write_broken_specs(bad)
    proc, report = e2e.cdicheck([bad], "-schema")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sorted(os.path.basename(p) for p in report["errors"]) == sorted(BROKEN_SPECS), report["errors"]
    assert 'unknown field "bogus"' in proc.stderr
    assert "must be at least v0.7.0" in proc.stderr


def test_podman_reports_a_spec_it_cannot_load(e2e, generation_1):
    del generation_1
    node = e2e.nodes["node-a"]
    mixed = e2e.inside("/srv/mixed-specs")
    write_broken_specs(mixed)
    shutil.copy(os.path.join(node.etc_cdi, "bcd-h_whole.json"), mixed)
    e2e.mount_cdi(mixed, node.run_cdi)
    obs = e2e.podman_run(["%s=%s" % (KIND, node.uuid(0))])
    assert obs.rc == 0, obs.runtime_said()
    errors = "\n".join(obs.refresh_errors())
    # The CDI library names the file only for a parse error; the others say what is wrong.
    for message in ('bcd-unknown_field.json\\": failed to unmarshal CDI Spec', "invalid device, empty device edits",
                    "the spec version must be at least v0.7.0"):
        assert message in errors, "podman's debug log lacks %r:%s" % (message, obs.runtime_said())
    assert "bcd-h_whole.json" not in errors


# ---------------------------------------------------------------------------------------
# Generation 1.

def test_every_hold_is_bound(e2e, generation_1):
    wanted = bcd_e2e.holds_generation_1(e2e.nodes)
    for node in bcd_e2e.NODES:
        result = generation_1[node.name]
        assert result["section"]["state"] == "CONVERGED", result["section"]
        assert result["failures"] == []
        bound = {h["allocation_id"]: h for h in result["holds"]}
        assert sorted(bound) == sorted(h["allocation_id"] for h in wanted[node.name])
        for hold in wanted[node.name]:
            exp = expected_for(node, hold)
            assert sorted(bound[hold["allocation_id"]]["cdi_devices"]) == sorted(exp.devices)
            assert os.path.isfile(os.path.join(node.etc_cdi, "bcd-%s.json" % hold["allocation_id"]))


def test_the_reference_cdi_library_loads_every_spec(e2e, generation_1):
    del generation_1
    dirs = []
    for node in bcd_e2e.NODES:
        dirs += [d for d in (node.etc_cdi, node.run_cdi) if os.path.isdir(d)]
    proc, report = e2e.cdicheck(dirs, "-schema", "-inject")
    assert proc.returncode == 0, "cdicheck:\n%s\n%s" % (proc.stdout, proc.stderr)
    assert report["errors"] == {} and report["injectErrors"] == {}
    wanted = bcd_e2e.holds_generation_1(e2e.nodes)
    loaded = sorted(os.path.basename(s["path"]) for s in report["specs"] if s["kind"] == KIND)
    assert loaded == sorted("bcd-%s.json" % h["allocation_id"] for holds in wanted.values() for h in holds)
    for node in bcd_e2e.NODES:
        for hold in wanted[node.name]:
            for device in expected_for(node, hold).devices:
                assert device in report["devices"], device


def test_podman_resolves_every_device_of_every_spec_at_once(e2e, generation_1):
    del generation_1
    node = e2e.nodes["node-a"]
    e2e.use_node(node)
    devices = []
    for name in sorted(os.listdir(node.etc_cdi)):
        with open(os.path.join(node.etc_cdi, name)) as handle:
            devices += ["%s=%s" % (KIND, d["name"]) for d in json.load(handle)["devices"]]
    devices.append("nvidia.com/gpu=%s" % node.uuid(0))  # NVIDIA's own spec, from /var/run/cdi
    obs = e2e.podman_run(devices)
    assert obs.rc == 0, obs.runtime_said()
    assert not obs.refresh_errors(), obs.runtime_said()
    holds = bcd_e2e.holds_generation_1(e2e.nodes)["node-a"]
    assert len(devices) == sum(len(h["devices"]) for h in holds) + 1


@pytest.mark.parametrize("node_name,allocation_id", GEN1_CASES)
def test_a_container_gets_what_the_hold_grants(e2e, generation_1, node_name, allocation_id):
    node = e2e.nodes[node_name]
    hold = hold_of(bcd_e2e.holds_generation_1(e2e.nodes)[node_name], allocation_id)
    exp = expected_for(node, hold)
    obs = run_hold(e2e, node, exp)
    check_container(e2e, node, exp, obs, read_spec(node, allocation_id))
    assert generation_1[node_name]["section"]["state"] == "CONVERGED"


def drop_first(key):
    def mutate(spec):
        spec["containerEdits"][key] = spec["containerEdits"][key][1:]
    return mutate


def other_gpu_node(spec):
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/nvidia1"


def void_kept(spec):
    spec["containerEdits"]["env"].append("NVIDIA_VISIBLE_DEVICES=void")


def gids_dropped(spec):
    spec["containerEdits"].pop("additionalGids")
    spec["devices"][0]["containerEdits"].pop("additionalGids")


def cgroup_parent_not_in_env(spec):
    spec["containerEdits"]["env"] = [e for e in spec["containerEdits"]["env"] if not e.startswith("BCD_CGROUP_PARENT=")]


# mutation: (hold of node-a, how its spec is altered, what the failed check says)
MUTATIONS = {
    "another-gpus-node": ("h_whole", other_gpu_node, "/dev/nvidia0: expected char 195:0, got None"),
    "vendor-void-kept": ("h_whole", void_kept, "NVIDIA_VISIBLE_DEVICES=void, expected GPU-"),
    "gids-dropped": ("h_whole", gids_dropped, "supplementary groups [], expected [44, 993]"),
    "a-mount-dropped": ("h_whole", drop_first("mounts"), "/run/nvidia-persistenced/socket in the container: 'head: "),
    "a-hook-dropped": ("h_whole", drop_first("hooks"), "hooks run"),
    "cgroup-parent-not-in-env": ("h_pair", cgroup_parent_not_in_env, "assert None == 'bcd-alloc-h_pair.slice'"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_container_check_catches_a_wrong_spec(e2e, generation_1, mutation):
    """The per-hold check fails when a hold's spec is altered the way a bug would alter it."""
    del generation_1
    node = e2e.nodes["node-a"]
    allocation_id, mutate, message = MUTATIONS[mutation]
    spec = read_spec(node, allocation_id)
    if mutation == "cgroup-parent-not-in-env" and "bcd.dev/cgroup-parent" not in spec.get("annotations", {}):
        pytest.skip("the converger does not name a slice for a hold with limits yet")
    mutate(spec)
    mutated = e2e.inside("/srv/mutated-" + mutation)
    os.makedirs(mutated)
    with open(os.path.join(mutated, "bcd-%s.json" % allocation_id), "w") as handle:
        json.dump(spec, handle)
    exp = expected_for(node, hold_of(bcd_e2e.holds_generation_1(e2e.nodes)["node-a"], allocation_id))
    obs = run_hold(e2e, node, exp, etc_cdi=mutated)
    with pytest.raises(AssertionError) as caught:
        check_container(e2e, node, exp, obs, spec)
    assert message in str(caught.value)


# ---------------------------------------------------------------------------------------
# Generation 2 on node-a: h_whole, h_mig and h_kube released; GPU 0 moved to h_new.

def test_released_holds_lose_their_files(e2e, generation_2):
    node = e2e.nodes["node-a"]
    result = generation_2["node-a"]
    assert result["section"]["state"] == "CONVERGED", result["section"]
    assert sorted(os.listdir(node.etc_cdi)) == ["bcd-h_new.json", "bcd-h_pair.json", "bcd-h_slots.json"]


@pytest.mark.parametrize("allocation_id", ["h_mig", "h_kube"])
def test_a_released_device_no_longer_resolves(e2e, generation_2, allocation_id):
    del generation_2
    node = e2e.nodes["node-a"]
    hold = hold_of(bcd_e2e.holds_generation_1(e2e.nodes)["node-a"], allocation_id)
    device = "%s=%s" % (KIND, cdi_name(hold["devices"][0]["id"]))
    e2e.use_node(node)
    obs = e2e.podman_run([device])
    assert obs.rc != 0, "a container started with the released %s:%s" % (device, obs.runtime_said())
    assert "unresolvable CDI devices %s" % device in obs.stderr, obs.runtime_said()
    assert not obs.refresh_errors(), obs.runtime_said()


@pytest.mark.parametrize("allocation_id", ["h_new", "h_slots"])
def test_moved_and_kept_holds_resolve_after_the_release(e2e, generation_2, allocation_id):
    del generation_2
    node = e2e.nodes["node-a"]
    hold = hold_of(bcd_e2e.holds_generation_2(e2e.nodes)["node-a"], allocation_id)
    exp = expected_for(node, hold)
    obs = run_hold(e2e, node, exp)
    check_container(e2e, node, exp, obs, read_spec(node, allocation_id))


def test_the_reference_cdi_library_loads_every_spec_after_the_release(e2e, generation_2):
    del generation_2
    node = e2e.nodes["node-a"]
    proc, report = e2e.cdicheck([node.etc_cdi, node.run_cdi], "-schema", "-inject")
    assert proc.returncode == 0, "cdicheck:\n%s\n%s" % (proc.stdout, proc.stderr)
    bcd_devices = sorted(d for d in report["devices"] if d.startswith(KIND + "="))
    wanted = bcd_e2e.holds_generation_2(e2e.nodes)["node-a"]
    assert bcd_devices == sorted(dev for h in wanted for dev in expected_for(node, h).devices)


# ---------------------------------------------------------------------------------------
# cdiVersion and the node's runtimes: Podman 5.4's CDI library (0.8.0) knows no later version.

def _converge_with(e2e, root, devices, runtimes):
    """``bcd-holds converge`` on a fakehw copy of a node, told which runtimes the node has."""
    spec = os.path.join(root, "spec.json")
    with open(spec, "w") as handle:
        json.dump({"generation": 1, "devices": devices, "cdi_runtimes": runtimes}, handle)
    code = ("import sys; sys.path.insert(0, %r); from ansible_collections.bcd.devices.plugins.module_utils.entry.cli "
            "import main; sys.exit(main(sys.argv[1:]))" % os.path.join(bcd_e2e.REPO, ".build"))
    proc = subprocess.run([bcd_e2e.PYTHON, "-c", code, "converge", "--json", "--spec", spec, "--root", root,
                           "--fakehw", os.path.join(root, "fakehw.yml")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def test_podman_5_4_refuses_a_spec_above_0_8_0_and_loads_the_one_written_for_it(e2e, generation_1):
    del generation_1
    node = e2e.nodes["node-j"]
    root = os.path.join(e2e.work, "runtimes-node")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(node.root, root, ignore=shutil.ignore_patterns("bcd-*.json", "bcd", "allocations"))
    vendor = os.path.join(root, "var", "run", "cdi", "nvidia.json")
    with open(vendor) as handle:
        spec = json.load(handle)
    spec["cdiVersion"] = "1.0.0"  # a toolkit newer than the runtime: its own spec does not load in Podman 5.4
    with open(vendor, "w") as handle:
        json.dump(spec, handle)
    said = e2e.chroot("podman", "--version").stdout
    version = said.split()[-1]
    assert version.startswith("5.4"), said  # Debian trixie's; the table says its library loads 0.8.0
    device = "%s=%s" % (KIND, cdi_name(node.uuid(0)))
    result = _converge_with(e2e, root, [{"allocation_id": "rt_whole", "reservation_id": "rsv_rt",
                                         "binding": "BINDING_HOLD", "devices": [{"id": node.uuid(0)}]}],
                            [{"name": "podman", "version": version}])
    assert result["failures"] == [], result["failures"]
    written = os.path.join(root, "etc", "cdi", "bcd-rt_whole.json")
    with open(written) as handle:
        hold_spec = json.load(handle)
    assert hold_spec["cdiVersion"] == "0.8.0"
    e2e.mount_cdi(os.path.join(root, "etc", "cdi"))
    loaded = e2e.podman_run([device])
    assert loaded.rc == 0, loaded.runtime_said()
    assert not loaded.refresh_errors(), loaded.runtime_said()
    # the same spec at the vendor's 1.0.0, as a converger blind to the runtime would write it
    above = os.path.join(root, "above")
    os.makedirs(above)
    with open(os.path.join(above, "bcd-rt_whole.json"), "w") as handle:
        json.dump(dict(hold_spec, cdiVersion="1.0.0"), handle)
    e2e.mount_cdi(above)
    refused = e2e.podman_run([device])
    assert refused.rc != 0, "podman 5.4 loaded a 1.0.0 spec:%s" % refused.runtime_said()
    assert "unresolvable CDI devices %s" % device in refused.stderr, refused.runtime_said()
    assert refused.refresh_errors(), refused.runtime_said()

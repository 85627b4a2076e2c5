# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docker's CDI support accepts the specs bcd.devices writes (issue 34, item 1).

``dockerd`` 26 (Debian trixie's ``docker.io``) runs chrooted in the podman rootfs, CDI
enabled as Docker documents it (``{"features": {"cdi": true}, "cdi-spec-dirs": [...]}``),
its spec directories the ones the converger writes on a node of its own, ``node-d``
(3 fake GPUs, GPU 1 split in MIG instances, NVIDIA's spec with additionalGids as on
``node-a``), converged through ansible-playbook. Then:

* ``docker run --device bcd.dev/gpu=<name>`` starts a container for a whole GPU, a MIG
  instance and a slot hold, and each gets exactly what its hold grants (the same checks as
  the podman part: env, device nodes and the device cgroup, GIDs, mounts, hooks), nothing of
  another hold's;
* one container with every device of every hold at once proves no spec was dropped;
* after generation 2 releases the MIG hold, Docker refuses its name ("CDI device injection
  failed: unresolvable CDI devices ...");
* Docker 26.1 loads a spec at cdiVersion 0.7.0 and refuses the same spec at 0.8.0 (which
  Podman 5.4 loads), saying why only in the daemon's log; the converger, told the runtimes
  ``detect_runtimes`` finds in the rootfs, writes 0.7.0 for a vendor spec at 0.8.0.

Run with `bash hack/e2e.sh -k docker`; see docs/verified-consumers.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import pytest

import bcd_e2e
from bcd_docker import REGISTRY_ERRORS, SCRATCH_SPECS, Docker
from bcd_e2e import KIND, Node, atom, cdi_name, expected_for
from test_cdi_consumers import _converge_with, check_container, read_spec

sys.path.insert(0, os.path.join(bcd_e2e.REPO, ".build"))
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import detect_runtimes  # noqa: E402

NODE_D = Node("node-d", 5, 3, [1], "yaml-gids")
NODE_R = Node("node-dr", 6, 1, [], "json")  # the cdiVersion check's node (its own GPU names)
TAG = "-docker"


def holds_d(generation):
    d = NODE_D
    holds = [
        {"allocation_id": "d_whole", "reservation_id": "rsv_dw", "binding": "BINDING_HOLD",
         "devices": [{"id": atom(d, 0), "device_class": "gpu"}], "env": ["TEAM=docker"]},
        {"allocation_id": "d_mig", "reservation_id": "rsv_dm", "binding": "BINDING_HOLD",
         "devices": [{"id": atom(d, 1, "/gi1/ci0"), "device_class": "gpu.mig"}]},
        {"allocation_id": "d_slots", "reservation_id": "rsv_ds", "binding": "BINDING_HOLD",
         "devices": [{"id": atom(d, 2, "/s0"), "device_class": "gpu.slot"},
                     {"id": atom(d, 2, "/s1"), "device_class": "gpu.slot"}]},
    ]
    if generation == 2:  # the MIG instance is released
        holds = [h for h in holds if h["allocation_id"] != "d_mig"]
    return {"node-d": holds}


def hold_d(allocation_id):
    return next(h for h in holds_d(1)["node-d"] if h["allocation_id"] == allocation_id)


@pytest.fixture(scope="module")
def docker_node(e2e):
    known = dict(e2e.numbers)
    for node in (NODE_D, NODE_R):
        e2e.build_node(node)
    # prepare_rootfs made the device nodes, stubs and hooks of the other nodes' vendor specs;
    # these nodes name the same paths (fewer GPUs), so nothing is missing in the rootfs.
    assert e2e.numbers == known, "node-d names device nodes node-a does not: %s" % (
        sorted(set(e2e.numbers) - set(known)))
    return NODE_D


@pytest.fixture(scope="module")
def docker_gen1(e2e, docker_node):
    os.makedirs(docker_node.etc_cdi, exist_ok=True)
    return e2e.converge(1, holds_d(1), nodes=[docker_node], tag=TAG)


@pytest.fixture(scope="module")
def docker(e2e, docker_node, docker_gen1):
    """dockerd, started after generation 1 (it loads those specs at start), stopped at the end."""
    del docker_gen1
    daemon = Docker(e2e, [e2e.as_seen_by_podman(docker_node.etc_cdi), e2e.as_seen_by_podman(docker_node.run_cdi)])
    try:
        daemon.start()
        e2e.versions["dockerd"] = e2e.chroot("dockerd", "--version").stdout.strip()
        e2e.versions["containerd (started by dockerd)"] = e2e.chroot("containerd", "--version").stdout.strip()
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def docker_gen2(e2e, docker_node, docker, docker_gen1):
    del docker, docker_gen1
    return e2e.converge(2, holds_d(2), nodes=[docker_node], tag=TAG, limit="node-d")


def docker_run_hold(e2e, docker, exp):
    return docker.run(exp.devices, node_paths=sorted(e2e.numbers), numbers=sorted(set(e2e.numbers.values())),
                      mount_paths=bcd_e2e.vendor_mount_paths(list(bcd_e2e.NODES) + [NODE_D]))


def check_docker_container(e2e, exp, obs, allocation_id):
    """The podman part's per-container check, but for the GIDs: Docker 26.1 does not apply a CDI spec's
    additionalGids (the container has only root's group 0), where Podman does. Should a Docker release
    apply them, this fails, and docs/verified-consumers.md must say so."""
    assert exp.gids, "node-d's vendor spec grants GIDs (44, and 993 per GPU): the check needs them"
    check_container(e2e, NODE_D, exp, obs, read_spec(NODE_D, allocation_id), groups=[0])
    assert REGISTRY_ERRORS not in obs.stderr, obs.runtime_said()


def run_until(docker, devices, done, timeout=10.0):
    """docker run until ``done(obs)``: Docker refreshes its CDI cache from inotify events, a
    moment after a file changes. Returns (obs, tries)."""
    deadline, tries = time.monotonic() + timeout, 0
    while True:
        tries += 1
        obs = docker.run(devices)
        if done(obs) or time.monotonic() > deadline:
            return obs, tries
        time.sleep(0.5)


# ---------------------------------------------------------------------------------------

def test_docker_every_hold_of_node_d_is_bound(docker_gen1):
    result = docker_gen1["node-d"]
    assert result["section"]["state"] == "CONVERGED", result["section"]
    assert sorted(h["allocation_id"] for h in result["holds"]) == ["d_mig", "d_slots", "d_whole"]


def test_docker_loads_every_spec_at_start(docker):
    log = docker.log_since(0)
    assert "CDI setup error" not in log, log
    assert docker.version.startswith("26."), docker.version  # the version this file's checks were made for


@pytest.mark.parametrize("allocation_id", ["d_whole", "d_mig", "d_slots"])
def test_docker_starts_a_container_with_what_the_hold_grants(e2e, docker, allocation_id):
    exp = expected_for(NODE_D, hold_d(allocation_id))
    obs = docker_run_hold(e2e, docker, exp)
    check_docker_container(e2e, exp, obs, allocation_id)


def test_docker_resolves_every_device_of_every_spec_at_once(docker):
    devices = []
    for name in sorted(os.listdir(NODE_D.etc_cdi)):
        with open(os.path.join(NODE_D.etc_cdi, name)) as handle:
            devices += ["%s=%s" % (KIND, d["name"]) for d in json.load(handle)["devices"]]
    assert len(devices) == 4  # d_whole, d_mig, d_slots' two slots
    devices.append("nvidia.com/gpu=%s" % NODE_D.uuid(0))  # NVIDIA's own spec, in var/run/cdi
    obs = docker.run(devices)
    assert obs.rc == 0, obs.runtime_said()
    assert obs.env.get("BCD_ALLOCATION_ID") is not None, obs.runtime_said()


def test_docker_refuses_a_released_hold(e2e, docker, docker_gen2):
    assert docker_gen2["node-d"]["section"]["state"] == "CONVERGED", docker_gen2["node-d"]["section"]
    assert sorted(os.listdir(NODE_D.etc_cdi)) == ["bcd-d_slots.json", "bcd-d_whole.json"]
    device = "%s=%s" % (KIND, cdi_name(hold_d("d_mig")["devices"][0]["id"]))
    obs, tries = run_until(docker, [device], lambda o: o.rc != 0)
    assert obs.rc != 0, "docker started a container with the released %s:%s" % (device, obs.runtime_said())
    client = obs.stderr.partition("\n--- dockerd's log")[0]
    assert "CDI device injection failed: unresolvable CDI devices %s" % device in client, obs.runtime_said()
    if tries > 1:
        e2e.notes.append("docker saw the release of d_mig after %d tries (its CDI cache follows inotify)" % tries)
    # the kept hold still starts
    exp = expected_for(NODE_D, hold_d("d_whole"))
    kept = docker_run_hold(e2e, docker, exp)
    check_docker_container(e2e, exp, kept, "d_whole")


def _chroot_runner(e2e):
    """detect_runtimes' runner for the rootfs: the binary found under it, run chrooted in it."""
    def runner(argv, timeout):
        proc = e2e.chroot(argv[0][len(e2e.rootfs):], *argv[1:], check=False, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr
    return runner


def test_docker_26_refuses_a_0_8_0_spec_and_loads_the_one_written_for_it(e2e, docker):
    found, warnings = detect_runtimes(e2e.rootfs, runner=_chroot_runner(e2e))
    assert warnings == []
    by_name = {r.name: r for r in found}
    assert sorted(by_name) == ["containerd", "docker", "podman"], found
    assert by_name["docker"].path == "/usr/sbin/dockerd" and by_name["docker"].version.startswith("26.1.")
    assert by_name["docker"].max_cdi_version == "0.7.0"
    node = NODE_R
    vendor = os.path.join(node.run_cdi, "nvidia.json")
    with open(vendor) as handle:
        spec = json.load(handle)
    spec["cdiVersion"] = "0.8.0"  # a toolkit that writes 0.8.0: a converger blind to Docker would follow it
    with open(vendor, "w") as handle:
        json.dump(spec, handle)
    hold = {"allocation_id": "r_whole", "reservation_id": "rsv_r", "binding": "BINDING_HOLD",
            "devices": [{"id": node.uuid(0)}]}
    result = _converge_with(e2e, node.root, [hold], [{"name": r.name, "version": r.version} for r in found])
    assert result["failures"] == [], result["failures"]
    with open(os.path.join(node.etc_cdi, "bcd-r_whole.json")) as handle:
        written = json.load(handle)
    assert written["cdiVersion"] == "0.7.0"  # Docker 26.1's (and containerd 1.7's) limit, not the vendor's 0.8.0
    device = "%s=%s" % (KIND, cdi_name(node.uuid(0)))
    target = os.path.join(e2e.inside(SCRATCH_SPECS), "bcd-r_whole.json")
    shutil.copy(os.path.join(node.etc_cdi, "bcd-r_whole.json"), target)
    loaded, _tries = run_until(docker, [device], lambda o: o.rc == 0)
    assert loaded.rc == 0, loaded.runtime_said()
    assert loaded.env.get("BCD_ALLOCATION_ID") == "r_whole", loaded.runtime_said()
    # The same spec at 0.8.0 (what a runtime-blind converger writes): Docker 26.1 drops it.
    offset = docker.log_size()
    with open(target + ".tmp", "w") as handle:
        json.dump(dict(written, cdiVersion="0.8.0"), handle)
    os.rename(target + ".tmp", target)
    refused, _tries = run_until(docker, [device], lambda o: o.rc != 0)
    assert refused.rc != 0, "docker 26.1 loaded a 0.8.0 spec:%s" % refused.runtime_said()
    client = refused.stderr.partition("\n--- dockerd's log")[0]
    assert "CDI device injection failed: unresolvable CDI devices %s" % device in client, refused.runtime_said()
    assert "0.8.0" not in client  # the client does not say why the spec was dropped ...
    said = docker.log_since(offset)
    assert REGISTRY_ERRORS in said and "0.8.0" in said, said  # ... the daemon's log does
    e2e.notes.append("dockerd's reason for dropping a 0.8.0 spec: %s" % next(
        (line for line in said.splitlines() if REGISTRY_ERRORS in line), "?")[:400])
    os.unlink(target)


def test_containerd_1_7_ctr_takes_no_cdi_device_name(e2e, docker):
    """Issue 34, item 3: trixie's containerd 1.7.24 is here (dockerd runs it), but its ctr cannot start
    a container from a CDI name: ``ctr run --device`` takes a device path (its --help says so), and
    1.7 resolves CDI names only in the CRI plugin, for a kubelet. So containerd is not run."""
    del docker  # its containerd serves ctr
    helped = e2e.chroot("ctr", "run", "--help", check=False)
    assert "--device value" in helped.stdout and "cdi" not in helped.stdout.lower(), helped.stdout
    device = "%s=%s" % (KIND, cdi_name(NODE_D.uuid(0)))
    proc = e2e.chroot("ctr", "--address", "/run/docker/containerd/containerd.sock", "--namespace", "bcd-e2e", "run",
                      "--rm", "--rootfs", "--device", device, bcd_e2e.CONTAINER_ROOTFS, "ctr-cdi", "/bin/true",
                      check=False)
    assert proc.returncode != 0 and device in proc.stderr, proc.stdout + proc.stderr
    e2e.notes.append("containerd 1.7.24's ctr run --device %s: %s" % (device, proc.stderr.strip()[-300:]))

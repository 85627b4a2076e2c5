# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33's reproductions against root as the role installs it: a ``bcd-holds helper`` process run as root,
serving a throwaway system account that plays the ``bcd`` account (``attackers.World``), which sends what the
issue sent. Root refuses a second hold of one GPU (whole vs part, part vs whole, a VM's GPU through VFIO, a GPU
another allocation's env file names), a running slice's ``cpus``/``mems`` narrowed or named beyond the host's,
and each env key the issue had it write; and it goes on serving."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.bcd.devices.tests.unit.attackers import GPU_A, GPU_B, attacker, world  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.bcd.devices.tests.unit.builders import request

GIB = 1 << 30
ISSUE_33_KEYS = ["GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_SEQUENCE_EDITOR", "SSH_ASKPASS",
                 "SUDO_ASKPASS", "FCEDIT", "OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent",
                 "PMIX_MCA_mca_base_component_path", "HWLOC_PLUGINS_PATH", "DBUS_SYSTEM_BUS_ADDRESS"]


def write(world, owner, device_id, kind="cdi", env=()):  # noqa: F811  # pylint: disable=redefined-outer-name
    device_class = "gpu.slot" if "/s" in device_id else "gpu"
    hold = request(owner, devices=[{"id": device_id, "device_class": device_class}], generation=1, env=list(env))
    return world.request({"op": "hold.write", "kind": kind, "hold": hold})


def overlap(message):
    return {"ok": False, "retryable": True, "error": "overlap: " + message}


def set_hardware(world, **fields):  # noqa: F811  # pylint: disable=redefined-outer-name
    hardware = json.loads(Path(world.fakehw).read_text())
    hardware.update(fields)
    Path(world.fakehw).write_text(json.dumps(hardware))


def hold_files(world):  # noqa: F811  # pylint: disable=redefined-outer-name
    return sorted(world.files("/etc/cdi")) + sorted(world.files("/run/bcd/allocations"))


def test_the_account_cannot_have_root_hand_one_gpu_to_two_allocations(world):  # noqa: F811  # pylint: disable=redefined-outer-name
    # the issue: a1 = GPU 1 whole, a2 = GPU 1 slot s0, a3 = GPU 1 slot s1, three valid specs giving /dev/nvidia1
    assert write(world, "a1", GPU_B) == {"ok": True}
    assert write(world, "a2", GPU_B + "/s0") == overlap("%s is assigned to a1" % GPU_B)
    assert write(world, "a3", GPU_B + "/s1", kind="allocation-env") == overlap("%s is assigned to a1" % GPU_B)
    # part vs whole: a slot of GPU 0, then GPU 0 whole
    assert write(world, "b1", GPU_A + "/s0") == {"ok": True}
    assert write(world, "b2", GPU_A) == overlap("%s has %s/s0 assigned to b1" % (GPU_A, GPU_A))
    assert world.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "b1"}) == {"ok": True}
    # a hold on a GPU a running VM has through VFIO
    set_hardware(world, domains=[{"instance_id": "vm-1", "state": "running", "gpus": [GPU_A]}])
    assert write(world, "c1", GPU_A) == overlap("%s is passed through to instance vm-1" % GPU_A)
    assert write(world, "c1", GPU_A + "/s1", kind="allocation-env") == overlap(
        "%s is passed through to instance vm-1" % GPU_A)
    set_hardware(world, domains=[])
    # a1's env file written for GPU 0 besides its spec's GPU 1: GPU 0 is a1's to every other allocation
    assert write(world, "a1", GPU_A, kind="allocation-env") == {"ok": True}
    assert write(world, "c1", GPU_A) == overlap("%s has %s (env file) assigned to a1" % (GPU_A, GPU_A))
    assert hold_files(world) == ["etc/cdi/bcd-a1.json", "run/bcd/allocations/a1.env"]
    assert world.alive()


def test_the_account_cannot_narrow_a_running_slice_or_name_what_the_host_lacks(world):  # noqa: F811  # pylint: disable=redefined-outer-name
    set_hardware(world, cpus="0-7", numa_nodes=[{"node": 0, "cpus": "0-3"}, {"node": 1, "cpus": "4-7"}])

    def apply(**limits):
        return world.request({"op": "slice.apply", "allocation_id": "a1", "limits": dict(memory_bytes=8 * GIB, **limits)})

    assert apply(cpus="0-7", mems="0-1") == {"ok": True}
    record_path = Path(world.node("/run/bcd/slices/bcd-alloc-a1.slice.json"))
    record = json.loads(record_path.read_text())
    record.update(populated=True, memory_current=6 * GIB)  # a workload using 6 GiB runs in it (root's record)
    record_path.write_text(json.dumps(record))
    narrowed = apply(cpus="0-7", mems="1")
    assert not narrowed["ok"] and narrowed["error"].startswith(
        "bcd-alloc-a1.slice: limits.mems 1 narrows AllowedMemoryNodes=0-1: it leaves out NUMA node 0"), narrowed
    assert apply(cpus="0-3", mems="0-1")["error"].startswith(
        "bcd-alloc-a1.slice: limits.cpus 0-3 narrows AllowedCPUs=0-7: it leaves out CPUs 4-7")
    assert apply(cpus="0-9", mems="0-3") == {
        "ok": False,
        "error": "bcd-alloc-a1.slice: limits.cpus 0-9: CPUs 8-9 not online on this node (online: 0-7); limits.mems "
                 "0-3: NUMA nodes 2-3 without memory on this node (NUMA nodes with memory: 0-1)"}
    stopped = world.request({"op": "slice.stop", "allocation_id": "a1"})
    assert not stopped["ok"] and "still runs a workload" in stopped["error"]
    assert json.loads(record_path.read_text()) == record  # as it was
    assert world.alive()


def test_root_writes_no_env_key_the_issue_had_it_write(world):  # noqa: F811  # pylint: disable=redefined-outer-name
    for index, key in enumerate(ISSUE_33_KEYS):
        for kind in ("cdi", "allocation-env"):
            reply = write(world, "a%d" % index, "%s/s%d" % (GPU_A, index), kind=kind, env=["TEAM=x", "%s=y" % key])
            assert not reply["ok"] and reply["error"].startswith("env[1]: %s " % key), (key, reply)
    assert hold_files(world) == []
    assert write(world, "a1", GPU_A, kind="allocation-env", env=["TEAM=x"]) == {"ok": True}
    assert b"TEAM=x" in Path(world.node("/run/bcd/allocations/a1.env")).read_bytes()
    assert os.stat(world.node("/run/bcd/allocations/a1.env")).st_uid == 0

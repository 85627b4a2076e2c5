# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the root helper does for a request it accepted (``entry/helper/handle.py``), spoken to over its socket.

Root renders a hold's spec and env file from its own data and logs what it touched, sets a damaged spec
aside, writes a kept hold's env file from its own spec while a device is not back; a refusal says whether
the node or the request is at fault, and a pass through the helper retries the one and fails with the
other. The slices are ``test_slices.py``'s.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient, HelperError, HelperRefused
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError
from ansible_collections.bcd.devices.tests.unit.builders import request
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.conftest import GPU_A, HARDWARE
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.test_slices import populate


def test_root_renders_a_hold_written_from_its_data_and_logs_it(helper):
    env_lines = ["OMP_NUM_THREADS=4"]
    assert helper.request({"op": "hold.write", "kind": "cdi", "hold": request("a1", env=env_lines)}) == {"ok": True}
    assert helper.request({"op": "hold.write", "kind": "allocation-env", "hold": request("a1", env=env_lines)}) == {"ok": True}
    spec_path = helper.node("/etc/cdi/bcd-a1.json")
    env_path = helper.node("/run/bcd/allocations/a1.env")
    spec = json.loads(Path(spec_path).read_text())
    # root built it from the node's own atom: the device name and the env come from the inventory
    assert spec["kind"] == "bcd.dev/gpu"
    assert spec["annotations"]["bcd.dev/allocation-id"] == "a1"
    assert spec["annotations"]["bcd.dev/reservation-id"] == "r-a1"
    assert [device["name"] for device in spec["devices"]] == [GPU_A]
    assert spec["devices"][0]["containerEdits"] == {"env": ["BCD_DEVICE_GPU_5F1C2A90_0000_4000_8000_000000000001=%s" % GPU_A]}
    env = Path(env_path).read_text().splitlines()
    assert "BCD_ALLOCATION_ID=a1" in env and "OMP_NUM_THREADS=4" in env
    for path in (spec_path, env_path):
        assert (os.stat(path).st_uid, stat.S_IMODE(os.stat(path).st_mode)) == (os.geteuid(), 0o644)
    assert os.listdir(helper.outside) == []
    assert "uid %d: hold.write cdi a1" % os.geteuid() in helper.log

    assert helper.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}
    assert not os.path.exists(spec_path)
    # removing what is not there is no error (a release may be repeated after a crash)
    assert helper.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}
    assert os.path.exists(env_path)


def test_a_damaged_spec_is_set_aside_by_root_through_the_helper(helper, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]}]

    def through_helper():
        host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
        return run_pass(host, 1, devices, lock_timeout=5)

    through_helper()
    spec = helper.node("/etc/cdi/bcd-a1.json")
    good = Path(spec).read_bytes()
    Path(spec).write_bytes(b"{damaged")
    result = through_helper()
    assert [a.kind for a in result.plan.actions] == ["rebind", "report-condition"]
    assert result.events[-1]["type"] == "HoldSpecDamaged"  # the account's pass journals the condition, signed
    assert Path(spec).read_bytes() == good
    (aside,) = [name for name in os.listdir(helper.node("/etc/cdi")) if ".damaged-" in name]
    assert Path(helper.node("/etc/cdi/" + aside)).read_bytes() == b"{damaged"
    assert any(line.endswith(": hold.set_aside a1") for line in helper.log)
    # setting aside what is not there is no error; an id that is no id is refused
    assert helper.request({"op": "hold.set_aside", "allocation_id": "a9"}) == {"ok": True}
    assert helper.request({"op": "hold.set_aside", "allocation_id": "../x"})["ok"] is False


def test_root_writes_a_kept_holds_env_file_from_its_own_spec_while_its_mig_instance_is_not_back(helper, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    mig_uuid = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"
    hardware = dict(HARDWARE, gpus=[dict(HARDWARE["gpus"][0], mig=[{"gi": 1, "ci": 0, "uuid": mig_uuid}])])
    Path(helper.fakehw).write_text(json.dumps(hardware))
    devices = [{"allocation_id": "m1", "reservation_id": "r1", "binding": "BINDING_HOLD",
                "devices": [{"id": GPU_A + "/gi1/ci0", "device_class": "gpu.mig"}]}]

    def through_helper(generation):
        host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
        return run_pass(host, generation, devices, lock_timeout=5)

    assert through_helper(1).section["state"] == "CONVERGED"
    env_path = helper.node("/run/bcd/allocations/m1.env")
    env = Path(env_path).read_bytes()
    os.unlink(env_path)                                                   # a reboot empties /run ...
    Path(helper.fakehw).write_text(json.dumps(HARDWARE))                  # ... before mig-layout runs
    kept = through_helper(1)
    assert [a.kind for a in kept.plan.actions] == ["write-env"]
    assert kept.section["state"] == "CONVERGED", kept.section
    assert Path(env_path).read_bytes() == env
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % mig_uuid).encode() in env
    # root takes it from its own spec only for the devices that spec names
    reply = helper.request({"op": "hold.write", "kind": "allocation-env",
                            "hold": request("m1", GPU_A + "/gi2/ci0",
                                            devices=[{"id": GPU_A + "/gi2/ci0", "device_class": "gpu.mig"}])})
    assert reply == {"ok": False, "error": "%s has no MIG instance gi2/ci0" % GPU_A, "retryable": True}
    # and never the spec itself
    reply = helper.request({"op": "hold.write", "kind": "cdi", "hold": request("m1", devices=devices[0]["devices"])})
    assert reply == {"ok": False, "error": "%s has no MIG instance gi1/ci0" % GPU_A, "retryable": True}


# -- what a refusal says, and what a pass does with it -----------------------------------------------

def test_the_client_turns_a_refusal_of_the_request_into_a_permanent_error(helper):
    client = HelperClient(helper.socket, timeout=5)
    with pytest.raises(HelperRefused, match="refused hold.remove: allocation_id '../x' does not match") as caught:
        client.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "../x"})
    assert not isinstance(caught.value, RetryableError)  # the same request fails again: no pass retries it
    for message in ({"op": "hold.write", "kind": "cdi", "hold": request(binding="BINDING_INSTANCE")},
                    {"op": "slice.apply", "allocation_id": "a1", "limits": {"cpu_millis": 1}},
                    {"op": "slice.apply", "allocation_id": "a1", "limits": {"cpus": "0-3;rm -rf /"}}):
        with pytest.raises(HelperRefused):
            client.request(message)
    assert client.reachable() is None


def test_the_client_turns_a_refusal_for_what_the_node_has_now_into_a_retryable_error(helper):
    client = HelperClient(helper.socket, timeout=5)
    assert client.request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 1 << 30}})["ok"]
    populate(helper.node)
    with pytest.raises(HelperError, match="refused slice.stop: bcd-alloc-a1.slice still runs a workload") as caught:
        client.request({"op": "slice.stop", "allocation_id": "a1"})
    assert isinstance(caught.value, RetryableError)  # it is stopped once its workload exits
    with pytest.raises(HelperError, match="refused hold.write: GPU-5f1c2a90-0000-4000-8000-0000000000ff not present"):
        client.request({"op": "hold.write", "kind": "cdi",
                        "hold": request(devices=[{"id": "GPU-5f1c2a90-0000-4000-8000-0000000000ff"}])})
    missing = HelperClient(os.path.join(helper.base, "no-such.sock"), timeout=1)
    assert "cannot be reached" in missing.reachable()


def test_a_request_the_helper_refuses_as_it_is_fails_the_pass_instead_of_retrying_it(helper, monkeypatch):
    # an older helper beside a newer node (the role updates both, a hand-installed one may lag): its refusal
    # of the request itself would be the same every 30 seconds, so the pass fails with it, never PROGRESSING
    from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import request as served
    from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setitem(served.OPS, "slice.apply", ("allocation_id",))
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}],
                "limits": {"cpus": "0-1"}}]
    with pytest.raises(HelperRefused, match="the root helper refused slice.apply: slice.apply takes no limits") as caught:
        run_pass(host, 1, devices, lock_timeout=5)
    assert not isinstance(caught.value, RetryableError)
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))  # nothing names a slice that is not there
    state = NodeState(helper.node("/"), "/var/lib/bcd")
    state.load(write=False)
    assert state.ledger.last_state != "PROGRESSING"  # the retry timer has nothing to retry


def test_a_pass_through_the_helper_in_process_binds_and_releases(helper, monkeypatch):
    # The same path as above for a test run without root: the pass believes it is uid 1000
    # (the helper thread still really is the test's uid, which its policy allows).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]}]
    bound = run_pass(host, 1, devices, lock_timeout=5)
    assert bound.section["state"] == "CONVERGED"
    assert os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    released = run_pass(host, 2, [], lock_timeout=5)
    assert [a.kind for a in released.plan.actions] == ["release"]
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    assert not os.path.exists(helper.node("/run/bcd/allocations/a1.env"))

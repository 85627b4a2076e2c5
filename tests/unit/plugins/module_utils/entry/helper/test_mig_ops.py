# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper's MIG ops (``entry/helper/mig.py``), attacked: a peer asks root to destroy what someone holds.

A fakehw node whose GPU 0 (an A100 40GB) has two GPU instances, gi1 (held: the MIG instance gi1/ci0 by ``m1``)
and gi2 (free), and whose GPU 1 is held whole by ``w1``. A peer's ``mig.change`` that would destroy the held
instance or its GPU instance, turn MIG mode off under it, or touch the GPU held whole is refused with the guard's
words, naming the holder, and the fakehw file is byte for byte as it was; so is one that any other claim root
reads itself forbids (a spec in /var/run/cdi, an env file, a damaged spec, a pending release, a VM now or at the
last pass, a process on the instance). The free instance goes, and the file changes. An op that is not one is
refused before anything of the node is read. The account's side (``HelperMigSide``) and a whole run of
``mig_layout`` through the helper, its planner told there are no claims, meet the same refusals.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import GpuClaims
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigDone, MigOp
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.wire import node_to_data
from ansible_collections.bcd.devices.plugins.module_utils.entry import mig_layout
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.handle import handle_request
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import NodeView
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import Refused
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import read_mig_file
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient, HelperMigSide
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit import attackers
from ansible_collections.bcd.devices.tests.unit.attackers import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    attacker,
    world,
)
from ansible_collections.bcd.devices.tests.unit.builders import device, request
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.conftest import GPU_A, GPU_B, HARDWARE

MIG1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd1"
MIG2 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd2"
A100 = "NVIDIA A100-SXM4-40GB"
GPU_GONE = "GPU-5f1c2a90-0000-4000-8000-0000000000ff"
OK = {"ok": True}


def hardware(**gpu_a):
    first = {"uuid": GPU_A, "index": 0, "minor": 0, "name": A100, "mig": [
        {"gi": 1, "ci": 0, "uuid": MIG1, "profile": "3g.20gb", "placement": 4},
        {"gi": 2, "ci": 0, "uuid": MIG2, "profile": "3g.20gb", "placement": 0}]}
    first.update(gpu_a)
    return dict(HARDWARE, gpus=[first, {"uuid": GPU_B, "index": 1, "minor": 1, "name": A100, "mig_mode": True}])


def write(helper, allocation_id, device_id, kind="cdi", device_class="gpu"):
    hold = request(allocation_id, devices=[device(device_id, device_class)])
    return helper.request({"op": "hold.write", "kind": kind, "hold": hold})


def change(helper, **op):
    return helper.request({"op": "mig.change", "change": op})


@pytest.fixture
def node(helper):
    """The helper's node with GPU 0's two GPU instances, gi1/ci0 held by m1 and GPU 1 held whole by w1."""
    Path(helper.fakehw).write_text(json.dumps(hardware()))
    assert write(helper, "m1", GPU_A + "/gi1/ci0", device_class="gpu.mig") == OK
    assert write(helper, "w1", GPU_B) == OK
    return helper


def refused(text):
    return {"ok": False, "error": text, "retryable": True}


# -- a held instance, its GPU instance, the mode under it, a GPU held whole: refused, nothing changed -----------

HELD = "MIG instance gi1/ci0 held by m1"


@pytest.mark.parametrize("op, reason", [
    ({"kind": "destroy", "gpu": GPU_A, "gi": 1, "ci": 0}, "it would destroy MIG instance gi1/ci0: " + HELD),
    ({"kind": "destroy", "gpu": GPU_A, "gi": 1}, "it would destroy GPU instance gi1: " + HELD),
    ({"kind": "destroy", "gpu": GPU_A, "gi": 1, "ci": None}, "it would destroy GPU instance gi1: " + HELD),
    ({"kind": "mode", "gpu": GPU_A, "enabled": False}, "MIG mode cannot change under its MIG instances: " + HELD),
    ({"kind": "mode", "gpu": GPU_A, "enabled": True}, "MIG mode cannot change under its MIG instances: " + HELD),
    ({"kind": "create", "gpu": GPU_B, "profile": "7g.40gb", "placement": 0, "compute": ["7g.40gb"]}, "held whole by w1"),
    ({"kind": "create", "gpu": GPU_B, "profile": "1g.5gb", "compute": ["1g.5gb"]}, "held whole by w1"),
    ({"kind": "mode", "gpu": GPU_B, "enabled": False}, "held whole by w1"),
])
def test_a_peer_cannot_have_root_touch_what_a_hold_has(node, op, reason):
    before = Path(node.fakehw).read_bytes()
    assert change(node, **op) == refused(reason)
    assert Path(node.fakehw).read_bytes() == before
    assert not any(": mig.change " in line for line in node.log)  # nothing was carried out


def test_a_free_instance_goes_and_one_is_made_in_its_place(node):
    before = Path(node.fakehw).read_bytes()
    assert change(node, kind="destroy", gpu=GPU_A, gi=2) == {"ok": True, "done": {"made": None, "error": None}}
    assert Path(node.fakehw).read_bytes() != before
    (kept,) = read_mig_file(node.fakehw).gpu(GPU_A).instances
    assert (kept.gi, kept.compute[0].uuid) == (1, MIG1)  # the held one, as it was
    assert "uid %d: mig.change %s destroy gi2" % (os.geteuid(), GPU_A) in node.log
    reply = change(node, kind="create", gpu=GPU_A, profile="3g.20gb", placement=0, compute=["1c.3g.20gb", "2c.3g.20gb"])
    made = reply["done"]["made"]
    assert reply["ok"] and reply["done"]["error"] is None
    assert (made["gi"], made["profile"], made["placement"]) == (2, "3g.20gb", [0, 4])
    assert [(ci["ci"], ci["profile"]) for ci in made["compute"]] == [(0, "1c.3g.20gb"), (1, "2c.3g.20gb")]
    assert all(ci["uuid"].startswith("MIG-") and ci["uuid"] != MIG2 for ci in made["compute"])
    assert "uid %d: mig.change %s create 3g.20gb at 0 (1c.3g.20gb,2c.3g.20gb)" % (os.geteuid(), GPU_A) in node.log
    # what the tool refuses is its words in the reply, and the file as it was
    before = Path(node.fakehw).read_bytes()
    reply = change(node, kind="create", gpu=GPU_A, profile="3g.20gb", placement=4, compute=["3g.20gb"])
    assert reply["ok"] and reply["done"]["made"] is None
    assert reply["done"]["error"].startswith("Unable to create a GPU instance on GPU  0")
    assert Path(node.fakehw).read_bytes() == before
    assert node.request({"op": "mig.look"}) == {"ok": True, "mig": json.loads(json.dumps(
        node_to_data(read_mig_file(node.fakehw))))}


# -- every claim root reads itself ---------------------------------------------------------------------------

def _in_var_run_cdi(helper):
    assert write(helper, "v1", GPU_A + "/gi2/ci0", device_class="gpu.mig") == OK
    os.makedirs(helper.node("/var/run/cdi"))
    os.rename(helper.node("/etc/cdi/bcd-v1.json"), helper.node("/var/run/cdi/bcd-v1.json"))
    return "it would destroy GPU instance gi2: MIG instance gi2/ci0 held by v1"


def _env_file_alone(helper):
    assert write(helper, "e1", GPU_A + "/gi2/ci0", kind="allocation-env", device_class="gpu.mig") == OK
    return "it would destroy GPU instance gi2: MIG instance gi2/ci0 held by e1"


def _damaged_spec(helper):
    Path(helper.node("/etc/cdi/bcd-d1.json")).write_bytes(b"{damaged")
    return "hold spec /etc/cdi/bcd-d1.json cannot be read back (cannot parse /etc/cdi/bcd-d1.json: "


def _state(helper, name, content):
    state = Path(helper.node("/var/lib/bcd"))
    state.mkdir(parents=True, exist_ok=True)
    state.joinpath(name).write_text(content)


def _pending_release(helper):
    _state(helper, "releasing.json", json.dumps({"releases": {"k1": {
        "device_ids": [GPU_A + "/gi2/ci0"], "generation": 2, "since": "2026-12-05T00:00:00Z"}}}))
    return "it would destroy GPU instance gi2: Kubernetes release of k1 pending (%s/gi2/ci0)" % GPU_A


def _releases_unreadable(helper):
    _state(helper, "releasing.json", "{not json")
    return "the pending Kubernetes releases could not be read"


def _vm_now(helper):
    data = json.loads(Path(helper.fakehw).read_text())
    data["domains"] = [{"instance_id": "vm-1", "gpus": [GPU_A]}]
    Path(helper.fakehw).write_text(json.dumps(data))
    return "passed through to VM vm-1"


def _vm_at_the_last_pass(helper):
    _state(helper, "ledger.json", json.dumps({"vfio": {GPU_A: "vm-9"}}))
    return "passed through to VM vm-9"


def _process(helper):
    Path(helper.fakehw).write_text(json.dumps(hardware(processes=[{"pid": 4242, "name": "python3", "gi": 2, "ci": 0}])))
    return "it would destroy GPU instance gi2: host process 4242 (python3) uses MIG instance gi2/ci0"


def _vm_to_come(helper):
    _state(helper, "nodespec.json", json.dumps({"generation": 3, "devices": [],
                                                "instances": [{"instance_id": "vm-7", "gpus": [GPU_A]}]}))
    return "to be passed through to VM vm-7"


def _nodespec_unreadable(helper):
    _state(helper, "nodespec.json", "{not json")
    return "the stored node spec cannot be read (a VM may be about to have it)"


@pytest.mark.parametrize("claim", [_in_var_run_cdi, _env_file_alone, _damaged_spec, _pending_release,
                                   _releases_unreadable, _vm_now, _vm_at_the_last_pass, _vm_to_come,
                                   _nodespec_unreadable, _process])
def test_root_reads_every_claim_itself(node, claim):
    reason = claim(node)
    before = Path(node.fakehw).read_bytes()
    reply = change(node, kind="destroy", gpu=GPU_A, gi=2)
    assert reply["ok"] is False and reply["retryable"] is True
    assert reply["error"].startswith(reason), reply
    assert Path(node.fakehw).read_bytes() == before


def test_a_link_planted_for_the_pending_releases_is_not_followed(node, tmp_path):
    target = tmp_path / "shadow"
    target.write_text("root:secret-hash\n")
    os.makedirs(node.node("/var/lib/bcd"))
    os.symlink(str(target), node.node("/var/lib/bcd/releasing.json"))
    before = Path(node.fakehw).read_bytes()
    reply = change(node, kind="destroy", gpu=GPU_A, gi=2)
    assert reply["ok"] is False and reply["retryable"] is True
    assert reply["error"].startswith("cannot read the pending releases: "), reply
    assert Path(node.fakehw).read_bytes() == before and target.read_text() == "root:secret-hash\n"


def test_a_gpu_the_node_lacks_is_refused_as_it_is(node):
    assert change(node, kind="destroy", gpu=GPU_GONE, gi=1) == {
        "ok": False, "error": "%s is not a GPU of this node" % GPU_GONE}


# -- an op that is not one: refused before anything is read ---------------------------------------------------

@pytest.mark.parametrize("message, error", [
    ({"op": "mig.change", "change": {"kind": "destroy", "gpu": GPU_A, "gi": 2, "force": True}},
     'change: takes no "force" (it takes kind, gpu, gi, ci)'),
    ({"op": "mig.change", "change": {"kind": "destroy", "gpu": "/etc/cdi/bcd-m1.json", "gi": 1}},
     'change.gpu: must be a GPU UUID (GPU-...), not "/etc/cdi/bcd-m1.json"'),
    ({"op": "mig.change", "change": {"kind": "destroy", "gpu": "GPU-../../../etc/shadow", "gi": 1}},
     'change.gpu: must be a GPU UUID (GPU-...), not "GPU-../../../etc/shadow"'),
    ({"op": "mig.change", "change": {"kind": "destroy", "gpu": GPU_A, "gi": True}},
     "change.gi: must be a whole number from 0 to 64, not True"),
    ({"op": "mig.change", "change": {"kind": "create", "gpu": GPU_A, "profile": "1g.5gb",
                                     "compute": ["1g.5gb"] * 10000}},
     "change.compute: must list 0 to 7 items, not 10000"),
    ({"op": "mig.change", "change": {"kind": "mode", "gpu": GPU_A, "enabled": [[{"a": [[[]]]}]]}},
     "change.enabled: must be true or false, not a list"),
    ({"op": "mig.change", "change": [[[{"kind": "destroy"}]]]}, "change: must be a JSON object, not a list"),
    ({"op": "mig.change"}, "change: must be a JSON object, not None"),
    ({"op": "mig.change", "change": {"kind": "destroy", "gpu": GPU_A, "gi": 2}, "claims": []},
     "mig.change takes no claims"),  # root asks the peer nothing of who holds what
    ({"op": "mig.look", "gpu": GPU_A}, "mig.look takes no gpu"),
])
def test_an_op_that_is_not_one_is_refused_before_anything_is_read(base, message, error):
    root, fakehw = os.path.join(base, "root"), os.path.join(base, "fakehw.json")
    os.makedirs(root)
    Path(fakehw).write_text(json.dumps(hardware()))
    view = NodeView(FakeHwHost(root, fakehw), seconds=0)
    os.unlink(fakehw)  # a reading of the node now fails: the refusal must come before any
    with pytest.raises(Refused) as caught:
        handle_request(view, message)
    assert str(caught.value) == error and not caught.value.retryable
    assert view.readings == 0  # no host made: not the fakehw file, not /etc/cdi, not the state directory


def test_an_op_that_is_not_one_is_refused_over_the_socket_and_not_retried(node):
    before = Path(node.fakehw).read_bytes()
    assert change(node, kind="destroy", gpu=GPU_A, gi="1") == {
        "ok": False, "error": 'change.gi: must be a whole number from 0 to 64, not "1"'}
    assert Path(node.fakehw).read_bytes() == before


# -- the account's side ---------------------------------------------------------------------------------------

def test_the_accounts_mig_side_reads_and_changes_through_root_and_meets_its_refusals(node):
    side = HelperMigSide(HelperClient(node.socket, timeout=10))
    assert side.read() == read_mig_file(node.fakehw)
    held = MigOp(kind="destroy", gpu=GPU_A, gi=1, ci=0)
    assert side.apply(held) == MigDone(op=held, error="the root helper refused it: it would destroy MIG instance "
                                                      "gi1/ci0: " + HELD)
    gone = MigOp(kind="destroy", gpu=GPU_A, gi=2)
    assert side.apply(gone) == MigDone(op=gone)
    made = MigOp(kind="create", gpu=GPU_A, profile="2g.10gb", placement=0, compute=("2g.10gb",))
    done = side.apply(made)
    assert done.error is None and done.made == read_mig_file(node.fakehw).gpu(GPU_A).instance(2)
    away = HelperMigSide(HelperClient(os.path.join(node.base, "no-such.sock"), timeout=1))
    assert "cannot be reached" in away.read().error and away.read().gpus == []
    assert "cannot be reached" in away.apply(gone).error


class Lying(object):
    """A helper client whose root answers what a test says."""

    def __init__(self, answer):
        self.answer = answer

    def request(self, message):
        return self.answer


def test_the_account_reads_roots_replies_strictly():
    mig = {"source": "fakehw", "error": None, "processes": [], "gpus": [{"uuid": GPU_A}] * 300}
    read = HelperMigSide(Lying({"ok": True, "mig": mig})).read()
    assert read.gpus == [] and read.error == ("the root helper's answer to mig.look is malformed: mig.gpus: must list "
                                              "0 to 256 items, not 300")
    op = MigOp(kind="destroy", gpu=GPU_A, gi=2)
    done = HelperMigSide(Lying({"ok": True, "done": {"made": None, "error": None, "extra": 1}})).apply(op)
    assert done == MigDone(op=op, error="the root helper's answer to mig.change is malformed: done: takes no "
                                        '"extra" (it takes made, error)')


# -- a whole run of mig_layout through the helper --------------------------------------------------------------

def test_a_layout_through_the_helper_keeps_the_held_instance_and_root_refuses_a_planner_that_ignores_it(
        node, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the run is the account's (the helper thread is root's)
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(node.socket, timeout=10)))
    one = [{"devices": [0], "mig_enabled": True, "instances": [{"profile": "3g.20gb"}]}]
    done = mig_layout.converge_layout(host, mig_layout.wanted_of(host, one), lock_timeout=5)
    assert not done["failed"] and done["changed"], done["msg"]
    (kept,) = read_mig_file(node.fakehw).gpu(GPU_A).instances
    assert (kept.gi, kept.compute[0].uuid) == (1, MIG1)
    assert "uid %d: mig.change %s destroy gi2" % (os.getuid(), GPU_A) in node.log
    # an account whose planner is told nothing holds anything: root still refuses, and nothing is destroyed
    monkeypatch.setattr(mig_layout, "node_claims", lambda host, state, mig: dict(
        (gpu.uuid, GpuClaims(uuid=gpu.uuid)) for gpu in mig.gpus))
    before = Path(node.fakehw).read_bytes()
    whole = [{"devices": [0], "mig_enabled": True, "instances": [{"profile": "7g.40gb"}]}]
    done = mig_layout.converge_layout(host, mig_layout.wanted_of(host, whole), lock_timeout=5)
    assert done["failed"] and not done["gpus"][0]["refused"]
    assert done["gpus"][0]["error"] == ("%s: destroy GPU instance gi1 and its compute instances failed: the root "
                                        "helper refused it: it would destroy GPU instance gi1: %s" % (GPU_A, HELD))
    assert Path(node.fakehw).read_bytes() == before


# -- another account against a root helper process ------------------------------------------------------------

@pytest.mark.skipif(not attackers.CAN_PLAY, reason=attackers.CANNOT_PLAY)
def test_another_account_cannot_have_a_root_helper_process_destroy_a_held_instance(world):
    gpu = attackers.GPU_A
    first = dict(attackers.HARDWARE["gpus"][0], name=A100, mig=[
        {"gi": 1, "ci": 0, "uuid": MIG1, "profile": "3g.20gb", "placement": 4},
        {"gi": 2, "ci": 0, "uuid": MIG2, "profile": "3g.20gb", "placement": 0}])
    Path(world.fakehw).write_text(json.dumps(dict(attackers.HARDWARE, gpus=[first] + attackers.HARDWARE["gpus"][1:])))
    hold = request("m1", devices=[device(gpu + "/gi1/ci0", "gpu.mig")])
    assert world.request({"op": "hold.write", "kind": "cdi", "hold": hold}) == OK
    before = Path(world.fakehw).read_bytes()
    for op in ({"kind": "destroy", "gpu": gpu, "gi": 1, "ci": 0}, {"kind": "destroy", "gpu": gpu, "gi": 1},
               {"kind": "mode", "gpu": gpu, "enabled": False}):
        reply = world.request({"op": "mig.change", "change": op})
        assert reply["ok"] is False and reply["error"].endswith(HELD), reply
    # the account's own state directory: a link planted for the pending releases is not followed
    world.attacker.run(["ln", "-s", world.target, os.path.join(world.state, "releasing.json")])
    reply = world.request({"op": "mig.change", "change": {"kind": "destroy", "gpu": gpu, "gi": 2}})
    assert reply["ok"] is False and reply["error"].startswith("cannot read the pending releases: "), reply
    assert Path(world.fakehw).read_bytes() == before and attackers.target_untouched(world)
    world.attacker.run(["rm", os.path.join(world.state, "releasing.json")])
    assert world.request({"op": "mig.change", "change": {"kind": "destroy", "gpu": gpu, "gi": 2}}) == {
        "ok": True, "done": {"made": None, "error": None}}
    assert [inst.gi for inst in read_mig_file(world.fakehw).gpu(gpu).instances] == [1]
    assert world.alive()


def test_the_module_with_helper_socket_runs_through_the_helper_and_says_what_root_refused(node, monkeypatch, capsys):
    from ansible_collections.bcd.devices.plugins.modules import mig_layout as module  # pylint: disable=import-outside-toplevel
    from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the run is the account's (the helper thread is root's)
    args = {"root": node.root, "fakehw": node.fakehw, "helper_socket": node.socket, "lock_timeout": 5}
    done = call(capsys, module.main, dict(args, layout=[{"devices": [0], "mig_enabled": True,
                                                         "instances": [{"profile": "3g.20gb"}]}]))
    assert done["changed"] and not done.get("failed"), done["msg"]
    assert "uid %d: mig.change %s destroy gi2" % (os.getuid(), GPU_A) in node.log
    before = Path(node.fakehw).read_bytes()
    done = call(capsys, module.main, dict(args, layout=[{"devices": [0], "mig_enabled": False}]))
    assert done["failed"] and done["msg"] == ("%s (GPU 0) is not changed: it would destroy GPU instance gi1: %s"
                                              % (GPU_A, HELD))
    assert Path(node.fakehw).read_bytes() == before

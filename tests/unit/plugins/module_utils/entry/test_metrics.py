# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds metrics``, read back with Prometheus's own text parser (prometheus_client), and the MIG families' exact
lines."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import CONDITION_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    MigGpu,
    MigNode,
    MigOp,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry import mig_layout
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_ERROR, EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeHwError
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import FakeMigSide
from ansible_collections.bcd.devices.tests.unit.builders import hold, kube, mig
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec


def samples(text):
    """``{(name, frozenset(labels)): value}`` as Prometheus parses the text."""
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found, name, **labels):
    return found[(name, frozenset(labels.items()))]


def test_metrics_count_holds_gpus_releases_refusals_the_last_pass_and_events(capsys, node):
    pod = {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_C]}
    node.set_hardware(kubelet={"reachable": True, "pods": [pod]})
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [
        mig("a1", GPU_A + "/gi1/ci0"), kube("k1", GPU_C),
        hold("bad", "GPU-00000000-dead-4000-8000-000000000000")]))
    cli(capsys, node, "converge", "--spec", write_spec(node, 2, [mig("a1", GPU_A + "/gi1/ci0")], "g2.json"))
    with open(node.path("/var/lib/bcd/maintenance.json"), "w") as handle:
        json.dump({GPU_B: {"reason": "firmware", "since": 0}}, handle)
    code, out, err = cli(capsys, node, "metrics")
    assert code == EX_OK and err == ""
    found = samples(out)
    assert value(found, "bcd_holds", binding="BINDING_HOLD", state="bound") == 1
    assert value(found, "bcd_holds", binding="BINDING_KUBERNETES", state="bound") == 0
    # GPU_A by its MIG hold, GPU_C by the pending release of k1
    assert value(found, "bcd_gpus", state="held") == 2 and value(found, "bcd_gpus", state="free") == 1
    assert value(found, "bcd_gpus", state="maintenance") == 1
    assert value(found, "bcd_gpus", state="busy") == 2  # GPU_A's MIG hold, GPU_C's pending release
    assert value(found, "bcd_kubernetes_releases_pending") == 1
    assert value(found, "bcd_kubernetes_release_oldest_age_seconds") >= 0
    assert value(found, "bcd_last_pass_state", state="CONVERGED") == 1
    assert value(found, "bcd_last_pass_state", state="FAILED") == 0
    assert 0 <= value(found, "bcd_last_pass_duration_seconds") < 60
    stamp = json.loads(node.read("/var/lib/bcd/last-pass.json"))
    assert value(found, "bcd_last_pass_timestamp_seconds") == stamp["finished"]
    assert value(found, "bcd_events_unacknowledged") == 3  # a1 and k1 bound, bad refused
    assert value(found, "bcd_condition", type="VendorSpecStale") == 0
    # every condition a pass can raise has its series, those of the GPUs' recovery too
    assert sorted(dict(labels)["type"] for name, labels in found if name == "bcd_condition") == sorted(CONDITION_TYPES)


def test_a_refusal_final_at_its_generation_is_counted_by_reason(capsys, node):
    cli(capsys, node, "converge", "--spec", write_spec(node, 1, [hold("a1", GPU_A), hold("a2", GPU_A)]))
    found = samples(cli(capsys, node, "metrics")[1])
    assert value(found, "bcd_refusals", reason="overlap") == 1
    assert value(found, "bcd_last_pass_state", state="FAILED") == 1


def test_the_textfile_is_written_atomically_and_must_be_a_prom_file(capsys, node, tmp_path):
    target = tmp_path / "collector" / "bcd.prom"
    target.parent.mkdir()
    code, out, _err = cli(capsys, node, "metrics", "--textfile", str(target))
    assert code == EX_OK and out == ""
    assert samples(target.read_text())[("bcd_events_unacknowledged", frozenset())] == 0
    assert os.listdir(str(target.parent)) == ["bcd.prom"]  # no temporary left, nothing node_exporter would read
    assert oct(os.stat(str(target)).st_mode & 0o777) == "0o644"
    code, _out, err = cli(capsys, node, "metrics", "--textfile", str(tmp_path / "bcd.txt"))
    assert code == EX_ERROR and "must end in .prom" in err


def test_metrics_on_a_node_that_never_ran_a_pass(capsys, node):
    found = samples(cli(capsys, node, "metrics")[1])
    assert ("bcd_last_pass_timestamp_seconds", frozenset()) not in found
    assert all(value(found, "bcd_last_pass_state", state=s) == 0 for s in ("CONVERGED", "PROGRESSING", "FAILED"))


# -- the MIG layout per GPU (issue 48) -------------------------------------------------------------------------

A100 = "NVIDIA A100-SXM4-40GB"
G0, G1 = GPU_A, GPU_B


def mig_families(text):
    """The lines of the MIG families, HELP and TYPE included, as written."""
    return [line for line in text.splitlines() if "bcd_mig_" in line]


@pytest.fixture
def mig_node(make_node):
    """GPU 0 an A100 cut into a 3g.20gb (split into two compute instances) and two 2g.10gb; GPU 1 an A100 with MIG
    off; GPU 2 a GPU the catalog does not know (it cannot do MIG: no series)."""
    node = make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False},
                           {"uuid": G1, "index": 1, "minor": 1, "name": A100, "mig_mode": False},
                           {"uuid": GPU_C, "index": 2, "minor": 2, "name": "NVIDIA GeForce RTX 4090"}])
    host = node.host()
    layout = [{"devices": [0], "mig_enabled": True, "instances": [
        {"profile": "3g.20gb", "placement": 4, "compute": ["1c.3g.20gb", "2c.3g.20gb"]},
        {"profile": "2g.10gb", "count": 2}]}]
    done = mig_layout.converge_layout(host, mig_layout.wanted_of(host, layout), lock_timeout=5)
    assert done["changed"] and not done["failed"]
    return node


LIVE = [
    "# HELP bcd_mig_mode MIG mode of each GPU that can do MIG (1 on, 0 off).",
    "# TYPE bcd_mig_mode gauge",
    'bcd_mig_mode{gpu="%s"} 1' % G0,
    'bcd_mig_mode{gpu="%s"} 0' % G1,
    "# HELP bcd_mig_instances MIG compute instances of each GPU, by compute profile.",
    "# TYPE bcd_mig_instances gauge",
    'bcd_mig_instances{gpu="%s",profile="1c.3g.20gb"} 1' % G0,
    'bcd_mig_instances{gpu="%s",profile="2c.3g.20gb"} 1' % G0,
    'bcd_mig_instances{gpu="%s",profile="2g.10gb"} 2' % G0,
]


def test_the_mig_layout_of_each_gpu_is_read_live(capsys, mig_node):
    code, out, _err = cli(capsys, mig_node, "metrics")
    assert code == EX_OK
    assert mig_families(out) == LIVE
    found = samples(out)  # and Prometheus reads them
    assert value(found, "bcd_mig_instances", gpu=G0, profile="2g.10gb") == 2
    # a change made behind the record's back shows at once: the metrics are the node's, not the record's
    FakeMigSide(mig_node.fakehw).apply(MigOp(kind="destroy", gpu=G0, gi=2))
    assert 'bcd_mig_instances{gpu="%s",profile="2g.10gb"} 1' % G0 in mig_families(cli(capsys, mig_node, "metrics")[1])


def test_where_the_mig_side_cannot_be_read_the_record_says_and_only_in_its_boot(capsys, mig_node, monkeypatch):
    monkeypatch.setattr(FakeMigSide, "read", lambda self: MigNode(source="nvidia-smi", error="Insufficient Permissions"))
    assert mig_families(cli(capsys, mig_node, "metrics")[1]) == LIVE
    # after a reboot the recorded instances are gone until the boot unit makes them again: the mode stays
    mig_node.write("/proc/sys/kernel/random/boot_id", "0b7c6d5e-0000-4000-8000-000000000002\n")
    assert mig_families(cli(capsys, mig_node, "metrics")[1]) == LIVE[:6]

    def broken(self):
        raise FakeHwError("fakehw file: gpus[0].mig: not a list")

    monkeypatch.setattr(FakeMigSide, "read", broken)
    assert mig_families(cli(capsys, mig_node, "metrics")[1]) == LIVE[:6]


def test_a_node_without_mig_and_without_a_record_has_the_families_and_no_series(capsys, make_node):
    node = make_node(gpus=[{"uuid": GPU_C, "index": 0, "minor": 0}])
    assert mig_families(cli(capsys, node, "metrics")[1]) == LIVE[:2] + LIVE[4:6]


def test_mig_label_values_are_kept_to_their_grammar(capsys, mig_node, monkeypatch):
    hostile = ComputeInstance(gi=1, ci=0, profile='3g"}\n#x')
    instance = GpuInstance(gi=1, profile="3g.20gb", placement=Placement(4, 4), compute=(hostile,))
    odd = MigNode(source="nvidia-smi", gpus=[MigGpu(uuid=G0, index=0, mode=True, instances=(instance,)),
                                             MigGpu(uuid='GPU-1"} 1\nbcd_owned{x="', index=1, mode=True)])
    monkeypatch.setattr(FakeMigSide, "read", lambda self: odd)
    lines = mig_families(cli(capsys, mig_node, "metrics")[1])
    assert lines[2:] == ['bcd_mig_mode{gpu="%s"} 1' % G0] + LIVE[4:6] + [
        'bcd_mig_instances{gpu="%s",profile="other"} 1' % G0]

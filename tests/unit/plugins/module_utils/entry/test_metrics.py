# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds metrics``, read back with Prometheus's own text parser (prometheus_client)."""

from __future__ import annotations

import json
import os

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import CONDITION_TYPES
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_ERROR, EX_OK
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

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every field comes over the network: a pass over random junk refuses or errs clearly, never crashes,
and never writes outside its root."""

from __future__ import annotations

import os
import random

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import PassError
from ansible_collections.bcd.devices.tests.unit.builders import device, hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, MIG_A1

ATOMS = [GPU_A, GPU_B, GPU_A + "/gi1/ci0", GPU_B + "/s1", MIG_A1, "../../etc/passwd", "GPU-x\n", "", "a/b/c",
         "GPU-" + "x" * 300, "\u0000", "GPU-5f1c/gi99999999/ci1"]
CLASSES = ["gpu", "gpu.mig", "gpu.slot", "", "nic.vf", None, 7, ["gpu"]]
TEXT = ["alloc_1", "alloc_2", "../x", "a" * 81, "", "x\ny", None, 3, True, {"a": 1}, ["a"], "alloc_\u00e9"]


def junk(rng, depth=0):
    """A random JSON-ish value."""
    kinds = ["str", "int", "none", "bool", "list", "dict"] if depth < 3 else ["str", "int", "none"]
    kind = rng.choice(kinds)
    if kind == "str":
        return rng.choice(TEXT + ATOMS)
    if kind == "int":
        return rng.choice([0, -1, 2 ** 70, 1234])
    if kind == "none":
        return None
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "list":
        return [junk(rng, depth + 1) for _unused in range(rng.randint(0, 3))]
    return dict((rng.choice(["id", "device_class", "cpus", "x", "memory_bytes"]), junk(rng, depth + 1))
                for _unused in range(rng.randint(0, 3)))


def assignment(rng):
    """A hold whose every field is drawn from hostile values, one in ten of them left out; one
    assignment in ten is junk."""
    entry = hold(
        rng.choice(TEXT),
        reservation_id=rng.choice(TEXT),
        binding=rng.choice(["BINDING_HOLD", "BINDING_KUBERNETES", "BINDING_NODE", None, 5, ""]),
        devices=rng.choice([[device(rng.choice(ATOMS), rng.choice(CLASSES)) for _unused in range(rng.randint(0, 3))],
                            junk(rng)]),
        limits=rng.choice([None, {"cpus": rng.choice(["0-3", "3-0", "0-3\n", "x" * 1100, 5]),
                                  "memory_bytes": rng.choice([1 << 30, -1, "1G", True])}, junk(rng)]),
        env=rng.choice([["A=1"], ["BAD"], ["BCD_X=1"], ["A=1\nB=2"], junk(rng)]),
    )
    for key in list(entry):
        if rng.random() < 0.1:
            del entry[key]
    return entry if rng.random() < 0.9 else junk(rng)


def test_random_junk_is_refused_or_bound_never_a_crash(make_node):
    rng = random.Random(20261202)
    node = make_node(vendor="mig")
    outside = os.path.dirname(node.root)
    before = set(os.listdir(outside))
    generation = 0
    for _unused in range(150):
        generation += 1
        devices = [assignment(rng) for _unused2 in range(rng.randint(0, 5))]
        try:
            result = node.run(generation, devices)
        except PassError as exc:
            assert str(exc)
            continue
        assert result.section["state"] in ("CONVERGED", "FAILED"), result.section
        for failure in result.plan.failures:
            assert failure.reason and failure.message
        for name in os.listdir(node.path("/etc/cdi")) if node.exists("/etc/cdi") else []:
            assert name.startswith("bcd-") and name.endswith(".json") or name.startswith("nvidia")
    assert set(os.listdir(outside)) == before  # nothing written beside the node's root

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""domain/claims.py answers from its index of claims by GPU exactly what a walk over every claim answers:
the same claims, in the same order, after any sequence of holds, releases, pending releases and drops."""

from __future__ import annotations

import random

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASS_GPU, CLASS_SLOT, Atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.claims import LIVE, PENDING, RELEASING, Claims, _overlap

GPUS = ["GPU-5f1c2a90-0000-4000-8000-%012x" % i for i in range(1, 5)]


def atom(rng):
    gpu = rng.choice(GPUS)
    if rng.random() < 0.2:
        return Atom(id=gpu, device_class=CLASS_GPU, gpu_uuid=gpu)
    slot = rng.randrange(6)
    return Atom(id="%s/s%d" % (gpu, slot), device_class=CLASS_SLOT, gpu_uuid=gpu, slot=slot)


def walked_holding(claims, atoms, owner):
    gpus = set(a.gpu_uuid for a in atoms)
    return [c for c in claims.atoms if c.kind != RELEASING and c.owner != owner and c.atom.gpu_uuid in gpus]


def walked_needs(claims, atoms):
    found = []
    for c in claims.atoms:
        if c.kind == RELEASING and c.owner not in found and any(_overlap(c.atom, a) for a in atoms):
            found.append(c.owner)
    return found


@pytest.mark.parametrize("seed", range(20))
def test_the_index_answers_what_a_walk_over_every_claim_answers(seed):
    rng = random.Random(seed)
    claims = Claims()
    for step in range(60):
        owner = "a%d" % rng.randrange(12)
        roll = rng.random()
        if roll < 0.6:
            claims = claims.hold(owner, [atom(rng) for _ in range(rng.randrange(1, 4))], rng.choice([LIVE, LIVE, PENDING]))
        elif roll < 0.75:
            claims = claims.releasing(owner)
        elif roll < 0.85:
            claims = claims.pending(owner, [atom(rng)])
        elif roll < 0.9:
            claims = claims.without(owner)
        else:
            claims = claims.pass_through("inst_%d" % step, [rng.choice(GPUS)])
        asked = [atom(rng) for _ in range(rng.randrange(1, 4))]
        other = "a%d" % rng.randrange(12)
        assert claims.holding(asked, other) == walked_holding(claims, asked, other)
        assert claims.needs(asked) == walked_needs(claims, asked)


def test_a_value_is_never_changed_by_a_later_hold():
    first = Claims().hold("a1", [Atom(id=GPUS[0], device_class=CLASS_GPU, gpu_uuid=GPUS[0])])
    assert len(first.holding([Atom(id=GPUS[0], device_class=CLASS_GPU, gpu_uuid=GPUS[0])])) == 1  # index built
    second = first.hold("a2", [Atom(id=GPUS[0] + "/s1", device_class=CLASS_SLOT, gpu_uuid=GPUS[0], slot=1)])
    probe = [Atom(id=GPUS[0], device_class=CLASS_GPU, gpu_uuid=GPUS[0])]
    assert [c.owner for c in first.holding(probe)] == ["a1"]
    assert [c.owner for c in second.holding(probe)] == ["a1", "a2"]
    assert first == Claims().hold("a1", [Atom(id=GPUS[0], device_class=CLASS_GPU, gpu_uuid=GPUS[0])])  # the index is no part of the value

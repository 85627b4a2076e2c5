# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""domain/plan/claims.py answers from its index of claims by GPU exactly what a walk over every claim answers, after
any sequence of holds, pending releases and releases; and a value is never changed by what is made from it.
(The index keeps a pass linear: a walk over every claim for every atom cost the worst accepted section 4 s.)"""

from __future__ import annotations

import random

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_GPU, CLASS_SLOT, Atom
from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.claims import LIVE, PENDING, RELEASING, Claim, Claims

GPUS = ["GPU-5f1c2a90-0000-4000-8000-%012x" % i for i in range(1, 5)]


def whole(gpu):
    return Atom(id=gpu, device_class=CLASS_GPU, gpu_uuid=gpu)


def slot(gpu, number):
    return Atom(id="%s/s%d" % (gpu, number), device_class=CLASS_SLOT, gpu_uuid=gpu, slot=number)


def atom(rng):
    gpu = rng.choice(GPUS)
    return whole(gpu) if rng.random() < 0.2 else slot(gpu, rng.randrange(6))


def walked_holding(made, asked, owner):
    held = [c for c in made if c.kind != RELEASING and c.owner != owner and c.atom.gpu_uuid == asked.gpu_uuid]
    same = next((c for c in held if c.atom.key == asked.key), None)
    part = next((c for c in held if not c.atom.whole), None)
    on_whole = next((c for c in held if c.atom.whole), None)
    return same, part, on_whole


def overlap(first, second):
    return first.gpu_uuid == second.gpu_uuid and (first.whole or second.whole or first.key == second.key)


def walked_needs(made, atoms):
    return sorted(set(c.owner for c in made if c.kind == RELEASING and any(overlap(c.atom, a) for a in atoms)))


@pytest.mark.parametrize("seed", range(20))
def test_the_index_answers_what_a_walk_over_every_claim_answers(seed):
    rng = random.Random(seed)
    claims, made = Claims(), []
    for _step in range(80):
        owner = "a%d" % rng.randrange(12)
        kind = rng.choice([LIVE, LIVE, PENDING, RELEASING])
        atoms = [atom(rng) for _count in range(rng.randrange(1, 4))]
        claims = claims.hold(owner, atoms, kind)
        made.extend(Claim(a, owner, kind) for a in atoms)
        asked = [atom(rng) for _count in range(rng.randrange(1, 4))]
        other = "a%d" % rng.randrange(12)
        for one in asked:
            assert claims.holding(one, other) == walked_holding(made, one, other)
        assert sorted(claims.needs(asked)) == walked_needs(made, asked)


def test_a_value_is_never_changed_by_a_later_hold():
    first = Claims().hold("a1", [whole(GPUS[0])])
    second = first.hold("a2", [slot(GPUS[0], 1)])
    assert first.holding(slot(GPUS[0], 1)) == (None, None, Claim(whole(GPUS[0]), "a1"))
    assert second.holding(slot(GPUS[0], 1))[0] == Claim(slot(GPUS[0], 1), "a2")
    assert first == Claims().hold("a1", [whole(GPUS[0])])

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout planner (``domain/mig/plan.py``) and the claim check (``domain/mig/guard.py``): what stays, what
goes, what is made and where; every refusal by its message; and, by Hypothesis, that no plan ever destroys a
held instance, that a plan carried out gives the wanted layout, and that planning again then plans nothing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.guard import GpuClaims, gpu_claims, op_refusal
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import WantedGpu, WantedInstance
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    GpuProcess,
    MigGpu,
    MigNode,
    MigOp,
    ci_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.placement import fit, placement_at
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.plan import LayoutRefused, plan_layout
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import capability_for

A100 = capability_for("NVIDIA A100-SXM4-40GB")
G0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
G1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
_uuids = itertools.count(1)


def inst(gi, profile, start, *compute):
    """A GPU instance of the A100 40GB at ``start``, with compute instances ``(ci, profile)`` (default: one
    spanning it, ci 0)."""
    prof = A100.profile(profile)
    placement = placement_at(prof, start)
    assert placement is not None, (profile, start)
    cis = compute or ((0, profile),)
    return GpuInstance(gi=gi, profile=profile, placement=placement, compute=tuple(
        ComputeInstance(gi=gi, ci=ci, profile=name, uuid="MIG-%08d-0000-4000-8000-000000000000" % next(_uuids))
        for ci, name in cis))


def gpu(*instances, uuid=G0, mode=True, pending=None):
    return MigGpu(uuid=uuid, index=0 if uuid == G0 else 1, product=A100.product, mode=mode,
                  pending=mode if pending is None else pending, capability=A100, instances=tuple(instances))


def want(*instances, uuid=G0, enabled=True):
    return {uuid: WantedGpu(uuid=uuid, index=0 if uuid == G0 else 1, mig_enabled=enabled, instances=tuple(
        WantedInstance(profile=i[0], placement=i[1] if len(i) > 1 else None, compute=tuple(i[2]) if len(i) > 2 else ())
        for i in instances), source="layout[0]")}


def hold(gpu_uuid, gi, ci, owner="alloc_a"):
    return {"kind": "hold", "text": "MIG instance gi%d/ci%d held by %s" % (gi, ci, owner), "allocation_id": owner,
            "device_id": "%s/gi%d/ci%d" % (gpu_uuid, gi, ci)}


def claims(*found, uuid=G0, processes=()):
    return {uuid: gpu_claims(uuid, found, processes)}


def plan_one(wanted, mig_gpu, found=None):
    return plan_layout(wanted, MigNode(gpus=[mig_gpu], source="test"), found or {}).gpus[0]


def texts(ops):
    return [(op.kind, op.gi, op.ci, op.profile, op.placement, op.compute, op.enabled) for op in ops]


# -- what stays, what goes, what is made ---------------------------------------------------------------------

def test_an_empty_gpu_gets_each_instance_at_a_placement_that_fits_the_larger_first():
    planned = plan_one(want(("1g.5gb",), ("3g.20gb",), ("2g.10gb",)), gpu())
    assert planned.refused is None and planned.keep == ()
    creates = [(op.profile, op.placement) for op in planned.ops]
    assert creates == [("1g.5gb", 6), ("3g.20gb", 0), ("2g.10gb", 4)]


def test_the_operators_placement_is_kept_and_the_rest_placed_around_it():
    planned = plan_one(want(("3g.20gb", 0), ("3g.20gb",)), gpu())
    assert [(op.profile, op.placement) for op in planned.ops] == [("3g.20gb", 0), ("3g.20gb", 4)]


def test_a_layout_already_there_plans_nothing():
    current = gpu(inst(1, "3g.20gb", 4), inst(2, "2g.10gb", 0), inst(3, "1g.5gb", 2))
    planned = plan_one(want(("3g.20gb",), ("2g.10gb",), ("1g.5gb",)), current)
    assert planned.ops == () and planned.refused is None
    assert planned.keep == current.instances


def test_what_does_not_match_goes_and_what_is_missing_is_made_around_what_stays():
    current = gpu(inst(1, "3g.20gb", 4), inst(2, "4g.20gb", 0))
    planned = plan_one(want(("3g.20gb",), ("2g.10gb",), ("2g.10gb",)), current)
    assert [i.gi for i in planned.keep] == [1]
    assert texts(planned.ops) == [("destroy", 2, None, None, None, (), None),
                                  ("create", None, None, "2g.10gb", 0, ("2g.10gb",), None),
                                  ("create", None, None, "2g.10gb", 2, ("2g.10gb",), None)]


def test_compute_instances_are_matched_by_profile_and_only_the_difference_changes():
    current = gpu(inst(1, "3g.20gb", 0, (0, "1c.3g.20gb"), (1, "2c.3g.20gb")))
    planned = plan_one(want(("3g.20gb", None, ["1c.3g.20gb", "1c.3g.20gb", "1c.3g.20gb"])), current)
    assert texts(planned.ops) == [("destroy", 1, 1, None, None, (), None),
                                  ("create", 1, None, "3g.20gb", 0, ("1c.3g.20gb", "1c.3g.20gb"), None)]
    assert [ci.ci for ci in planned.keep[0].compute] == [0]


def test_unheld_instances_that_match_are_made_again_elsewhere_when_the_rest_would_not_fit():
    current = gpu(inst(1, "1g.5gb", 3))  # in the middle: a 4g.20gb (slices 0-3) cannot go around it
    planned = plan_one(want(("1g.5gb",), ("4g.20gb",)), current)
    assert planned.refused is None and planned.keep == ()
    assert texts(planned.ops) == [("destroy", 1, None, None, None, (), None),
                                  ("create", None, None, "1g.5gb", 4, ("1g.5gb",), None),
                                  ("create", None, None, "4g.20gb", 0, ("4g.20gb",), None)]


def test_mig_mode_on_comes_before_the_creates_and_off_after_the_destroys():
    planned = plan_one(want(("7g.40gb",)), gpu(mode=False))
    assert texts(planned.ops) == [("mode", None, None, None, None, (), True),
                                  ("create", None, None, "7g.40gb", 0, ("7g.40gb",), None)]
    planned = plan_one(want(enabled=False), gpu(inst(1, "7g.40gb", 0)))
    assert texts(planned.ops) == [("destroy", 1, None, None, None, (), None), ("mode", None, None, None, None, (), False)]


def test_a_pending_mode_change_plans_no_create_and_says_a_reset_is_needed():
    planned = plan_one(want(("7g.40gb",)), gpu(mode=False, pending=True))
    assert planned.ops == () and planned.reset_needed and planned.refused is None


def test_mig_off_on_a_gpu_already_off_plans_nothing():
    planned = plan_one(want(enabled=False), gpu(mode=False))
    assert planned.ops == () and not planned.reset_needed


# -- never under a hold --------------------------------------------------------------------------------------

def test_a_held_instance_stays_and_the_free_ones_change_around_it():
    current = gpu(inst(1, "3g.20gb", 4), inst(2, "3g.20gb", 0))
    planned = plan_one(want(("3g.20gb",), ("2g.10gb",), ("1g.5gb",)), current, claims(hold(G0, 2, 0)))
    assert planned.refused is None
    assert [i.gi for i in planned.keep] == [2]  # the held one is the one matched, not the lower free one... by hold
    assert ("destroy", 1, None, None, None, (), None) in texts(planned.ops)


def test_a_layout_that_would_destroy_a_held_instance_refuses_the_gpu_naming_it_and_its_holder():
    current = gpu(inst(1, "3g.20gb", 4), inst(2, "3g.20gb", 0))
    planned = plan_one(want(("7g.40gb",)), current, claims(hold(G0, 1, 0, "alloc_train")))
    assert planned.ops == ()
    assert planned.refused == "it would destroy GPU instance gi1: MIG instance gi1/ci0 held by alloc_train"


def test_held_instances_in_the_way_refuse_the_gpu_with_the_room_they_take():
    current = gpu(inst(1, "1g.5gb", 3))
    planned = plan_one(want(("1g.5gb",), ("4g.20gb",)), current, claims(hold(G0, 1, 0)))
    assert planned.ops == ()
    assert planned.refused == ("the layout needs the memory slices of GPU instance gi1 (1g.5gb at 3): "
                               "MIG instance gi1/ci0 held by alloc_a")


def test_a_gpu_held_whole_refuses_any_change_even_a_create():
    found = claims({"kind": "vm", "text": "passed through to VM inst_1", "instance_id": "inst_1"})
    planned = plan_one(want(("1g.5gb",)), gpu(), found)
    assert planned.ops == () and planned.refused == "passed through to VM inst_1"


def test_mig_mode_does_not_change_under_a_held_instance():
    planned = plan_one(want(enabled=False), gpu(inst(1, "7g.40gb", 0)), claims(hold(G0, 1, 0)))
    assert planned.refused is not None and "gi1/ci0 held by alloc_a" in planned.refused


def test_maintenance_does_not_claim_and_a_process_on_a_free_instance_does():
    maintenance = {"kind": "maintenance", "text": "in maintenance (repartition)", "reason": "repartition"}
    current = gpu(inst(1, "7g.40gb", 0))
    assert plan_one(want(("3g.20gb",)), current, claims(maintenance)).refused is None
    process = GpuProcess(gpu=G0, pid=4242, name="python3", gi=1, ci=0)
    planned = plan_one(want(("3g.20gb",)), current, claims(processes=[process]))
    assert planned.refused == "it would destroy GPU instance gi1: host process 4242 (python3) uses MIG instance gi1/ci0"


def test_an_unparsable_claim_counts_for_the_gpu_whole():
    found = gpu_claims(G0, [{"kind": "hold", "text": "held by x", "device_id": "GPU-a/x"}])
    assert found.whole == ["held by x"]


def test_the_check_refuses_an_op_for_another_gpu_than_the_claims_read():
    assert op_refusal(MigOp(kind="create", gpu=G1, profile="1g.5gb", placement=0), GpuClaims(uuid=G0)) is not None


# -- bad input refused before anything changes ----------------------------------------------------------------

@pytest.mark.parametrize("wanted, message", [
    (want(("9g.1tb",)), "instance 0: 9g.1tb is not a MIG profile of NVIDIA A100-SXM4-40GB (it has 1g.5gb, "),
    (want(("3g.20gb", 2)), "instance 0: 3g.20gb cannot start at memory slice 2 (its placements start at 0, 4)"),
    (want(("3g.20gb", 0), ("4g.20gb", 0)), "the instances do not fit NVIDIA A100-SXM4-40GB's 8 memory slices"),
    (want(*[("1g.5gb",)] * 8), "8 instances of 1g.5gb; NVIDIA A100-SXM4-40GB has room for 7"),
    (want(("4g.20gb",), ("3g.20gb",), ("1g.5gb",)),
     "more instances than the GPU has slices: 4g.20gb + 3g.20gb + 1g.5gb take 8 compute slices; NVIDIA "
     "A100-SXM4-40GB has 7"),
    (want(("3g.20gb", None, ["2c.3g.20gb", "2c.3g.20gb"])),
     "instance 0: its compute instances (2c.3g.20gb, 2c.3g.20gb) take 4 compute slices; a 3g.20gb has 3"),
    (want(("3g.20gb", None, ["1c.2g.10gb"])), "instance 0: 1c.2g.10gb is not a compute profile of 3g.20gb"),
])
def test_bad_input_is_refused_whole_naming_the_gpu_and_the_entry(wanted, message):
    with pytest.raises(LayoutRefused) as refused:
        plan_one(wanted, gpu())
    assert str(refused.value).startswith("%s (GPU 0), layout[0]: " % G0)
    assert message in str(refused.value)


def test_a_gpu_that_cannot_do_mig_is_refused():
    plain = MigGpu(uuid=G0, index=0, product="Tesla T4")
    with pytest.raises(LayoutRefused, match="Tesla T4 cannot do MIG"):
        plan_one(want(("1g.5gb",)), plain)


def test_every_gpus_problem_is_named_at_once():
    wanted = dict(want(("9g.1tb",)), **want(("3g.20gb", 2), uuid=G1))
    node = MigNode(gpus=[gpu(), gpu(uuid=G1)])
    with pytest.raises(LayoutRefused) as refused:
        plan_layout(wanted, node, {})
    assert "%s (GPU 0)" % G0 in str(refused.value) and "%s (GPU 1)" % G1 in str(refused.value)


# -- the properties ------------------------------------------------------------------------------------------

PROFILES = [p.name for p in A100.profiles]


@st.composite
def layouts(draw):
    """A GPU instance layout of the A100 40GB that fits (random profiles, placed in turn where they fit)."""
    placed = []
    for name in draw(st.lists(st.sampled_from(PROFILES), max_size=7)):
        prof = A100.profile(name)
        free = [p for p in prof.placements if not any(p.overlaps(q) for _n, q in placed)]
        if free and sum(A100.profile(n).slices for n, _q in placed) + prof.slices <= A100.compute_slices \
                and sum(1 for n, _q in placed if n == name) < prof.instances:
            placed.append((name, draw(st.sampled_from(free))))
    return placed


def simulate(mig_gpu, ops):
    """The ops carried out as a driver would: GI ids lowest free from 1, CI ids lowest free from 0."""
    instances = dict((i.gi, i) for i in mig_gpu.instances)
    mode = mig_gpu.mode
    for op in ops:
        if op.kind == "mode":
            assert not instances
            mode = op.enabled
        elif op.kind == "destroy":
            if op.ci is None:
                del instances[op.gi]
            else:
                old = instances[op.gi]
                instances[op.gi] = GpuInstance(gi=old.gi, profile=old.profile, placement=old.placement,
                                               compute=tuple(c for c in old.compute if c.ci != op.ci))
        else:
            assert mode
            if op.gi is None:
                prof = A100.profile(op.profile)
                placement = placement_at(prof, op.placement)
                assert not any(placement.overlaps(i.placement) for i in instances.values())
                gi = min(set(range(1, 16)) - set(instances))
                instances[gi] = GpuInstance(gi=gi, profile=op.profile, placement=placement)
                old = instances[gi]
            else:
                old = instances[op.gi]
            cis = list(old.compute)
            used = sum(ci_slices(c.profile, A100.profile(old.profile)) for c in cis)
            for name in op.compute:
                used += ci_slices(name, A100.profile(old.profile))
                ci = min(set(range(0, 8)) - set(c.ci for c in cis))
                cis.append(ComputeInstance(gi=old.gi, ci=ci, profile=name, uuid="MIG-new-%d" % next(_uuids)))
            assert used <= A100.profile(old.profile).slices
            instances[old.gi] = GpuInstance(gi=old.gi, profile=old.profile, placement=old.placement, compute=tuple(cis))
    return MigGpu(uuid=mig_gpu.uuid, index=mig_gpu.index, product=mig_gpu.product, mode=mode, pending=mode,
                  capability=A100, instances=tuple(instances[k] for k in sorted(instances)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), layouts(), st.data())
def test_a_plan_never_touches_a_held_instance_gives_the_layout_and_then_plans_nothing(current, wanted, data):
    existing = gpu(*[inst(gi, name, placement.start) for gi, (name, placement) in enumerate(current, 1)])
    held = data.draw(st.sets(st.sampled_from([i.gi for i in existing.instances] or [0]), max_size=2))
    found = claims(*[hold(G0, gi, 0) for gi in held if existing.instance(gi)])
    placements = data.draw(st.booleans())
    wanted_gpu = want(*[(name, placement.start if placements else None) for name, placement in wanted])
    planned = plan_one(wanted_gpu, existing, found)
    if planned.refused:
        assert planned.ops == ()
        assert any(existing.instance(gi) for gi in held)
        return
    for op in planned.ops:
        assert op.kind != "mode"
        if op.kind == "destroy":
            assert op.gi not in held
    after = simulate(existing, planned.ops)
    got = sorted((i.profile, i.placement.start if placements else None) for i in after.instances)
    assert got == sorted((name, placement.start if placements else None) for name, placement in wanted)
    for gi in held:
        if existing.instance(gi):
            assert after.instance(gi) == existing.instance(gi)  # same GI/CI, same UUID
    assert plan_one(wanted_gpu, after, found).ops == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PROFILES), st.one_of(st.none(), st.integers(0, 7))), max_size=7))
def test_fit_places_without_overlap_or_says_none(items):
    to_place = [(A100.profile(name), start) for name, start in items]
    placed = fit(to_place, [])
    if placed is None:
        return
    assert len(placed) == len(items)
    for (prof, start), placement in zip(to_place, placed):
        assert placement in prof.placements and (start is None or placement.start == start)
    for a, b in itertools.combinations(placed, 2):
        assert not a.overlaps(b)

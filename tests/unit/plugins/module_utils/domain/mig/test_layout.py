# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG layout as operators write it, native form (``domain/mig/layout.py``): which GPUs each entry picks,
what it wants of them, and every refusal by its exact message, field first. Whatever the input, the answer is a
``LayoutError`` or a layout (the Hypothesis tests at the end)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import (
    MAX_INSTANCES,
    LayoutError,
    WantedGpu,
    WantedInstance,
    wanted_from_layout,
)

A0 = "GPU-0a000000-0000-4000-8000-000000000000"
A1 = "GPU-0a000000-0000-4000-8000-000000000001"
H2 = "GPU-0b000000-0000-4000-8000-000000000002"
A3 = "GPU-0a000000-0000-4000-8000-000000000003"
INVENTORY = Inventory(gpus=[
    Gpu(uuid=A0, index=0, name="NVIDIA A100-SXM4-80GB"),
    Gpu(uuid=A1, index=1, name="NVIDIA A100-SXM4-80GB"),
    Gpu(uuid=H2, index=2, name="NVIDIA H100 80GB HBM3"),
    Gpu(uuid=A3, index=3, name="A100-SXM4-80GB"),  # an older driver prints no "NVIDIA "
], source="fakehw")


def wanted(*entries, inventory=INVENTORY):
    return wanted_from_layout(list(entries), inventory)


def refusal(*entries, inventory=INVENTORY):
    with pytest.raises(LayoutError) as caught:
        wanted(*entries, inventory=inventory)
    return str(caught.value)


def on(devices, *instances, **fields):
    return dict({"devices": devices, "mig_enabled": True, "instances": list(instances)}, **fields)


# --- what the entries pick and want --------------------------------------------------------------------------

def test_all_picks_every_gpu_in_index_order_with_the_instances_in_the_order_listed():
    result = wanted(on("all", {"profile": "3g.40gb", "placement": 4}, {"profile": "1g.10gb", "count": 2},
                       {"profile": "2g.20gb"}))
    assert list(result) == [A0, A1, H2, A3]
    instances = (WantedInstance("3g.40gb", 4), WantedInstance("1g.10gb"), WantedInstance("1g.10gb"),
                 WantedInstance("2g.20gb"))
    assert result[A0] == WantedGpu(A0, 0, True, instances, "layout[0]")
    assert result[H2] == WantedGpu(H2, 2, True, instances, "layout[0]")


def test_entries_pick_by_index_and_uuid_and_a_gpu_no_entry_picks_is_left_out():
    result = wanted(on([0, H2], {"profile": "7g.80gb"}), {"devices": [3], "mig_enabled": False})
    assert result == {
        A0: WantedGpu(A0, 0, True, (WantedInstance("7g.80gb"),), "layout[0]"),
        H2: WantedGpu(H2, 2, True, (WantedInstance("7g.80gb"),), "layout[0]"),
        A3: WantedGpu(A3, 3, False, (), "layout[1]"),
    }


def test_products_filter_all_ignoring_case_and_a_leading_nvidia():
    result = wanted(on("all", products=["nvidia a100-sxm4-80gb"]), on("all", products=["H100 80GB HBM3"]))
    assert [(uuid, gpu.source) for uuid, gpu in result.items()] == [
        (A0, "layout[0]"), (A1, "layout[0]"), (A3, "layout[0]"), (H2, "layout[1]")]
    assert result[A0].instances == ()  # MIG on, no instance
    assert result[A0].mig_enabled


def test_one_product_may_be_written_without_a_list():
    assert list(wanted(on("all", products="NVIDIA H100 80GB HBM3"))) == [H2]


def test_a_products_filter_no_gpu_matches_picks_none():
    assert wanted(on("all", products=["NVIDIA H200"])) == {}
    assert wanted() == {}
    assert wanted(on("all"), inventory=Inventory()) == {}


def test_compute_instances_are_kept_in_order_and_one_spanning_the_instance_is_written_as_none():
    result = wanted(on([0], {"profile": "3g.40gb", "compute": ["1c.3g.40gb", "2c.3g.40gb"]},
                       {"profile": "4g.40gb", "compute": ["4g.40gb"]},
                       {"profile": "1g.24gb+gfx", "compute": ["1g.24gb+gfx"], "placement": 0},
                       {"profile": "2g.48gb-me", "compute": ["1c.2g.48gb-me", "1c.2g.48gb-me"]}))
    assert result[A0].instances == (
        WantedInstance("3g.40gb", None, ("1c.3g.40gb", "2c.3g.40gb")), WantedInstance("4g.40gb"),
        WantedInstance("1g.24gb+gfx", 0), WantedInstance("2g.48gb-me", None, ("1c.2g.48gb-me", "1c.2g.48gb-me")))


def test_null_optional_fields_read_as_absent():
    result = wanted(on([1], {"profile": "1g.10gb+me", "placement": None, "count": None, "compute": None},
                       products=None), {"devices": [0], "mig_enabled": False, "instances": None})
    assert result[A1].instances == (WantedInstance("1g.10gb+me"),)
    assert result[A0].instances == ()


def test_seven_instances_after_counts_are_taken():
    result = wanted(on([0], {"profile": "1g.10gb", "count": 6}, {"profile": "1g.10gb"}))
    assert len(result[A0].instances) == MAX_INSTANCES == 7


# --- refusals, each by its message ---------------------------------------------------------------------------

@pytest.mark.parametrize("entries, message", [
    ("all", 'layout: must be a list of entries ({devices, mig_enabled, instances}), not "all"'),
    ({"devices": "all"}, "layout: must be a list of entries ({devices, mig_enabled, instances}), not a mapping"),
    ([on("all")] * 65, "layout: 65 entries; at most 64"),
    ([["all"]], "layout[0]: must be a mapping ({devices, mig_enabled, instances}), not a list"),
    ([on("all", gpus=[0])], 'layout[0]: unknown key "gpus" (devices, products, mig_enabled, instances)'),
    ([{1: 2, "devices": "all", "mig_enabled": True}],
     "layout[0]: unknown key 1 (devices, products, mig_enabled, instances)"),
    ([{"mig_enabled": True}], "layout[0].devices: missing; every entry says which GPUs (devices) and whether MIG is "
                              "on (mig_enabled)"),
    ([{"devices": "all"}], "layout[0].mig_enabled: missing; every entry says which GPUs (devices) and whether MIG "
                           "is on (mig_enabled)"),
    ([{"devices": "all", "mig_enabled": "yes"}], 'layout[0].mig_enabled: must be true or false, not "yes"'),
    ([{"devices": "all", "mig_enabled": 1}], "layout[0].mig_enabled: must be true or false, not 1"),
    ([on("all"), {"devices": [0], "mig_enabled": False, "instances": [{"profile": "1g.10gb"}]}],
     "layout[1].instances: mig_enabled is false, so no instance may be listed"),
    ([dict(on("all"), instances={"profile": "1g.10gb"})],
     'layout[0].instances: must be a list of at most 7 GPU instances, not a mapping'),
    ([on("all", *[{"profile": "1g.10gb"}] * 8)], "layout[0].instances: must be a list of at most 7 GPU instances, "
                                                 "not 8 of them"),
    ([on("all", {"profile": "1g.10gb", "count": 4}, {"profile": "1g.10gb", "count": 4})],
     "layout[0].instances: more than 7 GPU instances once counts are expanded; a GPU has at most 7"),
    ([on("all", "1g.10gb")], 'layout[0].instances[0]: must be a mapping ({profile, placement, count, compute}), '
                             'not "1g.10gb"'),
    ([on("all", {"profile": "1g.10gb", "size": 1})],
     'layout[0].instances[0]: unknown key "size" (profile, placement, count, compute)'),
    ([on("all", {"count": 1})], 'layout[0].instances[0].profile: missing; a GPU instance profile name such as '
                                '"1g.10gb" is required'),
    ([on("all", {"profile": "1g.10gb"}, {"profile": "9g.1tb"})],
     'layout[0].instances[1].profile: "9g.1tb" is not a MIG profile name'),
    ([on("all", {"profile": 7})], 'layout[0].instances[0].profile: must be a GPU instance profile name such as '
                                  '"1g.10gb", not 7'),
    ([on("all", {"profile": None})], 'layout[0].instances[0].profile: must be a GPU instance profile name such as '
                                     '"1g.10gb", not None'),
    ([on("all", {"profile": "MIG 1g.10gb"})], 'layout[0].instances[0].profile: "MIG 1g.10gb" is not a MIG profile '
                                              'name'),
    ([on("all", {"profile": "1g.10gb+me,gfx"})], 'layout[0].instances[0].profile: "1g.10gb+me,gfx" is not a MIG '
                                                 'profile name'),
    ([on("all", {"profile": "1c.3g.40gb"})], 'layout[0].instances[0].profile: "1c.3g.40gb" is not a MIG profile '
                                             'name'),
    ([on("all", {"profile": "1g.10gb\x1b[2K{{x}}"})],
     'layout[0].instances[0].profile: "1g.10gb\\x1b[2K\\x7b\\x7bx\\x7d\\x7d" is not a MIG profile name'),
    ([on("all", {"profile": "1g.10gb" * 1000})],
     'layout[0].instances[0].profile: "' + ("1g.10gb" * 12)[:77] + '..." is not a MIG profile name'),
    ([on("all", {"profile": "1g.10gb", "count": 0})],
     'layout[0].instances[0].count: must be a whole number from 1 to 7, not 0'),
    ([on("all", {"profile": "1g.10gb", "count": 8})],
     'layout[0].instances[0].count: must be a whole number from 1 to 7, not 8'),
    ([on("all", {"profile": "1g.10gb", "count": True})],
     'layout[0].instances[0].count: must be a whole number from 1 to 7, not True'),
    ([on("all", {"profile": "1g.10gb", "count": 2.0})],
     'layout[0].instances[0].count: must be a whole number from 1 to 7, not 2.0'),
    ([on("all", {"profile": "1g.10gb", "count": 10 ** 100})],
     'layout[0].instances[0].count: must be a whole number from 1 to 7, not an integer of 333 bits'),
    ([on("all", {"profile": "1g.10gb", "placement": 8})],
     'layout[0].instances[0].placement: must be a start memory slice from 0 to 7, not 8'),
    ([on("all", {"profile": "1g.10gb", "placement": -1})],
     'layout[0].instances[0].placement: must be a start memory slice from 0 to 7, not -1'),
    ([on("all", {"profile": "1g.10gb", "placement": "0"})],
     'layout[0].instances[0].placement: must be a start memory slice from 0 to 7, not "0"'),
    ([on("all", {"profile": "1g.10gb", "placement": 2, "count": 2})],
     "layout[0].instances[0].count: 2 instances cannot all start at placement 2; give each its own entry"),
    ([on("all", {"profile": "3g.40gb", "compute": []})],
     "layout[0].instances[0].compute: must be a list of 1 to 7 compute instance profile names, not 0 of them"),
    ([on("all", {"profile": "3g.40gb", "compute": "1c.3g.40gb"})],
     'layout[0].instances[0].compute: must be a list of 1 to 7 compute instance profile names, not "1c.3g.40gb"'),
    ([on("all", {"profile": "7g.80gb", "compute": ["1c.7g.80gb"] * 8})],
     "layout[0].instances[0].compute: must be a list of 1 to 7 compute instance profile names, not 8 of them"),
    ([on("all", {"profile": "3g.40gb", "compute": ["1c.3g.40gb", "1c.4g.40gb"]})],
     'layout[0].instances[0].compute[1]: "1c.4g.40gb" is not a compute instance profile of a 3g.40gb GPU instance '
     '(1c.3g.40gb, 2c.3g.40gb or 3g.40gb)'),
    ([on("all", {"profile": "1g.10gb", "compute": ["2g.20gb"]})],
     'layout[0].instances[0].compute[0]: "2g.20gb" is a GPU instance profile; the compute instances of a 1g.10gb '
     'GPU instance are 1g.10gb'),
    ([on("all", {"profile": "3g.40gb", "compute": [3]})],
     'layout[0].instances[0].compute[0]: 3 is not a compute instance profile of a 3g.40gb GPU instance '
     '(1c.3g.40gb, 2c.3g.40gb or 3g.40gb)'),
    ([on("all", {"profile": "3g.40gb", "compute": ["4c.3g.40gb"]})],
     'layout[0].instances[0].compute[0]: "4c.3g.40gb" takes 4 compute slices; a 3g.40gb GPU instance has 3'),
    ([on("all", {"profile": "3g.40gb", "compute": ["0c.3g.40gb"]})],
     'layout[0].instances[0].compute[0]: "0c.3g.40gb" takes 0 compute slices; a 3g.40gb GPU instance has 3'),
    ([on("all", {"profile": "7g.80gb", "compute": ["5c.7g.80gb"]})],
     'layout[0].instances[0].compute[0]: "5c.7g.80gb": no compute instance profile has 5 slices'),
    ([on("all", {"profile": "3g.40gb", "compute": ["2c.3g.40gb", "2c.3g.40gb"]})],
     "layout[0].instances[0].compute: the compute instances take 4 compute slices; a 3g.40gb GPU instance has 3"),
    ([on("all", {"profile": "3g.40gb", "compute": ["3g.40gb", "1c.3g.40gb"]})],
     "layout[0].instances[0].compute: the compute instances take 4 compute slices; a 3g.40gb GPU instance has 3"),
    ([on("some")], 'layout[0].devices: must be "all" or a list of 1 to 64 GPU indexes or UUIDs, not "some"'),
    ([on([])], 'layout[0].devices: must be "all" or a list of 1 to 64 GPU indexes or UUIDs, not 0 of them'),
    ([on(list(range(65)))], 'layout[0].devices: must be "all" or a list of 1 to 64 GPU indexes or UUIDs, not 65 of '
                            'them'),
    ([on(0)], 'layout[0].devices: must be "all" or a list of 1 to 64 GPU indexes or UUIDs, not 0'),
    ([on([0, "1"])], 'layout[0].devices[1]: must be a GPU index from 0 to 255 or a GPU UUID (GPU-...), not "1"'),
    ([on([True])], 'layout[0].devices[0]: must be a GPU index from 0 to 255 or a GPU UUID (GPU-...), not True'),
    ([on([256])], 'layout[0].devices[0]: must be a GPU index from 0 to 255 or a GPU UUID (GPU-...), not 256'),
    ([on([0, 9])], "layout[0].devices[1]: GPU 9 is not present (the node's GPUs: 0, 1, 2, 3)"),
    ([on(["GPU-0c000000-0000-4000-8000-000000000009"])],
     "layout[0].devices[0]: GPU-0c000000-0000-4000-8000-000000000009 is not present (the node's GPUs: 0, 1, 2, 3)"),
    ([on([0, 1, 0])], "layout[0].devices[2] names GPU 0 (%s), which layout[0].devices[0] names too" % A0),
    ([on([2, H2])], "layout[0].devices[1] names GPU 2 (%s), which layout[0].devices[0] names too" % H2),
    ([on([1]), on([A1])], "layout[1].devices[0] picks GPU 1 (%s), which layout[0].devices[0] picks too; a GPU may "
                          "be picked by one entry only" % A1),
    ([on([3]), on("all")], "layout[1].devices picks GPU 3 (%s), which layout[0].devices[0] picks too; a GPU may be "
                           "picked by one entry only" % A3),
    ([on("all", products=["NVIDIA H100 80GB HBM3"]), on("all", products=["NVIDIA H100 80GB HBM3"])],
     "layout[1].devices picks GPU 2 (%s), which layout[0].devices picks too; a GPU may be picked by one entry "
     "only" % H2),
    ([on([0, 2], products=["NVIDIA A100-SXM4-80GB"])],
     'layout[0].devices[1]: GPU 2 (%s) is not one of layout[0].products (it is "NVIDIA H100 80GB HBM3")' % H2),
    ([on("all", products={"NVIDIA A100-SXM4-80GB": 1})],
     'layout[0].products: must be a list of 1 to 16 product names such as "NVIDIA A100-SXM4-80GB", not a mapping'),
    ([on("all", products="")],
     'layout[0].products: must be a product name, 1 to 96 printable ASCII characters, not ""'),
    ([on("all", {"profile": "1g.10gb\n"})], 'layout[0].instances[0].profile: "1g.10gb\\n" is not a MIG profile name'),
    ([on("all", {"profile": "3g.40gb", "compute": ["1c.3g.40gb\n"]})],
     'layout[0].instances[0].compute[0]: "1c.3g.40gb\\n" is not a compute instance profile of a 3g.40gb GPU '
     'instance (1c.3g.40gb, 2c.3g.40gb or 3g.40gb)'),
    ([on([A0 + "\n"])], 'layout[0].devices[0]: must be a GPU index from 0 to 255 or a GPU UUID (GPU-...), not "%s'
                        '\\n"' % A0[:69]),
    ([on("all", products=[])],
     'layout[0].products: must be a list of 1 to 16 product names such as "NVIDIA A100-SXM4-80GB", not a list'),
    ([on("all", products=["NVIDIA H200", 100])],
     "layout[0].products[1]: must be a product name, 1 to 96 printable ASCII characters, not 100"),
    ([on("all", products=["  "])],
     'layout[0].products[0]: must be a product name, 1 to 96 printable ASCII characters, not "  "'),
    ([on("all", products=["H100\n"])],
     'layout[0].products[0]: must be a product name, 1 to 96 printable ASCII characters, not "H100\\n"'),
])
def test_refused(entries, message):
    with pytest.raises(LayoutError) as caught:
        wanted_from_layout(entries, INVENTORY)
    assert str(caught.value) == message


def test_a_gpu_of_no_known_product_named_with_a_products_filter():
    inventory = Inventory(gpus=[Gpu(uuid=A0, index=0)])
    assert refusal(on([0], products=["NVIDIA H200"]), inventory=inventory) == \
        "layout[0].devices[0]: GPU 0 (%s) is not one of layout[0].products (it is of no known product)" % A0
    assert wanted(on("all", products=["NVIDIA H200"]), inventory=inventory) == {}


def test_a_gpu_not_present_when_the_gpus_could_not_be_listed_says_why():
    inventory = Inventory(source="nvidia-smi", error="nvidia-smi failed: exit 9")
    assert refusal(on([0]), inventory=inventory) == \
        "layout[0].devices[0]: GPU 0 is not present; the GPUs could not be listed: nvidia-smi failed: exit 9"
    assert refusal(on([0]), inventory=Inventory()) == "layout[0].devices[0]: GPU 0 is not present (the node's GPUs: none)"


def test_64_entries_of_64_devices_are_read():
    inventory = Inventory(gpus=[Gpu(uuid="GPU-%04d" % n, index=n) for n in range(64)])
    result = wanted_from_layout([on(list(range(64)))] + [on("all", products=["x"])] * 63, inventory)
    assert len(result) == 64


# --- whatever the input: a LayoutError or a layout -----------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10) | st.integers(), children,
                                                                      max_size=5),
    max_leaves=30)


def mostly(valid, other=JSON):
    """``valid`` 19 times in 20, ``other`` (any JSON value) else: deep enough to reach every check, rough enough to
    hit it."""
    return st.sampled_from([False] * 19 + [True]).flatmap(lambda rough: other if rough else valid)


PROFILES = st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "1g.24gb+gfx", "2g.48gb-me", "1g.10gb+me", "9g.1tb",
                            "1c.3g.40gb"])
COMPUTE = st.sampled_from(["1c.3g.40gb", "2c.3g.40gb", "3g.40gb", "1c.7g.80gb", "7g.80gb", "5c.7g.80gb", "1g.10gb",
                           "1c.1g.24gb+gfx"])
INSTANCE = st.fixed_dictionaries({"profile": mostly(PROFILES)}, optional={
    "placement": mostly(st.integers(-1, 8) | st.none()), "count": mostly(st.integers(0, 8) | st.none()),
    "compute": mostly(st.lists(COMPUTE, max_size=4) | st.none())})
DEVICE = mostly(st.integers(-1, 4) | st.sampled_from([A0, A1, H2, A3, "GPU-0c", "0"]))
ENTRY = st.fixed_dictionaries({
    "devices": mostly(st.just("all") | st.lists(DEVICE, min_size=1, max_size=3)),
    "mig_enabled": mostly(st.booleans()),
}, optional={
    "instances": mostly(st.lists(mostly(INSTANCE), max_size=4) | st.none()),
    "products": mostly(st.lists(st.sampled_from(["NVIDIA A100-SXM4-80GB", "h100 80gb hbm3", "", "x" * 100]),
                                min_size=1, max_size=2) | st.sampled_from(["A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])),
})


def holds_to_the_rules(result):
    assert isinstance(result, dict)
    for uuid, gpu in result.items():
        assert isinstance(gpu, WantedGpu) and gpu.uuid == uuid and INVENTORY.gpu(uuid).index == gpu.index
        assert len(gpu.instances) <= MAX_INSTANCES
        assert gpu.mig_enabled or not gpu.instances
        for instance in gpu.instances:
            assert isinstance(instance.profile, str) and (instance.placement is None or 0 <= instance.placement <= 7)
            assert all(isinstance(name, str) for name in instance.compute) and len(instance.compute) <= 7


@settings(max_examples=300, deadline=None)
@given(layout=JSON)
def test_any_json_value_is_a_layout_or_a_layout_error(layout):
    try:
        result = wanted_from_layout(layout, INVENTORY)
    except LayoutError as exc:
        assert str(exc).split(":", 1)[0].startswith("layout") and str(exc).isprintable()
    else:
        holds_to_the_rules(result)


@settings(max_examples=400, deadline=None)
@given(layout=st.lists(ENTRY, max_size=4))
def test_any_layout_of_plausible_parts_is_a_layout_or_a_layout_error(layout):
    try:
        result = wanted_from_layout(layout, INVENTORY)
    except LayoutError as exc:
        assert str(exc).startswith("layout") and str(exc).isprintable()
    else:
        holds_to_the_rules(result)

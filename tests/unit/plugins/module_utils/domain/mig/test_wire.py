# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG forms across the root helper's socket (domain/mig/wire.py): every op and every node reads back as it was
written; what is not one of them is refused naming the field (root refuses the account's op, the account root's
reply), within bounds; and, by Hypothesis, no input raises anything but ``WireError``."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    ComputeInstance,
    GpuInstance,
    GpuProcess,
    MigDone,
    MigGpu,
    MigNode,
    MigOp,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.wire import (
    MAX_GPUS,
    MAX_PROCESSES,
    WireError,
    done_from_data,
    done_to_data,
    node_from_data,
    node_to_data,
    op_from_data,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_catalog import CATALOG

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"
MIG1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbd1"
A100 = "NVIDIA A100-SXM4-40GB"


def wired(value):
    """``value`` as it crosses the socket: JSON text and back."""
    return json.loads(json.dumps(value))


def instance(gi=1, profile="3g.20gb", start=4, size=4, cis=((0, "3g.20gb", MIG1),)):
    return GpuInstance(gi=gi, profile=profile, placement=Placement(start, size),
                       compute=tuple(ComputeInstance(gi=gi, ci=ci, profile=p, uuid=u) for ci, p, u in cis))


def a_node(gpus=None, processes=None):
    if gpus is None:
        gpus = [MigGpu(uuid="GPU-5f1c2a90-0000-4000-8000-%012d" % n, index=n, product=product, mode=n % 2 == 0,
                       pending=True, capability=cap, instances=(instance(),) if n == 0 else ())
                for n, (product, cap) in enumerate(sorted(CATALOG.items()))]
        gpus.append(MigGpu(uuid="GPU-5f1c2a90-0000-4000-8000-0000000000ff", index=9))  # no MIG at all
    if processes is None:
        processes = [GpuProcess(gpu=GPU, pid=4242, name="python3", gi=1, ci=0), GpuProcess(gpu=GPU, pid=7, name="")]
    return MigNode(gpus=gpus, processes=processes, source="nvidia-smi")


# -- what is written reads back ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", [
    MigOp(kind="mode", gpu=GPU, enabled=True),
    MigOp(kind="mode", gpu=GPU, enabled=False),
    MigOp(kind="destroy", gpu=GPU, gi=1),
    MigOp(kind="destroy", gpu=GPU, gi=13, ci=2),
    MigOp(kind="create", gpu=GPU, profile="3g.20gb", placement=4, compute=("1c.3g.20gb", "2c.3g.20gb")),
    MigOp(kind="create", gpu=GPU, profile="1g.10gb+me", placement=None, compute=("1g.10gb+me",)),
    MigOp(kind="create", gpu=GPU, gi=2, profile="7g.80gb", placement=0, compute=("3c.7g.80gb",)),
])
def test_every_op_the_planner_makes_reads_back_as_it_was(op):
    assert op_from_data(wired(op.as_data())) == op


def test_a_key_whose_value_may_be_null_may_be_left_out():
    assert op_from_data({"kind": "destroy", "gpu": GPU, "gi": 1}) == MigOp(kind="destroy", gpu=GPU, gi=1)
    assert op_from_data({"kind": "create", "gpu": GPU, "profile": "1g.5gb"}) == MigOp(kind="create", gpu=GPU,
                                                                                      profile="1g.5gb")


def test_a_node_with_every_catalog_entry_and_a_done_read_back_as_they_were():
    node = a_node()
    assert node_from_data(wired(node_to_data(node))) == node
    error = MigNode(source="fakehw", error="fakehw file x: gpus[0].mig[0].placement: 3 is not a placement")
    assert node_from_data(wired(node_to_data(error))) == error
    op = MigOp(kind="create", gpu=GPU, profile="3g.20gb", placement=4, compute=("3g.20gb",))
    for done in (MigDone(op=op, made=instance()), MigDone(op=op, error="Insufficient Resources"), MigDone(op=op)):
        assert done_from_data(wired(done_to_data(done)), op) == done
    unknown = instance(gi=3, profile="unknown", start=0, size=0, cis=((0, "unknown", None),))
    assert done_from_data(wired(done_to_data(MigDone(op=op, made=unknown))), op).made == unknown


# -- root refuses an op that is not one, naming the field ------------------------------------------------

def op(**fields):
    data = {"kind": "destroy", "gpu": GPU, "gi": 1, "ci": 0}
    data.update(fields)
    return data


@pytest.mark.parametrize("data, message", [
    ([], 'change: must be a JSON object, not a list'),
    (op(kind="reset"), 'change.kind: must be one of mode, destroy, create, not "reset"'),
    (op(kind=None), "change.kind: must be one of mode, destroy, create, not None"),
    (op(path="/etc/shadow"), 'change: takes no "path" (it takes kind, gpu, gi, ci)'),
    (op(enabled=True), 'change: takes no "enabled" (it takes kind, gpu, gi, ci)'),
    ({"kind": "destroy", "gpu": GPU}, "change.gi: required"),
    (op(gpu="/etc/shadow"), 'change.gpu: must be a GPU UUID (GPU-...), not "/etc/shadow"'),
    (op(gpu="GPU-../../etc"), 'change.gpu: must be a GPU UUID (GPU-...), not "GPU-../../etc"'),
    (op(gpu=GPU + "\n"), 'change.gpu: must be a GPU UUID (GPU-...), not "%s\\n"' % GPU),
    (op(gpu=GPU + "/gi1/ci0"), 'change.gpu: must be a GPU UUID (GPU-...), not "%s/gi1/ci0"' % GPU),
    (op(gpu="GPU-" + "a" * 129), 'change.gpu: must be a GPU UUID (GPU-...), not "GPU-%s..."' % ("a" * 73)),
    (op(gpu=["GPU-x"]), "change.gpu: must be a GPU UUID (GPU-...), not a list"),
    (op(gi=True), "change.gi: must be a whole number from 0 to 64, not True"),
    (op(gi=1.0), "change.gi: must be a whole number from 0 to 64, not 1.0"),
    (op(gi="1"), 'change.gi: must be a whole number from 0 to 64, not "1"'),
    (op(gi=65), "change.gi: must be a whole number from 0 to 64, not 65"),
    (op(gi=-1), "change.gi: must be a whole number from 0 to 64, not -1"),
    (op(gi=None), "change.gi: must be a whole number from 0 to 64, not None"),
    (op(ci=2 ** 80), "change.ci: must be a whole number from 0 to 64 or null, not an integer of 81 bits"),
    (op(ci={"$gt": 0}), "change.ci: must be a whole number from 0 to 64 or null, not a mapping"),
    ({"kind": "mode", "gpu": GPU, "enabled": 1}, "change.enabled: must be true or false, not 1"),
    ({"kind": "mode", "gpu": GPU, "enabled": None}, "change.enabled: must be true or false, not None"),
    ({"kind": "mode", "gpu": GPU}, "change.enabled: required"),
    ({"kind": "create", "gpu": GPU, "profile": "9g.1tb"},
     'change.profile: must be a GPU instance profile name such as "3g.40gb", not "9g.1tb"'),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb\n"},
     'change.profile: must be a GPU instance profile name such as "3g.40gb", not "3g.20gb\\n"'),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "placement": 8},
     "change.placement: must be a whole number from 0 to 7 or null, not 8"),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": ["1c.3g.20gb"] * 10000},
     "change.compute: must list 0 to 7 items, not 10000"),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": "1c.3g.20gb"},
     'change.compute: must be a list, not "1c.3g.20gb"'),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": [["1c.3g.20gb"]]},
     "change.compute[0]: must be a compute instance profile name, not a list"),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": ["1c.7g.80gb"]},
     'change.compute[0]: "1c.7g.80gb" is not a compute instance profile of a 3g.20gb GPU instance'),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": ["4c.3g.20gb"]},
     'change.compute[0]: "4c.3g.20gb" takes 4 compute slices; a 3g.20gb GPU instance has 3'),
    ({"kind": "create", "gpu": GPU, "profile": "3g.20gb", "compute": [], "nested": {"a": [{"b": [[[]]]}]}},
     'change: takes no "nested" (it takes kind, gpu, profile, gi, placement, compute)'),
])
def test_root_refuses_an_op_that_is_not_one_naming_the_field(data, message):
    with pytest.raises(WireError) as caught:
        op_from_data(data)
    assert str(caught.value).startswith(message), str(caught.value)


# -- the account refuses a reply that is not one, within bounds ------------------------------------------

def node_data(**fields):
    data = node_to_data(a_node())
    data.update(fields)
    return data


def with_compute(*compute):
    """The first GPU's data, its first GPU instance with these compute instances."""
    return gpu_data(instances=[dict(gpu_data()["instances"][0], compute=list(compute))])


def gpu_data(**fields):
    data = node_to_data(a_node())["gpus"][0]
    data.update(fields)
    return data


@pytest.mark.parametrize("data, message", [
    (None, "mig: must be a JSON object, not None"),
    (node_data(extra=1), 'mig: takes no "extra" (it takes source, error, gpus, processes)'),
    (node_data(gpus=[gpu_data()] * (MAX_GPUS + 1)), "mig.gpus: must list 0 to 256 items, not 257"),
    (node_data(gpus=[gpu_data(), gpu_data()]), 'mig.gpus[1].uuid: GPU "%s" is listed twice' % "GPU-5f1c2a90-0000-4000-8000-000000000000"),
    (node_data(processes=[{"gpu": GPU, "pid": 1, "name": "x", "gi": None, "ci": None}] * (MAX_PROCESSES + 1)),
     "mig.processes: must list 0 to 4096 items, not 4097"),
    (node_data(processes=[{"gpu": GPU, "pid": 1, "name": "x" * 1025, "gi": None, "ci": None}]),
     "mig.processes[0].name: must be a process name of at most 1024 characters"),
    (node_data(processes=[{"gpu": GPU, "pid": True, "name": "x", "gi": None, "ci": None}]),
     "mig.processes[0].pid: must be a whole number from 0 to 4194304, not True"),
    (node_data(source="nvidia-smi; rm -rf /"), 'mig.source: must be a source name such as nvidia-smi, not "nvidia-smi; rm -rf /"'),
    (node_data(error=7), "mig.error: must be a message or null, not 7"),
    (node_data(gpus=[gpu_data(uuid="../x")]), 'mig.gpus[0].uuid: must be a GPU UUID (GPU-...), not "../x"'),
    (node_data(gpus=[gpu_data(mode="on")]), 'mig.gpus[0].mode: must be true or false or null, not "on"'),
    (node_data(gpus=[gpu_data(index=256)]), "mig.gpus[0].index: must be a whole number from 0 to 255, not 256"),
    (node_data(gpus=[gpu_data(product="\x1b[31m")]), 'mig.gpus[0].product: must be a product name or null, not "\\x1b[31m"'),
    (node_data(gpus=[gpu_data(instances=[gpu_data()["instances"][0]] * 9)]),
     "mig.gpus[0].instances: must list 0 to 8 items, not 9"),
    (node_data(gpus=[gpu_data(instances=[gpu_data()["instances"][0]] * 2)]),
     "mig.gpus[0].instances[1].gi: GPU instance 1 is listed twice"),
    (node_data(gpus=[with_compute(*[{"ci": 0, "profile": "3g.20gb", "uuid": None}] * 9)]),
     "mig.gpus[0].instances[0].compute: must list 0 to 8 items, not 9"),
    (node_data(gpus=[with_compute({"ci": 0, "profile": "3g.20gb", "uuid": "GPU-x"})]),
     'mig.gpus[0].instances[0].compute[0].uuid: must be a MIG UUID (MIG-...) or null, not "GPU-x"'),
    (node_data(gpus=[with_compute({"ci": 0, "profile": "1c.x", "uuid": None})]),
     'mig.gpus[0].instances[0].compute[0].profile: must be a compute instance profile name such as "1c.3g.40gb"'),
    (node_data(gpus=[gpu_data(instances=[dict(gpu_data()["instances"][0], placement=[4])])]),
     "mig.gpus[0].instances[0].placement: must list 2 to 2 items, not 1"),
    (node_data(gpus=[gpu_data(capability=dict(gpu_data()["capability"], profiles=[{}] * 33))]),
     "mig.gpus[0].capability.profiles: must list 0 to 32 items, not 33"),
    (node_data(gpus=[gpu_data(capability=dict(gpu_data()["capability"], memory_slices=0))]),
     "mig.gpus[0].capability.memory_slices: must be a whole number from 1 to 8, not 0"),
])
def test_the_account_refuses_a_reply_that_is_not_one_naming_the_field(data, message):
    with pytest.raises(WireError) as caught:
        node_from_data(data)
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_account_refuses_a_done_that_is_not_one():
    op_ = MigOp(kind="destroy", gpu=GPU, gi=1)
    for data, message in ((None, "done: must be a JSON object, not None"),
                          ({"made": None}, "done.error: required"),
                          ({"made": None, "error": ""}, 'done.error: must be a message or null, not ""'),
                          ({"made": {"gi": 1}, "error": None}, "done.made.profile: required"),
                          ({"made": None, "error": None, "op": {}}, 'done: takes no "op" (it takes made, error)')):
        with pytest.raises(WireError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            done_from_data(data, op_)


# -- by Hypothesis: a parse error or a value, never another exception ----------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                    max_leaves=30)
KEYS = ("kind", "gpu", "enabled", "gi", "ci", "profile", "placement", "compute")
WORDS = st.sampled_from(["mode", "destroy", "create", GPU, "3g.20gb", "1c.3g.20gb", "7g.80gb", "unknown", MIG1, "",
                         "GPU-", "3g.20gb\n", "1c.", "c.3g.20gb"])
LEAF = st.none() | st.booleans() | st.integers(-2, 70) | WORDS | JSON


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, st.dictionaries(st.sampled_from(KEYS), st.one_of(LEAF, st.lists(LEAF, max_size=9)),
                                       max_size=8)))
def test_any_op_data_gives_an_op_or_a_wire_error(data):
    try:
        parsed = op_from_data(data)
    except WireError as exc:
        assert str(exc).startswith("change")
    else:
        assert op_from_data(wired(parsed.as_data())) == parsed  # a value read is one the grammar writes


def _mutations(value, path=()):
    """Every place of a JSON value: the path to it."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _mutations(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            yield from _mutations(item, path + (index,))


VALID = node_to_data(a_node())
PLACES = list(_mutations(VALID))


def _replaced(value, path, new):
    if not path:
        return new
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLACES), LEAF, st.booleans())
def test_any_reply_gives_a_node_or_a_wire_error(path, leaf, drop):
    data = _replaced(VALID, path, leaf)
    if drop and path and isinstance(path[-1], str):  # a key left out instead
        data = json.loads(json.dumps(VALID))
        holder = data
        for step in path[:-1]:
            holder = holder[step]
        del holder[path[-1]]
    try:
        node = node_from_data(data)
    except WireError as exc:
        assert str(exc).startswith("mig")
    else:
        assert node_from_data(wired(node_to_data(node))) == node


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_any_json_gives_a_node_or_a_wire_error(data):
    try:
        node_from_data(data)
    except WireError:
        pass

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted's configuration documents read as the layout the module converges (``domain/mig/mig_parted.py``):
NVIDIA's own files (tests/data/mig-parted/, see tests/data/README.md) give the layouts mig-parted would make,
compute instances are packed as mig-parted packs them, and every refusal names its field."""

from __future__ import annotations

import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import (
    MAX_INSTANCES,
    LayoutError,
    WantedGpu,
    WantedInstance,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.mig_parted import pci_id, wanted_from_mig_parted
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.mig.test_layout import JSON, mostly

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "data", "mig-parted")
A100_40, A100_80, H100, DISPLAY = "0x20B010DE", "0x20B210DE", "0x233010DE", "0x1FB010DE"


def load(name):
    with open(os.path.join(DATA, name), "r") as handle:
        return yaml.safe_load(handle)


def uuid(n):
    return "GPU-0d000000-0000-4000-8000-%012d" % n


def node(*products):
    """An inventory of GPUs 0, 1, ... of ``products`` (name, PCI device id), and the ids as the caller knows them."""
    gpus = [Gpu(uuid=uuid(n), index=n, name=name) for n, (name, pci) in enumerate(products)]
    return Inventory(gpus=gpus, source="fakehw"), dict((uuid(n), pci) for n, (name, pci) in enumerate(products))


EIGHT_A100_40 = node(*[("NVIDIA A100-SXM4-40GB", A100_40)] * 8)


def shape(result):
    """``{index: (mig_enabled, [(profile, compute), ...])}``, for reading."""
    return dict((gpu.index, (gpu.mig_enabled, [(i.profile, i.compute) for i in gpu.instances]))
                for gpu in result.values())


def doc(*entries, name="c"):
    return {"version": "v1", "mig-configs": {name: list(entries)}}


def entry(mig_devices, devices="all", **fields):
    return dict({"devices": devices, "mig-enabled": True, "mig-devices": mig_devices}, **fields)


def refusal(document, config="c", inventory=EIGHT_A100_40):
    with pytest.raises(LayoutError) as caught:
        wanted_from_mig_parted(document, config, *inventory)
    return str(caught.value)


# --- NVIDIA's files ------------------------------------------------------------------------------------------

def test_the_example_custom_config_on_eight_a100s():
    result = wanted_from_mig_parted(load("examples_config.yaml.txt"), "custom-config", *EIGHT_A100_40)
    one = [("1g.5gb", ())]
    assert shape(result) == {
        0: (False, []), 1: (False, []), 2: (False, []), 3: (False, []),
        4: (True, one * 7), 5: (True, [("2g.10gb", ())] * 3), 6: (True, [("3g.20gb", ())] * 2),
        7: (True, [("3g.20gb", ()), ("2g.10gb", ())] + one * 2),  # larger first, as mig-parted makes them
    }
    assert result[uuid(7)] == WantedGpu(uuid(7), 7, True, (
        WantedInstance("3g.20gb"), WantedInstance("2g.10gb"), WantedInstance("1g.5gb"), WantedInstance("1g.5gb")),
        "mig-configs.custom-config[4]")


@pytest.mark.parametrize("name, wanted", [
    ("all-disabled", (False, [])),
    ("all-enabled", (True, [])),
    ("all-1g.5gb", (True, [("1g.5gb", ())] * 7)),
    ("all-balanced", (True, [("3g.20gb", ()), ("2g.10gb", ()), ("1g.5gb", ()), ("1g.5gb", ())])),
])
def test_the_example_configs_for_every_gpu(name, wanted):
    result = wanted_from_mig_parted(load("examples_config.yaml.txt"), name, *EIGHT_A100_40)
    assert shape(result) == dict((n, wanted) for n in range(8))
    assert set(gpu.source for gpu in result.values()) == {"mig-configs.%s[0]" % name}


def test_the_dgx_station_config_filters_by_pci_device_id():
    inventory = node(("NVIDIA A100-SXM4-80GB", A100_80), ("NVIDIA A100-SXM4-80GB", A100_80),
                     ("NVIDIA A100-SXM4-80GB", A100_80), ("DGX Display", DISPLAY), ("NVIDIA A100-SXM4-80GB", A100_80))
    document = load("examples_dgx-station-80gb-config.yaml")
    assert shape(wanted_from_mig_parted(document, "balanced-k8s-dgx-station-80", *inventory)) == {
        0: (False, []), 1: (True, [("3g.40gb", ())] * 2), 2: (True, [("2g.20gb", ())] * 3 + [("1g.10gb", ())]),
        3: (False, []), 4: (True, [("1g.10gb", ())] * 7)}
    result = wanted_from_mig_parted(document, "all-1g.10gb-dgx-station-80", *inventory)
    assert shape(result) == dict([(n, (True, [("1g.10gb", ())] * 7)) for n in (0, 1, 2, 4)] + [(3, (False, []))])
    assert result[uuid(3)].source == "mig-configs.all-1g.10gb-dgx-station-80[1]"


@pytest.mark.parametrize("pci, count", [(A100_40, 4), (A100_80, 7), (H100, 7), ("0x20B010DE:0x145F10DE", 4),
                                        ("0x20b010de", 4), ("0x1DB610DE", None)])
def test_the_default_config_picks_its_entry_by_the_gpus_pci_device_id(pci, count):
    inventory = node(("NVIDIA whatever", pci))
    result = wanted_from_mig_parted(load("deployments_systemd_config-default.yaml"), "all-1g.10gb", *inventory)
    if count is None:  # a V100: no entry of the config is for it, so it is left as it is
        assert result == {}
    else:
        assert shape(result) == {0: (True, [("1g.10gb", ())] * count)}


def test_every_config_of_nvidias_files_reads_on_the_gpus_it_is_for():
    pcis = {A100_40: "NVIDIA A100-SXM4-40GB", A100_80: "NVIDIA A100-SXM4-80GB", H100: "NVIDIA H100 80GB HBM3",
            "0x233510DE": "NVIDIA H200", "0x2BB510DE": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "0x290110DE": "NVIDIA B200", DISPLAY: "DGX Display"}
    inventory = node(*[(name, pci) for pci, name in pcis.items()])
    read = 0
    for name in ("examples_config.yaml.txt", "examples_dgx-station-80gb-config.yaml",
                 "deployments_systemd_config-default.yaml"):
        document = load(name)
        for config in document["mig-configs"]:
            if config == "custom-config":
                continue  # names GPUs 0 to 7; read above
            result = wanted_from_mig_parted(document, config, *inventory)
            assert all(len(gpu.instances) <= MAX_INSTANCES for gpu in result.values())
            read += 1
    assert read == 9 + 9 + 81 - 1  # every config of the three files but custom-config


# --- how mig-devices become GPU instances --------------------------------------------------------------------

@pytest.mark.parametrize("mig_devices, made", [
    ({"1c.3g.40gb": 4}, [("3g.40gb", ("1c.3g.40gb",) * 3), ("3g.40gb", ("1c.3g.40gb",))]),
    ({"1c.3g.40gb": 2, "2c.3g.40gb": 1}, [("3g.40gb", ("2c.3g.40gb", "1c.3g.40gb")), ("3g.40gb", ("1c.3g.40gb",))]),
    ({"1c.3g.40gb": 1, "3g.40gb": 1}, [("3g.40gb", ()), ("3g.40gb", ("1c.3g.40gb",))]),
    ({"3c.3g.40gb": 1}, [("3g.40gb", ())]),  # mig-parted's own name for it is 3g.40gb
    ({"1c.7g.80gb": 7}, [("7g.80gb", ("1c.7g.80gb",) * 7)]),
    ({"2c.4g.40gb": 2, "1g.10gb": 3}, [("4g.40gb", ("2c.4g.40gb", "2c.4g.40gb"))] + [("1g.10gb", ())] * 3),
    ({"1g.10gb": 1, "1g.10gb+me": 1, "1g.20gb": 0, "2g.20gb": 1}, [("2g.20gb", ()), ("1g.10gb", ()), ("1g.10gb+me", ())]),
    ({"1c.2g.20gb": 1, "1c.2g.20gb+me": 1}, [("2g.20gb", ("1c.2g.20gb",)), ("2g.20gb+me", ("1c.2g.20gb+me",))]),
    ({}, []),
])
def test_mig_devices_are_packed_as_mig_parted_packs_them(mig_devices, made):
    result = wanted_from_mig_parted(doc(entry(mig_devices, [0])), None, *EIGHT_A100_40)
    assert [(i.profile, i.compute) for i in result[uuid(0)].instances] == made
    assert all(i.placement is None for i in result[uuid(0)].instances)


def test_device_filter_may_name_products_and_is_refused_where_a_pci_id_cannot_be_compared():
    inventory = node(("NVIDIA A100-SXM4-40GB", None), ("NVIDIA H100 80GB HBM3", H100))
    document = doc(entry({"1g.10gb": 1}, **{"device-filter": ["a100-sxm4-40gb", H100]}))
    assert list(wanted_from_mig_parted(document, "c", *inventory)) == [uuid(0), uuid(1)]
    assert list(wanted_from_mig_parted(doc(entry({}, **{"device-filter": "NVIDIA H100 80GB HBM3"})), "c",
                                       *inventory)) == [uuid(1)]
    assert refusal(doc(entry({}, **{"device-filter": [A100_40]})), inventory=inventory) == (
        'mig-configs.c[0].device-filter: "0x20B010DE" is a PCI device id, and the PCI device id of GPU 0 (%s) is not '
        'known, so whether the entry picks it cannot be told; filter by product name instead '
        '("NVIDIA A100-SXM4-40GB")' % uuid(0))
    assert wanted_from_mig_parted(doc(entry({}, [1], **{"device-filter": [A100_40]})), "c", *inventory) == {}


def test_a_subsystem_in_the_filter_must_match_and_one_only_the_gpu_has_is_ignored():
    inventory = node(("NVIDIA A100-SXM4-40GB", "0x20B010DE:0x145F10DE"))
    for pci, picked in (("0x20B010DE:0x145F10DE", True), ("0x20B010DE:0x134F10DE", False), (A100_40, True)):
        result = wanted_from_mig_parted(doc(entry({}, **{"device-filter": pci})), "c", *inventory)
        assert bool(result) is picked
    assert pci_id("0x20B010DE") == (0x20B010DE, None) and pci_id("20B010DE") is None and pci_id(" 0x1:0x2 ") == (1, 2)


def test_the_only_config_is_applied_when_none_is_named():
    assert shape(wanted_from_mig_parted(doc(entry({}, [2])), None, *EIGHT_A100_40)) == {2: (True, [])}


def test_an_entry_with_mig_off_may_list_an_empty_mig_devices_or_none():
    document = doc({"devices": [0], "mig-enabled": False, "mig-devices": {}},
                   {"devices": [1], "mig-enabled": False, "mig-devices": None}, {"devices": [2], "mig-enabled": False})
    assert shape(wanted_from_mig_parted(document, "c", *EIGHT_A100_40)) == {0: (False, []), 1: (False, []),
                                                                            2: (False, [])}


# --- refusals, each by its message ---------------------------------------------------------------------------

@pytest.mark.parametrize("document, config, message", [
    (["v1"], "c", 'mig_parted: must be a mig-parted config document ({version: v1, mig-configs: ...}), not a list'),
    ({"mig-configs": {"c": [entry({})]}}, "c",
     'mig_parted.version: must be "v1", the version of mig-parted\'s format this reads, not missing'),
    (dict(doc(entry({})), version=1), "c",
     'mig_parted.version: must be "v1", the version of mig-parted\'s format this reads, not 1'),
    (dict(doc(entry({})), version="v2"), "c",
     'mig_parted.version: must be "v1", the version of mig-parted\'s format this reads, not "v2"'),
    (dict(doc(entry({})), hooks={}), "c", 'mig_parted: unknown key "hooks" (version, mig-configs)'),
    ({"version": "v1"}, "c", "mig_parted.mig-configs: must be a mapping of 1 to 256 config names to their entries, "
                             "not None"),
    ({"version": "v1", "mig-configs": {}}, "c",
     "mig_parted.mig-configs: must be a mapping of 1 to 256 config names to their entries, not 0 of them"),
    ({"version": "v1", "mig-configs": dict(("c%d" % n, [entry({})]) for n in range(257))}, "c1",
     "mig_parted.mig-configs: must be a mapping of 1 to 256 config names to their entries, not 257 of them"),
    ({"version": "v1", "mig-configs": {"c": [entry({})], "bad name": [entry({})]}}, "c",
     'mig_parted.mig-configs: "bad name" is not a config name (letters, digits, \'_\', \'.\', \'+\' or \'-\', at '
     'most 128)'),
    ({"version": "v1", "mig-configs": {"c": [entry({})], 7: [entry({})]}}, "c",
     "mig_parted.mig-configs: 7 is not a config name (letters, digits, '_', '.', '+' or '-', at most 128)"),
    ({"version": "v1", "mig-configs": {"c": [entry({})], "d": []}}, "c",
     "mig-configs.d: must be a list of 1 to 64 entries, not 0 of them"),
    ({"version": "v1", "mig-configs": {"c": entry({})}}, "c", "mig-configs.c: must be a list of 1 to 64 entries, "
                                                              "not a mapping"),
    ({"version": "v1", "mig-configs": {"c": [entry({})] * 65}}, "c",
     "mig-configs.c: must be a list of 1 to 64 entries, not 65 of them"),
    ({"version": "v1", "mig-configs": {"c": [entry({})], "d": [entry({})]}}, None,
     "mig_config: missing; the document has 2 mig-configs, so which one to apply must be named"),
    ({"version": "v1", "mig-configs": dict(("c%d" % n, [entry({})]) for n in range(10))}, "all-1g.10gb",
     'mig_config: "all-1g.10gb" is not one of the document\'s mig-configs (c0, c1, c2, c3, c4, c5, c6, c7 and 2 more)'),
    (doc(entry({})), 1, 'mig_config: 1 is not one of the document\'s mig-configs (c)'),
    (doc(["all"]), "c", "mig-configs.c[0]: must be a mapping ({devices, mig-enabled, mig-devices}), not a list"),
    (doc(entry({}), entry({}, gpus=[0])), "c",
     'mig-configs.c[1]: unknown key "gpus" (device-filter, devices, mig-enabled, mig-devices)'),
    (doc({"mig-enabled": False}), "c",
     "mig-configs.c[0].devices: missing; mig-parted requires devices and mig-enabled in every entry"),
    (doc({"devices": "all"}), "c",
     "mig-configs.c[0].mig-enabled: missing; mig-parted requires devices and mig-enabled in every entry"),
    (doc({"devices": "all", "mig-enabled": "true"}), "c",
     'mig-configs.c[0].mig-enabled: must be true or false, not "true"'),
    (doc({"devices": "all", "mig-enabled": True}), "c",
     "mig-configs.c[0].mig-devices: missing; mig-enabled is true, so mig-devices says which MIG devices ({} for "
     "none)"),
    (doc({"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 0}}), "c",
     "mig-configs.c[0].mig-devices: mig-enabled is false, so no MIG device may be listed"),
    (doc(entry(["1g.5gb"])), "c",
     'mig-configs.c[0].mig-devices: must be a mapping of at most 32 MIG profile names to counts, not a list'),
    (doc(entry(dict(("%dg.5gb" % n, 0) for n in range(33)))), "c",
     'mig-configs.c[0].mig-devices: must be a mapping of at most 32 MIG profile names to counts, not 33 of them'),
    (doc(entry({"1g.5gb": 0, "2g.10gb": 0})), "c",
     "mig-configs.c[0].mig-devices: every count is 0; mig-parted refuses that (write {} for MIG on and no device)"),
    (doc(entry({"1g.5gb": 8})), "c",
     'mig-configs.c[0].mig-devices["1g.5gb"]: must be a whole number from 0 to 7, not 8'),
    (doc(entry({"1g.5gb": -1})), "c",
     'mig-configs.c[0].mig-devices["1g.5gb"]: must be a whole number from 0 to 7, not -1'),
    (doc(entry({"1g.5gb": "7"})), "c",
     'mig-configs.c[0].mig-devices["1g.5gb"]: must be a whole number from 0 to 7, not "7"'),
    (doc(entry({"9g.1tb": 1})), "c", 'mig-configs.c[0].mig-devices: "9g.1tb" is not a MIG profile name'),
    (doc(entry({"1c.9g.1tb": 1})), "c", 'mig-configs.c[0].mig-devices: "1c.9g.1tb" is not a MIG profile name'),
    (doc(entry({1.5: 1})), "c",
     'mig-configs.c[0].mig-devices: 1.5 is not a MIG profile name such as "1g.10gb" or "1c.3g.40gb"'),
    (doc(entry({"4c.3g.40gb": 1})), "c",
     'mig-configs.c[0].mig-devices["4c.3g.40gb"]: "4c.3g.40gb" takes 4 compute slices; a 3g.40gb GPU instance has 3'),
    (doc(entry({"5c.7g.80gb": 1})), "c",
     'mig-configs.c[0].mig-devices["5c.7g.80gb"]: "5c.7g.80gb": no compute instance profile has 5 slices'),
    (doc(entry({"1g.5gb": 7, "2g.10gb": 1})), "c",
     "mig-configs.c[0].mig-devices: 8 GPU instances once packed; a GPU has at most 7"),
    (doc(entry({}, "some")), "c",
     'mig-configs.c[0].devices: must be "all" or a list of at most 64 GPU indexes, not "some"'),
    (doc(entry({}, list(range(65)))), "c",
     'mig-configs.c[0].devices: must be "all" or a list of at most 64 GPU indexes, not 65 of them'),
    (doc(entry({}, [0, 8])), "c", "mig-configs.c[0].devices[1]: GPU 8 is not present (the node's GPUs: 0, 1, 2, 3, "
                                  "4, 5, 6, 7)"),
    (doc(entry({}, [0, "0"])), "c",
     'mig-configs.c[0].devices[1]: must be a GPU index from 0 to 255 or a GPU UUID (GPU-...), not "0"'),
    (doc(entry({}, [1, uuid(1)])), "c",
     "mig-configs.c[0].devices[1] names GPU 1 (%s), which mig-configs.c[0].devices[0] names too" % uuid(1)),
    (doc(entry({}, [1]), entry({"1g.5gb": 7})), "c",
     "mig-configs.c[1].devices picks GPU 1 (%s), which mig-configs.c[0].devices[0] picks too; a GPU may be picked "
     "by one entry only" % uuid(1)),
    (doc(entry({}, **{"device-filter": 0x20B010DE})), "c",
     'mig-configs.c[0].device-filter: must be a list of 1 to 16 PCI device ids such as "0x20B010DE" or product '
     'names, not 548409566'),
    (doc(entry({}, **{"device-filter": [A100_40, None]})), "c",
     "mig-configs.c[0].device-filter[1]: must be a PCI device id or a product name, 1 to 96 printable ASCII "
     "characters, not None"),
])
def test_refused(document, config, message):
    assert refusal(document, config) == message


# --- whatever the input: a LayoutError or a layout -----------------------------------------------------------

MIG_DEVICES = st.dictionaries(st.sampled_from(["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb", "1c.3g.20gb", "2c.3g.20gb",
                                               "3c.3g.20gb", "1c.7g.40gb", "4c.3g.20gb", "1g.5gb+me", "x"]),
                              mostly(st.integers(-1, 8)), max_size=5)
ENTRY = st.fixed_dictionaries({
    "devices": mostly(st.just("all") | st.lists(st.integers(-1, 3), max_size=3)),
    "mig-enabled": mostly(st.booleans()),
}, optional={
    "mig-devices": mostly(MIG_DEVICES | st.none()),
    "device-filter": mostly(st.lists(st.sampled_from([A100_40, A100_80, "0x20B010DE:0x1", "NVIDIA A100-SXM4-40GB",
                                                      "0x"]), max_size=3) | st.sampled_from([A100_40, "x"])),
})
DOCUMENT = st.fixed_dictionaries({"version": mostly(st.just("v1")), "mig-configs": mostly(st.dictionaries(
    mostly(st.sampled_from(["c", "d", "all-1g.5gb"]), st.sampled_from(["bad name", 7])), mostly(st.lists(mostly(ENTRY), min_size=1, max_size=3)),
    min_size=1, max_size=3))})
HALF_KNOWN = node(("NVIDIA A100-SXM4-40GB", A100_40), ("NVIDIA A100-SXM4-40GB", None), ("NVIDIA A100-SXM4-80GB", A100_80))


def holds_to_the_rules(result, inventory):
    assert isinstance(result, dict)
    for key, gpu in result.items():
        assert isinstance(gpu, WantedGpu) and gpu.uuid == key and inventory.gpu(key).index == gpu.index
        assert len(gpu.instances) <= MAX_INSTANCES and (gpu.mig_enabled or not gpu.instances)
        assert gpu.source.startswith("mig-configs.")
        for instance in gpu.instances:
            assert instance.placement is None and len(instance.compute) <= 7


@settings(max_examples=300, deadline=None)
@given(document=JSON, config=st.none() | st.sampled_from(["c", "d"]) | JSON)
def test_any_json_value_is_a_layout_or_a_layout_error(document, config):
    try:
        result = wanted_from_mig_parted(document, config, *HALF_KNOWN)
    except LayoutError as exc:
        assert str(exc).startswith(("mig_parted", "mig_config", "mig-configs.")) and str(exc).isprintable()
    else:
        holds_to_the_rules(result, HALF_KNOWN[0])


@settings(max_examples=400, deadline=None)
@given(document=DOCUMENT, config=st.none() | st.sampled_from(["c", "d", "all-1g.5gb"]))
def test_any_document_of_plausible_parts_is_a_layout_or_a_layout_error(document, config):
    try:
        result = wanted_from_mig_parted(document, config, *HALF_KNOWN)
    except LayoutError as exc:
        assert str(exc).startswith(("mig_parted", "mig_config", "mig-configs.")) and str(exc).isprintable()
    else:
        holds_to_the_rules(result, HALF_KNOWN[0])

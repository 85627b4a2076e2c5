# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/mig-layout.md says what ``bcd.devices.mig_layout`` does (issue 48): each message and output the page quotes is
made again here, in this process, on a fakehw node of two A100 80GB (MIG off, as the page starts), through the module
and ``bcd-holds``. Every line of the page's quoted refusals has its situation below, and every situation its line; the
first layout lands where the page says; the events tables are the event types and reasons the code journals; the
record the page shows is one the code reads; the boot run's output, ``held_missing`` and the re-rendered hold are as
the page tells them. A message changed in the code, or a line of the page, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.event_types import MIG_EVENT_TYPES, MIG_REASONS
from ansible_collections.bcd.devices.plugins.module_utils.entry import mig_layout as entry
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_ERROR, mig_lines
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import fakehw_reboot, read_mig_file
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import FakeMigSide
from ansible_collections.bcd.devices.plugins.module_utils.state.mig_record import parse_record
from ansible_collections.bcd.devices.plugins.modules import mig_layout
from ansible_collections.bcd.devices.tests.unit.builders import NO_CLASS, hold, mig
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "mig-layout.md"
MIG_PARTED_DEFAULT = REPO / "tests" / "data" / "mig-parted" / "deployments_systemd_config-default.yaml"
G0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
G1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
A100 = "NVIDIA A100-SXM4-80GB"
MIG_UUID = re.compile(r"MIG-[0-9a-f-]{36}")


# -- the page -----------------------------------------------------------------------------------------------------

def section(heading):
    """The text of the page's section ``## heading``, up to the next one."""
    text = PAGE.read_text(encoding="utf-8")
    assert "\n## %s\n" % heading in text, "docs/mig-layout.md has no section %r" % heading
    return text.split("\n## %s\n" % heading, 1)[1].split("\n## ", 1)[0]


def blocks(heading, language):
    """The fenced ``language`` blocks of a section, each as its list of lines."""
    return [body.splitlines() for body in re.findall(r"^```%s\n(.*?)^```$" % language, section(heading), re.M | re.S)]


def table_rows(text):
    """The body rows of the Markdown tables in ``text``, as lists of cells."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| ---") and not re.match(r"\| `?(type|reason)`? \|", line)]


def config_document():
    """The page's mig-parted document (its first YAML block)."""
    return yaml.safe_load("\n".join(blocks("A first layout", "yaml")[0]))


def trimmed(text):
    """Output as the page quotes it: MIG UUIDs trimmed to ``MIG-…``."""
    return MIG_UUID.sub("MIG-…", text)


# -- the node -------------------------------------------------------------------------------------------------------

@pytest.fixture
def node(make_node):
    """Two A100 80GB, MIG off, no instance: the page's node."""
    return make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False},
                           {"uuid": G1, "index": 1, "minor": 1, "name": A100, "mig_mode": False}])


def apply(capsys, node, check=False, diff=False, **args):
    args.update(root=node.root, fakehw=node.fakehw, lock_timeout=5)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return call(capsys, mig_layout.main, args)


def on_gpu(index, *instances):
    return {"devices": [index], "mig_enabled": True, "instances": list(instances)}


FIRST_EXAMPLE = [on_gpu(0, {"profile": "3g.40gb", "placement": 4}, {"profile": "2g.20gb", "count": 2}),
                 on_gpu(1, {"profile": "1g.10gb", "count": 7})]


def layout_now(node, gpu=G0):
    """``[(gi, ci, GI profile, start)]`` of a GPU as the fakehw file has it now."""
    found = read_mig_file(node.fakehw).gpu(gpu)
    return sorted((inst.gi, ci.ci, inst.profile, inst.placement.start) for inst in found.instances for ci in inst.compute)


# -- a first layout ---------------------------------------------------------------------------------------------------

def test_the_first_layout_lands_where_the_page_says_and_a_second_run_changes_nothing(capsys, node):
    done = apply(capsys, node, mig_parted=config_document(), mig_config="all-balanced")
    assert done["changed"] and not done.get("failed"), done["msg"]
    placed = [(1, 0, "3g.40gb", 4), (2, 0, "2g.20gb", 0), (3, 0, "1g.10gb", 2), (4, 0, "1g.10gb", 3)]
    assert layout_now(node, G0) == placed and layout_now(node, G1) == placed
    assert [item["device_id"] for item in done["gpus"][0]["after"]] == ["%s/gi%d/ci0" % (G0, gi) for gi in (1, 2, 3, 4)]
    text = section("A first layout")
    assert "a `3g.40gb` at memory slice 4, a `2g.20gb` at 0 and two `1g.10gb`\nat 2 and 3, GPU instances 1 to 4" in text
    again = apply(capsys, node, mig_parted=config_document(), mig_config="all-balanced")
    assert not again["changed"] and again["msg"] == "the MIG layout is as wanted"
    assert "(`%s`)" % again["msg"] in text


# -- refusals ---------------------------------------------------------------------------------------------------------

BAD_INPUT = {  # a line of the page's "Bad input" block: the layout (or the mig-parted config's name) that gets it
    "layout[0].devices[0]: GPU 7 is not present": [on_gpu(7, {"profile": "1g.10gb"})],
    "layout[1].devices[0] picks GPU 0": [on_gpu(0), on_gpu(0)],
    "layout[0].instances: more than 7 GPU instances": [on_gpu(0, {"profile": "1g.10gb", "count": 4},
                                                              {"profile": "1g.10gb", "count": 4})],
    "layout[0].instances: mig_enabled is false": [{"devices": [0], "mig_enabled": False,
                                                   "instances": [{"profile": "1g.10gb"}]}],
    "layout[0].instances[0].count: 2 instances": [on_gpu(0, {"profile": "3g.40gb", "placement": 4, "count": 2})],
    "layout[0].instances[0].compute[0]": [on_gpu(0, {"profile": "3g.40gb", "compute": ["1c.2g.20gb"]})],
    "9g.80gb is not a MIG profile": [on_gpu(0, {"profile": "9g.80gb"})],
    "3g.40gb cannot start at memory slice 2": [on_gpu(0, {"profile": "3g.40gb", "placement": 2})],
    "2 instances of 1g.10gb+me": [on_gpu(0, {"profile": "1g.10gb+me", "count": 2})],
    "more instances than the GPU has slices": [on_gpu(0, {"profile": "4g.40gb"}, {"profile": "3g.40gb"},
                                                      {"profile": "1g.10gb"})],
    "the instances do not fit": [on_gpu(0, {"profile": "4g.40gb"}, {"profile": "2g.20gb", "placement": 2})],
    'mig_config: "zz"': "zz",
}


def quoted_line(lines, start):
    found = [line for line in lines if start in line]
    assert len(found) == 1, "the page quotes %d lines with %r" % (len(found), start)
    return found[0]


def test_every_bad_input_the_page_quotes_is_refused_with_that_message_and_nothing_changes(capsys, node):
    [lines] = blocks("Bad input", "text")
    assert len(lines) == len(BAD_INPUT), "a quoted line without its situation below, or a situation without its line"
    hardware = Path(node.fakehw).read_bytes()
    for start, given in BAD_INPUT.items():
        if isinstance(given, str):
            done = apply(capsys, node, mig_parted=config_document(), mig_config=given)
        else:
            done = apply(capsys, node, layout=given)
        assert done["failed"] and done["msg"] == quoted_line(lines, start), done["msg"]
    assert Path(node.fakehw).read_bytes() == hardware
    assert not node.exists("/var/lib/bcd/events.jsonl") and not node.exists("/var/lib/bcd/mig-layout.json")


def test_a_pci_device_id_filter_is_refused_as_the_page_says(capsys, node):
    [[line]] = blocks("mig-parted's document", "text")
    document = yaml.safe_load(MIG_PARTED_DEFAULT.read_text())
    done = apply(capsys, node, mig_parted=document, mig_config="all-balanced")
    assert done["failed"] and done["msg"] == line


def test_mig_parteds_own_default_config_applies_as_it_is_where_sysfs_says_the_pci_device_ids(capsys, make_node):
    gpus = [{"uuid": uuid, "index": index, "minor": index, "name": A100, "mig_mode": False,
             "pci_bus_id": "0000:%02x:00.0" % (7 + index)} for index, uuid in enumerate((G0, G1))]
    node = make_node(gpus=gpus)
    for listed in gpus:
        node.write("/sys/bus/pci/devices/%s/device" % listed["pci_bus_id"], "0x20b2\n")  # A100-SXM4-80GB
        node.write("/sys/bus/pci/devices/%s/vendor" % listed["pci_bus_id"], "0x10de\n")
    document = yaml.safe_load(MIG_PARTED_DEFAULT.read_text())
    done = apply(capsys, node, mig_parted=document, mig_config="all-balanced")
    assert done["changed"] and not done.get("failed"), done["msg"]
    assert layout_now(node, G0) == layout_now(node, G1) == [
        (1, 0, "3g.40gb", 4), (2, 0, "2g.20gb", 0), (3, 0, "1g.10gb", 2), (4, 0, "1g.10gb", 3)]
    assert "so\nthat file applies as it is" in section("mig-parted's document")


def test_the_held_refusals_and_the_change_around_a_held_instance_are_the_modules(capsys, node):
    refusals, around = blocks("Never under a hold", "text")
    apply(capsys, node, layout=FIRST_EXAMPLE[:1])  # GPU 0: gi1 3g.40gb at 4, gi2 and gi3 2g.20gb
    node.run(1, [mig("alloc_train", "%s/gi1/ci0" % G0), hold("alloc_whole", G1, device_class=NO_CLASS)])
    seventh = apply(capsys, node, layout=[on_gpu(0, {"profile": "7g.80gb"}), on_gpu(1, {"profile": "7g.80gb"})])
    assert seventh["failed"] and seventh["msg"] == "; ".join(refusals[:2])
    planned = apply(capsys, node, check=True, diff=True,
                    layout=[on_gpu(0, {"profile": "3g.40gb"}, {"profile": "1g.10gb", "count": 4})])
    assert not planned.get("failed") and trimmed(planned["diff"]["after"]).splitlines() == around
    # the third: a 1g.10gb held at slice 3, and a 4g.40gb asked for beside it
    node.run(2, [])
    apply(capsys, node, layout=[on_gpu(0, {"profile": "1g.10gb", "placement": 3})])
    assert layout_now(node) == [(1, 0, "1g.10gb", 3)]
    node.run(3, [mig("alloc_train", "%s/gi1/ci0" % G0)])
    done = apply(capsys, node, layout=[on_gpu(0, {"profile": "1g.10gb"}, {"profile": "4g.40gb"})])
    assert done["failed"] and done["msg"] == refusals[2]
    assert len(refusals) == 3


def test_check_mode_diff_is_the_first_examples_as_quoted(capsys, node):
    [quoted] = blocks("Check mode and diff", "text")
    before = node.listing()
    done = apply(capsys, node, check=True, diff=True, layout=FIRST_EXAMPLE)
    assert node.listing() == before
    assert done["diff"]["after"].splitlines()[:len(quoted)] == quoted


# -- events, the record, the boot run ---------------------------------------------------------------------------------

def test_the_events_tables_are_the_types_and_reasons_the_code_journals():
    types, reasons = [table_rows(part) for part in section("Events").split("\n\n| `reason`", 1)]
    assert [row[0].strip("`") for row in types] == list(MIG_EVENT_TYPES)
    assert [row[0].strip("`") for row in reasons] == list(MIG_REASONS[MIG_EVENT_TYPES[0]])
    assert all(list(MIG_REASONS[kind]) == list(MIG_REASONS[MIG_EVENT_TYPES[0]]) for kind in MIG_EVENT_TYPES)
    recovery = (REPO / "docs" / "events.md").read_text(encoding="utf-8").split("\n## A GPU's recovery\n", 1)[1]
    rows = dict((row[0].strip("`"), row[-1]) for row in table_rows(recovery.split("\n## ", 1)[0]))
    for kind in MIG_EVENT_TYPES:
        assert all(reason in rows[kind] for reason in MIG_REASONS[kind]), kind


def test_the_record_the_page_shows_is_one_the_code_reads_with_the_fields_it_writes(capsys, node):
    [quoted] = blocks("The record and the boot run", "json")
    shown, problem = parse_record("\n".join(quoted).encode())
    assert problem is None and shown.gpus[G0].mig_enabled
    apply(capsys, node, layout=[on_gpu(0, {"profile": "3g.40gb", "placement": 4}, {"profile": "2g.20gb", "placement": 0})])
    written = json.loads(node.read("/var/lib/bcd/mig-layout.json"))
    page = json.loads("\n".join(quoted))

    def keys(value):
        if isinstance(value, dict):
            return dict((key, keys(item)) for key, item in value.items() if not key.startswith("GPU-"))
        if isinstance(value, list):
            return [keys(value[0])] if value and isinstance(value[0], (dict, list)) else []
        return None

    assert keys(page) == keys(written)
    assert page["gpus"][G0]["instances"][0]["placement"] == written["gpus"][G0]["instances"][0]["placement"] == [4, 4]


def test_the_boot_run_makes_the_recorded_layout_again_and_the_pass_renders_the_kept_hold_anew(capsys, node):
    [quoted] = blocks("The record and the boot run", "text")
    apply(capsys, node, layout=[on_gpu(0, {"profile": "3g.40gb", "placement": 4}, {"profile": "2g.20gb", "placement": 0})])
    node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    old = read_mig_file(node.fakehw).gpu(G0).instance(2).compute[0].uuid
    boot = fakehw_reboot(node.fakehw)
    node.write("/proc/sys/kernel/random/boot_id", boot + "\n")
    done = entry.converge_layout(node.host(), None, lock_timeout=5)
    assert mig_lines(done) == quoted and done["held_missing"] == []
    assert layout_now(node) == [(1, 0, "3g.40gb", 4), (2, 0, "2g.20gb", 0)]  # the same GI/CI at the same places
    new = read_mig_file(node.fakehw).gpu(G0).instance(2).compute[0].uuid
    assert new != old
    rendered = node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)]).to_dict()
    assert [step["action"] for step in rendered["plan"]] == ["rerender", "write-env"]
    spec = node.read("/etc/cdi/bcd-alloc_train.json").decode()
    assert new in spec and old not in spec
    assert "(its plan's `rerender` and `write-env` steps)" in section("Kept holds after a reboot")


def test_an_unreadable_record_fails_the_boot_run_with_exit_2(capsys, node):
    node.write("/var/lib/bcd/mig-layout.json", "{not json")
    code, _out, err = cli(capsys, node, "mig-layout", "--boot")
    assert code == EX_ERROR and "mig-layout.json cannot be read" in err
    assert "(`--boot` exits 2, and makes nothing)" in section("The record and the boot run")


def test_a_held_instance_the_layout_lacks_is_held_missing_as_the_page_says(capsys, node):
    apply(capsys, node, layout=FIRST_EXAMPLE[:1])
    node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    FakeMigSide(node.fakehw).apply(entry.MigOp(kind="destroy", gpu=G0, gi=2))  # someone else, by hand
    done = apply(capsys, node, layout=[on_gpu(1, {"profile": "7g.80gb"})])
    assert done["held_missing"] == [{"allocation_id": "alloc_train", "device_id": "%s/gi2/ci0" % G0}]
    said = "%s/gi2/ci0 is held by alloc_train but the layout has no such instance" % G0
    assert said in done["msg"]
    assert said.replace(G0, "GPU-…") in " ".join(section("Kept holds after a reboot").split())


def test_a_mode_change_that_waits_for_a_reset_is_not_a_failure_and_says_so(capsys, make_node):
    node = make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False,
                            "mig_mode_needs_reset": True}])
    done = apply(capsys, node, layout=FIRST_EXAMPLE[:1])
    assert not done.get("failed") and done["gpus"][0]["reset_needed"] and layout_now(node) == []
    said = "its MIG mode change waits for a GPU reset\n(bcd.devices.gpu_reset) or a reboot"
    assert said in section("MIG mode and GPU resets") and " ".join(said.split()) in done["msg"]

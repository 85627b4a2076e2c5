# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds mig-layout`` on fakehw nodes (issue 48): the layout from a file (the module's list, or a mig-parted
document and the config named), planned with ``--check`` and changing nothing, made, and then nothing to do; bad
input refused with exit 2 before anything changes; a GPU under a hold refused with exit 1, naming the hold; and
``--boot``, the boot unit's run, which makes the recorded layout again after a reboot (same GI/CI, fresh UUIDs) and
says when there is nothing to make or a hold's instance is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_CHECK, EX_ERROR, EX_OK, mig_lines
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import fakehw_reboot, read_mig_file
from ansible_collections.bcd.devices.tests.unit.builders import mig
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli

G0 = "GPU-5f1c2a90-0000-4000-8000-000000000001"
G1 = "GPU-5f1c2a90-0000-4000-8000-000000000002"
A100 = "NVIDIA A100-SXM4-40GB"

LAYOUT_YAML = """\
# GPU 0: a 3g.20gb at slice 4 and two 2g.10gb
- devices: [0]
  mig_enabled: true
  instances:
    - {profile: 3g.20gb, placement: 4}
    - {profile: 2g.10gb, count: 2}
"""
MIG_PARTED = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]}}


@pytest.fixture
def mig_node(make_node):
    """Two A100 40GB, MIG off on both, no instance."""
    return make_node(gpus=[{"uuid": G0, "index": 0, "minor": 0, "name": A100, "mig_mode": False},
                           {"uuid": G1, "index": 1, "minor": 1, "name": A100, "mig_mode": False}])


def layout_file(node, content, name="layout.yml"):
    path = "%s/%s" % (node.base, name)
    with open(path, "w") as handle:
        handle.write(content if isinstance(content, str) else json.dumps(content))
    return path


def layout_now(node):
    """``{gpu: [(gi, ci, GI profile, start, MIG uuid)]}`` as the fakehw file has it now."""
    return dict((gpu.uuid, sorted((inst.gi, ci.ci, inst.profile, inst.placement.start, ci.uuid)
                                  for inst in gpu.instances for ci in inst.compute))
                for gpu in read_mig_file(node.fakehw).gpus)


def test_a_layout_file_is_planned_made_and_then_as_wanted(capsys, mig_node):
    path = layout_file(mig_node, LAYOUT_YAML)
    before = mig_node.listing()
    code, out, err = cli(capsys, mig_node, "mig-layout", "--layout", path, "--check")
    assert (code, err) == (EX_OK, "")
    assert mig_node.listing() == before  # --check changes nothing, not even the state directory
    lines = out.splitlines()
    assert lines[0] == "%s (GPU 0): would make 4 changes: 0 MIG instances destroyed, 3 made, 0 kept" % G0
    assert lines[1:] == ["  %s: turn MIG mode on" % G0] + [
        "  %s: make GPU instance %s at memory slice %d with compute instances %s" % (G0, profile, start, profile)
        for profile, start in (("3g.20gb", 4), ("2g.10gb", 0), ("2g.10gb", 2))]

    code, out, err = cli(capsys, mig_node, "mig-layout", "--layout", path)
    assert (code, err) == (EX_OK, "")
    assert out.splitlines()[0] == "%s (GPU 0): made 4 changes: 0 MIG instances destroyed, 3 made, 0 kept" % G0
    made = layout_now(mig_node)
    assert [row[:4] for row in made[G0]] == [(1, 0, "3g.20gb", 4), (2, 0, "2g.10gb", 0), (3, 0, "2g.10gb", 2)]
    assert made[G1] == []  # not named: left as it is
    assert json.loads(mig_node.read("/var/lib/bcd/mig-layout.json"))["gpus"][G0]["mig_enabled"] is True

    code, out, _err = cli(capsys, mig_node, "mig-layout", "--layout", path)
    assert (code, out) == (EX_OK, "%s (GPU 0): as wanted: MIG on, 3 MIG instances\n" % G0)
    assert layout_now(mig_node) == made


def test_a_mig_parted_document_applies_the_config_named(capsys, mig_node):
    path = layout_file(mig_node, MIG_PARTED, "config.json")
    code, out, _err = cli(capsys, mig_node, "mig-layout", "--layout", path, "--mig-config", "all-1g.5gb", "--json")
    assert code == EX_OK
    done = json.loads(out)
    assert [gpu["uuid"] for gpu in done["gpus"]] == [G0, G1] and not done["failed"]
    assert [gpu["source"] for gpu in done["gpus"]] == ["mig-configs.all-1g.5gb[0]"] * 2
    for gpu in (G0, G1):
        assert [row[2] for row in layout_now(mig_node)[gpu]] == ["1g.5gb"] * 7
    code, out, _err = cli(capsys, mig_node, "mig-layout", "--layout", path, "--mig-config", "all-disabled")
    assert code == EX_OK
    assert out.splitlines()[0] == "%s (GPU 0): made 8 changes: 7 MIG instances destroyed, 0 made, 0 kept" % G0
    assert layout_now(mig_node) == {G0: [], G1: []}


@pytest.mark.parametrize("content, argv, message", [
    (LAYOUT_YAML.replace("3g.20gb", "5g.20gb"), [], "layout[0]: instance 0: 5g.20gb is not a MIG profile of NVIDIA A100"),
    (LAYOUT_YAML.replace("3g.20gb", "3g.20gb!"), [], "layout[0].instances[0].profile"),
    (LAYOUT_YAML.replace("[0]", "[7]"), [], "layout[0].devices"),
    (LAYOUT_YAML.replace("placement: 4", "placement: 5"), [], "placement"),
    ("- devices: [0]\n  mig_enabled: true\n  mig_enabled: false\n", [], "duplicate key"),
    ("devices: [0\n", [], "is neither JSON nor YAML"),
    ("", [], "is empty"),
    ("[" * 100 + "]" * 100, [], "nests deeper than 64 levels"),
    ("x" * (1 << 20) + "x", [], "longer than 1048576 bytes"),
    (json.dumps(MIG_PARTED), [], "--mig-config names the config to apply"),
    (json.dumps(MIG_PARTED), ["--mig-config", "no-such-config"], "no-such-config"),
    (LAYOUT_YAML, ["--mig-config", "all-1g.5gb"], "is a list of layout entries"),
    ('"all-1g.5gb"', [], "must be a list"),
])
def test_bad_input_exits_2_naming_what_is_wrong_and_changes_nothing(capsys, mig_node, content, argv, message):
    path = layout_file(mig_node, content)
    hardware = Path(mig_node.fakehw).read_bytes()
    code, out, err = cli(capsys, mig_node, "mig-layout", "--layout", path, *argv)
    assert code == EX_ERROR and out == ""
    assert err.startswith("ERROR: ") and message in err, err
    assert err.count("\n") == 1
    assert Path(mig_node.fakehw).read_bytes() == hardware  # refused before anything changed
    assert mig_node.read("/var/lib/bcd/events.jsonl") is None and not mig_node.exists("/var/lib/bcd/mig-layout.json")


def test_a_layout_file_that_is_not_there_exits_2(capsys, mig_node):
    code, _out, err = cli(capsys, mig_node, "mig-layout", "--layout", mig_node.base + "/nothing.yml")
    assert code == EX_ERROR and "cannot read the layout %s/nothing.yml" % mig_node.base in err


def test_boot_and_layout_are_one_or_the_other(capsys, mig_node):
    with pytest.raises(SystemExit) as exited:
        cli(capsys, mig_node, "mig-layout", "--boot", "--layout", "x.yml")
    assert exited.value.code == EX_ERROR
    code, _out, err = cli(capsys, mig_node, "mig-layout", "--boot", "--mig-config", "all-1g.5gb")
    assert code == EX_ERROR and "--mig-config names a config of a --layout file" in err


def test_a_gpu_under_a_hold_is_refused_with_exit_1_and_the_others_change(capsys, mig_node):
    path = layout_file(mig_node, LAYOUT_YAML)
    assert cli(capsys, mig_node, "mig-layout", "--layout", path)[0] == EX_OK
    mig_node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    made = layout_now(mig_node)[G0]
    both = layout_file(mig_node, [{"devices": [0], "mig_enabled": True, "instances": [{"profile": "7g.40gb"}]},
                                  {"devices": [1], "mig_enabled": True, "instances": [{"profile": "7g.40gb"}]}],
                       "both.json")
    code, out, err = cli(capsys, mig_node, "mig-layout", "--layout", both)
    assert code == EX_CHECK and err == ""
    first, second = [line for line in out.splitlines() if not line.startswith("  ")]
    assert first.startswith("%s (GPU 0): not changed: " % G0) and "alloc_train" in first, first
    assert second == "%s (GPU 1): made 2 changes: 0 MIG instances destroyed, 1 made, 0 kept" % G1
    assert layout_now(mig_node)[G0] == made
    assert [row[2] for row in layout_now(mig_node)[G1]] == ["7g.40gb"]


def test_boot_without_a_record_makes_nothing_and_writes_nothing(capsys, mig_node):
    before = mig_node.listing()
    code, out, err = cli(capsys, mig_node, "mig-layout", "--boot")
    assert (code, err) == (EX_OK, "")
    assert out == "no MIG layout is recorded in /var/lib/bcd/mig-layout.json: nothing to make\n"
    assert mig_node.listing() == before


def test_an_unreadable_record_at_boot_exits_2_saying_so(capsys, mig_node):
    mig_node.write("/var/lib/bcd/mig-layout.json", "{not json")
    code, out, err = cli(capsys, mig_node, "mig-layout", "--boot")
    assert code == EX_ERROR and out == ""
    assert "/var/lib/bcd/mig-layout.json cannot be read" in err and "there is no layout to make again" in err


def test_after_a_reboot_boot_makes_the_recorded_layout_again_with_the_same_gi_and_ci(capsys, mig_node):
    path = layout_file(mig_node, LAYOUT_YAML)
    cli(capsys, mig_node, "mig-layout", "--layout", path)
    before = layout_now(mig_node)[G0]
    mig_node.run(1, [mig("alloc_train", "%s/gi2/ci0" % G0)])
    boot = fakehw_reboot(mig_node.fakehw)
    mig_node.write("/proc/sys/kernel/random/boot_id", boot + "\n")
    assert layout_now(mig_node)[G0] == []

    code, out, err = cli(capsys, mig_node, "mig-layout", "--boot", "--check")
    assert (code, err) == (EX_OK, "")
    assert out.splitlines()[0] == "%s (GPU 0): would make 3 changes: 0 MIG instances destroyed, 3 made, 0 kept" % G0
    assert layout_now(mig_node)[G0] == []

    code, out, err = cli(capsys, mig_node, "mig-layout", "--boot")
    assert (code, err) == (EX_OK, "")
    assert out.splitlines()[0] == "%s (GPU 0): made 3 changes: 0 MIG instances destroyed, 3 made, 0 kept" % G0
    assert "held but missing" not in out
    after = layout_now(mig_node)[G0]
    assert [row[:4] for row in after] == [row[:4] for row in before]
    assert all(new[4] != old[4] for new, old in zip(after, before))  # fresh MIG UUIDs
    assert cli(capsys, mig_node, "mig-layout", "--boot")[1].splitlines()[0] == (
        "%s (GPU 0): as wanted: MIG on, 3 MIG instances" % G0)


def test_a_held_instance_the_layout_lacks_is_named_on_its_gpu_s_line(capsys, mig_node):
    path = layout_file(mig_node, LAYOUT_YAML)
    cli(capsys, mig_node, "mig-layout", "--layout", path)
    mig_node.run(1, [mig("alloc_train", "%s/gi3/ci0" % G0)])
    fewer = layout_file(mig_node, LAYOUT_YAML.replace("count: 2", "count: 1"), "fewer.yml")
    boot = fakehw_reboot(mig_node.fakehw)
    mig_node.write("/proc/sys/kernel/random/boot_id", boot + "\n")
    # after the reboot (MIG mode stays on) the layout has gi1 and gi2 only: the hold's gi3 is not made
    code, out, _err = cli(capsys, mig_node, "mig-layout", "--layout", fewer)
    assert code == EX_OK
    assert out.splitlines()[0] == ("%s (GPU 0): made 2 changes: 0 MIG instances destroyed, 2 made, 0 kept; held but "
                                   "missing: %s/gi3/ci0 (held by alloc_train)" % (G0, G0))


def test_every_line_is_escaped():
    hostile = "GPU-\x1b]0;owned\x07"
    done = {"check_mode": False, "held_missing": [{"device_id": hostile + "/gi1/ci0", "allocation_id": "a\nb"}],
            "gpus": [{"uuid": G0, "index": 0, "refused": "held by \x1b[31mred\x1b[0m", "error": None,
                      "reset_needed": False, "ops": [], "before": [], "kept": [], "mig_enabled": True}]}
    lines = mig_lines(done)
    assert lines == ["%s (GPU 0): not changed: held by \\x1b[31mred\\x1b[0m" % G0,
                     "GPU-\\x1b]0;owned\\x07: held but missing: GPU-\\x1b]0;owned\\x07/gi1/ci0 (held by a\\nb)"]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's MIG layout (issue 48): ``bcd_holds_mig_layout`` applied by ``bcd.devices.mig_layout`` before the pass,
the boot unit ``bcd-holds-mig-layout.service`` rendered (``systemd-analyze verify``) and installed with it, and
removed without it.

The role runs for real (ansible-playbook, as root) on a fakehw node of two A100s: the layout is made, a re-run is the
layout's run and the pass from the installed library and changes nothing, the installed ``bcd-holds mig-layout
--boot`` makes the layout again after a reboot; a GPU something holds fails the role naming the hold, unless the same
run's pass releases the hold, after which the layout is applied again; and with the layout unset the unit goes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import fakehw_reboot, read_mig_file
from ansible_collections.bcd.devices.tests.unit.roles.test_role_rerun import (
    ANSIBLE_PLAYBOOK,
    ROLE,
    ROLE_PLAY,
    Node,
    _collection,
    recap,
    tasks_run,
)
from ansible_collections.bcd.devices.tests.unit.roles.test_root_isolation import RoleVars, parse_unit, written_units

G0 = "GPU-5f1c2a90-0001-4000-8000-000000000000"
G1 = "GPU-5f1c2a90-0001-4000-8000-000000000001"
A100 = "NVIDIA A100-SXM4-40GB"
LAYOUT = [{"devices": [0], "mig_enabled": True,
           "instances": [{"profile": "3g.20gb", "placement": 4}, {"profile": "2g.10gb", "count": 2}]}]
UNIT = "bcd-holds-mig-layout.service"


# -- the unit, rendered --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("helper", (True, False))
def test_the_boot_unit_passes_systemd_analyze_verify(tmp_path, helper):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd gives it; nothing is started)")
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    program = prefix / "bin" / "bcd-holds"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    role_vars = RoleVars(dict(bcd_holds_mig_layout=LAYOUT, bcd_holds_helper=helper, bcd_holds_prefix=str(prefix)))
    units = written_units(role_vars)
    path = tmp_path / UNIT
    path.write_text(units[UNIT], encoding="utf-8")
    result = subprocess.run([tool, "verify", str(path)], capture_output=True, text=True, check=False, timeout=120)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.parametrize("overrides, wanted", [
    ({}, False),
    ({"bcd_holds_mig_layout": LAYOUT}, True),
    ({"bcd_holds_mig_parted": {"version": "v1", "mig-configs": {}}, "bcd_holds_mig_config": "x"}, True),
    ({"bcd_holds_mig_layout": LAYOUT, "bcd_holds_mig_boot": False}, False),
    ({"bcd_holds_mig_boot": True}, True),   # the layout some other run recorded, made again
])
def test_the_unit_is_written_with_a_layout_or_when_asked(overrides, wanted):
    assert (UNIT in written_units(RoleVars(overrides))) == wanted


def test_the_unit_runs_the_installed_command_as_root_with_the_node_s_arguments():
    units = written_units(RoleVars(dict(bcd_holds_mig_layout=LAYOUT, bcd_holds_root="/srv/node",
                                        bcd_holds_fakehw="/srv/node/fakehw.yml", bcd_holds_state_dir="/var/lib/x")))
    entries = parse_unit(units[UNIT])
    assert [value for _s, key, value in entries if key == "ExecStart"] == [
        "/usr/local/bin/bcd-holds mig-layout --boot --state-dir /var/lib/x --fakehw /fakehw.yml"]
    assert ("Service", "WorkingDirectory", "/") in entries and not any(key == "User" for _s, key, _v in entries)


# -- the role, for real --------------------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(),
                                reason="needs root (the role creates an account) and ansible-playbook")


@pytest.fixture
def base():
    """A directory the pass account can reach (pytest's own is root's 0700), as test_role_rerun's."""
    path = tempfile.mkdtemp(prefix="bcd-role-mig.")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def a100_node(base):
    node = Node(base, _collection(base))
    data = json.loads(node.fakehw.read_text())
    data["gpus"] = [{"uuid": uuid, "index": i, "minor": i, "numa_node": 0, "name": A100, "mig_mode": False}
                    for i, uuid in enumerate((G0, G1))]
    node.fakehw.write_text(json.dumps(data))
    node.devices = [{"allocation_id": "a1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD",
                     "devices": [{"id": G1, "device_class": "gpu"}]}]
    return node


def run_role(node, generation=1, **role_vars):
    """The role's run, which may fail: (exit status, output)."""
    path = node.base / "play.yml"
    path.write_text(ROLE_PLAY)
    extra = dict(bcd_holds_root=str(node.root), bcd_holds_fakehw=str(node.fakehw), bcd_holds_systemd=False,
                 bcd_holds_install_dependencies=False, bcd_holds_generation=generation, bcd_holds_devices=node.devices,
                 **role_vars)
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(node.base / "hosts.yml"), str(path), "-e",
                           json.dumps(extra)], env=node.env, cwd=str(node.base), capture_output=True, text=True,
                          timeout=600, check=False)
    return done.returncode, done.stdout + done.stderr


def layout_now(node, uuid):
    return [(inst.gi, inst.profile, inst.placement.start, tuple(ci.uuid for ci in inst.compute))
            for inst in read_mig_file(str(node.fakehw)).gpu(uuid).instances]


@needs_root
def test_the_role_applies_the_layout_installs_the_boot_unit_and_a_re_run_changes_nothing(base):
    node = a100_node(base)
    unit = node.root / "etc" / "systemd" / "system" / UNIT
    first = node.role(bcd_holds_mig_layout=LAYOUT)
    assert "Record the install" in tasks_run(first)
    made = layout_now(node, G0)
    assert [row[:3] for row in made] == [(1, "3g.20gb", 4), (2, "2g.10gb", 0), (3, "2g.10gb", 2)]
    assert layout_now(node, G1) == []
    assert "mig-layout --boot --state-dir /var/lib/bcd --fakehw %s" % node.fakehw in unit.read_text()
    assert json.loads((node.root / "var" / "lib" / "bcd" / "mig-layout.json").read_text())["gpus"][G0]["instances"]

    again = node.role(bcd_holds_mig_layout=LAYOUT)
    assert "Record the install" not in tasks_run(again) and recap(again)[1] == 0, again
    assert tasks_run(again)[:4] == ["Validating arguments against arg spec 'main'", "Apply the MIG layout",
                                    "Have NVIDIA's CDI refresh generate its spec for the new MIG devices",
                                    "Converge the holds"]
    assert layout_now(node, G0) == made

    # the boot unit's command, as installed: after a reboot the same GI at the same placements, fresh MIG UUIDs
    boot = fakehw_reboot(str(node.fakehw))
    (node.root / "proc" / "sys" / "kernel" / "random").mkdir(parents=True)
    (node.root / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    command = [sys.executable, "-I", str(node.root / "usr" / "local" / "bin" / "bcd-holds"), "mig-layout", "--boot",
               "--root", str(node.root), "--fakehw", str(node.fakehw)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("%s (GPU 0): made 3 changes" % G0), done.stdout
    remade = layout_now(node, G0)
    assert [row[:3] for row in remade] == [row[:3] for row in made] and remade != made

    # no layout: the unit goes (a changed install: the full run), the layout stays as it is
    gone = node.role()
    assert "Record the install" in tasks_run(gone) and not unit.exists()
    assert layout_now(node, G0) == remade


@needs_root
def test_a_held_gpu_fails_the_role_unless_the_same_run_releases_it(base):
    node = a100_node(base)
    node.role(bcd_holds_mig_layout=LAYOUT)
    both = LAYOUT + [{"devices": [1], "mig_enabled": True, "instances": [{"profile": "7g.40gb"}]}]
    code, output = run_role(node, bcd_holds_mig_layout=both)
    assert code != 0
    assert "Apply the MIG layout again where a hold refused a GPU before the pass" in tasks_run(output)
    assert "%s (GPU 1) is not changed" % G1 in output and "a1" in output, output[-4000:]
    assert layout_now(node, G1) == []

    # the same layout in a run whose pass releases a1: refused before the pass, made after it
    node.devices = []
    code, output = run_role(node, 2, bcd_holds_mig_layout=both)
    assert code == 0 and "[WARNING]" not in output, output[-4000:]
    names = tasks_run(output)
    assert names.index("Apply the MIG layout") < names.index("Converge the holds") < names.index(
        "Apply the MIG layout again where a hold refused a GPU before the pass"), names
    assert re.search(r"TASK \[bcd\.devices\.bcd_holds : Apply the MIG layout again .*\n(.*\n)?changed: \[node-a\]",
                     output), output[-4000:]
    assert [row[1] for row in layout_now(node, G1)] == ["7g.40gb"], output[-4000:]
    assert not (node.root / "etc" / "cdi" / "bcd-a1.json").exists()


# -- the README's example --------------------------------------------------------------------------------------------

def readme_layout():
    """The ``bcd_holds_mig_layout`` block of the role's README, as written."""
    text = (ROLE / "README.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("bcd_holds_mig_layout:")]
    return yaml.safe_load(block)["bcd_holds_mig_layout"]


def test_the_readme_s_layout_is_made_on_two_a100_80gb(capsys, make_node):
    node = make_node(gpus=[{"uuid": uuid, "index": i, "minor": i, "name": "NVIDIA A100-SXM4-80GB", "mig_mode": False}
                           for i, uuid in enumerate((G0, G1))])
    path = node.base + "/layout.json"
    with open(path, "w") as handle:
        json.dump(readme_layout(), handle)
    assert main(["mig-layout", "--layout", path, "--root", node.root, "--fakehw", node.fakehw]) == EX_OK
    capsys.readouterr()
    for uuid in (G0, G1):
        assert [row[:3] for row in layout_now(node, uuid)] == [(1, "3g.40gb", 4), (2, "2g.20gb", 0), (3, "2g.20gb", 2)]

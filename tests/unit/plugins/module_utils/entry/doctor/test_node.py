# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds doctor``'s checks of the node itself. Issue 33, item 1: ``doctor`` checks "one GPU, one hold" over
the node's specs and env files, with the rule the planner and the root helper apply
(``conflicts.one_gpu_one_hold``), and fails when it does not hold. And whether the node is as the role's last
install recorded it."""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.entry.doctor.node import check_install, installed_manifest
from ansible_collections.bcd.devices.plugins.module_utils.node import library as node_library
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.doctor.conftest import doctor_run


def test_one_gpu_one_hold_passes_on_a_converged_node(capsys, healthy):
    code, checks, lines = doctor_run(capsys, healthy)
    assert code == EX_OK
    assert checks["one-hold"] == ("OK", "each GPU, or part of one, is held once (1 specs, 1 env files)")
    names = [line.split()[1] for line in lines]
    assert names.index("one-hold") == names.index("holds") + 1


def test_a_second_spec_or_an_env_file_naming_a_held_gpu_fails_doctor(capsys, healthy):
    healthy.write("/run/bcd/allocations/a2.env", "BCD_ALLOCATION_ID=a2\nNVIDIA_VISIBLE_DEVICES=%s\n" % GPU_B)
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s is assigned to a1" % GPU_B)
    healthy.write("/var/run/cdi/bcd-a3.json", healthy.read("/etc/cdi/bcd-a1.json").replace(b"a1", b"a3"))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s is assigned to a1; a3: %s is assigned to a1" % (GPU_B, GPU_B))


def test_an_env_file_naming_a_gpu_its_spec_lacks_fails_doctor_where_another_holds_it(capsys, healthy):
    # a2's spec holds GPU_A; a1's spec is GPU_B's, but its env file names GPU_A too: two files hand out GPU_A
    healthy.write("/etc/cdi/bcd-a2.json", healthy.read("/etc/cdi/bcd-a1.json").replace(b"a1", b"a2")
                  .replace(GPU_B.encode(), GPU_A.encode()))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code == EX_OK and checks["one-hold"][0] == "OK"
    healthy.write("/run/bcd/allocations/a1.env", "BCD_ALLOCATION_ID=a1\nNVIDIA_VISIBLE_DEVICES=%s,%s\n" % (GPU_B, GPU_A))
    code, checks, _lines = doctor_run(capsys, healthy)
    assert code != EX_OK
    assert checks["one-hold"] == ("ERROR", "a2: %s has %s (env file) assigned to a1" % (GPU_A, GPU_A))


# -- install: the node as the role's last install recorded it -------------------------------------------------------

def test_doctor_says_whether_the_node_is_as_the_role_s_install_recorded_it(tmp_path):
    # beside the library this code runs from: <lib>/installed.json, <lib> seven directories above entry/doctor/node.py
    assert installed_manifest().endswith(os.sep + "installed.json")
    assert os.path.isdir(os.path.join(os.path.dirname(installed_manifest()), "ansible_collections"))
    manifest = str(tmp_path / "installed.json")
    missing = check_install(manifest)
    assert (missing["level"], missing["name"]) == ("OK", "install") and "no record" in missing["message"]
    unit = tmp_path / "bcd-holds-drift.timer"
    unit.write_text("[Timer]\n")
    with open(manifest, "w") as handle:
        json.dump(node_library.install_manifest({"digest": "d" * 64, "files": [str(unit)]}), handle)
    os.chmod(manifest, 0o600)
    if os.geteuid() != 0:  # the record is root's: only root's reads it
        return
    assert check_install(manifest)["level"] == "OK"
    unit.unlink()
    drifted = check_install(manifest)
    assert drifted["level"] == "WARN"
    assert "%s is missing" % unit in drifted["message"] and "rerun the role bcd.devices.bcd_holds" in drifted["message"]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``cdi-lint`` on spec directories as a runtime loads them (``domain/cdi_lint.py``, ``node/cdi_files.py``)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_lint import MAX_FILES, SpecFile, lint
from ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files import read_spec_dirs
from ansible_collections.bcd.devices.tests.unit.conftest import NVIDIA_CDI


def ours(device, allocation="a1"):
    return json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu",
                       "annotations": {"bcd.dev/allocation-id": allocation},
                       "devices": [{"name": device, "containerEdits": {"env": ["A=1"]}}]}).encode()


def summaries(findings):
    return [(f.level, f.summary()) for f in findings]


def test_real_nvidia_specs_and_a_hold_of_ours_lint_clean():
    files = [SpecFile("/var/run/cdi", path.name, path.read_bytes()) for path in sorted(NVIDIA_CDI.iterdir())
             if path.name != "constructed_mig_nvidia.yaml" and "wsl" not in path.name]
    files.append(SpecFile("/etc/cdi", "bcd-a1.json", ours("GPU-1")))
    assert summaries(lint(files)) == []


def test_a_device_in_both_directories_is_a_warning_naming_the_winner():
    files = [SpecFile("/etc/cdi", "bcd-a1.json", ours("GPU-1")),
             SpecFile("/var/run/cdi", "elsewhere.json", ours("GPU-1"))]
    assert summaries(lint(files)) == [
        ("WARN", "/var/run/cdi/elsewhere.json: claims kind bcd.dev/gpu but is no hold of bcd's; the converger neither "
                 "owns nor removes it"),
        ("WARN", "/etc/cdi/bcd-a1.json: bcd.dev/gpu=GPU-1 is also defined by /var/run/cdi/elsewhere.json, which wins "
                 "(/var/run/cdi has priority)")]


@pytest.mark.parametrize("content, why", [
    (b"[1, 2]", "holds no CDI spec (no mapping at the top)"),
    (b"\xff\xfe", "is not UTF-8 text"),
    (b"[" * 100000, "not valid"),
    (json.dumps({"cdiVersion": "9.9.9", "kind": "bcd.dev/gpu", "devices": []}).encode(), "is not valid CDI"),
    (None, "cannot be read: Permission denied"),
])
def test_a_file_no_runtime_would_load_is_an_error_never_an_exception(content, why):
    findings = lint([SpecFile("/etc/cdi", "x.json", content, "Permission denied" if content is None else "")])
    assert [f.level for f in findings] == ["ERROR"] and why in findings[0].message
    assert len(findings[0].message) <= 300


def test_a_bcd_named_file_of_another_kind_and_a_set_aside_spec_are_named():
    other = json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/other",
                        "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}]}).encode()
    files = [SpecFile("/etc/cdi", "bcd-a2.json", other),
             SpecFile("/etc/cdi", "bcd-a3.json.damaged-20261203T101500Z", b"{"),
             SpecFile("/etc/cdi", "notes.txt", b"ignored: runtimes load only .json and .yaml")]
    assert [(f.level, f.path) for f in lint(files)] == [
        ("WARN", "/etc/cdi/bcd-a2.json"), ("WARN", "/etc/cdi/bcd-a3.json.damaged-20261203T101500Z")]
    assert "kind is 'example.com/other'" in lint(files)[0].message


def test_the_files_read_are_bounded_and_links_are_not_followed(tmp_path):
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    (cdi / "bcd-a1.json").write_bytes(ours("GPU-1"))
    os.symlink("/etc/passwd", str(cdi / "evil.json"))
    (cdi / "sub").mkdir()
    files = read_spec_dirs(str(tmp_path))
    assert [(f.directory, f.name, f.content is not None) for f in files] == [
        ("/etc/cdi", "bcd-a1.json", True), ("/etc/cdi", "evil.json", False)]
    assert summaries(lint(files)) == [
        ("WARN", "/etc/cdi/evil.json: is a symbolic link (to /etc/passwd); runtimes follow it, the lint does not")]
    many = [SpecFile("/etc/cdi", "f%05d.txt" % i, b"") for i in range(MAX_FILES + 1)]
    assert summaries(lint(many)) == [("WARN", "/etc/cdi: %d files; only the first %d are checked"
                                      % (MAX_FILES + 1, MAX_FILES))]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtimes' CDI versions, their ``--version`` outputs, finding them on a node, and the probes
that tell a stale vendor spec (``domain/cdi/runtimes.py``, ``node/runtimes.py``, ``domain/cdi/staleness.py``)."""

from __future__ import annotations

import os
import random
import stat
import time

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import runtimes as cdi_runtimes
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.lint import TEMP_FILE_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import (
    NOT_A_DEVICE,
    driver_version_from_proc,
    generated_for,
    stale_edits,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import KNOWN_VERSIONS
from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import RealHost
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import (
    cdi_enabled,
    detect_runtimes,
    resolve_in_root,
)
from ansible_collections.bcd.devices.tests.unit.conftest import DATA

SAMPLES = DATA / "runtimes"


# -- the table ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, version, expected", [
    # containerd: the 1.7 line, then 2.x; 1.7.27+ (made after 2.0) must not leak into 2.0.0-2.0.4 or back
    ("containerd", "1.6.20", None), ("containerd", "1.6.38", None), ("containerd", "1.7.0", "0.5.0"),
    ("containerd", "1.7.11", "0.5.0"), ("containerd", "1.7.12", "0.6.0"), ("containerd", "1.7.15", "0.6.0"),
    ("containerd", "1.7.16", "0.7.0"), ("containerd", "1.7.19", "0.7.0"), ("containerd", "1.7.20", "0.7.0"),
    ("containerd", "1.7.26", "0.7.0"), ("containerd", "1.7.27", "0.8.0"), ("containerd", "1.7.30", "0.8.0"),
    ("containerd", "1.8.0", "0.8.0"), ("containerd", "2.0.0", "0.8.0"), ("containerd", "2.0.4", "0.8.0"),
    ("containerd", "2.0.5", "1.0.0"), ("containerd", "2.0.11", "1.0.0"), ("containerd", "2.1.0", "1.0.0"),
    ("containerd", "2.2.0", "1.0.0"), ("containerd", "2.2.1", "1.1.0"), ("containerd", "2.3.4", "1.1.0"),
    ("containerd", "v2.0.5", "1.0.0"), ("containerd", "1.6.20~ds1", None), ("containerd", "1.7.24~ds1-1", "0.7.0"),
    # docker (dockerd): 25.0.17 (a 25.0 patch made after 28.x) must not leak into 26.0
    ("docker", "24.0", None), ("docker", "24.0.7", None), ("docker", "25.0.0", "0.6.0"),
    ("docker", "25.0.16", "0.6.0"), ("docker", "25.0.17", "0.8.0"), ("docker", "26.0.0", "0.6.0"),
    ("docker", "26.0.2", "0.6.0"), ("docker", "26.1.0", "0.7.0"), ("docker", "27.3.1", "0.7.0"),
    ("docker", "27.3.1-ce", "0.7.0"), ("docker", "27.4.0", "0.8.0"), ("docker", "28.0.4", "0.8.0"),
    ("docker", "28.1.0", "1.0.0"), ("docker", "29.1.5", "1.0.0"), ("docker", "29.2.0", "1.1.0"),
    ("docker", "29.7.2", "1.1.0"),
    # podman
    ("podman", "3.4.4", None), ("podman", "4.0.3", "0.2.0"), ("podman", "4.2.1", "0.4.0"),
    ("podman", "4.3.1", "0.5.0"), ("podman", "4.6.2", "0.5.0"), ("podman", "4.7.0", "0.6.0"),
    ("podman", "4.9.3", "0.6.0"), ("podman", "5.0.3", "0.6.0"), ("podman", "5.1.2", "0.7.0"),
    ("podman", "5.2.0", "0.8.0"), ("podman", "5.4.2", "0.8.0"), ("podman", "5.4.2+ds1-2", "0.8.0"),
    ("podman", "5.5.0", "1.0.0"), ("podman", "6.0.0", "1.0.0"),
    # cri-o
    ("cri-o", "1.23.5", None), ("cri-o", "1.24.6", "0.3.0"), ("cri-o", "1.27.4", "0.5.0"),
    ("cri-o", "1.28.1", "0.6.0"), ("cri-o", "1.29.9", "0.6.0"), ("cri-o", "1.30.0", "0.7.0"),
    ("cri-o", "1.31.0", "0.8.0"), ("cri-o", "1.32.5", "0.8.0"), ("cri-o", "1.33.0", "1.0.0"),
    ("cri-o", "1.34.2", "1.0.0"), ("cri-o", "1.35", "1.1.0"), ("cri-o", "1.36.3", "1.1.0"),
    ("crio", "1.35.0", "1.1.0"),
])
def test_each_release_maps_to_the_newest_cdi_version_its_library_loads(name, version, expected):
    assert cdi_runtimes.max_cdi_version(name, version) == expected


def test_the_table_is_ordered_and_names_only_known_cdi_versions():
    assert sorted(cdi_runtimes.TABLE) == sorted(cdi_runtimes.RUNTIME_NAMES)
    for name, rows in cdi_runtimes.TABLE.items():
        firsts = [first for first, _cdi in rows]
        assert firsts == sorted(set(firsts)), name
        for first, cdi_version in rows:
            assert len(first) == 3 and all(isinstance(part, int) for part in first)
            assert cdi_version in KNOWN_VERSIONS, (name, first)


@pytest.mark.parametrize("text, key", [
    ("2.0.5", (2, 0, 5)), ("v2.0.5", (2, 0, 5)), ("27.3.1-ce", (27, 3, 1)), ("2.0.0-rc.1", (2, 0, 0)),
    ("1.6.20~ds1", (1, 6, 20)), ("5.4.2+dfsg", (5, 4, 2)), ("5.4.2-1", (5, 4, 2)), ("25.0", (25, 0, 0)),
    ("5", (5, 0, 0)), ("1.2.3.4", (1, 2, 3)), (" 1.28.1\n", (1, 28, 1)), (5, (5, 0, 0)), (5.4, (5, 4, 0)),
])
def test_version_key_takes_the_first_three_numbers(text, key):
    assert cdi_runtimes.version_key(text) == key


@pytest.mark.parametrize("text", ["", "abc", "-1.0", "version 5", None, True, [], {}, "1" * 12, 10 ** 30, -1,
                                  "x" * 10 ** 6])
def test_version_key_refuses_text_without_a_version(text):
    with pytest.raises(ValueError):
        cdi_runtimes.version_key(text)


def test_an_unknown_runtime_is_a_value_error():
    with pytest.raises(ValueError, match="must be one of containerd, docker, podman, cri-o, not 'runc'"):
        cdi_runtimes.max_cdi_version("runc", "1.1.0")


# -- --version outputs --------------------------------------------------------------------------

@pytest.mark.parametrize("sample, name, version", [
    ("docker-28.2.2.txt", "docker", "28.2.2"),
    ("docker-26.1.5-debian.txt", "docker", "26.1.5+dfsg1"),
    ("containerd-1.7.24-debian.txt", "containerd", "1.7.24~ds1"),
    ("containerd-1.7.27-containerd.io.txt", "containerd", "1.7.27"),
    ("containerd-2.0.5-upstream.txt", "containerd", "2.0.5"),
    ("containerd-1.6.20-debian.txt", "containerd", "1.6.20~ds1"),
    ("podman-5.4.2.txt", "podman", "5.4.2"),
    ("podman-4.3.1.txt", "podman", "4.3.1"),
    ("crio-1.31.0.txt", "cri-o", "1.31.0"),
    ("crio-1.28.1.txt", "cri-o", "1.28.1"),
])
def test_the_version_is_read_from_each_recorded_output(sample, name, version):
    found = cdi_runtimes.version_from_output(name, (SAMPLES / sample).read_text())
    assert found == version


def test_debian_trixies_docker_and_containerd_as_captured_load_cdi_0_7_0_at_most():
    """What the e2e rootfs's dockerd and containerd print (captured there): Docker 26.1.5 refuses a
    0.8.0 spec in the e2e suite, so a node with it is never written one."""
    docker = cdi_runtimes.version_from_output("dockerd", (SAMPLES / "docker-26.1.5-debian.txt").read_text())
    containerd = cdi_runtimes.version_from_output("containerd", (SAMPLES / "containerd-1.7.24-debian.txt").read_text())
    assert cdi_runtimes.runtime("docker", docker).max_cdi_version == "0.7.0"
    assert cdi_runtimes.runtime("containerd", containerd).max_cdi_version == "0.7.0"
    both = [cdi_runtimes.runtime("podman", "5.4.2"), cdi_runtimes.runtime("docker", docker)]
    assert cdi_runtimes.ceiling(both).name == "docker"


def test_every_recorded_output_is_tested_and_described():
    samples = sorted(p.name for p in SAMPLES.iterdir() if p.suffix == ".txt")
    readme = (SAMPLES / "README.md").read_text()
    assert samples and all("`%s`" % sample in readme for sample in samples)
    tested = test_the_version_is_read_from_each_recorded_output.pytestmark[0].args[1]
    assert sorted(sample for sample, _n, _v in tested) == samples


@pytest.mark.parametrize("name, text, version", [
    ("containerd", "containerd github.com/containerd/containerd v1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n",
     "1.7.27"),
    ("docker", "Docker version 20.10.24+dfsg1, build 297e128\n", "20.10.24+dfsg1"),
    ("docker", "Docker version 27.3.1-ce, build 41ca978", "27.3.1-ce"),
    ("podman", "podman-remote version 5.4.2", "5.4.2"),
    ("cri-o", "INFO[0000] a log line first\ncrio version 1.35.0\nGitCommit: abc", "1.35.0"),
    ("cri-o", "Version:        1.28.1\nGitCommit:      unknown\n", "1.28.1"),  # the info block without its header
])
def test_the_version_is_read_from_other_known_forms(name, text, version):
    assert cdi_runtimes.version_from_output(name, text) == version


@pytest.mark.parametrize("name, text, message", [
    ("podman", "Error: unknown flag", "no version in its output ('Error: unknown flag')"),
    ("docker", "", "no version in its output (it is empty)"),
    ("docker", "Docker version abc, build 1", "no version in its output"),
    ("cri-o", "x" * 100000, "no version in its output ('xxxx"),
    ("podman", "\n" * 5000 + "podman version 5.4.2", "no version in its output"),  # past the first 4 KiB
    ("podman", "podman version 5" + "1" * 100, "no version in its output"),
    ("podman", None, "no output to read a version from (null)"),
    ("podman", b"podman version 5.4.2", "no output to read a version from"),
])
def test_output_without_a_version_is_a_clear_error(name, text, message):
    with pytest.raises(ValueError) as caught:
        cdi_runtimes.version_from_output(name, text)
    assert str(caught.value).startswith(message)
    assert len(str(caught.value)) < 200


# -- the cdi_runtimes option ----------------------------------------------------------------------

def test_the_option_takes_auto_or_a_list_of_name_and_version_and_aliases():
    assert cdi_runtimes.parse_runtimes_option("auto") == "auto"
    assert cdi_runtimes.parse_runtimes_option(None) == "auto"
    assert cdi_runtimes.parse_runtimes_option([]) == []
    parsed = cdi_runtimes.parse_runtimes_option([{"name": "crio", "version": "1.31.2"},
                                                 {"name": "Podman", "version": "v5.4.2"},
                                                 {"name": "cri_o", "version": 1.35},
                                                 {"name": "dockerd", "version": "27.3.1-ce"},
                                                 {"version": "2.0.5", "name": "containerd"}])
    assert [r.to_dict() for r in parsed] == [
        {"name": "cri-o", "version": "1.31.2", "max_cdi_version": "0.8.0"},
        {"name": "podman", "version": "5.4.2", "max_cdi_version": "0.8.0"},
        {"name": "cri-o", "version": "1.35", "max_cdi_version": "1.1.0"},
        {"name": "docker", "version": "27.3.1-ce", "max_cdi_version": "0.7.0"},
        {"name": "containerd", "version": "2.0.5", "max_cdi_version": "1.0.0"}]
    assert {r.source for r in parsed} == {"option"}
    assert cdi_runtimes.ceiling(parsed).to_dict()["name"] == "docker"
    assert cdi_runtimes.parse_runtimes_option([{"name": "podman", "version": "5"}], source="fakehw")[0].source == "fakehw"


@pytest.mark.parametrize("value, message", [
    (7, "cdi_runtimes: must be auto or a list of {name, version}, not an integer"),
    ("Auto", "cdi_runtimes: must be auto or a list of {name, version}, not 'Auto'"),
    ({"name": "podman", "version": "5"}, "cdi_runtimes: must be auto or a list of {name, version}, not a mapping"),
    (("podman",), "cdi_runtimes: must be auto or a list of {name, version}, not a tuple"),
    ([{"name": "podman", "version": "5"}] * 9, "cdi_runtimes: lists 9 runtimes; at most 8"),
    ([{"name": "podman", "version": "5"}] * 10 ** 6, "cdi_runtimes: lists 1000000 runtimes; at most 8"),
    ([["podman", "5.4"]], "cdi_runtimes[0]: must be a mapping {name, version}, not a list"),
    ([{"name": "podman", "version": "5"}, None], "cdi_runtimes[1]: must be a mapping {name, version}, not null"),
    ([{"name": "podman", "version": "5", "socket": "/x"}], "cdi_runtimes[0].socket: unknown field (known: name, version)"),
    ([{"name": "podman", "version": "5", 3: 4}], "cdi_runtimes[0].3: unknown field"),
    ([{"name": "podman", "version": "5", "max_cdi_version": "1.1.0"}], "cdi_runtimes[0].max_cdi_version: unknown field"),
    ([{"name": {"x": 1}, "version": "1"}],
     "cdi_runtimes[0].name: must be one of containerd, docker, podman, cri-o, not a mapping"),
    ([{"version": "1"}], "cdi_runtimes[0].name: must be one of containerd, docker, podman, cri-o, not null"),
    ([{"name": "runc", "version": "1"}], "cdi_runtimes[0].name: must be one of containerd, docker, podman, cri-o, not 'runc'"),
    ([{"name": "p" * 10 ** 6, "version": "1"}], "cdi_runtimes[0].name: must be one of"),
    ([{"name": "podman", "version": True}], "cdi_runtimes[0].version: must be a version like 5.4.2, not a boolean"),
    ([{"name": "podman", "version": ["5"]}], "cdi_runtimes[0].version: must be a version like 5.4.2, not a list"),
    ([{"name": "podman", "version": "5" * 40}], "cdi_runtimes[0].version: must be a version like 5.4.2 of at most 32"),
    ([{"name": "podman", "version": "5" * 10 ** 7}], "cdi_runtimes[0].version: must be a version like 5.4.2 of at most"),
    ([{"name": "podman", "version": 10 ** 5000}], "cdi_runtimes[0].version: must be a version like 5.4.2, not an integer"),
    ([{"name": "podman", "version": -5}], "cdi_runtimes[0].version: must be a version like 5.4.2, not an integer"),
    ([{"name": "podman", "version": float("nan")}], "cdi_runtimes[0].version: must be a version like 5.4.2, not 'nan'"),
    ([{"name": "podman", "version": 1e20}], "cdi_runtimes[0].version: must be a version like 5.4.2, not '1e+20'"),
    ([{"name": "podman", "version": "5.4;rm -rf /"}], "cdi_runtimes[0].version: must be a version like 5.4.2, not '5.4;rm"),
    ([{"name": "podman", "version": "five"}], "cdi_runtimes[0].version: must be a version like 5.4.2, not 'five'"),
    ([{"name": "podman", "version": ""}], "cdi_runtimes[0].version: must be a version like 5.4.2, not ''"),
    ([{"name": "podman", "version": "5.4.2\n"}, {"name": "podman", "version": "5.4.2\x00"}],
     "cdi_runtimes[1].version: must be a version like 5.4.2, not '5.4.2\\x00'"),
    ([{"name": "podman"}], "cdi_runtimes[0].version: must be a version like 5.4.2, not null"),
])
def test_a_hostile_option_is_a_value_error_naming_the_entry(value, message):
    with pytest.raises(ValueError) as caught:
        cdi_runtimes.parse_runtimes_option(value)
    assert str(caught.value).startswith(message)
    assert len(str(caught.value)) < 200


def test_the_option_names_the_field_as_the_caller_calls_it():
    with pytest.raises(ValueError, match=r"^hold\.runtimes\[0\]\.version: "):
        cdi_runtimes.parse_runtimes_option([{"name": "podman", "version": "x"}], where="hold.runtimes")


def _junk(rng, depth=0):
    choices = [None, True, 0, -1, 10 ** 40, 1.5, float("inf"), "", "auto", "podman", "5.4.2", "v", "\x00" * 3,
               "é" * 50, b"5.4.2", ("name", "version"), {1, 2}, object()]
    if depth < 3:
        choices += [[_junk(rng, depth + 1) for _unused in range(rng.randint(0, 9))],
                    {rng.choice(["name", "version", "x", 1, None]): _junk(rng, depth + 1)
                     for _unused in range(rng.randint(0, 3))},
                    {"name": _junk(rng, depth + 1), "version": _junk(rng, depth + 1)}]
    return rng.choice(choices)


def test_random_junk_is_only_ever_a_value_error():
    rng = random.Random(20261203)
    for _round in range(3000):
        value = _junk(rng)
        try:
            result = cdi_runtimes.parse_runtimes_option(value)
        except ValueError:
            continue
        assert result == "auto" or all(isinstance(r, cdi_runtimes.Runtime) for r in result)


def test_the_ceiling_is_the_runtime_loading_the_oldest_version_and_ignores_one_without_cdi():
    runtimes = cdi_runtimes.parse_runtimes_option([{"name": "docker", "version": "24.0.7"},
                                                   {"name": "containerd", "version": "2.1.0"},
                                                   {"name": "podman", "version": "5.4.2"},
                                                   {"name": "cri-o", "version": "1.31.0"}])
    assert cdi_runtimes.ceiling(runtimes).name == "podman"  # 0.8.0, tied with cri-o: the first listed
    assert cdi_runtimes.ceiling(runtimes[:2]).name == "containerd"
    assert cdi_runtimes.ceiling(runtimes[:1]) is None
    assert cdi_runtimes.ceiling([]) is None and cdi_runtimes.ceiling(None) is None
    old = cdi_runtimes.runtime("podman", "4.2.1")  # 0.4.0 sorts below 0.10.0-style strings would not
    assert cdi_runtimes.ceiling(runtimes + [old]) is old


def test_a_runtime_is_frozen_and_its_dict_has_three_keys():
    found = cdi_runtimes.runtime("crio", "1.35.0", path="/usr/bin/crio", source="auto")
    assert found == cdi_runtimes.Runtime("cri-o", "1.35.0", "1.1.0", "/usr/bin/crio", "auto")
    assert found.to_dict() == {"name": "cri-o", "version": "1.35.0", "max_cdi_version": "1.1.0"}
    with pytest.raises(AttributeError):
        found.version = "1.0"  # type: ignore[misc]


# -- finding them on a node -------------------------------------------------------------------------

def binary(root, node_path, script, mode=0o755):
    path = os.path.join(str(root), node_path.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n" + script + "\n")
    os.chmod(path, mode)
    return path


def test_runtimes_are_found_and_asked_their_version(tmp_path):
    binary(tmp_path, "/usr/bin/podman", "echo 'podman version 5.4.2'")
    binary(tmp_path, "/usr/local/bin/containerd", "echo 'containerd github.com/containerd/containerd/v2 v2.1.4 abc'")
    binary(tmp_path, "/usr/bin/containerd", "echo 'containerd x 1.6.0 abc'")  # /usr/local/bin comes first
    binary(tmp_path, "/usr/bin/docker", "echo 'Docker version 29.2.0, build x'")  # the CLI: not asked
    found, warnings = detect_runtimes(str(tmp_path))
    assert warnings == []
    assert [(r.name, r.version, r.max_cdi_version, r.path, r.source) for r in found] == [
        ("containerd", "2.1.4", "1.0.0", "/usr/local/bin/containerd", "auto"),
        ("podman", "5.4.2", "0.8.0", "/usr/bin/podman", "auto")]


def test_no_runtime_is_no_warning(tmp_path):
    assert detect_runtimes(str(tmp_path)) == ([], [])


def test_the_runner_is_given_the_binary_and_the_timeout_and_nothing_else(tmp_path):
    binary(tmp_path, "/usr/sbin/dockerd", "exit 99")
    binary(tmp_path, "/sbin/crio", "exit 99")
    calls = []

    def runner(argv, timeout):
        calls.append((argv, timeout))
        return 0, "Docker version 28.2.2, build e6534b4" if "dockerd" in argv[0] else "crio version 1.35.0\n"

    found, warnings = detect_runtimes(str(tmp_path), runner=runner, timeout=2.5)
    assert warnings == [] and [(r.name, r.version) for r in found] == [("docker", "28.2.2"), ("cri-o", "1.35.0")]
    assert calls == [([str(tmp_path / "usr/sbin/dockerd"), "--version"], 2.5),
                     ([str(tmp_path / "sbin/crio"), "--version"], 2.5)]


def test_the_binary_runs_with_a_minimal_environment_and_no_stdin(tmp_path, monkeypatch):
    report = tmp_path / "report"
    monkeypatch.setenv("SECRET_TOKEN", "x")
    binary(tmp_path, "/usr/bin/podman", "env > %s; if read line; then echo stdin >> %s; fi; pwd >> %s; "
                                        "echo 'podman version 5.4.2'" % (report, report, report))
    found, warnings = detect_runtimes(str(tmp_path))
    assert warnings == [] and found[0].version == "5.4.2"
    lines = report.read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if "=" in line)
    assert env.get("PATH") == "/usr/sbin:/usr/bin:/sbin:/bin" and env.get("LC_ALL") == "C"
    assert "SECRET_TOKEN" not in env and "HOME" not in env
    assert "stdin" not in lines and lines[-1] == "/"


def test_a_binary_others_could_replace_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    binary(tmp_path, "/usr/bin/podman", "touch %s; echo 'podman version 5.4.2'" % marker, mode=0o775)
    binary(tmp_path, "/usr/bin/crio", "touch %s; echo 'crio version 1.35.0'" % marker, mode=0o757)
    found, warnings = detect_runtimes(str(tmp_path))
    assert found == [] and not marker.exists()
    assert warnings == ["container runtime /usr/bin/podman is not asked its version: it is writable by group or others",
                        "container runtime /usr/bin/crio is not asked its version: it is writable by group or others"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another owner")
def test_a_binary_owned_by_another_account_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    path = binary(tmp_path, "/usr/bin/podman", "touch %s; echo 'podman version 5.4.2'" % marker)
    os.chown(path, 4321, 4321)
    found, warnings = detect_runtimes(str(tmp_path))
    assert found == [] and not marker.exists()
    assert warnings == ["container runtime /usr/bin/podman is not asked its version: it is owned by uid 4321, "
                        "neither root nor this user"]


def test_what_is_not_a_runnable_regular_file_is_not_run(tmp_path):
    (tmp_path / "usr" / "bin" / "podman").mkdir(parents=True)
    binary(tmp_path, "/usr/bin/crio", "echo 'crio version 1.35.0'", mode=0o644)
    os.mkfifo(str(tmp_path / "usr" / "bin" / "containerd"))
    os.symlink("dockerd", str(tmp_path / "usr" / "bin" / "dockerd"))  # a link to itself
    found, warnings = detect_runtimes(str(tmp_path))
    assert found == []
    assert warnings == [
        "container runtime /usr/bin/containerd is not asked its version: it is not a regular file",
        "container runtime /usr/bin/dockerd is not asked its version: it cannot be resolved under %s: %s"
        % (tmp_path, os.strerror(40)),
        "container runtime /usr/bin/podman is not asked its version: it is not a regular file",
        "container runtime /usr/bin/crio is not asked its version: it is not executable",
    ]


def test_links_are_followed_as_the_node_sees_them_and_never_out_of_root(tmp_path):
    outside = binary(tmp_path, "/outside/podman", "echo 'podman version 5.4.2'")
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    os.symlink(outside, str(root / "usr" / "bin" / "podman"))  # absolute: taken under root, where it is not
    os.symlink("../../../../../outside/crio", str(root / "usr" / "bin" / "crio"))  # climbs no higher than root
    binary(tmp_path, "/outside/crio", "echo 'crio version 1.35.0'")
    binary(root, "/usr/libexec/docker/dockerd", "echo 'Docker version 28.2.2, build e6534b4'")
    os.symlink("/usr/libexec/docker/dockerd", str(root / "usr" / "bin" / "dockerd"))  # absolute, inside root
    os.symlink("usr/bin", str(root / "bin"))  # merged /usr
    binary(root, "/usr/bin/containerd", "echo 'containerd containerd.io 1.7.27 05044ec'")
    found, warnings = detect_runtimes(str(root))
    assert [(r.name, r.version, r.path) for r in found] == [
        ("containerd", "1.7.27", "/usr/bin/containerd"), ("docker", "28.2.2", "/usr/bin/dockerd")]
    missing = os.strerror(2)
    assert warnings == [
        "container runtime /usr/bin/podman is not asked its version: it cannot be resolved under %s: %s" % (root, missing),
        "container runtime /usr/bin/crio is not asked its version: it cannot be resolved under %s: %s" % (root, missing),
    ]
    assert resolve_in_root(str(root), "/bin/../../../usr/libexec/x") == str(root / "usr" / "libexec" / "x")
    with pytest.raises(OSError):
        resolve_in_root(str(root), "/etc/missing/x")
    assert resolve_in_root(str(root), "/bin/dockerd") == str(root / "usr" / "libexec" / "docker" / "dockerd")


def test_a_runtime_that_hangs_is_cut_off_and_one_that_prints_garbage_is_named(tmp_path):
    binary(tmp_path, "/usr/bin/podman", "exec sleep 30")
    binary(tmp_path, "/usr/bin/containerd", "sleep 30 & echo 'containerd containerd.io 1.7.27 05044ec'")  # holds stdout
    binary(tmp_path, "/usr/bin/crio", "echo 'something else'")
    binary(tmp_path, "/usr/sbin/dockerd", "echo 'Docker version 27.3.1, build 41ca978'; exit 3")
    started = time.monotonic()
    found, warnings = detect_runtimes(str(tmp_path), timeout=0.5)
    assert time.monotonic() - started < 5
    assert found == []
    assert warnings == [
        "container runtime /usr/bin/containerd --version did not answer within 0.5 s",
        "container runtime /usr/sbin/dockerd: its version cannot be read: it exited 3",
        "container runtime /usr/bin/podman --version did not answer within 0.5 s",
        "container runtime /usr/bin/crio: its version cannot be read: no version in its output ('something else')",
    ]


def test_output_is_read_up_to_64_kib(tmp_path):
    # 1 MiB of output, then the version: what is read is cut at 64 KiB, so no version is found
    binary(tmp_path, "/usr/bin/podman", "head -c 1048576 /dev/zero | tr '\\0' x; echo; echo 'podman version 5.4.2'")
    started = time.monotonic()
    found, warnings = detect_runtimes(str(tmp_path), timeout=2.0)
    assert time.monotonic() - started < 5
    assert found == [] and len(warnings) == 1 and warnings[0].startswith("container runtime /usr/bin/podman")


def test_a_runner_that_fails_gives_a_warning(tmp_path):
    binary(tmp_path, "/usr/bin/podman", "exit 0")

    def runner(argv, timeout):
        raise OSError(8, "Exec format error")

    assert detect_runtimes(str(tmp_path), runner=runner) == (
        [], ["container runtime /usr/bin/podman cannot be run: Exec format error"])


# -- whether CDI is on ----------------------------------------------------------------------------

def test_whether_cdi_is_on_is_read_from_the_runtimes_configuration(tmp_path):
    def state(name, version):
        return cdi_enabled(str(tmp_path), cdi_runtimes.runtime(name, version))[0]
    assert state("containerd", "1.7.27") is False and state("containerd", "2.0.5") is True
    config = tmp_path / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true  # on\n')
    assert state("containerd", "1.7.27") is True
    config.write_text('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    assert state("containerd", "2.0.5") is False
    config.write_text('[plugins."io.containerd.grpc.v1.cri"]\n  # enable_cdi = true\n'
                      '[plugins."io.containerd.grpc.v1.cri".containerd]\n  enable_cdi = true\n')
    assert state("containerd", "1.7.27") is False  # a comment, and a key in another table, say nothing
    config.write_text('plugins."io.containerd.grpc.v1.cri".enable_cdi = true\n')
    assert state("containerd", "1.7.27") is True
    config.write_text('version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert state("containerd", "1.7.27") is None
    assert state("docker", "27.3.1") is False and state("docker", "28.2.0") is True
    daemon = tmp_path / "etc" / "docker" / "daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text('{"features": {"cdi": true}}')
    assert state("docker", "27.3.1") is True
    daemon.write_text('{"features": {"cdi": false}}')
    assert state("docker", "28.2.0") is False  # from 28.2 only an explicit false turns it off
    daemon.write_text('{"features": ')
    assert state("docker", "27.3.1") is None
    daemon.write_text('["features"]')
    assert state("docker", "27.3.1") is False
    assert state("podman", "5.4.2") is True and state("cri-o", "1.31.0") is True


def test_configuration_is_read_under_root_with_a_cap(tmp_path):
    def answer(name, version):
        return cdi_enabled(str(tmp_path), cdi_runtimes.runtime(name, version))
    outside = tmp_path / "outside.toml"
    outside.write_text('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n')
    (tmp_path / "etc" / "containerd").mkdir(parents=True)
    os.symlink(str(outside), str(tmp_path / "etc" / "containerd" / "config.toml"))  # taken under root: not there
    assert answer("containerd", "1.7.27")[0] is False
    (tmp_path / "etc" / "docker").mkdir(parents=True)
    (tmp_path / "etc" / "docker" / "daemon.json").write_text('{"features": {"cdi": true}, "x": "%s"}' % ("y" * (1 << 20)))
    assert answer("docker", "27.3.1") == (None, "/etc/docker/daemon.json is larger than 1048576 bytes")
    os.unlink(str(tmp_path / "etc" / "docker" / "daemon.json"))
    os.mkfifo(str(tmp_path / "etc" / "docker" / "daemon.json"))  # would block a plain open
    assert answer("docker", "27.3.1") == (None, "/etc/docker/daemon.json is not a regular file")
    assert answer("docker", "27.3.1")[1] and answer("podman", "5.4.2")[1]


# -- the stale checks' probes ------------------------------------------------------------------------

class Probe(object):
    def __init__(self, nodes=None, files=(), version=None):
        self.nodes, self.files, self.version = nodes or {}, set(files), version

    def device_number(self, path):
        return self.nodes.get(path)

    def file_exists(self, path):
        return path in self.files

    def driver_version(self):
        return self.version


def test_a_device_node_whose_number_changed_is_stale_and_one_without_numbers_is_judged_by_its_presence():
    spec = {"devices": [{"name": "gpu1", "containerEdits": {"deviceNodes": [
        {"path": "/dev/nvidia1", "major": 195, "minor": 1}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/dri/card1"},
        {"path": "/dev/x", "hostPath": "/dev/nvidia-caps/nvidia-cap1"}]}}]}
    probe = Probe(nodes={"/dev/nvidia1": (195, 3), "/dev/nvidia-uvm": (508, 0), "/dev/dri/card1": NOT_A_DEVICE,
                         "/dev/nvidia-caps/nvidia-cap1": (237, 1)})
    assert stale_edits(spec, probe) == ["device node /dev/nvidia1 is 195:3 on the node, not 195:1",
                                        "/dev/dri/card1 is not a device node"]


def test_the_driver_a_spec_was_generated_for_is_read_from_its_library_mounts_and_proc():
    spec = {"containerEdits": {"mounts": [{"hostPath": "/usr/lib/libcuda.so.550.54.15"},
                                          {"hostPath": "/usr/lib/libnvidia-ml.so.550.54.15"},
                                          {"hostPath": "/usr/bin/nvidia-smi"}]}}
    assert generated_for(spec) == "550.54.15"
    assert driver_version_from_proc("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                                    "22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0") == "550.54.15"
    assert driver_version_from_proc("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.64.03  Release "
                                    "Build  (dvs-builder@U16-I3-B13-4-3)") == "575.64.03"
    assert driver_version_from_proc("") is None


def test_a_real_host_reads_device_numbers_files_and_the_driver_under_its_root(tmp_path):
    host = RealHost(str(tmp_path), runner=lambda *a, **k: (0, "", ""))
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "plain").write_text("")
    assert host.device_number("/dev/plain") == NOT_A_DEVICE
    assert host.device_number("/dev/nvidia9") is None
    assert host.device_number("/../../etc/passwd") is None  # never outside root
    assert host.file_exists("/dev/plain") and not host.file_exists("/usr/lib/libcuda.so.1")
    # found by make fuzz: a spec's path with a NUL or a lone surrogate (JSON's \ud800) raised ValueError
    for odd in ("/dev/nvidia\ud800", "/usr/lib/a\x00b"):
        assert host.device_number(odd) is None and not host.file_exists(odd)
    if os.geteuid() == 0:
        os.mknod(str(tmp_path / "dev" / "nvidia0"), stat.S_IFCHR | 0o666, os.makedev(195, 0))
        assert host.device_number("/dev/nvidia0") == (195, 0)
    assert host.driver_version() is None
    proc = tmp_path / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024\n")
    assert host.driver_version() == "550.54.15"


def test_the_lint_knows_the_temporary_names_atomic_writes_use(tmp_path):
    target = str(tmp_path / "bcd-a1.json")
    temporary = fsutil._temp_name(target)
    assert TEMP_FILE_RE.match(os.path.basename(temporary))
    assert not TEMP_FILE_RE.match("bcd-a1.json") and not TEMP_FILE_RE.match("nvidia.yaml")

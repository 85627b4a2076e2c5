# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtimes' CDI versions, their ``--version`` outputs, finding them on a node, and the probes
that tell a stale vendor spec (``domain/cdi_runtimes.py``, ``node/runtimes.py``, ``domain/cdi_staleness.py``)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain import cdi_runtimes
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_lint import TEMP_FILE_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_staleness import (
    NOT_A_DEVICE,
    driver_version_from_proc,
    generated_for,
    stale_edits,
)
from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import RealHost
from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import cdi_enabled, detect_runtimes
from ansible_collections.bcd.devices.tests.unit.conftest import DATA

SAMPLES = DATA / "runtimes"


@pytest.mark.parametrize("name, version, expected", [
    ("containerd", "1.6.20", None), ("containerd", "1.7.0", "0.5.0"), ("containerd", "1.7.19", "0.5.0"),
    ("containerd", "1.7.20", "0.7.0"), ("containerd", "1.7.26", "0.7.0"), ("containerd", "1.7.27", "0.8.0"),
    ("containerd", "1.7.30", "0.8.0"), ("containerd", "2.0.0", "0.8.0"), ("containerd", "2.0.4", "0.8.0"),
    ("containerd", "2.0.5", "1.0.0"), ("containerd", "2.2.0", "1.0.0"), ("containerd", "2.2.1", "1.1.0"),
    ("docker", "24.0.7", None), ("docker", "25.0.0", "0.6.0"), ("docker", "26.0.2", "0.6.0"),
    ("docker", "26.1.0", "0.7.0"), ("docker", "27.3.1", "0.7.0"), ("docker", "27.4.0", "0.8.0"),
    ("docker", "28.0.4", "0.8.0"), ("docker", "28.1.0", "1.0.0"), ("docker", "29.1.9", "1.0.0"),
    ("docker", "29.2.0", "1.1.0"),
    ("podman", "4.2.0", None), ("podman", "4.3.1", "0.5.0"), ("podman", "4.6.2", "0.5.0"), ("podman", "4.7.0", "0.6.0"),
    ("podman", "5.0.3", "0.6.0"), ("podman", "5.1.2", "0.7.0"), ("podman", "5.2.0", "0.8.0"),
    ("podman", "5.4.2", "0.8.0"), ("podman", "5.5.0", "1.0.0"), ("podman", "6.0.0", "1.0.0"),
    ("cri-o", "1.27.4", None), ("cri-o", "1.28.1", "0.6.0"), ("cri-o", "1.29.9", "0.6.0"), ("cri-o", "1.30.0", "0.7.0"),
    ("cri-o", "1.31.0", "0.8.0"), ("cri-o", "1.32.5", "0.8.0"), ("cri-o", "1.33.0", "1.0.0"),
    ("cri-o", "1.34.2", "1.0.0"), ("cri-o", "1.35.0", "1.1.0"),
])
def test_each_release_maps_to_the_newest_cdi_version_its_library_loads(name, version, expected):
    assert cdi_runtimes.max_cdi_version(name, version) == expected


@pytest.mark.parametrize("sample, name, version", [
    ("docker-28.2.2.txt", "docker", "28.2.2"),
    ("containerd-1.7.27-containerd.io.txt", "containerd", "1.7.27"),
    ("containerd-2.0.5-upstream.txt", "containerd", "v2.0.5"),
    ("containerd-1.6.20-debian.txt", "containerd", "1.6.20~ds1"),
    ("podman-5.4.2.txt", "podman", "5.4.2"),
    ("podman-4.3.1.txt", "podman", "4.3.1"),
    ("crio-1.31.0.txt", "cri-o", "1.31.0"),
    ("crio-1.28.1.txt", "cri-o", "1.28.1"),
])
def test_the_version_is_read_from_each_recorded_output(sample, name, version):
    found = cdi_runtimes.version_from_output(name, (SAMPLES / sample).read_text())
    assert found == version
    assert cdi_runtimes.version_key(found) == tuple(int(p) for p in version.lstrip("v").split("~")[0].split("."))


@pytest.mark.parametrize("name, text", [("podman", "Error: unknown flag"), ("docker", ""), ("cri-o", "x" * 100000)])
def test_output_without_a_version_is_a_clear_error(name, text):
    with pytest.raises(ValueError, match="no version in its output"):
        cdi_runtimes.version_from_output(name, text)


def test_the_option_takes_auto_or_a_list_of_name_and_version_and_aliases():
    assert cdi_runtimes.parse_runtimes_option("auto") == "auto"
    parsed = cdi_runtimes.parse_runtimes_option([{"name": "crio", "version": "1.31.2"},
                                                 {"name": "Podman", "version": "v5.4.2"}])
    assert [r.to_dict() for r in parsed] == [{"name": "cri-o", "version": "1.31.2", "max_cdi_version": "0.8.0"},
                                             {"name": "podman", "version": "5.4.2", "max_cdi_version": "0.8.0"}]
    assert cdi_runtimes.ceiling(parsed).name == "cri-o"  # ties go to the first listed


@pytest.mark.parametrize("value, message", [
    (7, "cdi_runtimes: must be auto or a list of {name, version}, not an integer"),
    ([["podman", "5.4"]], "cdi_runtimes[0]: must be a mapping {name, version}, not a list"),
    ([{"name": {"x": 1}, "version": "1"}], "cdi_runtimes[0].name: must be one of containerd, docker, podman, cri-o, not a mapping"),
    ([{"name": "podman", "version": True}], "cdi_runtimes[0].version: must be a version like 5.4.2, not a boolean"),
    ([{"name": "podman", "version": "5" * 40}], "cdi_runtimes[0].version: must be a version like 5.4.2"),
    ([{"name": "podman", "version": "5.4;rm -rf /"}], "cdi_runtimes[0].version: must be a version like 5.4.2"),
    ([{"name": "podman"}], "cdi_runtimes[0].version: must be a version like 5.4.2, not null"),
])
def test_a_hostile_option_is_a_value_error_naming_the_entry(value, message):
    with pytest.raises(ValueError) as caught:
        cdi_runtimes.parse_runtimes_option(value)
    assert str(caught.value).startswith(message)


def test_the_ceiling_ignores_a_runtime_without_cdi_support():
    runtimes = cdi_runtimes.parse_runtimes_option([{"name": "docker", "version": "24.0.7"},
                                                   {"name": "containerd", "version": "2.1.0"}])
    assert cdi_runtimes.ceiling(runtimes).name == "containerd"
    assert cdi_runtimes.ceiling(runtimes[:1]) is None


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
    found, warnings = detect_runtimes(str(tmp_path))
    assert warnings == []
    assert [(r.name, r.version, r.max_cdi_version, r.path) for r in found] == [
        ("containerd", "v2.1.4", "1.0.0", "/usr/local/bin/containerd"), ("podman", "5.4.2", "0.8.0", "/usr/bin/podman")]


def test_a_binary_others_could_replace_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    binary(tmp_path, "/usr/bin/podman", "touch %s; echo 'podman version 5.4.2'" % marker, mode=0o775)
    found, warnings = detect_runtimes(str(tmp_path))
    assert found == [] and not marker.exists()
    assert warnings == ["container runtime /usr/bin/podman is not asked its version: it is writable by group or others"]


def test_a_link_out_of_root_is_not_run(tmp_path):
    outside = binary(tmp_path, "/outside/podman", "echo 'podman version 5.4.2'")
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    os.symlink(outside, str(root / "usr" / "bin" / "podman"))
    found, warnings = detect_runtimes(str(root))
    assert found == [] and warnings == ["container runtime /usr/bin/podman is not asked its version: it leads out of %s"
                                        % root]


def test_a_runtime_that_hangs_is_cut_off_and_one_that_prints_garbage_is_named(tmp_path):
    binary(tmp_path, "/usr/bin/podman", "exec sleep 30")
    binary(tmp_path, "/usr/bin/crio", "echo 'something else'")
    binary(tmp_path, "/usr/sbin/dockerd", "echo 'Docker version 27.3.1, build 41ca978'; exit 3")
    found, warnings = detect_runtimes(str(tmp_path), timeout=0.5)
    assert found == []
    assert warnings == [
        "container runtime /usr/sbin/dockerd: its version cannot be read: it exited 3",
        "container runtime /usr/bin/podman --version did not answer within 0.5 s",
        "container runtime /usr/bin/crio: its version cannot be read: no version in its output ('something else')",
    ]


def test_whether_cdi_is_on_is_read_from_the_runtimes_configuration(tmp_path):
    def state(name, version):
        return cdi_enabled(str(tmp_path), cdi_runtimes.runtime(name, version))[0]
    assert state("containerd", "1.7.27") is False and state("containerd", "2.0.5") is True
    config = tmp_path / "etc" / "containerd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n')
    assert state("containerd", "1.7.27") is True
    config.write_text('[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    assert state("containerd", "2.0.5") is False
    assert state("docker", "27.3.1") is False and state("docker", "28.2.0") is True
    daemon = tmp_path / "etc" / "docker" / "daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text('{"features": {"cdi": true}}')
    assert state("docker", "27.3.1") is True
    daemon.write_text('{"features": ')
    assert state("docker", "27.3.1") is None
    assert state("podman", "5.4.2") is True


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

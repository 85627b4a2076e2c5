# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node/hosts.py on its own: each Host method of the fakehw host and of the real host, on a
directory standing for the node's root. The real host's tools (nvidia-smi, virsh, systemctl) are an
injected runner and a PATH of our own; nothing here needs a GPU."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import NOT_A_DEVICE
from ansible_collections.bcd.devices.plugins.module_utils.node import inventory
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, FakeHwHost, RealHost, make_host
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import DirectWriter, HelperWriter

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"
MEMINFO = b"MemTotal:       65536000 kB\nMemFree:        1000 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n"
DRIVER = b"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"


class Runner(object):
    """An injected ``run_command``: answers by the first words of argv, records every call."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        return 127, "", "%s: not found" % argv[0]


@pytest.fixture
def real(tmp_path, monkeypatch):
    """A real host on tmp_path/root, with nvidia-smi on PATH answering through the runner and no virsh."""
    root = tmp_path / "root"
    root.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(inventory, "HAS_PYNVML", False)
    runner = Runner({("nvidia-smi", "-L"): (0, "GPU 0: NVIDIA A100 (UUID: %s)\n" % GPU, "")})
    return RealHost(str(root), runner=runner)


def write(host, node_path, content):
    path = host.path(node_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content)


@pytest.fixture(params=["fakehw", "real"])
def host(request, node, real):
    return FakeHwHost(node.root, node.fakehw) if request.param == "fakehw" else real


def test_paths_stay_under_root(host):
    assert host.path("/etc/cdi/bcd-a.json") == os.path.join(host.root, "etc/cdi/bcd-a.json")
    with pytest.raises(FsError, match="outside root"):
        host.path("/../outside")
    assert host.read("/etc/missing") is None and not host.exists("/etc/missing")
    write(host, "/etc/here", b"x")
    assert host.read("/etc/here") == b"x" and host.exists("/etc/here")


def test_hold_files_are_the_bcd_specs_of_etc_cdi_and_nothing_else(host):
    assert host.hold_files() == {}  # no /etc/cdi: no holds
    write(host, "/etc/cdi/bcd-alloc_a.json", b"{}")
    write(host, "/etc/cdi/nvidia.yaml", b"{}")
    write(host, "/etc/cdi/.bcd-alloc_b.json.tmp-0123456789ab", b"{}")
    write(host, "/etc/cdi/bcd-alloc_c.json.damaged-20260101T000000Z", b"{")
    os.makedirs(host.path("/etc/cdi/bcd-alloc_d.json"))   # a directory of that name is no hold
    os.mkfifo(host.path("/etc/cdi/bcd-alloc_e.json"))      # a FIFO is opened without waiting, and is no hold
    write(host, "/etc/cdi/bcd-alloc_f.json", b"x" * (MAX_HOLD_SPEC_BYTES + 100))
    files = host.hold_files()
    assert sorted(files) == ["alloc_a", "alloc_f"]
    assert files["alloc_a"] == ("/etc/cdi/bcd-alloc_a.json", b"{}")
    assert len(files["alloc_f"][1]) == MAX_HOLD_SPEC_BYTES + 1  # read no further than what shows it damaged
    assert host.damaged_specs() == ["/etc/cdi/bcd-alloc_c.json.damaged-20260101T000000Z"]


def test_memory_is_read_from_meminfo_under_root(host):
    assert host.memory() is None
    write(host, "/proc/meminfo", MEMINFO)
    assert host.memory().mem_total == 65536000 * 1024


def test_boot_id_is_read_under_root(host):
    write(host, "/proc/sys/kernel/random/boot_id", b"0f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10\n")
    assert host.boot_id() == "0f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10"


def test_the_writer_is_direct_unless_a_helper_is_named(host):
    assert isinstance(host.writer, DirectWriter) and host.writer.host is host
    assert host.privileged is (os.geteuid() == 0)


def test_inventory_and_domains_are_read_once_per_host(host):
    first = host.inventory()
    assert host.inventory() is first and host.domains() is host.domains()
    assert [gpu.uuid for gpu in host.fresh().inventory().gpus] == [gpu.uuid for gpu in first.gpus]


def test_the_fakehw_host_reads_its_hardware_file(node, make_node):
    host = FakeHwHost(node.root, node.fakehw)
    assert host.inventory().source == "fakehw"
    assert [gpu.uuid for gpu in host.inventory().gpus][:1] == [GPU]
    assert host.node_id() == "node-a"
    assert host.boot_id() == "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10"  # the file's, with none under root
    assert host.driver_probe() is None  # no driver entry: nothing checked
    assert host.cdi_runtimes() == ([], [])
    assert host.slices_unavailable() is None
    running = {"instance_id": "vm-run", "state": "running", "gpus": [GPU]}
    stopped = {"instance_id": "vm-off", "state": "shut off", "gpus": [GPU]}
    other = make_node(domains=[running, stopped])
    domains, error = FakeHwHost(other.root, other.fakehw).domains()
    assert [d.instance_id for d in domains] == ["vm-run"] and error is None


def test_the_fakehw_driver_entry_stands_for_dev_and_the_driver(node):
    hardware = json.loads(open(node.fakehw).read())
    hardware["driver"] = {"version": "570.133.20", "device_nodes": {"/dev/nvidia0": "195:0"},
                          "files": ["/usr/lib/libcuda.so.570.133.20"]}
    with open(node.fakehw, "w") as handle:
        json.dump(hardware, handle)
    host = FakeHwHost(node.root, node.fakehw)
    assert host.driver_probe() is host
    assert host.driver_version() == "570.133.20"
    assert host.device_number("/dev/nvidia0") == (195, 0) and host.device_number("/dev/nvidia9") is None
    assert host.file_exists("/usr/lib/libcuda.so.570.133.20") and not host.file_exists("/usr/lib/other.so")


def test_the_real_host_lists_gpus_through_its_runner(real):
    listed = real.inventory()
    assert (listed.source, [gpu.uuid for gpu in listed.gpus], listed.error) == ("nvidia-smi", [GPU], None)
    assert ["nvidia-smi", "-L"] in real.runner.calls
    assert real.domains() == ([], None)  # no virsh on PATH: no VMs, no error
    assert real.fresh().runner is real.runner and real.fresh() is not real


def test_the_real_host_probes_dev_and_the_driver_under_root(real):
    assert real.driver_probe() is real
    assert real.driver_version() is None
    write(real, "/proc/driver/nvidia/version", DRIVER)
    assert real.driver_version() == "570.133.20"
    write(real, "/dev/nvidia0", b"")
    assert real.device_number("/dev/nvidia0") == NOT_A_DEVICE  # a plain file is no device node
    assert real.device_number("/dev/nvidia9") is None and real.device_number("/../../dev/null") is None
    assert real.file_exists("/dev/nvidia0") and not real.file_exists("/dev/nvidia9")
    assert not real.file_exists("/../../etc/passwd")


def test_the_real_host_says_why_it_cannot_make_slices(real):
    assert "no cgroup v2 hierarchy" in real.slices_unavailable()
    write(real, "/sys/fs/cgroup/cgroup.controllers", b"cpu memory hugetlb\n")
    assert real.slices_unavailable() == "systemd is not the service manager"
    os.makedirs(real.path("/run/systemd/system"))
    assert real.slices_unavailable() is None
    assert real.slice_states() == {}


def test_make_host_picks_the_host_and_the_writer_once(node, tmp_path):
    assert isinstance(make_host(node.root, node.fakehw), FakeHwHost)
    assert isinstance(make_host(str(tmp_path)), RealHost)
    helped = make_host(node.root, node.fakehw, helper_socket=str(tmp_path / "helper.sock"))
    assert isinstance(helped.writer, HelperWriter) and helped.privileged is True

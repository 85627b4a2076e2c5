# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node every input is thrown at, and how it is put back between two inputs.

``build_node`` makes a fakehw node with ``tests/unit/conftest.py``'s helpers (its GPUs, NVIDIA's MIG
spec with the node's UUIDs) and runs real passes on it, so that each state file holds what bcd.devices
writes there: two plain holds with limits and env lines, a MIG instance, two slots, a Kubernetes hold
released while a pod still holds its GPU (``releasing.json``), a GPU in maintenance and one back in
service (``maintenance.json``, ``health.json``), events journaled, signed (``node.key``) and partly
acknowledged (``events.seq``). Run as root, the state directory is then given to another account, as
the role's nodes give it to ``bcd``: root's commands then read a directory root does not own.

``Snapshot`` records the whole node (every path, its kind, owner, mode and bytes) and ``restore`` puts
it back as it was, touching only what an input changed; a FIFO, link, socket or directory in a file's
place is removed, never followed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import stat
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = "/var/lib/bcd"
ACCOUNT_UID = 65534  # the state directory's owner when this runs as root (the role's bcd account)


def _conftest():
    """``tests/unit/conftest.py``, loaded as a module of its own (its node helpers and GPUs)."""
    spec = importlib.util.spec_from_file_location("_bcd_fuzz_conftest", str(REPO / "tests" / "unit" / "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONFTEST = _conftest()
GPU_A, GPU_B, GPU_C = CONFTEST.GPU_A, CONFTEST.GPU_B, CONFTEST.GPU_C
MIG_A1 = CONFTEST.MIG_A1
GPU_D = "GPU-5f1c2a90-0000-4000-8000-000000000004"
GPU_E = "GPU-5f1c2a90-0000-4000-8000-000000000005"
GPU_F = "GPU-5f1c2a90-0000-4000-8000-000000000006"
HARDWARE = {
    "node_id": "node-fuzz",
    "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
    "gpus": copy.deepcopy(CONFTEST.DEFAULT_GPUS) + [
        {"uuid": GPU_D, "index": 3, "minor": 3, "numa_node": 0, "pci_bus_id": "0000:3b:00.0", "name": "NVIDIA H100"},
        {"uuid": GPU_E, "index": 4, "minor": 4, "health": {"xids": [48, 79]}},
        {"uuid": GPU_F, "index": 5, "minor": 5},
    ],
    "domains": [{"instance_id": "vm-1", "state": "running", "memory_bytes": 1 << 30, "hugepages": False, "gpus": []},
                {"instance_id": "vm-2", "state": "shut off", "gpus": [GPU_F]}],
    "kubelet": {"reachable": True, "pods": [
        {"namespace": "ml", "name": "trainer-0", "container": "main", "device_ids": [GPU_C]},
        {"namespace": "ml", "name": "dra-0", "container": "main", "dynamic_resources": [
            {"claim_name": "gpu", "claim_namespace": "ml", "claim_resources": [
                {"driver_name": "gpu.bcd.dev", "pool_name": "node-fuzz", "device_name": "gpu-9",
                 "cdi_devices": ["bcd.dev/gpu=%s_s7" % GPU_D]}]}]},
    ]},
    "runtimes": [{"name": "podman", "version": "5.4.2"}, {"name": "containerd", "version": "1.7.27"}],
}
MEMINFO = ("MemTotal:       67108864 kB\nMemFree:        33554432 kB\nMemAvailable:   50331648 kB\n"
           "HugePages_Total:       0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\n")


def hold(allocation_id, device, binding="BINDING_HOLD", device_class=None, **fields):
    entry = {"allocation_id": allocation_id, "reservation_id": "res-%s" % allocation_id, "binding": binding,
             "devices": [dict({"id": device}, **({"device_class": device_class} if device_class else {}))]}
    entry.update(fields)
    return entry


A1 = hold("a1", GPU_B, limits={"cpus": "0-3", "mems": "0", "cpu_millis": 1500, "memory_bytes": 1 << 30},
          env=["FOO=bar", "OMP_NUM_THREADS=4"])
M1 = hold("m1", "%s/gi1/ci0" % GPU_A, device_class="gpu.mig", env=["X=1"])
K1 = hold("k1", GPU_C, binding="BINDING_KUBERNETES")
S1 = hold("s1", "%s/s0" % GPU_D, device_class="gpu.slot", limits={"cpu_millis": 250})
S2 = hold("s2", "%s/s1" % GPU_D, device_class="gpu.slot")
# The devices section the node's last pass had (generation 2), and one a next pass would bring.
DEVICES = [A1, M1, S1, S2]
GENERATION = 2
NEXT_DEVICES = DEVICES + [hold("n1", "%s/gi2/ci0" % GPU_A, device_class="gpu.mig",
                               limits={"memory_bytes": 1 << 28, "hugepages_2mi": 0}, env=["Y=2"])]
INSTANCES = [{"instance_id": "vm-1", "gpus": []}]


class Node(object):
    """A node directory: ``base`` holds ``root`` (the node's ``/``), ``fakehw.json`` and ``outside`` (a
    root-owned file beside the root, for links that lead out)."""

    def __init__(self, base):
        self.base = base
        self.root = os.path.join(base, "root")
        self.fakehw = os.path.join(base, "fakehw.json")
        self.outside = os.path.join(base, "outside.json")

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def state(self, name=""):
        return os.path.join(self.path(STATE_DIR), name) if name else self.path(STATE_DIR)

    def host(self, writer=None):
        from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost  # pylint: disable=import-outside-toplevel
        return FakeHwHost(self.root, self.fakehw, writer=writer)

    def write(self, node_path, content, owner=None):
        path = self.path(node_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else content.encode("utf-8"))
        if owner is not None:
            os.chown(path, owner, owner)

    def owner(self):
        """The uid that owns the state directory (the account's, when this runs as root)."""
        return os.lstat(self.state()).st_uid


def _open_to_all(path):
    """Let the account traverse every directory down to ``path``, as conftest's ``open_to_all`` does."""
    path = os.path.abspath(path)
    while path != os.path.dirname(path):
        mode = os.stat(path).st_mode
        if not mode & 0o001:
            os.chmod(path, (mode & 0o7777) | 0o011)
        path = os.path.dirname(path)


def build_node(base, vendor="mig", vendor_json=True):
    """The node above under ``base`` (a new directory), its state as real passes leave it. NVIDIA's spec
    is written as JSON (``vendor_json``): the same data, read 30 times faster than PyYAML reads it."""
    from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass  # pylint: disable=import-outside-toplevel
    from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState  # pylint: disable=import-outside-toplevel

    os.makedirs(base)
    node = Node(base)
    os.makedirs(node.root)
    with open(node.fakehw, "w", encoding="utf-8") as handle:
        json.dump(HARDWARE, handle, indent=2)
    with open(node.outside, "w", encoding="utf-8") as handle:
        handle.write('{"root": "owns this file"}\n')
    if vendor_json:
        import yaml  # pylint: disable=import-outside-toplevel
        node.write("/var/run/cdi/nvidia.json", json.dumps(yaml.safe_load(CONFTEST.vendor_text(vendor)), indent=1))
    else:
        node.write("/var/run/cdi/nvidia.yaml", CONFTEST.vendor_text(vendor))
    node.write("/proc/meminfo", MEMINFO)
    for kib in (2048, 1048576):
        node.write("/sys/kernel/mm/hugepages/hugepages-%dkB/free_hugepages" % kib, "64\n")
        node.write("/sys/kernel/mm/hugepages/hugepages-%dkB/resv_hugepages" % kib, "0\n")
    if os.geteuid() == 0:  # the role's shape: the state directory is the account's, root reads it
        os.makedirs(node.state(), mode=0o700)
        os.chown(node.state(), ACCOUNT_UID, ACCOUNT_UID)
        _open_to_all(node.state())
    host = node.host()
    run_pass(host, 1, [A1, M1, K1, S1, S2], INSTANCES, state_dir=STATE_DIR, lock_timeout=5)
    result = run_pass(node.host(), GENERATION, DEVICES, INSTANCES, state_dir=STATE_DIR, lock_timeout=5)
    state = NodeState(node.state(), STATE_DIR)
    state.list_and_acknowledge(ack_through=2, lock_timeout=5)
    now = time.time()
    with state.lock(5):
        state.load()
        state.save_maintenance({}, back_in_service=[GPU_D], now=now - 60)
        state.save_maintenance({GPU_E: {"reason": "xid 79 fell off the bus", "since": now}})
    node.generation_result = result  # type: ignore[attr-defined]
    return node


class Snapshot(object):
    """Every path under a directory as it is now: ``restore`` makes it so again."""

    def __init__(self, top):
        self.top = top
        self.entries = {}
        for path, info in _walk(top):
            content = None
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    content = handle.read()
            elif stat.S_ISLNK(info.st_mode):
                content = os.readlink(path)
            self.entries[os.path.relpath(path, top)] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode),
                                                        info.st_uid, info.st_gid, content)

    def content(self, rel):
        return self.entries[rel][4]

    def restore(self):
        """Remove what was not there, put back what changed; directories first, parents before children."""
        seen = set()
        for path, info in list(_walk(self.top)):
            rel = os.path.relpath(path, self.top)
            if rel == ".":
                continue
            if os.path.dirname(rel) not in seen and os.path.dirname(rel) != "":
                continue  # its directory was removed, or is not what it was: it went with it
            want = self.entries.get(rel)
            if want is None or not _same(path, info, want):
                _remove(path)
            else:
                seen.add(rel)
        for rel in sorted(self.entries, key=lambda r: (r.count(os.sep), r)):
            if rel in seen or rel == ".":
                continue
            kind, mode, uid, gid, content = self.entries[rel]
            path = os.path.join(self.top, rel)
            if kind == stat.S_IFDIR:
                if not os.path.isdir(path) or os.path.islink(path):
                    _remove(path)
                    os.mkdir(path)
            elif kind == stat.S_IFLNK:
                os.symlink(content, path)
            elif kind == stat.S_IFREG:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
                try:
                    os.write(fd, content)
                finally:
                    os.close(fd)
            else:
                continue
            if kind != stat.S_IFLNK:
                os.chmod(path, mode)
            if os.geteuid() == 0:
                os.chown(path, uid, gid, follow_symlinks=False)
        top = self.entries.get(".")
        if top is not None:
            os.chmod(self.top, top[1])


def _same(path, info, want):
    kind, mode, uid, gid, content = want
    if stat.S_IFMT(info.st_mode) != kind or (info.st_uid, info.st_gid) != (uid, gid):
        return False
    if kind == stat.S_IFLNK:
        return os.readlink(path) == content
    if stat.S_IMODE(info.st_mode) != mode or info.st_nlink != 1 and kind == stat.S_IFREG:
        return False
    if kind == stat.S_IFREG:
        if info.st_size != len(content):
            return False
        with open(path, "rb") as handle:
            return handle.read(len(content) + 1) == content
    return True


def _walk(top):
    """``(path, lstat)`` of ``top`` and everything under it, never through a link."""
    pending = [top]
    while pending:
        path = pending.pop()
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        yield path, info
        if stat.S_ISDIR(info.st_mode):
            if not info.st_mode & 0o500 and os.geteuid() != 0:
                os.chmod(path, 0o700)
            pending.extend(os.path.join(path, name) for name in sorted(os.listdir(path)))


def _remove(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def preload():
    """Import now what the code under test would import on first use. As root, a pass drops to the state
    directory owner's uid (``state/store.py``); on this machine the interpreter's own files may not be
    readable to that uid (a Python under ``/root``), so an import made then would fail where a node's
    world-readable Python never does. Everything of the collection, the codecs and ``_strptime`` are
    imported once, before any input."""
    import encodings  # pylint: disable=import-outside-toplevel
    import importlib  # pylint: disable=import-outside-toplevel
    import pkgutil  # pylint: disable=import-outside-toplevel

    for _finder, name, _is_package in pkgutil.iter_modules(encodings.__path__):
        try:
            importlib.import_module("encodings." + name)
        except Exception:  # pylint: disable=broad-except
            pass  # a codec of another platform (mbcs, oem)
    time.strptime("2026-01-01T00:00:00Z", "%Y-%m-%dT%H:%M:%SZ")
    plugins = REPO / "plugins"
    for path in sorted(plugins.rglob("*.py")):
        module = "ansible_collections.bcd.devices." + ".".join(path.relative_to(REPO).with_suffix("").parts)
        try:
            importlib.import_module(module)
        except Exception:  # pylint: disable=broad-except
            pass  # a module of an optional library this venv lacks
    for name in ("yaml", "grpc", "cryptography.hazmat.primitives.asymmetric.ed25519",
                 "cryptography.hazmat.primitives.serialization", "unicodedata", "difflib", "shlex", "ipaddress",
                 "uuid", "hashlib", "hmac", "secrets", "base64", "binascii", "calendar", "locale", "traceback",
                 "linecache", "tokenize", "faulthandler", "signal", "glob", "fnmatch", "shutil", "tempfile"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass

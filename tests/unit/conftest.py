# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared fixtures: a fakehw GPU node made of a directory and a hardware file.

``make_node(...)`` returns a ``Node``: ``root`` (the node's ``/``), ``fakehw``
(the hardware file, kept outside ``root``), a ``host()`` to run passes against,
and small helpers to read node files and list everything under the test's
directory (to show that a run wrote nothing, or nothing outside ``root``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost

# BCD_UNITS_ANSIBLE_ONLY=1 (make units under the newest ansible-core): the module_utils tests that run no Ansible
# code are left out. module_utils imports no ansible (test_layers.py), so those tests answer the same under every
# core; they run under the oldest, and Python 3.13 runs module_utils on make e2e's trixie nodes. A test file that
# drives a module, an action plugin or ansible itself stays.
_MODULE_UTILS_TESTS = Path(__file__).parent / "plugins" / "module_utils"
_DRIVES_ANSIBLE = re.compile(r"plugins\.modules|plugins\.action|from ansible\.|import ansible|\"ansible\"|ansible-playbook")


def pytest_ignore_collect(collection_path, config):  # pylint: disable=unused-argument
    if os.environ.get("BCD_UNITS_ANSIBLE_ONLY") != "1":
        return None
    path = Path(str(collection_path))
    if path.suffix != ".py" or _MODULE_UTILS_TESTS not in path.parents:
        return None
    return None if _DRIVES_ANSIBLE.search(path.read_text(encoding="utf-8")) else True


DATA = Path(__file__).resolve().parents[1] / "data"
NVIDIA_CDI = DATA / "nvidia-cdi"
CDI_SCHEMA = DATA / "cdi-schema"

# The default node: GPU 0 with two MIG instances, GPU 1 whole, GPU 2 whole. The MIG UUIDs are
# those of tests/data/nvidia-cdi/constructed_mig_nvidia.yaml; the GI/CI numbers are this node's own
# (holds reach NVIDIA's edits through the MIG UUID, never through GI/CI).
GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
GPU_C = "GPU-5f1c2a90-0000-4000-8000-000000000003"
MIG_A1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"  # GPU_A gi1/ci0
MIG_A2 = "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"  # GPU_A gi2/ci0

DEFAULT_GPUS = [
    {"uuid": GPU_A, "index": 0, "minor": 0, "mig": [
        {"gi": 1, "ci": 0, "uuid": MIG_A1},
        {"gi": 2, "ci": 0, "uuid": MIG_A2},
    ]},
    {"uuid": GPU_B, "index": 1, "minor": 1},
    {"uuid": GPU_C, "index": 2, "minor": 2},
]

MIG_1_0_BLOCK = ("- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n    - path: /dev/nvidia-caps/nvidia-cap147\n"
                 "    - path: /dev/nvidia-caps/nvidia-cap148\n  name: MIG-2a5c6f10-8e3b-5f4e-9c1d-7b0e4d3a2f91\n")

# NVIDIA's real specs name other GPUs; these replacements make them name ours.
VENDOR_FIXTURES = {
    # One real GPU (toolkit 1.17.8): its GPU becomes GPU_A.
    "full": ("salilkadam_nvidia.yaml", {"GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e": GPU_A}),
    # The toolkit's MIG layout: GPU 0 (and its MIG-7089/MIG-56c3 devices) becomes GPU_A; GPU 1 is GPU_B already.
    # GPU_B is whole on the default node, so GPU 1's MIG device goes: a spec naming a MIG device the node
    # does not have is stale (VendorSpecStale, issue 48). Its index name "1:0" stays (no UUID, not compared).
    "mig": ("constructed_mig_nvidia.yaml", {"GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4": GPU_A,
                                            MIG_1_0_BLOCK: ""}),
    # JSON form with per-device hooks.
    "json": ("ramalama_fullgpu_cdi.json", {"GPU-08b3c2e8-cb7b-ea3f-7711-a042c580b3e8": GPU_A}),
    # WSL2: a single "all" device.
    "wsl": ("crazymax-buildx_wsl_nvidia-gpu.yaml", {}),
}


def vendor_text(name):
    """A vendor fixture's text with its GPU UUIDs replaced by the default node's."""
    filename, replacements = VENDOR_FIXTURES[name]
    text = (NVIDIA_CDI / filename).read_text(encoding="utf-8")
    for old, new in replacements.items():
        assert old in text
        text = text.replace(old, new)
    return text


class Node(object):
    """A fakehw test node. Paths given to helpers are node paths (``/etc/cdi/...``)."""

    state_dir = "/var/lib/bcd"

    def __init__(self, base, root, fakehw):
        self.base = base
        self.root = root
        self.fakehw = fakehw

    def host(self):
        return FakeHwHost(self.root, self.fakehw)

    def run(self, generation, devices, **kwargs):
        kwargs.setdefault("state_dir", self.state_dir)
        kwargs.setdefault("lock_timeout", 5)
        return run_pass(self.host(), generation, devices, **kwargs)

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def state(self, name=""):
        return os.path.join(self.path(self.state_dir), name) if name else self.path(self.state_dir)

    def read(self, node_path):
        try:
            with open(self.path(node_path), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def exists(self, node_path):
        return os.path.exists(self.path(node_path))

    def mode(self, node_path):
        return stat.S_IMODE(os.stat(self.path(node_path)).st_mode)

    def write(self, node_path, content):
        target = Path(self.path(node_path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))

    def set_hardware(self, gpus=None, domains=None, **extra):
        data = json.loads(Path(self.fakehw).read_text())
        if gpus is not None:
            data["gpus"] = gpus
        if domains is not None:
            data["domains"] = domains
        data.update(extra)
        Path(self.fakehw).write_text(json.dumps(data))

    def listing(self):
        """Every path under the test's directory (root and hardware file), with its
        mode and, for files, its content and mtime: equal listings mean nothing was written."""
        found = {}
        for dirpath, dirnames, filenames in os.walk(self.base):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                content = None
                if stat.S_ISREG(st.st_mode):
                    with open(full, "rb") as handle:
                        content = handle.read()
                found[os.path.relpath(full, self.base)] = (st.st_mode, st.st_mtime_ns, content)
        return found


@pytest.fixture
def make_node(tmp_path):
    """Factory for fakehw nodes under ``tmp_path``.

    ``gpus``/``domains`` as in the fakehw file; ``vendor`` a key of
    ``VENDOR_FIXTURES`` or a dict (a spec written as JSON); ``vendor_path``
    where NVIDIA's spec goes; ``mps`` creates ``/run/nvidia-mps``.
    """
    counter = [0]

    def factory(gpus=None, domains=(), vendor=None, vendor_path=None, mps=False, node_id="node-a",
                boot_id="6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10"):
        counter[0] += 1
        base = tmp_path / ("node%d" % counter[0])
        root = base / "root"
        root.mkdir(parents=True)
        hardware = {"node_id": node_id, "boot_id": boot_id,
                    "gpus": copy.deepcopy(DEFAULT_GPUS if gpus is None else gpus),
                    "domains": list(domains)}
        fakehw = base / "fakehw.json"
        fakehw.write_text(json.dumps(hardware))
        node = Node(str(base), str(root), str(fakehw))
        if vendor is not None:
            if isinstance(vendor, dict):
                node.write(vendor_path or "/var/run/cdi/nvidia.json", json.dumps(vendor))
            else:
                suffix = os.path.splitext(VENDOR_FIXTURES[vendor][0])[1]
                node.write(vendor_path or "/var/run/cdi/nvidia" + suffix, vendor_text(vendor))
        if mps:
            os.makedirs(node.path("/run/nvidia-mps"))
        return node

    return factory


def open_to_all(path):
    """Let other accounts traverse every directory down to ``path`` (pytest's temporary ones are 0700),
    for a state directory another account owns: root's passes work there as that account."""
    path = os.path.abspath(path)
    while path != os.path.dirname(path):
        mode = os.stat(path).st_mode
        if not mode & 0o001:
            os.chmod(path, (mode & 0o7777) | 0o011)
        path = os.path.dirname(path)


@pytest.fixture
def node(make_node):
    """The default node: three GPUs, NVIDIA's spec in /var/run/cdi, no VMs."""
    return make_node(vendor="mig")

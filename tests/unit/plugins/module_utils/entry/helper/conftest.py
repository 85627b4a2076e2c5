# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper as the tests of ``entry/helper/`` speak to it: over its real unix socket.

``helper`` starts the real server (``listen`` + ``serve`` in a thread, ``served_helper.ServedHelper``)
for a fakehw root under ``base`` and sends it raw requests, one per connection, as a careless peer
would. The files of this folder are named for the module of ``entry/helper/`` they hold
(``test_request``, ``test_reading``, ``test_limits``, ``test_server``, ``test_handle``, with
``test_slices`` for ``handle``'s slices and ``test_quotas`` for ``reading``'s quotas), or for the
reproduction they play against a helper process (``test_attacks``, ``test_bounds``, ...).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import cli as _cli
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper

GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
HARDWARE = {"node_id": "node-h", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
            "gpus": [{"uuid": GPU_A, "index": 0, "minor": 0}, {"uuid": GPU_B, "index": 1, "minor": 1}]}
# .../.build: the directory that holds ansible_collections/ (not resolved: .build links to the checkout)
COLLECTIONS_PARENT = _cli.__file__[:_cli.__file__.rindex("/ansible_collections/")]


class Helper(ServedHelper):
    """A running helper: ``base`` (a 0755 directory nobody can traverse) holds ``root``,
    the hardware file and the socket; ``outside`` is a sibling of ``root`` that must stay empty."""

    def __init__(self, base, users=()):
        self.base = base
        self.root = os.path.join(base, "root")
        self.outside = os.path.join(base, "outside")
        os.makedirs(self.root)
        os.makedirs(self.outside)
        self.fakehw = os.path.join(base, "fakehw.json")
        with open(self.fakehw, "w") as handle:
            json.dump(HARDWARE, handle)
        super().__init__(FakeHwHost(self.root, self.fakehw), os.path.join(base, "run", "helper.sock"), users)

    def node(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def send(self, data, timeout=10):
        """Send raw bytes on one connection; every reply line the helper sent before hanging up."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(self.socket)
            connection.sendall(data if isinstance(data, bytes) else data.encode("utf-8"))
            connection.shutdown(socket.SHUT_WR)
            received = b""
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        return [json.loads(line) for line in received.decode("utf-8").splitlines()]

    def request(self, message):
        replies = self.send(json.dumps(message) + "\n")
        assert len(replies) == 1, replies  # one request, one reply, then the helper hangs up
        return replies[0]

    def files(self):
        """Every file under ``base`` except the socket and the hardware file."""
        found = {}
        for dirpath, _dirs, names in os.walk(self.base):
            for name in names:
                path = os.path.join(dirpath, name)
                if path not in (self.socket, self.fakehw):
                    found[os.path.relpath(path, self.base)] = stat.S_IMODE(os.lstat(path).st_mode)
        return found


@pytest.fixture
def base():
    """A directory under the system temp dir that ``nobody`` can reach (pytest's own is 0700)."""
    path = tempfile.mkdtemp(prefix="bcd-helper-test-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def helper(base):
    running = Helper(base)
    yield running
    running.close()

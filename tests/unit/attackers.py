# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A throwaway system account that plays the attacker, and the root it attacks.

``Attacker`` is the account (``useradd``, removed at the end), which runs code and file work as
itself; ``World`` is a fakehw node whose state directory the account owns, served by a root
``bcd-holds helper`` process that allows the account; the fixtures ``attacker`` (one account a
module) and ``world`` (one a test) set them up, ``hold`` is what the account asks that helper to
write. ``LAUNCHER`` runs ``bcd-holds`` from this checkout in a fresh interpreter, as root does.
Playing an account needs root, ``useradd`` and ``/usr/bin/python3``: ``CAN_PLAY`` says whether
this run has them.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import cli as _cli
from ansible_collections.bcd.devices.tests.unit.builders import request

ATTACKER_PYTHON = "/usr/bin/python3"  # one every account may run (the test's may sit in root's home)
CAN_PLAY = os.geteuid() == 0 and shutil.which("useradd") is not None and os.path.exists(ATTACKER_PYTHON)
CANNOT_PLAY = "needs root, useradd and /usr/bin/python3 to play another account"

GPU_A = "GPU-5f1c2a90-00aa-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-00aa-4000-8000-000000000002"
HARDWARE = {"node_id": "node-x", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
            "gpus": [{"uuid": GPU_A, "index": 0, "minor": 0}, {"uuid": GPU_B, "index": 1, "minor": 1}]}
COLLECTIONS_PARENT = _cli.__file__[:_cli.__file__.rindex("/ansible_collections/")]
LAUNCHER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main
sys.exit(main(sys.argv[2:]))
"""
# The attacker's client: stdlib only, so the system Python of any account runs it. Each argv item
# after the socket is one connection's raw bytes (base64); it prints one JSON list of replies.
CLIENT = r"""
import base64, json, socket, sys
replies = []
for payload in sys.argv[2:]:
    got = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(20)
            connection.connect(sys.argv[1])
            try:
                connection.sendall(base64.b64decode(payload))
                connection.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                got += chunk
        replies.append([json.loads(line) for line in got.decode().splitlines()])
    except OSError as exc:
        replies.append({"client error": str(exc)})
print(json.dumps(replies))
"""


class Attacker(object):
    """The throwaway account (``bcdatk<8 hex>``), and ways to run code and file work as it."""

    def __init__(self):
        self.name = "bcdatk%s" % uuid.uuid4().hex[:8]
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", self.name],
                       check=True, timeout=60, stdout=subprocess.DEVNULL)
        account = pwd.getpwnam(self.name)
        self.uid, self.gid = account.pw_uid, account.pw_gid

    def remove(self):
        subprocess.run(["userdel", self.name], timeout=60, check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def demote(self):
        """A ``preexec_fn`` that makes the child this account."""
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    def python(self, code, *args, timeout=60):
        """``code`` run as the account by ``/usr/bin/python3 -I``; the finished process (it must succeed)."""
        proc = subprocess.run([ATTACKER_PYTHON, "-I", "-c", code] + [str(a) for a in args], preexec_fn=self.demote,
                              cwd="/", capture_output=True, timeout=timeout, check=False)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc

    def python_json(self, code, *args, timeout=60):
        """What ``code`` run as the account prints, read as JSON."""
        return json.loads(self.python(code, *args, timeout=timeout).stdout)

    def run(self, argv):
        """Shell-free file work as the account (ln, rm, ...)."""
        return subprocess.run(argv, preexec_fn=self.demote, cwd="/", timeout=30, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def chown(self, path):
        """Give ``path`` (not what a link names) to the account."""
        os.lchown(path, self.uid, self.gid)


class World(object):
    """A fakehw node whose state directory is the attacker's, and a root helper process for it."""

    def __init__(self, attacker):
        self.attacker = attacker
        self.base = tempfile.mkdtemp(prefix="bcd-attack-")
        os.chmod(self.base, 0o755)
        self.root = os.path.join(self.base, "root")
        os.makedirs(self.root)
        self.fakehw = os.path.join(self.base, "fakehw.json")
        Path(self.fakehw).write_text(json.dumps(HARDWARE))
        self.state = os.path.join(self.root, "var/lib/bcd")
        os.makedirs(self.state, mode=0o700)
        os.chown(self.state, attacker.uid, attacker.gid)
        # what the attacker would love to reach: root's, in a directory only root can enter
        self.secrets = os.path.join(self.base, "secrets")
        os.makedirs(self.secrets, mode=0o700)
        self.target = os.path.join(self.secrets, "shadow")
        Path(self.target).write_text("root:secret-hash\n")
        os.chmod(self.target, 0o600)
        self.socket = os.path.join(self.base, "run", "helper.sock")
        os.makedirs(os.path.dirname(self.socket), mode=0o755)
        self.log = open(os.path.join(self.base, "helper.log"), "wb")
        self.helper = subprocess.Popen([sys.executable, "-I", "-c", LAUNCHER, COLLECTIONS_PARENT, "helper", "--root",
                                        self.root, "--fakehw", self.fakehw, "--socket", self.socket,
                                        "--allow-user", attacker.name], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            assert self.helper.poll() is None, self.helper_log()
            assert time.monotonic() < deadline, "the helper did not start: %s" % self.helper_log()
            time.sleep(0.05)

    def helper_log(self):
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def close(self):
        self.helper.kill()
        self.helper.wait(10)
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)

    def node(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def send(self, *payloads):
        """Raw payloads, one connection each, sent by the attacker; the replies of each connection."""
        encoded = [base64.b64encode(p if isinstance(p, bytes) else p.encode()).decode() for p in payloads]
        return self.attacker.python_json(CLIENT, self.socket, *encoded)

    def request(self, message):
        (replies,) = self.send(json.dumps(message) + "\n")
        assert len(replies) == 1, replies
        return replies[0]

    def alive(self):
        """The helper still runs and serves the attacker a harmless request."""
        assert self.helper.poll() is None, self.helper_log()
        return self.request({"op": "slice.stop", "allocation_id": "nothing_here"}) == {"ok": True}

    def root_cli(self, *argv, timeout=120):
        """``bcd-holds ARGV`` as root, as the module under become or a root timer would run it."""
        proc = subprocess.run([sys.executable, "-I", "-c", LAUNCHER, COLLECTIONS_PARENT] + list(argv)
                              + ["--root", self.root, "--fakehw", self.fakehw], cwd="/", timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

    def files(self, under="/"):
        found = {}
        for dirpath, _dirs, names in os.walk(self.node(under)):
            for name in names:
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, self.root)] = os.lstat(path).st_uid
        return found


@pytest.fixture(scope="module")
def attacker():
    """One account for a module's tests (skipped where this run cannot play one)."""
    if not CAN_PLAY:
        pytest.skip(CANNOT_PLAY)
    account = Attacker()
    yield account
    account.remove()


@pytest.fixture
def world(attacker):
    """A node and a root helper process serving the account, for one test."""
    running = World(attacker)
    yield running
    running.close()


# What the account asks the helper to write: a hold of this node's GPU_A, generation 1, reservation r1.
hold = functools.partial(request, device_id=GPU_A, generation=1, reservation_id="r1")


def target_untouched(world):
    info = os.stat(world.target)
    return (Path(world.target).read_text(), info.st_uid, stat.S_IMODE(info.st_mode)) == ("root:secret-hash\n", 0, 0o600)

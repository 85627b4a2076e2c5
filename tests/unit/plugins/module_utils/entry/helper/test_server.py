# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper's socket and who it serves (``entry/helper/server.py``).

``listen`` binds the socket for root and the allowed user only, and never in a directory others can
write; a connection carries one line, answered within its deadline, whatever the peer does with it; the
policy serves root, the allowed users and the members of the allowed groups, read from the peer's
credentials. The tests that need a second uid (a peer the helper does not serve, a pass run as
``nobody`` through the helper) run a client subprocess as ``nobody`` and are skipped when not run as
root. ``test_attacks.py`` plays a hostile account against a helper process.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.server import HelperSetupError, Policy, listen
from ansible_collections.bcd.devices.tests.unit.builders import request
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.conftest import (
    COLLECTIONS_PARENT,
    GPU_A,
    GPU_B,
    Helper,
)


def nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


needs_root = pytest.mark.skipif(os.geteuid() != 0 or nobody() is None,
                                reason="needs root and a nobody account to run a second uid")


def as_nobody():
    account = nobody()

    def demote():
        os.setgroups([])
        os.setgid(account.pw_gid)
        os.setuid(account.pw_uid)
    return demote


def python_for_nobody():
    """An interpreter ``nobody`` can run that has cryptography (the venv's may live under /root)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            probe = subprocess.run([candidate, "-c", "import cryptography, sys; sys.exit(sys.version_info < (3, 8))"],
                                   preexec_fn=as_nobody(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   cwd="/", timeout=60, check=False)
        except OSError:
            continue
        if probe.returncode == 0:
            return candidate
    return None


def test_the_socket_is_only_for_root_and_the_allowed_user(base):
    account = nobody()
    if account is None or os.geteuid() != 0:
        pytest.skip("needs root and a nobody account")
    running = Helper(base, users=["nobody"])
    try:
        info = os.stat(running.socket)
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == account.pw_uid
    finally:
        running.close()


def test_the_helper_will_not_listen_in_a_directory_others_can_write(base):
    directory = os.path.join(base, "open")
    os.makedirs(directory)
    os.chmod(directory, 0o777)
    with pytest.raises(HelperSetupError, match="writable by no one else"):
        listen(os.path.join(directory, "helper.sock"))
    assert os.listdir(directory) == []


# -- one line a connection, within its deadline ------------------------------------------------------

def test_a_blank_line_is_no_request_and_gets_no_reply(helper):
    assert helper.send(b"\n") == []
    assert helper.request({"op": "slice.stop", "allocation_id": "a9"}) == {"ok": True}


def test_only_the_first_line_of_a_connection_is_served(helper):
    second = json.dumps({"op": "hold.write", "kind": "allocation-env", "hold": request("a2")})
    replies = helper.send(json.dumps({"op": "slice.stop", "allocation_id": "a1"}) + "\n" + second + "\n")
    assert replies == [{"ok": True}]
    assert not os.path.exists(helper.node("/run/bcd/allocations/a2.env"))


def test_a_peer_that_hangs_up_mid_line_does_not_stop_the_helper(helper):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(helper.socket)
        connection.sendall(b'{"op": "hold.wri')
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}


def test_a_last_line_without_its_newline_is_still_answered(helper):
    assert helper.send(json.dumps({"op": "slice.stop", "allocation_id": "a1"})) == [{"ok": True}]


# -- peers -------------------------------------------------------------------------------------------

CLIENT = r"""
import json, socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.settimeout(10)
connection.connect(sys.argv[1])
try:
    connection.sendall((json.dumps({"op": "slice.apply", "allocation_id": "a1",
                                    "limits": {"cpus": "0"}}) + "\n").encode())
except OSError:
    pass  # the helper may hang up on a refused peer before the request is sent
print(connection.recv(65536).decode().strip())
"""


@needs_root
def test_a_peer_that_is_not_allowed_is_refused_by_its_credentials(helper):
    # The socket is 0600 root; open it up so that only SO_PEERCRED stands in the way.
    os.chmod(helper.socket, 0o666)
    python = python_for_nobody()
    if python is None:
        pytest.skip("no Python that nobody can run")
    proc = subprocess.run([python, "-c", CLIENT, helper.socket], preexec_fn=as_nobody(), cwd="/",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    account = nobody()
    assert json.loads(proc.stdout) == {
        "ok": False, "error": "uid %d gid %d may not use this helper" % (account.pw_uid, account.pw_gid)}
    assert not os.path.exists(helper.node("/run/bcd/slices"))
    # root is still served
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}


def test_the_policy_serves_root_the_allowed_users_and_groups():
    policy = Policy(["65534"], ["0"])
    assert policy.allows(0, 0)
    assert policy.allows(65534, 65534)
    assert policy.allows(1234, 0)                  # a member of an allowed group by its gid
    assert not policy.allows(1234, 1234)
    assert not Policy().allows(65534, 65534)


CONVERGE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import main
sys.exit(main(sys.argv[2:]))
"""


@needs_root
def test_a_pass_as_nobody_is_refused_alone_and_binds_through_the_helper(base):
    python = python_for_nobody()
    if python is None:
        pytest.skip("no Python with cryptography that nobody can run")
    account = nobody()
    running = Helper(base, users=["nobody"])
    try:
        state = running.node("/var/lib/bcd")
        os.makedirs(state)
        os.chown(state, account.pw_uid, account.pw_gid)
        spec = os.path.join(base, "spec.json")
        wanted = {"generation": 1, "devices": [
            {"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]},
            {"allocation_id": "a2", "reservation_id": "r2", "binding": "BINDING_HOLD", "devices": [{"id": GPU_B}],
             "limits": {"cpus": "0-1", "memory_bytes": 1 << 30}},
        ]}
        common = ["--root", running.root, "--fakehw", running.fakehw, "--json"]

        def converge(*extra, generation=1):
            with open(spec, "w") as handle:
                json.dump(dict(wanted, generation=generation), handle)
            proc = subprocess.run([python, "-c", CONVERGE, COLLECTIONS_PARENT, "converge", "--spec", spec]
                                  + common + list(extra), preexec_fn=as_nobody(), cwd="/",
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
            assert proc.returncode == 0, proc.stderr.decode()
            return json.loads(proc.stdout), proc.stderr.decode()

        alone, log = converge()
        assert [(f["allocation_id"], f["reason"]) for f in alone["failures"]] == [
            ("a1", "node-unprivileged"), ("a2", "node-unprivileged")]
        assert alone["capabilities"] == ["nvml"]
        assert "ERROR: refused: a1: bcd node runs without root and without [helper]" in log
        assert not os.path.exists(running.node("/etc/cdi"))

        # a refusal is final at its generation: the helper's help comes with the next one
        through, _log = converge("--helper-socket", running.socket, generation=2)
        assert through["section"]["state"] == "CONVERGED"
        assert [a["action"] for a in through["plan"]] == ["bind", "bind"]
        assert set(through["capabilities"]) >= {"cdi", "devices.limits", "binding.kubernetes"}
        for path in ("/etc/cdi/bcd-a1.json", "/etc/cdi/bcd-a2.json", "/run/bcd/allocations/a1.env",
                     "/run/bcd/slices/bcd-alloc-a2.slice.json"):
            info = os.stat(running.node(path))
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644), path
        # the pass's own state is nobody's; the signed events are in its journal
        journal = running.node("/var/lib/bcd/events.jsonl")
        assert os.stat(journal).st_uid == account.pw_uid
        types = [json.loads(line)["type"] for line in Path(journal).read_text().splitlines()]
        assert types.count("AllocationBound") == 2
        assert sum(1 for line in running.log if line.startswith("uid %d:" % account.pw_uid)) >= 5
    finally:
        running.close()

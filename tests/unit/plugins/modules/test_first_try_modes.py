# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The user guide's order works (issue 46, item 2): a bare node converged by the modules first, then handed to
the role, whose passes run as ``bcd``. The first pass made every missing directory above the state directory
0700 as well (``<root>/var``, ``<root>/var/lib``), so ``bcd`` could not reach its own state directory and the
role failed on every node with ``[Errno 13] Permission denied: '<root>/var/lib/bcd'``.

Whatever creates a directory on the node (a module, ``bcd-holds``, the root helper) makes the directories above
the one it asked for 0755, root's, as the system's own are; only the state directory is 0700."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import server as helper_module
from ansible_collections.bcd.devices.plugins.modules import maintenance
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, open_to_all
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call

STATE_DIR = "/var/lib/bcd"
# The directories a first pass that binds a sliced hold creates under a bare fakehw root, each 0755 but the state
# directory's 0700.
CREATED = {
    "/var": 0o755, "/var/lib": 0o755, STATE_DIR: 0o700,
    "/etc": 0o755, "/etc/cdi": 0o755,
    "/run": 0o755, "/run/bcd": 0o755, "/run/bcd/allocations": 0o755, "/run/bcd/slices": 0o755,
}


@pytest.fixture(params=[0o022, 0o077], ids=["umask-022", "umask-077"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def directories(node):
    """``{node path: (mode, uid, gid)}`` of every directory under the node's root (the root itself left out)."""
    found = {}
    for dirpath, dirnames, _filenames in os.walk(node.root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            found["/" + os.path.relpath(path, node.root)] = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    return found


def assert_modes(node, expected):
    owner = (os.geteuid(), os.getegid())
    found = directories(node)
    assert dict((path, mode) for path, (mode, _uid, _gid) in found.items()) == expected
    assert set((uid, gid) for _mode, uid, gid in found.values()) == {owner}


def test_a_first_module_pass_on_a_bare_root_leaves_every_directory_above_the_state_directory_0755(
        capsys, make_node, umask):
    node = make_node(gpus=[{"uuid": GPU_A, "index": 0, "minor": 0}, {"uuid": GPU_B, "index": 1, "minor": 1}])
    assert os.listdir(node.root) == []
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, limits={"cpus": "0-1"}), hold("a2", GPU_B)])
    assert result["changed"] is True and not result.get("failed"), result
    assert node.exists("/run/bcd/slices/bcd-alloc-a1.slice.json") and node.exists("/var/lib/bcd/node.key")
    assert_modes(node, CREATED)


def test_the_node_command_and_the_maintenance_module_first_leave_the_same_modes(capsys, make_node, umask):
    by_cli = make_node()
    code, _out, _err = cli(capsys, by_cli, "converge", "--spec", write_spec(by_cli, 1, [hold("a1", GPU_A)]))
    assert code == 0
    assert_modes(by_cli, dict((path, mode) for path, mode in CREATED.items() if path != "/run/bcd/slices"))
    by_module = make_node()
    put = call(capsys, maintenance.main, {"root": by_module.root, "fakehw": by_module.fakehw, "gpus": [GPU_A],
                                          "reason": "firmware update"})
    assert put["changed"] is True
    assert_modes(by_module, {"/var": 0o755, "/var/lib": 0o755, STATE_DIR: 0o700})


def test_the_helpers_socket_directory_and_those_above_it_are_0755_whatever_the_umask(tmp_path, umask):
    socket_path = tmp_path / "run" / "bcd" / "helper.sock"
    server = helper_module.listen(str(socket_path))
    try:
        assert server.family == socket.AF_UNIX
        assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o755
        assert stat.S_IMODE(os.stat(tmp_path / "run" / "bcd").st_mode) == 0o755
    finally:
        server.close()


def test_an_existing_directory_keeps_its_mode(capsys, make_node):
    node = make_node()
    os.makedirs(node.path("/var/lib"))
    os.chmod(node.path("/var"), 0o711)
    os.chmod(node.path("/var/lib"), 0o750)
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    found = directories(node)
    assert found["/var"][0] == 0o711 and found["/var/lib"][0] == 0o750 and found[STATE_DIR][0] == 0o700


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="needs root to play nobody")
def test_the_account_the_state_directory_is_handed_to_reaches_it_after_a_root_pass(capsys, make_node):
    """What the role does after the modules' first pass: the state directory is handed to the pass account,
    whose pass must then get in (it failed with [Errno 13] on <root>/var/lib/bcd)."""
    try:
        account = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no account nobody")
    node = make_node()
    run(capsys, node, generation=1, devices=[hold("a1", GPU_A)])
    open_to_all(node.base)  # pytest's own temporary directories are 0700: let the account reach the root
    state = node.state()
    for dirpath, _dirnames, filenames in os.walk(state):
        for name in [""] + filenames:
            os.chown(os.path.join(dirpath, name), account.pw_uid, account.pw_gid)
    seen = subprocess.run(["/usr/bin/python3", "-c", "import os, sys; print(' '.join(sorted(os.listdir(sys.argv[1]))))",
                           state], user=account.pw_uid, group=account.pw_gid, extra_groups=[], capture_output=True,
                          text=True, timeout=60, check=False, cwd="/")
    assert seen.returncode == 0, seen.stderr
    assert "events.jsonl" in seen.stdout.split() and "ledger.json" in seen.stdout.split()
    shutil.rmtree(node.base)  # owned by another account now: removed here, as root

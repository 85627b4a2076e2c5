# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper, spoken to over its real unix socket.

Each test starts the real server (``listen`` + ``serve`` in a thread) for a
fakehw root and sends it raw lines, as a hostile or careless peer would: good
writes, ids and kinds that try to leave the root, bad slice names and
cpulists, content that is not valid CDI, garbage, a 2 MiB line. The helper
must answer each with ``"ok": false`` and a reason, write nothing outside its
root, and keep answering. The tests that need a second uid (a peer the helper
does not serve, a pass run as ``nobody`` through the helper) run a client
subprocess as ``nobody`` and are skipped when not run as root.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry import cli as _cli
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import listen, MAX_REQUEST, Policy, serve
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient, HelperError
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter

GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
HARDWARE = {"node_id": "node-h", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-2c4f1d2b7a10",
            "gpus": [{"uuid": GPU_A, "index": 0, "minor": 0}, {"uuid": GPU_B, "index": 1, "minor": 1}]}
# .../.build: the directory that holds ansible_collections/ (not resolved: .build links to the checkout)
COLLECTIONS_PARENT = _cli.__file__[:_cli.__file__.rindex("/ansible_collections/")]


def valid_cdi(allocation_id="a1", device="GPU-x"):
    return json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu",
                       "annotations": {"bcd.dev/allocation-id": allocation_id},
                       "devices": [{"name": device, "containerEdits": {"env": ["BCD_DEVICE=%s" % device]}}]})


class Helper(object):
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
        self.socket = os.path.join(base, "run", "helper.sock")
        self.log = []
        self.server = listen(self.socket, list(users))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=serve, args=(FakeHwHost(self.root, self.fakehw), self.server,
                                                           Policy(users), self.log.append, self.stop))
        self.thread.daemon = True
        self.thread.start()

    def close(self):
        self.stop.set()
        try:  # wake the accept loop so that it sees the stop at once
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(self.socket)
        except OSError:
            pass
        self.thread.join(5)
        self.server.close()

    def node(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def send(self, *lines, timeout=10):
        """Send raw lines on one connection; the replies, one per answered line."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(self.socket)
            for line in lines:
                connection.sendall(line if isinstance(line, bytes) else line.encode("utf-8"))
            connection.shutdown(socket.SHUT_WR)
            data = b""
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
        return [json.loads(line) for line in data.decode("utf-8").splitlines()]

    def request(self, message):
        return self.send(json.dumps(message) + "\n")[0]

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


# -- good requests -------------------------------------------------------------------

def test_a_good_write_lands_under_root_with_mode_0644_and_the_helper_logs_it(helper):
    assert helper.request({"op": "file.write", "kind": "cdi", "allocation_id": "a1",
                           "content": valid_cdi("a1")}) == {"ok": True}
    assert helper.request({"op": "file.write", "kind": "allocation-env", "allocation_id": "a1",
                           "content": "BCD_ALLOCATION_ID=a1\n"}) == {"ok": True}
    spec = helper.node("/etc/cdi/bcd-a1.json")
    env = helper.node("/run/bcd/allocations/a1.env")
    assert json.loads(Path(spec).read_text())["annotations"]["bcd.dev/allocation-id"] == "a1"
    assert Path(env).read_text() == "BCD_ALLOCATION_ID=a1\n"
    assert stat.S_IMODE(os.stat(spec).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o644
    assert os.listdir(helper.outside) == []
    assert any("file.write cdi a1" in line for line in helper.log)  # the kind is logged too

    assert helper.request({"op": "file.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}
    assert not os.path.exists(spec)
    # removing what is not there is no error (a release may be repeated after a crash)
    assert helper.request({"op": "file.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}


def test_a_slice_is_applied_and_removed_as_a_record_under_root(helper):
    name = "bcd-alloc-a1.slice"
    reply = helper.request({"op": "slice.apply", "name": name,
                            "properties": {"AllowedCPUs": "0-3,8", "MemoryMax": "1073741824"},
                            "hugetlb_max": {"2MB": 2097152}})
    assert reply == {"ok": True}
    record_path = helper.node("/run/bcd/slices/%s.json" % name)
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["AllowedCPUs"] == "0-3,8"
    assert record["hugetlb_max"] == {"2MB": 2097152}
    assert helper.request({"op": "slice.remove", "name": name}) == {"ok": True}
    assert not os.path.exists(record_path)


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


# -- hostile and malformed requests ---------------------------------------------------

@pytest.mark.parametrize("allocation_id", [
    "../../outside/x", "../x", "a/b", "a1\n", "a1/", "", "x" * 81, ".", "..", "a b", "a-1", 7, None, ["a1"],
])
def test_an_allocation_id_that_is_not_an_id_is_refused_and_nothing_is_written(helper, allocation_id):
    before = helper.files()
    for op in ("file.write", "file.remove"):
        reply = helper.request({"op": op, "kind": "allocation-env", "allocation_id": allocation_id,
                                "content": "A=1\n"})
        assert reply["ok"] is False
        assert "allocation_id" in reply["error"] and "does not match" in reply["error"]
    assert helper.files() == before


@pytest.mark.parametrize("kind", ["../cdi", "cdi/../../outside", "../../outside/x", "/etc/passwd", "env", "", None])
def test_a_kind_that_is_not_one_of_the_two_is_refused(helper, kind):
    before = helper.files()
    reply = helper.request({"op": "file.write", "kind": kind, "allocation_id": "a1", "content": "A=1\n"})
    assert reply["ok"] is False
    assert "unknown kind" in reply["error"] and "allocation-env, cdi" in reply["error"]
    assert helper.files() == before


@pytest.mark.parametrize("name", [
    "bcd-alloc-../../outside/x.slice", "../bcd-alloc-a1.slice", "bcd-alloc-a1.slice/../../x", "foo.slice",
    "bcd-alloc-.slice", "bcd-alloc-a1.service", "bcd-alloc-a1.slice\n", "-.slice", "bcd-alloc-a-1.slice",
    "bcd-alloc-%s.slice" % ("x" * 81), "", None, 3,
])
def test_a_slice_name_of_another_form_is_refused(helper, name):
    before = helper.files()
    for message in ({"op": "slice.apply", "name": name, "properties": {"AllowedCPUs": "0"}},
                    {"op": "slice.remove", "name": name}):
        reply = helper.request(message)
        assert reply["ok"] is False and reply["error"]
    assert helper.files() == before


@pytest.mark.parametrize("properties, hugetlb, words", [
    ({"AllowedCPUs": ",".join(["1"] * 600)}, {}, "1024"),             # 1199 characters
    ({"AllowedMemoryNodes": "0-" + "9" * 1030}, {}, "1024"),
    ({"AllowedCPUs": "0-3;rm -rf /"}, {}, "cpulist"),
    ({"AllowedCPUs": "3-1"}, {}, "runs backwards"),
    ({"AllowedCPUs": 5}, {}, "must be a string"),
    ({"ExecStart": "/bin/sh"}, {}, "unknown slice property"),
    ({"MemoryMax": "1G; reboot"}, {}, "not valid"),
    ({}, {"2MB": -1}, "non-negative"),
    ({}, {"3MB": 1}, "unknown huge page size"),
    (["AllowedCPUs=0"], {}, "mappings"),
])
def test_slice_properties_and_cpulists_are_checked_as_root(helper, properties, hugetlb, words):
    reply = helper.request({"op": "slice.apply", "name": "bcd-alloc-a1.slice", "properties": properties,
                            "hugetlb_max": hugetlb})
    assert reply["ok"] is False
    assert words in reply["error"]
    assert not os.path.exists(helper.node("/run/bcd/slices"))


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    (json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": []}), "of kind bcd.dev/gpu"),
    (valid_cdi("a2"), "is not a1"),                       # another allocation's spec
    (json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "annotations": {"bcd.dev/allocation-id": "a1"},
                 "devices": []}), "not valid CDI"),
    (json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "annotations": {"bcd.dev/allocation-id": "a1"},
                 "devices": [{"name": "GPU/x", "containerEdits": {"env": ["A=1"]}}]}), "not valid CDI"),
    (json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "annotations": {"bcd.dev/allocation-id": "a1"},
                 "devices": [{"name": "GPU-x", "containerEdits": {}}]}), "not valid CDI"),
    (valid_cdi("a1")[:-1] + ', "unknown": 1}', "not valid CDI"),
    (valid_cdi("a1").replace("BCD_DEVICE", "BCD\0"), "NUL"),
    (["not", "a", "string"], "must be a string"),
])
def test_content_that_is_not_a_valid_bcd_cdi_spec_for_that_allocation_is_refused(helper, content, words):
    reply = helper.request({"op": "file.write", "kind": "cdi", "allocation_id": "a1", "content": content})
    assert reply["ok"] is False
    assert words in reply["error"]
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))


def test_a_nul_escaped_inside_the_cdi_json_is_refused_too(helper):
    content = valid_cdi("a1").replace("BCD_DEVICE", "BCD\\u0000")
    assert "\0" in json.loads(content)["devices"][0]["containerEdits"]["env"][0]
    reply = helper.request({"op": "file.write", "kind": "cdi", "allocation_id": "a1", "content": content})
    assert reply["ok"] is False
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))


@pytest.mark.parametrize("content", ["no equals sign\n", "=value\n", "1KEY=x\n", "KEY WITH SPACE=x\n"])
def test_env_content_must_be_key_value_lines(helper, content):
    reply = helper.request({"op": "file.write", "kind": "allocation-env", "allocation_id": "a1", "content": content})
    assert reply == {"ok": False, "error": "env line 1 is not KEY=VALUE"}
    assert not os.path.exists(helper.node("/run/bcd/allocations/a1.env"))


def test_garbage_lines_each_get_a_clear_refusal_and_the_connection_goes_on(helper):
    replies = helper.send(
        b"this is not json\n",
        b"\xff\xfe\n",
        b"[1, 2, 3]\n",
        b'{"op": "file.chmod", "path": "/etc/shadow"}\n',
        b'{"op": "ping"}\n',
        b"\n",                                               # blank lines are skipped, not answered
        (json.dumps({"op": "file.write", "kind": "allocation-env", "allocation_id": "a9",
                     "content": "A=1\n"}) + "\n").encode(),
    )
    assert [reply["ok"] for reply in replies] == [False, False, False, False, False, True]
    assert replies[0]["error"].startswith("malformed request")
    assert replies[1]["error"].startswith("malformed request")
    assert replies[2]["error"] == "a request must be a JSON object"
    assert "unknown op 'file.chmod'" in replies[3]["error"]
    assert "file.write, file.remove, slice.apply, slice.remove" in replies[4]["error"]
    assert os.path.exists(helper.node("/run/bcd/allocations/a9.env"))


def test_a_2_mib_line_is_refused_and_the_helper_still_answers_afterwards(helper):
    replies = []

    def flood():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(10)
                connection.connect(helper.socket)
                try:
                    connection.sendall(b'{"op": "file.write", "content": "' + b"x" * (2 << 20) + b'"}\n')
                except OSError:
                    pass                                     # the helper hung up mid-line, as it should
                data = b""
                while True:
                    try:
                        chunk = connection.recv(65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
                replies.extend(json.loads(line) for line in data.decode().splitlines())
        except OSError as exc:
            replies.append({"client error": str(exc)})

    worker = threading.Thread(target=flood)
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    assert replies == [{"ok": False, "error": "request longer than %d bytes" % MAX_REQUEST}]
    assert helper.files() == {}
    # a fresh connection is served as before
    assert helper.request({"op": "file.write", "kind": "allocation-env", "allocation_id": "a1",
                           "content": "A=1\n"}) == {"ok": True}


def test_a_peer_that_hangs_up_mid_line_does_not_stop_the_helper(helper):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(helper.socket)
        connection.sendall(b'{"op": "file.wri')
    assert helper.request({"op": "slice.remove", "name": "bcd-alloc-a1.slice"}) == {"ok": True}


def test_the_client_turns_a_refusal_into_a_helper_error(helper):
    client = HelperClient(helper.socket, timeout=5)
    with pytest.raises(HelperError, match="refused file.write: .*does not match"):
        client.write_node_file("cdi", "../x", b"{}")
    assert client.reachable() is None
    missing = HelperClient(os.path.join(helper.base, "no-such.sock"), timeout=1)
    assert "cannot be reached" in missing.reachable()


# -- peers -------------------------------------------------------------------------

CLIENT = r"""
import json, socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.settimeout(10)
connection.connect(sys.argv[1])
try:
    connection.sendall((json.dumps({"op": "file.write", "kind": "allocation-env", "allocation_id": "a1",
                                    "content": "A=1\n"}) + "\n").encode())
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
    assert not os.path.exists(helper.node("/run/bcd/allocations/a1.env"))
    # root is still served
    assert helper.request({"op": "slice.remove", "name": "bcd-alloc-a1.slice"}) == {"ok": True}


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
        with open(spec, "w") as handle:
            json.dump({"generation": 1, "devices": [
                {"allocation_id": "a1", "reservation_id": "r1", "devices": [{"id": GPU_A}]},
                {"allocation_id": "a2", "reservation_id": "r2", "devices": [{"id": GPU_B}],
                 "limits": {"cpus": "0-1", "memory_bytes": 1 << 30}},
            ]}, handle)
        common = ["--root", running.root, "--fakehw", running.fakehw, "--json"]

        def converge(*extra):
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

        through, _log = converge("--helper-socket", running.socket)
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


def test_a_pass_through_the_helper_in_process_binds_and_releases(helper, monkeypatch):
    # The same path as above for a test run without root: the pass believes it is uid 1000
    # (the helper thread still really is the test's uid, which its policy allows).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "devices": [{"id": GPU_A}]}]
    bound = run_pass(host, 1, devices, lock_timeout=5)
    assert bound.section["state"] == "CONVERGED"
    assert os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    released = run_pass(host, 2, [], lock_timeout=5)
    assert [a.action for a in released.plan.actions] == ["release"]
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    assert not os.path.exists(helper.node("/run/bcd/allocations/a1.env"))

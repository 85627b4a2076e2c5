# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper, spoken to over its real unix socket.

Each test starts the real server (``listen`` + ``serve`` in a thread) for a
fakehw root and sends it raw requests, one per connection, as a careless peer
would: good holds and slices, ids and kinds that try to leave the root, keys the
protocol does not have, hostile limits, garbage, a 2 MiB line. The helper must
answer each with ``"ok": false`` and a reason, write nothing outside its root,
and keep answering. ``test_helper_attacks.py`` plays a hostile account against a
helper process. The tests that need a second uid (a peer the helper
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

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.entry import cli as _cli
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import HelperSetupError, listen, MAX_REQUEST, Policy
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient, HelperError, HelperRefused
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit.builders import request
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

def test_root_renders_a_hold_written_from_its_data_and_logs_it(helper):
    env_lines = ["OMP_NUM_THREADS=4"]
    assert helper.request({"op": "hold.write", "kind": "cdi", "hold": request("a1", env=env_lines)}) == {"ok": True}
    assert helper.request({"op": "hold.write", "kind": "allocation-env", "hold": request("a1", env=env_lines)}) == {"ok": True}
    spec_path = helper.node("/etc/cdi/bcd-a1.json")
    env_path = helper.node("/run/bcd/allocations/a1.env")
    spec = json.loads(Path(spec_path).read_text())
    # root built it from the node's own atom: the device name and the env come from the inventory
    assert spec["kind"] == "bcd.dev/gpu"
    assert spec["annotations"]["bcd.dev/allocation-id"] == "a1"
    assert spec["annotations"]["bcd.dev/reservation-id"] == "r-a1"
    assert [device["name"] for device in spec["devices"]] == [GPU_A]
    assert spec["devices"][0]["containerEdits"] == {"env": ["BCD_DEVICE_GPU_5F1C2A90_0000_4000_8000_000000000001=%s" % GPU_A]}
    env = Path(env_path).read_text().splitlines()
    assert "BCD_ALLOCATION_ID=a1" in env and "OMP_NUM_THREADS=4" in env
    for path in (spec_path, env_path):
        assert (os.stat(path).st_uid, stat.S_IMODE(os.stat(path).st_mode)) == (os.geteuid(), 0o644)
    assert os.listdir(helper.outside) == []
    assert "uid %d: hold.write cdi a1" % os.geteuid() in helper.log

    assert helper.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}
    assert not os.path.exists(spec_path)
    # removing what is not there is no error (a release may be repeated after a crash)
    assert helper.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"}) == {"ok": True}
    assert os.path.exists(env_path)


def test_a_slice_is_built_by_root_from_limits_and_stopped_once_empty(helper):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a1",
                            "limits": {"cpus": "0-3,8", "memory_bytes": 1 << 30, "hugepages_2mi": 2}})
    assert reply == {"ok": True}
    record_path = helper.node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["AllowedCPUs"] == "0-3,8"
    assert record["properties"]["MemoryMax"] == str(1 << 30)
    assert record["hugetlb_max"] == {"2MB": 2 * 2097152, "1GB": 0}
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}
    assert not os.path.exists(record_path)
    # stopping a slice that is not there is no error either
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}
    # the log names the unit each slice request touched
    assert "uid %d: slice.apply bcd-alloc-a1.slice" % os.geteuid() in helper.log
    assert "uid %d: slice.stop bcd-alloc-a1.slice" % os.geteuid() in helper.log


def least_memory_bytes(used):
    """Worked out here, not taken from the code: MemoryMax >= use + max(64 MiB, 5 %), MemoryHigh
    (90 % of it, rounded down) >= use. Returns (least memory_bytes, the margin)."""
    margin = max(64 << 20, -(-used * 5 // 100))
    least = max(used + margin, -(-used * 10 // 9))
    assert least * 9 // 10 >= used > (least - 1) * 9 // 10 or least == used + margin
    return least, margin


def headroom_message(wanted, used, least, margin):
    return ("bcd-alloc-a1.slice: memory_bytes %d leaves no headroom over the slice's current use %d: at least %d "
            "is needed (MemoryMax >= current + %s = %d, and MemoryHigh, 90%% of it, >= current); a change of its "
            "limits never kills its workload" % (wanted, used, least,
                                                 "64 MiB" if margin == 64 << 20 else "5%% (%d)" % margin,
                                                 used + margin))


def check_a_populated_slice_is_kept(request, node, used):
    """Through ``request``: a slice whose workload uses ``used`` bytes is neither stopped nor squeezed
    below that, and may grow. Also run against a real helper process by test_helper_attacks.py. The slice is
    bound above the use, so each value tried below lowers what it has (the same value again is no change)."""
    bound = 4 << 30
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": bound}}) == {"ok": True}
    record_path = node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    record = json.loads(Path(record_path).read_text())
    record.update(populated=True, memory_current=used)      # a workload runs in it (root's record)
    Path(record_path).write_text(json.dumps(record))
    # what the slice holds now refuses these: retryable, the same request may be carried out later
    assert request({"op": "slice.stop", "allocation_id": "a1"}) == {
        "ok": False, "error": "bcd-alloc-a1.slice still runs a workload; it is stopped once empty", "retryable": True}
    least, margin = least_memory_bytes(used)
    for wanted in (1 << 20, used, least - 1):  # below use, at use (the next allocation OOM), one byte short
        reply = request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": wanted}})
        assert reply == {"ok": False, "error": headroom_message(wanted, used, least, margin), "retryable": True}
        assert json.loads(Path(record_path).read_text())["properties"]["MemoryMax"] == str(bound)
    assert os.path.exists(record_path)
    # just past the margin is fine
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": least}}) == {"ok": True}
    assert json.loads(Path(record_path).read_text())["properties"]["MemoryMax"] == str(least)
    # growing is fine
    assert request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 2 << 30}}) == {"ok": True}


def test_a_populated_slice_is_not_stopped_and_its_limits_never_go_below_its_use(helper):
    check_a_populated_slice_is_kept(helper.request, helper.node, 512 << 20)


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


# -- malformed and out-of-bounds requests ---------------------------------------------

@pytest.mark.parametrize("allocation_id", [
    "../../outside/x", "../x", "a/b", "a1\n", "a1/", "", "x" * 81, ".", "..", "a b", "a-1", 7, None, ["a1"],
])
def test_an_allocation_id_that_is_not_an_id_is_refused_and_nothing_is_written(helper, allocation_id):
    before = helper.files()
    for message in ({"op": "hold.remove", "kind": "allocation-env", "allocation_id": allocation_id},
                    {"op": "slice.apply", "allocation_id": allocation_id, "limits": {"cpus": "0"}},
                    {"op": "slice.stop", "allocation_id": allocation_id},
                    {"op": "hold.write", "kind": "allocation-env", "hold": request(allocation_id)}):
        reply = helper.request(message)
        assert reply["ok"] is False
        # the helper's own check of an id, or hold.write's (the module's invalid-assignment message, in words)
        assert "allocation_id" in reply["error"] and ("does not match" in reply["error"] or (
            message["op"] == "hold.write" and "is not an allocation id" in reply["error"])), (message, reply)
    assert helper.files() == before


@pytest.mark.parametrize("kind", ["../cdi", "cdi/../../outside", "../../outside/x", "/etc/passwd", "env", "", None,
                                  ["cdi"], {"cdi": 1}])
def test_a_kind_that_is_not_one_of_the_two_is_refused(helper, kind):
    before = helper.files()
    for message in ({"op": "hold.write", "kind": kind, "hold": request()},
                    {"op": "hold.remove", "kind": kind, "allocation_id": "a1"}):
        reply = helper.request(message)
        assert reply["ok"] is False
        assert "unknown kind" in reply["error"] and "allocation-env, cdi" in reply["error"]
    assert helper.files() == before


@pytest.mark.parametrize("message, error", [
    ({"op": "hold.write", "kind": "cdi", "hold": request(), "content": "{}"}, "hold.write takes no content"),
    ({"op": "hold.remove", "kind": "cdi", "allocation_id": "a1", "path": "/etc/shadow"}, "hold.remove takes no path"),
    ({"op": "slice.apply", "allocation_id": "a1", "limits": {"cpus": "0"}, "properties": {"ExecStart": "/bin/sh"}},
     "slice.apply takes no properties"),
    ({"op": "slice.stop", "allocation_id": "a1", "force": True}, "slice.stop takes no force"),
    ({"op": "kube.look", "socket": "/tmp/x"}, "kube.look takes no socket"),
])
def test_a_key_the_operation_does_not_take_is_refused_by_name(helper, message, error):
    assert helper.request(message) == {"ok": False, "error": error}
    assert helper.files() == {}


@pytest.mark.parametrize("fields, error", [
    ({"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "env[0]: NVIDIA_VISIBLE_DEVICES is set by bcd and cannot be overridden"),
    ({"devices": [{"id": "all"}]}, "all not present"),
    ({"devices": [{"id": "GPU-5f1c2a90-0000-4000-8000-0000000000ff"}]},
     "GPU-5f1c2a90-0000-4000-8000-0000000000ff not present"),
    ({"generation": None}, "generation: required"),
    ({"binding": None}, "binding is missing"),
    ({"binding": "BINDING_INSTANCE"}, "binding BINDING_INSTANCE is not supported"),
    ({"devices": [{"id": GPU_A + "/gi01/ci0", "device_class": "gpu.mig"}]},
     '"%s/gi01/ci0" is not a MIG instance id (<gpu>/gi<n>/ci<n>)' % GPU_A),
    ({"containerEdits": {"hooks": []}}, "hold.containerEdits: unknown field"),
    ({"limits": {"cpus": "0-30000000"}}, "limits.cpus: CPU 30000000 is beyond 8191, the most any host has"),
])
def test_a_hold_is_checked_by_the_rules_network_input_is(helper, fields, error):
    reply = {"ok": False, "error": error}
    if error.endswith(" not present"):  # a device root does not see now may be there later; the rest never passes
        reply["retryable"] = True
    for kind in ("cdi", "allocation-env"):
        assert helper.request({"op": "hold.write", "kind": kind, "hold": request(**fields)}) == reply
    assert helper.files() == {}


@pytest.mark.parametrize("limits, error", [
    ({"cpus": ",".join(["1"] * 600)}, "limits.cpus: cpulist longer than 1024 characters"),
    ({"mems": "0-" + "9" * 1030}, "limits.mems: cpulist longer than 1024 characters"),
    ({"mems": "0-2000"}, "limits.mems: NUMA node 2000 is beyond 1023, the most any host has"),
    ({"cpus": "0-3;rm -rf /"}, "limits.cpus: '0-3;rm -rf /' is not a cpulist such as 0-3,8"),
    ({"cpus": "3-1"}, "limits.cpus: range 3-1 runs backwards"),
    ({"cpus": True}, "limits.cpus: must be a cpulist string such as 0-3,8"),
    ({"ExecStart": "/bin/sh"}, "limits.ExecStart: unknown field (known: cpus, mems, cpu_millis, memory_bytes, hugepages_2mi, hugepages_1gi)"),
    ({"memory_bytes": -1}, "limits.memory_bytes: must be a non-negative integer"),
    ({"hugepages_2mi": True}, "limits.hugepages_2mi: must be a non-negative integer"),
    (["cpus=0"], "limits: must be a mapping"),
    ({}, "the limits book nothing a slice enforces (cpus, mems, cpu_millis, memory_bytes, hugepages_2mi or "
         "hugepages_1gi)"),
])
def test_slice_limits_are_checked_as_root(helper, limits, error):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a1", "limits": limits})
    assert reply == {"ok": False, "error": error}
    assert not os.path.exists(helper.node("/run/bcd/slices"))


@pytest.mark.parametrize("data, error", [
    (b"this is not json\n", "malformed request"),
    (b"\xff\xfe\n", "malformed request"),
    (b"[1, 2, 3]\n", "a request must be a JSON object, not a list"),
    (b'{"op": "file.write", "kind": "cdi", "allocation_id": "a1", "content": "{}"}\n',
     "unknown op 'file.write'; known: hold.remove, hold.set_aside, hold.write, kube.look, slice.apply, slice.stop"),
    (b'{"op": ["hold.write"]}\n', "unknown op a list"),
    (b"[" * 5000 + b"]" * 5000 + b"\n", "a request nests deeper than 16 levels"),
    (b'{"op": "slice.stop", "allocation_id": "a1\\u0000"}\n', "a request must not contain NUL characters"),
])
def test_garbage_gets_a_clear_refusal_and_the_helper_goes_on(helper, data, error):
    [reply] = helper.send(data)
    assert reply["ok"] is False
    assert reply["error"].startswith(error), reply
    assert helper.request({"op": "slice.stop", "allocation_id": "a9"}) == {"ok": True}


def test_a_blank_line_is_no_request_and_gets_no_reply(helper):
    assert helper.send(b"\n") == []
    assert helper.request({"op": "slice.stop", "allocation_id": "a9"}) == {"ok": True}


def test_only_the_first_line_of_a_connection_is_served(helper):
    second = json.dumps({"op": "hold.write", "kind": "allocation-env", "hold": request("a2")})
    replies = helper.send(json.dumps({"op": "slice.stop", "allocation_id": "a1"}) + "\n" + second + "\n")
    assert replies == [{"ok": True}]
    assert not os.path.exists(helper.node("/run/bcd/allocations/a2.env"))


def test_a_line_past_max_request_is_refused_and_the_helper_still_answers_afterwards(helper):
    replies = []

    def flood():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(10)
                connection.connect(helper.socket)
                try:
                    connection.sendall(b'{"op": "hold.write", "hold": "' + b"x" * (MAX_REQUEST + 1) + b'"}\n')
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
    assert helper.request({"op": "hold.write", "kind": "allocation-env", "hold": request()}) == {"ok": True}


def test_a_peer_that_hangs_up_mid_line_does_not_stop_the_helper(helper):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(helper.socket)
        connection.sendall(b'{"op": "hold.wri')
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}


def test_a_last_line_without_its_newline_is_still_answered(helper):
    assert helper.send(json.dumps({"op": "slice.stop", "allocation_id": "a1"})) == [{"ok": True}]


def test_the_client_turns_a_refusal_of_the_request_into_a_permanent_error(helper):
    client = HelperClient(helper.socket, timeout=5)
    with pytest.raises(HelperRefused, match="refused hold.remove: allocation_id '../x' does not match") as caught:
        client.request({"op": "hold.remove", "kind": "cdi", "allocation_id": "../x"})
    assert not isinstance(caught.value, RetryableError)  # the same request fails again: no pass retries it
    for message in ({"op": "hold.write", "kind": "cdi", "hold": request(binding="BINDING_INSTANCE")},
                    {"op": "slice.apply", "allocation_id": "a1", "limits": {"cpu_millis": 1}},
                    {"op": "slice.apply", "allocation_id": "a1", "limits": {"cpus": "0-3;rm -rf /"}}):
        with pytest.raises(HelperRefused):
            client.request(message)
    assert client.reachable() is None


def test_the_client_turns_a_refusal_for_what_the_node_has_now_into_a_retryable_error(helper):
    client = HelperClient(helper.socket, timeout=5)
    assert client.request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 1 << 30}})["ok"]
    populate(helper.node)
    with pytest.raises(HelperError, match="refused slice.stop: bcd-alloc-a1.slice still runs a workload") as caught:
        client.request({"op": "slice.stop", "allocation_id": "a1"})
    assert isinstance(caught.value, RetryableError)  # it is stopped once its workload exits
    with pytest.raises(HelperError, match="refused hold.write: GPU-5f1c2a90-0000-4000-8000-0000000000ff not present"):
        client.request({"op": "hold.write", "kind": "cdi",
                        "hold": request(devices=[{"id": "GPU-5f1c2a90-0000-4000-8000-0000000000ff"}])})
    missing = HelperClient(os.path.join(helper.base, "no-such.sock"), timeout=1)
    assert "cannot be reached" in missing.reachable()


# -- peers -------------------------------------------------------------------------

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


def test_a_request_the_helper_refuses_as_it_is_fails_the_pass_instead_of_retrying_it(helper, monkeypatch):
    # an older helper beside a newer node (the role updates both, a hand-installed one may lag): its refusal
    # of the request itself would be the same every 30 seconds, so the pass fails with it, never PROGRESSING
    from ansible_collections.bcd.devices.plugins.module_utils.entry import helper as served
    from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setitem(served.OPS, "slice.apply", ("allocation_id",))
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}],
                "limits": {"cpus": "0-1"}}]
    with pytest.raises(HelperRefused, match="the root helper refused slice.apply: slice.apply takes no limits") as caught:
        run_pass(host, 1, devices, lock_timeout=5)
    assert not isinstance(caught.value, RetryableError)
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))  # nothing names a slice that is not there
    state = NodeState(helper.node("/"), "/var/lib/bcd")
    state.load(write=False)
    assert state.ledger.last_state != "PROGRESSING"  # the retry timer has nothing to retry


def test_a_pass_through_the_helper_in_process_binds_and_releases(helper, monkeypatch):
    # The same path as above for a test run without root: the pass believes it is uid 1000
    # (the helper thread still really is the test's uid, which its policy allows).
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]}]
    bound = run_pass(host, 1, devices, lock_timeout=5)
    assert bound.section["state"] == "CONVERGED"
    assert os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
    released = run_pass(host, 2, [], lock_timeout=5)
    assert [a.kind for a in released.plan.actions] == ["release"]
    assert not os.path.exists(helper.node("/etc/cdi/bcd-a1.json"))
    assert not os.path.exists(helper.node("/run/bcd/allocations/a1.env"))


def test_root_writes_a_kept_holds_env_file_from_its_own_spec_while_its_mig_instance_is_not_back(helper, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    mig_uuid = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"
    hardware = dict(HARDWARE, gpus=[dict(HARDWARE["gpus"][0], mig=[{"gi": 1, "ci": 0, "uuid": mig_uuid}])])
    Path(helper.fakehw).write_text(json.dumps(hardware))
    devices = [{"allocation_id": "m1", "reservation_id": "r1", "binding": "BINDING_HOLD",
                "devices": [{"id": GPU_A + "/gi1/ci0", "device_class": "gpu.mig"}]}]

    def through_helper(generation):
        host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
        return run_pass(host, generation, devices, lock_timeout=5)

    assert through_helper(1).section["state"] == "CONVERGED"
    env_path = helper.node("/run/bcd/allocations/m1.env")
    env = Path(env_path).read_bytes()
    os.unlink(env_path)                                                   # a reboot empties /run ...
    Path(helper.fakehw).write_text(json.dumps(HARDWARE))                  # ... before mig-layout runs
    kept = through_helper(1)
    assert [a.kind for a in kept.plan.actions] == ["write-env"]
    assert kept.section["state"] == "CONVERGED", kept.section
    assert Path(env_path).read_bytes() == env
    assert ("NVIDIA_VISIBLE_DEVICES=%s" % mig_uuid).encode() in env
    # root takes it from its own spec only for the devices that spec names
    reply = helper.request({"op": "hold.write", "kind": "allocation-env",
                            "hold": request("m1", GPU_A + "/gi2/ci0",
                                            devices=[{"id": GPU_A + "/gi2/ci0", "device_class": "gpu.mig"}])})
    assert reply == {"ok": False, "error": "%s has no MIG instance gi2/ci0" % GPU_A, "retryable": True}
    # and never the spec itself
    reply = helper.request({"op": "hold.write", "kind": "cdi", "hold": request("m1", devices=devices[0]["devices"])})
    assert reply == {"ok": False, "error": "%s has no MIG instance gi1/ci0" % GPU_A, "retryable": True}


def test_a_damaged_spec_is_set_aside_by_root_through_the_helper(helper, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    devices = [{"allocation_id": "a1", "reservation_id": "r1", "binding": "BINDING_HOLD", "devices": [{"id": GPU_A}]}]

    def through_helper():
        host = FakeHwHost(helper.root, helper.fakehw, writer=HelperWriter(HelperClient(helper.socket, timeout=10)))
        return run_pass(host, 1, devices, lock_timeout=5)

    through_helper()
    spec = helper.node("/etc/cdi/bcd-a1.json")
    good = Path(spec).read_bytes()
    Path(spec).write_bytes(b"{damaged")
    result = through_helper()
    assert [a.kind for a in result.plan.actions] == ["rebind", "report-condition"]
    assert result.events[-1]["type"] == "HoldSpecDamaged"  # the account's pass journals the condition, signed
    assert Path(spec).read_bytes() == good
    (aside,) = [name for name in os.listdir(helper.node("/etc/cdi")) if ".damaged-" in name]
    assert Path(helper.node("/etc/cdi/" + aside)).read_bytes() == b"{damaged"
    assert any(line.endswith(": hold.set_aside a1") for line in helper.log)
    # setting aside what is not there is no error; an id that is no id is refused
    assert helper.request({"op": "hold.set_aside", "allocation_id": "a9"}) == {"ok": True}
    assert helper.request({"op": "hold.set_aside", "allocation_id": "../x"})["ok"] is False


def populate(node, name="bcd-alloc-a1.slice", **used):
    """A workload in the slice's record (root's), using ``used`` (memory_current, hugetlb_current)."""
    record_path = node("/run/bcd/slices/%s.json" % name)
    record = json.loads(Path(record_path).read_text())
    record.update(populated=True, **used)
    Path(record_path).write_text(json.dumps(record))
    return record_path


def test_the_helper_keeps_headroom_whatever_the_peer_checked(helper):
    """Issue 22: each limit at the edge of a running workload's use, sent straight to root's socket."""
    apply = {"op": "slice.apply", "allocation_id": "a1"}
    assert helper.request(dict(apply, limits={"memory_bytes": 8 << 30, "hugepages_2mi": 8, "cpu_millis": 1000})) \
        == {"ok": True}
    used = 2 << 30
    record_path = populate(helper.node, memory_current=used, hugetlb_current={"2MB": 4 << 20})
    # MemoryHigh (90 %) below use, MemoryMax past its margin
    wanted = used + (used * 5 // 100) + (1 << 20)
    reply = helper.request(dict(apply, limits={"memory_bytes": wanted}))
    assert reply["ok"] is False and "memory_bytes %d leaves no headroom over the slice's current use %d: at least " \
        "%d is needed" % (wanted, used, -(-used * 10 // 9)) in reply["error"]
    # a huge page limit at what is faulted in (2 pages), then one page more
    reply = helper.request(dict(apply, limits={"hugepages_2mi": 2}))
    assert reply == {"ok": False, "error": "bcd-alloc-a1.slice: hugepages_2mi 2 (hugetlb.2MB.max=4194304) leaves no "
                     "headroom over the 2MB huge pages faulted in, 4194304 bytes (2 pages): at least 3 pages "
                     "(6291456 bytes, one page more) are needed; a change of its limits never kills its workload",
                     "retryable": True}
    # a CPUQuota of 1 %
    reply = helper.request(dict(apply, limits={"cpu_millis": 10}))
    assert reply == {"ok": False, "error": "bcd-alloc-a1.slice: cpu_millis gives CPUQuota=1%, below the floor of "
                     "10% of one CPU: at least 100 cpu_millis are needed (or none, for no quota)"}
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["MemoryMax"] == str(8 << 30) and record["hugetlb_max"] == {"2MB": 16 << 20, "1GB": 0}
    assert record["properties"]["CPUQuota"] == "100%"
    # just past each margin
    for limits in ({"memory_bytes": -(-used * 10 // 9)}, {"hugepages_2mi": 3}, {"cpu_millis": 100}):
        assert helper.request(dict(apply, limits=limits)) == {"ok": True}, limits


def test_the_helper_refuses_a_fresh_slice_under_the_cpu_floor(helper):
    reply = helper.request({"op": "slice.apply", "allocation_id": "a2", "limits": {"cpu_millis": 1}})
    assert reply == {"ok": False, "error": "bcd-alloc-a2.slice: cpu_millis gives CPUQuota=1%, below the floor of "
                     "10% of one CPU: at least 100 cpu_millis are needed (or none, for no quota)"}
    assert not os.path.exists(helper.node("/run/bcd/slices/bcd-alloc-a2.slice.json"))


def test_slice_stop_freezes_and_checks_again_so_a_late_joiner_is_kept(helper, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices
    assert helper.request({"op": "slice.apply", "allocation_id": "a1", "limits": {"memory_bytes": 1 << 30}}) \
        == {"ok": True}
    record_path = helper.node("/run/bcd/slices/bcd-alloc-a1.slice.json")
    original = RecordSlices.freeze

    def freeze(self, name, frozen):  # a process joins between the helper's check and the freeze
        if frozen:
            populate(helper.node)
        original(self, name, frozen)

    monkeypatch.setattr(RecordSlices, "freeze", freeze)
    assert helper.request({"op": "slice.stop", "allocation_id": "a1"}) == {
        "ok": False, "error": "bcd-alloc-a1.slice still runs a workload (it joined as the slice was stopped); it "
                              "is stopped once empty", "retryable": True}
    record = json.loads(Path(record_path).read_text())
    assert record["populated"] is True and record["frozen"] is False  # kept, and thawed


def test_the_helper_sets_the_same_limits_again_on_a_slice_used_to_its_limits(helper):
    """Only what takes something away is held to the headroom: a peer may set a running slice's limits
    again (another cpus, a drift repair) or raise them, even with the workload past its MemoryHigh and every
    huge page it booked faulted in; lowering them is refused with the numbers, as before."""
    apply = {"op": "slice.apply", "allocation_id": "a1"}
    limits = {"cpus": "0-3", "memory_bytes": 1 << 30, "hugepages_2mi": 4}
    assert helper.request(dict(apply, limits=limits)) == {"ok": True}
    used = (1 << 30) - (32 << 20)
    record_path = populate(helper.node, memory_current=used, hugetlb_current={"2MB": 8 << 20})
    assert helper.request(dict(apply, limits=dict(limits, cpus="0-7"))) == {"ok": True}
    assert helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=(1 << 30) + (16 << 20),
                                                  hugepages_2mi=5))) == {"ok": True}
    record = json.loads(Path(record_path).read_text())
    assert record["properties"]["AllowedCPUs"] == "0-7" and record["hugetlb_max"] == {"2MB": 10 << 20, "1GB": 0}
    assert record["properties"]["MemoryMax"] == str((1 << 30) + (16 << 20))
    reply = helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=1 << 30, hugepages_2mi=5)))
    assert reply["ok"] is False and "memory_bytes %d leaves no headroom over the slice's current use %d" % (
        1 << 30, used) in reply["error"]
    reply = helper.request(dict(apply, limits=dict(limits, cpus="0-7", memory_bytes=(1 << 30) + (16 << 20))))
    assert reply["ok"] is False and "hugepages_2mi 4 (hugetlb.2MB.max=8388608) leaves no headroom" in reply["error"]

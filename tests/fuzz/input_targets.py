# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Input from the network and from the account: the module's devices section, the helper's requests.

* ``module``: ``generation``, ``devices``, ``instances`` and ``cdi_runtimes`` as Ansible hands them to
  ``bcd.devices.holds`` (parsed JSON: Python values), checked by the module's own argument spec
  (``ArgumentSpecValidator``, as ``AnsibleModule`` checks them), then ``run_pass`` as the module calls it,
  in check mode at times, and what ``main`` does with the result (``to_dict``, the diff, the refusal
  texts, the JSON Ansible returns). A real pass stored its input: ``converge --stored``'s reader must
  take it back (``roundtrip``). At times the section is made wide on purpose (hundreds of assignments of
  hundreds of atoms: issue 22's worst case).
* ``helper``: one request line through ``serve_connection``, the function that serves a peer, on a
  connection object that hands it the line; its reply must be one JSON line ``{ok, error}``, never an
  ``internal error``, and ``handle_request`` may raise nothing outside the allowlist.
* ``helper-socket``: the same lines, cut in pieces, with no newline, or several, through a real
  ``listen``/``serve`` on a unix socket: a few hundred a run.
* ``helper-bounds``: a peer's run of requests (wide holds up to a request line's worth of slots, env files
  of long lines, releases, looks, mutated lines) against a node planted near the helper's bounds, through
  ``serve_connection`` with one ``NodeView``, ``RateLimits`` and ``LogLimit`` of bursts and rates the input
  draws, on a clock it moves: after every request the node keeps no more atoms, spec bytes, env bytes or
  files than the bounds allow (counted here, from the files), and over the run no class of operations got
  more than its burst and rate, the node's hardware was read no more than once an interval, a peer's log
  lines stopped at their burst and rate, and every quota refusal said its numbers.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import threading

from ansible_collections.bcd.devices.tests.fuzz import base, mutate, nodes, verdict

ASSIGNMENT_KEYS = ("allocation_id", "reservation_id", "binding", "devices", "limits", "env", "id", "device_class",
                   "cpus", "mems", "cpu_millis", "memory_bytes", "hugepages_2mi", "hugepages_1gi", "instance_id",
                   "gpus", "name", "version")
WIDE = [(64, 64), (256, 256), (1024, 16), (16, 1024), (1024, 1024)]


def wide_section(rng):
    """``assignments`` × ``atoms`` slots: each entry allowed, the product issue 22's item 5 bounds."""
    assignments, atoms = rng.choice(WIDE)
    return [{"allocation_id": "w%d" % number, "binding": "BINDING_HOLD",
             "devices": [{"id": "%s/s%d" % (nodes.GPU_D, number * atoms + slot), "device_class": "gpu.slot"}
                         for slot in range(atoms)]} for number in range(assignments)]


class ModuleTarget(base.Target):
    name = "module"
    family = "input"
    doc = ("bcd.devices.holds' devices/instances/generation/cdi_runtimes: the module's argument spec, then "
           "run_pass as main calls it (check mode at times), the result as main returns it")

    def extend_node(self):
        from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds  # pylint: disable=import-outside-toplevel
        self.argument_spec = holds.module_argument_spec()

    def generate(self, rng):
        params = {"generation": nodes.GENERATION + 1, "devices": list(nodes.NEXT_DEVICES),
                  "instances": list(nodes.INSTANCES), "cdi_runtimes": "auto"}
        roll = rng.random()
        if roll < 0.003:
            params["devices"] = wide_section(rng)
        elif roll < 0.75:
            params["devices"] = mutate.mutate_value(rng, params["devices"], False, ASSIGNMENT_KEYS)
        elif roll < 0.85:
            params["generation"] = mutate.nasty_value(rng, False, params["generation"])
        elif roll < 0.93:
            params["instances"] = mutate.mutate_value(rng, params["instances"], False, ASSIGNMENT_KEYS)
        else:
            params["cdi_runtimes"] = mutate.mutate_value(rng, [{"name": "podman", "version": "5.4.2"}], False,
                                                         ASSIGNMENT_KEYS)
        return {"params": params, "check_mode": rng.random() < 0.2, "diff": rng.random() < 0.5}

    def plant(self, item):
        """ansible-core's own validation of the arguments, which runs before any of the module's code: not
        timed, not counted (a 113 MB argument costs ansible-core some 200 MB and 1.6 s before bcd.devices
        sees it; the bound is on what the module does with what it is given)."""
        from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # pylint: disable=import-outside-toplevel
        given = dict(item["params"], root=self.node.root, fakehw=self.node.fakehw, state_dir=nodes.STATE_DIR,
                     lock_timeout=5)
        item.pop("validated", None)
        try:
            checked = ArgumentSpecValidator(self.argument_spec).validate(given)
        except Exception:  # pylint: disable=broad-except
            return  # ansible-core's own validation failed (Infinity for an int): the module never runs
        if not checked.error_messages:  # else the module fails the task with these messages
            item["validated"] = checked.validated_parameters

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState  # pylint: disable=import-outside-toplevel

        params = item.get("validated")
        if params is None:
            return None
        host = host_from_params(params)
        result = run_pass(host, params["generation"], params["devices"], params["instances"],
                          state_dir=params["state_dir"], check_mode=item["check_mode"],
                          lock_timeout=params["lock_timeout"], cdi_runtimes=params["cdi_runtimes"])
        output = result.to_dict()
        if item["diff"]:
            output["diff"] = result.plan.diffs()
        texts = list(result.warnings) + result.refusal_texts()
        json.dumps(dict(output, warnings=texts))
        if not item["check_mode"]:
            try:
                NodeState(self.node.state(), nodes.STATE_DIR).load_nodespec()
            except StateFileError as exc:
                return verdict.problem("roundtrip", "nodespec.json: %s" % re.sub(r"[0-9]+", "N", exc.problem),
                                       "a pass stored an input its own reader refuses: %s" % exc)
        return None

    def describe(self, item):
        return "module input (check mode %s, diff %s): %s" % (item["check_mode"], item["diff"],
                                                              verdict.one_line(_shown(item["params"]), 600))

    def dump(self, item, directory):
        super().dump(dict((key, value) for key, value in item.items() if key != "validated"), directory)
        with open(os.path.join(directory, "params.json"), "wb") as handle:
            handle.write(mutate.to_text(item["params"], ascii_only=True, indent=1).encode("ascii"))


def _shown(value):
    try:
        return mutate.to_text(value)
    except Exception:  # pylint: disable=broad-except
        return repr(value)


# -- the helper ------------------------------------------------------------------------------------------

def _hold(allocation_id, device, device_class="gpu", binding="BINDING_HOLD", limits=None, env=()):
    return {"allocation_id": allocation_id, "reservation_id": "res-%s" % allocation_id, "generation": 3,
            "binding": binding, "devices": [{"id": device, "device_class": device_class}], "limits": limits,
            "env": list(env), "runtimes": [{"name": "podman", "version": "5.4.2"}]}


REQUESTS = [
    {"op": "hold.write", "kind": "cdi", "hold": _hold("n1", nodes.GPU_F, limits={"cpus": "0-1", "memory_bytes": 1 << 28},
                                                      env=["A=1"])},
    {"op": "hold.write", "kind": "allocation-env", "hold": _hold("m1", "%s/gi1/ci0" % nodes.GPU_A, "gpu.mig",
                                                                 env=["X=1"])},
    {"op": "hold.write", "kind": "cdi", "hold": _hold("k2", nodes.GPU_F, binding="BINDING_KUBERNETES")},
    {"op": "hold.write", "kind": "cdi", "hold": _hold("s3", "%s/s5" % nodes.GPU_D, "gpu.slot")},
    {"op": "hold.remove", "kind": "cdi", "allocation_id": "a1"},
    {"op": "hold.remove", "kind": "allocation-env", "allocation_id": "s1"},
    {"op": "hold.set_aside", "allocation_id": "a1"},
    {"op": "slice.apply", "allocation_id": "a1",
     "limits": {"cpus": "0-3", "mems": "0", "cpu_millis": 1500, "memory_bytes": 1 << 30, "hugepages_2mi": 4}},
    {"op": "slice.stop", "allocation_id": "s1"},
    {"op": "kube.look"},
]
HELPER_KEYS = ("op", "kind", "hold", "allocation_id", "limits", "content", "path", "runtimes") + ASSIGNMENT_KEYS
CAUGHT = []  # handle_request's exceptions outside the allowlist, with their tracebacks (any thread)
_GUARD = threading.Lock()


def _guard_handle_request():
    """Wrap the helper's ``handle_request`` (once) so that an exception outside the allowlist is recorded with
    its traceback: ``_answer`` turns some of them into plain refusals (a ``ValueError`` reads as a malformed
    request), which would hide a bug."""
    from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import server as helper  # pylint: disable=import-outside-toplevel
    with _GUARD:
        if getattr(helper.handle_request, "fuzz_guarded", False):
            return
        original = helper.handle_request

        def guarded(host, request):
            try:
                return original(host, request)
            except Exception as exc:
                if not verdict.clean(exc):
                    CAUGHT.append(verdict.traceback_failure(exc, "handle_request"))
                raise

        guarded.fuzz_guarded = True
        helper.handle_request = guarded


def request_line(rng):
    """A request line: a valid request mutated (JSON text), at times bytes changed too."""
    request = rng.choice(REQUESTS)
    roll = rng.random()
    if roll < 0.1:
        data = mutate.encode(mutate.to_text(request), rng)
    elif roll < 0.85:
        data = mutate.encode(mutate.to_text(mutate.mutate_value(rng, request, True, HELPER_KEYS),
                                            ascii_only=rng.random() < 0.5), rng)
    else:
        data = mutate.mutate_bytes(rng, mutate.encode(mutate.to_text(request), rng))
    return data


def check_reply(raw, line):
    """A failure when ``raw`` (what the peer got) is not one JSON line ``{ok, error}``, or no reply to a line
    that is not blank."""
    from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_REQUEST  # pylint: disable=import-outside-toplevel
    if not line.strip() and len(line) <= MAX_REQUEST:
        return None if not raw else verdict.problem("reply", "to a blank line", "a blank line got %r" % raw[:200])
    if not raw.endswith(b"\n") or raw.count(b"\n") != 1:
        return verdict.problem("reply", "not one line", "the reply is not one line: %r" % raw[:300])
    try:
        reply = json.loads(raw)
    except ValueError as exc:
        return verdict.problem("reply", "not JSON", "the reply is not JSON (%s): %r" % (exc, raw[:300]))
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool) or (
            not reply["ok"] and not isinstance(reply.get("error"), str)):
        return verdict.problem("reply", "shape", "the reply is not {ok, error}: %r" % raw[:300])
    if not reply["ok"] and reply["error"].startswith("internal error"):
        return verdict.problem("reply", "internal error", "the helper answered %s" % reply["error"])
    return None


class _Connection(object):
    """What ``serve_connection`` needs of a socket: credentials, the peer's bytes in pieces, the reply."""

    def __init__(self, pieces, uid):
        self.pieces = list(pieces)
        self.offset = 0  # into pieces[0]
        self.uid = uid
        self.sent = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def getsockopt(self, *args):
        return struct.pack("3i", 4242, self.uid, self.uid)

    def settimeout(self, value):
        pass

    def recv(self, size):
        # an offset into the first piece, never a copy of its rest: a 37 MB piece read 64 KiB at a time
        # cost this double 1.4 s of CPU (its copies), which the fuzzer charged to the helper (3.7 ms)
        if not self.pieces:
            return b""
        piece = self.pieces[0][self.offset:self.offset + size]
        self.offset += len(piece)
        if self.offset >= len(self.pieces[0]):
            self.pieces.pop(0)
            self.offset = 0
        return piece

    def sendall(self, data):
        self.sent += data

    def shutdown(self, how):
        pass


def _pieces(rng, data):
    """``data`` as a peer may send it: whole, cut in pieces, a newline or not, another line after it."""
    roll = rng.random()
    if roll < 0.7:
        data += b"\n"
    elif roll < 0.8:
        data += b"\n" + data + b"\n"
    elif roll < 0.85:
        data = b"\n" + data
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.choice([0, 0, 1, 3]))) if len(data) > 1 else [])
    pieces, last = [], 0
    for cut in cuts + [len(data)]:
        pieces.append(data[last:cut])
        last = cut
    return pieces


class HelperTarget(base.Target):
    name = "helper"
    family = "input"
    doc = ("the root helper's request lines through serve_connection (the function that serves a peer), "
           "in-process: parse, bounds, op handlers, replies")

    def extend_node(self):
        _guard_handle_request()

    def generate(self, rng):
        data = request_line(rng)
        return {"pieces": _pieces(rng, data), "uid": 0 if rng.random() < 0.7 else 65534}

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import limits, server as helper  # pylint: disable=import-outside-toplevel
        del CAUGHT[:]
        connection = _Connection(item["pieces"], item["uid"])
        helper.serve_connection(self.node.host(), connection, helper.Policy(users=["65534"]), log=None,
                                deadline=5.0, limiter=limits.RateLimit())
        if CAUGHT:
            return CAUGHT[0]
        line = b"".join(item["pieces"]).split(b"\n", 1)[0]
        return check_reply(connection.sent, line)

    def describe(self, item):
        return "helper request from uid %d in %d pieces: %s" % (item["uid"], len(item["pieces"]), verdict.one_line(
            repr(b"".join(item["pieces"])[:600]), 640))

    def dump(self, item, directory):
        super().dump(item, directory)
        with open(os.path.join(directory, "request.bin"), "wb") as handle:
            handle.write(b"".join(item["pieces"]))


class HelperSocketTarget(base.Target):
    name = "helper-socket"
    family = "input"
    share = 0.04
    doc = "the same request lines through a real unix socket to listen/serve (a few hundred a run)"

    def extend_node(self):
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import server as helper  # pylint: disable=import-outside-toplevel
        _guard_handle_request()
        directory = os.path.join(self.workdir, "run")
        os.makedirs(directory, mode=0o755)
        self.socket_path = os.path.join(directory, "helper.sock")
        self.log = []
        self.server = helper.listen(self.socket_path, [str(os.geteuid())])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=helper.serve, args=(self.node.host(), self.server, helper.Policy([str(os.geteuid())]),
                                                                  self.log.append, self.stop))
        self.thread.daemon = True
        self.thread.start()

    def generate(self, rng):
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_REQUEST  # pylint: disable=import-outside-toplevel
        roll = rng.random()
        if roll < 0.03:
            data = b"x" * (MAX_REQUEST + 1 + rng.randrange(1 << 16))  # past the bound, by a little or more
        elif roll < 0.06:
            data = b" \t \r"
        else:
            data = request_line(rng)
        return {"pieces": _pieces(rng, data)}

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_REQUEST  # pylint: disable=import-outside-toplevel
        del CAUGHT[:]
        del self.log[:]
        data = b"".join(item["pieces"])
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.settimeout(15)
        raw, reset = b"", False
        try:
            peer.connect(self.socket_path)
            try:
                for piece in item["pieces"]:
                    peer.sendall(piece)
                peer.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the helper hung up on a request too long: its reply is still there to read
            while True:
                try:
                    chunk = peer.recv(65536)
                except ConnectionResetError:
                    reset = True  # the helper closed with bytes of ours unread (a line past its bound)
                    break
                if not chunk:
                    break
                raw += chunk
        finally:
            peer.close()
        if not self.thread.is_alive():
            return verdict.problem("reply", "helper stopped", "the helper's serve loop ended")
        if CAUGHT:
            return CAUGHT[0]
        internal = [line for line in self.log if "internal error" in line]
        if internal:
            return verdict.problem("reply", "internal error (socket)", internal[0])
        line = data.split(b"\n", 1)[0]
        if not line.strip():  # no request, no reply; what followed it is left unread, which may reset
            return None if not raw else verdict.problem("reply", "to a blank line", "a blank line got %r" % raw[:200])
        if len(line) > MAX_REQUEST:
            return None if raw.startswith(b'{"ok": false') or (reset and not raw) else verdict.problem(
                "reply", "long line", "a line over %d bytes got %r" % (MAX_REQUEST, raw[:200]))
        if reset and not raw:
            return verdict.problem("reply", "reset", "the helper reset the connection without a reply")
        return check_reply(raw, line)

    def describe(self, item):
        return "helper socket, %d pieces: %s" % (len(item["pieces"]), verdict.one_line(
            repr(b"".join(item["pieces"])[:600]), 640))


# -- the helper's bounds -----------------------------------------------------------------------------------

BOUNDS_IDS = ["b%d" % number for number in range(8)]
QUOTA_RE = re.compile(
    r"quota: (?:[0-9]+ atoms would take the holds on the node to [0-9]+, past the [0-9]+ atoms a pass honours "
    r"\([0-9]+ taken by the other holds\)|[0-9]+ bytes would take the env files in \S+ to [0-9]+, past the [0-9]+ "
    r"bytes of a devices section \([0-9]+ taken by the other env files\)|the spec of \w+ would be [0-9]+ bytes for "
    r"its [0-9]+ atoms, past the [0-9]+ bytes a pass reads back|\S+ already holds [0-9]+ (?:hold specs|env files), "
    r"the most a node may have \(a pass honours at most [0-9]+ holds\)|cannot count the )")


def bounds_request(rng):
    """One request of the peer's run: mostly what the bounds are about (wide holds, long env lines), else a
    release, a look, or a mutated request line."""
    roll = rng.random()
    allocation_id = rng.choice(BOUNDS_IDS)
    if roll < 0.55:
        count = rng.choice([1, 8, 64, 256, 512, 700])
        start = rng.choice([0, 100, 1000, rng.randrange(20000)])
        lines = rng.choice([0, 0, 1, 8, 15])
        env = ["K%d=%s" % (number, "v" * rng.choice([1, 100, 3990])) for number in range(lines)]
        hold = {"allocation_id": allocation_id, "reservation_id": "r-%s" % allocation_id, "generation": 1,
                "binding": "BINDING_HOLD", "devices": [{"id": "%s/s%d" % (nodes.GPU_F, start + number),
                                                        "device_class": "gpu.slot"} for number in range(count)],
                "limits": None, "env": env, "runtimes": []}
        return {"op": "hold.write", "kind": rng.choice(["cdi", "allocation-env"]), "hold": hold}
    if roll < 0.7:
        return {"op": "hold.remove", "kind": rng.choice(["cdi", "allocation-env"]), "allocation_id": allocation_id}
    if roll < 0.8:
        return {"op": "slice.stop", "allocation_id": allocation_id}
    if roll < 0.92:
        return {"op": "kube.look"}
    return mutate.mutate_value(rng, rng.choice(REQUESTS), True, HELPER_KEYS)


def bcd_holds_on(root):
    """``(atoms, spec bytes, env bytes, specs in /etc/cdi, largest spec)`` of the holds under ``root``, read
    here from the files, as an operator would count them: a spec's distinct device ids (``/etc/cdi`` and
    ``/var/run/cdi``), the GPUs of an env file whose allocation has no spec."""
    atoms, spec_bytes, specs, largest, named = 0, 0, 0, 0, set()
    for directory in ("etc/cdi", "var/run/cdi"):
        path = os.path.join(root, directory)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
            found = re.fullmatch(r"bcd-([A-Za-z0-9_]+)\.json", name)
            if not found or not os.path.isfile(os.path.join(path, name)) or os.path.islink(os.path.join(path, name)):
                continue
            with open(os.path.join(path, name), "rb") as handle:
                content = handle.read()
            spec_bytes += len(content)
            largest = max(largest, len(content))
            specs += directory == "etc/cdi"
            named.add(found.group(1))
            try:
                devices = json.loads(content.decode("utf-8")).get("devices") or []
            except (ValueError, AttributeError):
                continue
            atoms += len(set(json.dumps(device.get("annotations")) for device in devices if isinstance(device, dict)))
    env_bytes = 0
    path = os.path.join(root, "run/bcd/allocations")
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        found = re.fullmatch(r"([A-Za-z0-9_]+)\.env", name)
        if not found or os.path.islink(os.path.join(path, name)) or not os.path.isfile(os.path.join(path, name)):
            continue
        with open(os.path.join(path, name), "rb") as handle:
            content = handle.read()
        env_bytes += len(content)
        if found.group(1) not in named:
            visible = [line for line in content.decode("utf-8", "replace").splitlines()
                       if line.startswith("NVIDIA_VISIBLE_DEVICES=")]
            atoms += len([gpu for gpu in visible[-1].split("=", 1)[1].split(",") if gpu.startswith("GPU-")]) \
                if visible else 0
    return atoms, spec_bytes, env_bytes, specs, largest


# what the helper refuses before a request reaches its limiter
BEFORE_THE_LIMIT = ("malformed request", "a request nests deeper", "a request must not contain", "request longer than")


def _op_of(line):
    """The op of a request line as the helper reads it, or None."""
    try:
        request = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return request.get("op") if isinstance(request, dict) else None


class HelperBoundsTarget(base.Target):
    name = "helper-bounds"
    family = "input"
    share = 0.05  # each input is a run of up to six requests on a planted node: some 0.25 s
    doc = ("a peer's run of wide, env-heavy and other requests against a node planted near the helper's bounds: "
           "what root keeps and does stays within them (atoms, bytes, files, rates, readings, log lines)")

    def extend_node(self):
        _guard_handle_request()

    def generate(self, rng):
        classes = [(rng.choice([1, 2, 4, 8, 64]), rng.choice([0.5, 2.0, 16.0])) for _class in range(3)]
        requests = []
        for _request in range(rng.randrange(1, 7)):
            request, pause = bounds_request(rng), rng.choice([0.0, 0.0, 0.01, 0.3, 1.5])
            # a flood of what costs a request little (a wide write costs a render: one at a time)
            floods = isinstance(request, dict) and request.get("op") in ("kube.look", "hold.remove", "slice.stop")
            requests += [(request, pause)] * (rng.choice([1, 1, 5, 30]) if floods else 1)
        return {"uid": 65534 if rng.random() < 0.8 else 0,
                "classes": classes, "log": (rng.choice([1, 3, 50]), rng.choice([0.5, 4.0])),
                "view_seconds": rng.choice([0.0, 0.5, 1.0]),
                "planted_atoms": rng.choice([0, 0, 1024, 3500, 4000]),
                "planted_env": rng.choice([0, 0, 3 << 20, (4 << 20) - 30000, (4 << 20) - 4000]),
                "requests": requests}

    def plant(self, item):
        """Specs in /var/run/cdi naming ``planted_atoms`` slots of GPU_D (written by root, as a bind of another
        allocation would), and env files no hold has taking ``planted_env`` bytes."""
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import server as helper  # pylint: disable=import-outside-toplevel
        left, number = item["planted_atoms"], 0
        while left > 0:
            count = min(left, 512)
            hold = {"allocation_id": "p%d" % number, "reservation_id": "", "generation": 1,
                    "binding": "BINDING_HOLD", "devices": [{"id": "%s/s%d" % (nodes.GPU_D, 100 + number * 512 + slot),
                                                            "device_class": "gpu.slot"} for slot in range(count)],
                    "limits": None, "env": [], "runtimes": []}
            helper.handle_request(self.node.host(), {"op": "hold.write", "kind": "cdi", "hold": hold})
            os.makedirs(self.node.path("/var/run/cdi"), exist_ok=True)
            os.rename(self.node.path("/etc/cdi/bcd-p%d.json" % number), self.node.path("/var/run/cdi/bcd-p%d.json" % number))
            left, number = left - count, number + 1
        left, number = item["planted_env"], 0
        while left > 0:
            size = min(left, 60000)
            self.node.write("/run/bcd/allocations/q%d.env" % number, "BCD_ALLOCATION_ID=q%d\nX=%s\n" % (
                number, "v" * max(0, size - 40)))
            left, number = left - size, number + 1

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_ATOMS  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import server as helper  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import (  # pylint: disable=import-outside-toplevel
            RATE_CLASSES, LogLimit, RateLimits)
        from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import (  # pylint: disable=import-outside-toplevel
            MAX_ENV_BYTES, MAX_HOLD_FILES, NodeView)
        from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES  # pylint: disable=import-outside-toplevel
        del CAUGHT[:]
        now = [1000.0]

        def clock():
            return now[0]
        classes = [(ops, burst, rate) for (ops, _burst, _rate), (burst, rate) in zip(RATE_CLASSES, item["classes"])]
        limits = RateLimits(classes=classes, exempt=(0,), clock=clock)
        lines = []
        log = LogLimit(lines.append, burst=item["log"][0], rate=item["log"][1], window=60, clock=clock)
        view = NodeView(self.node.host(), seconds=item["view_seconds"], clock=clock)
        policy = helper.Policy(users=["65534"])
        passed = dict((ops, 0) for ops, _burst, _rate in classes)
        before = bcd_holds_on(self.node.root)
        for request, pause in item["requests"]:
            now[0] += pause
            line = mutate.to_text(request, ascii_only=True).encode("ascii")
            connection = _Connection([line + b"\n"], item["uid"])
            helper.serve_connection(view, connection, policy, log=log, deadline=5.0, limiter=limits)
            if CAUGHT:
                return CAUGHT[0]
            failure = check_reply(connection.sent, line)
            if failure is not None:
                return failure
            reply = json.loads(connection.sent)
            error = reply.get("error") or ""
            op = _op_of(line)
            for ops in passed:  # what took a token: all but what is refused before the limiter, or by it
                if op in ops and not error.startswith(BEFORE_THE_LIMIT + ("rate limited",)):
                    passed[ops] += 1
            if error.startswith("quota") and not QUOTA_RE.match(error):
                return verdict.problem("bound", "a quota refusal without its numbers", error)
            if op != "hold.write" or not reply["ok"]:
                continue  # nothing else adds to what root keeps: counted after each write it carried out
            after = bcd_holds_on(self.node.root)
            for index, (what, most) in enumerate((("atoms", MAX_ATOMS), ("spec bytes", None),
                                                  ("env bytes", MAX_ENV_BYTES),
                                                  ("specs in /etc/cdi", MAX_HOLD_FILES),
                                                  ("bytes of one spec", MAX_HOLD_SPEC_BYTES))):
                if most is not None and after[index] > max(most, before[index]):
                    return verdict.problem("bound", what, "after %s the node's holds have %d %s, past the bound %d "
                                           "(%d before)" % (op, after[index], what, most, before[index]))
            before = after
        elapsed = now[0] - 1000.0
        if item["uid"] != 0:
            for ops, burst, rate in classes:
                if passed[ops] > burst + rate * elapsed + 1e-6:
                    return verdict.problem("bound", "rate of %s" % ops[0], "%d of %s passed in %gs, past a burst of "
                                           "%d and %g a second" % (passed[ops], ", ".join(ops), elapsed, burst, rate))
        if view.seconds and view.readings > 1 + elapsed / view.seconds + 1e-6:
            return verdict.problem("bound", "readings", "the node was read %d times in %gs (once a %gs at most)"
                                   % (view.readings, elapsed, view.seconds))
        burst, rate = item["log"]
        peer = [text for text in lines if text.startswith("uid %d: " % item["uid"]) and "rate limited" not in text
                and "similar lines dropped" not in text]
        if len(peer) > burst + rate * elapsed + 1e-6:
            return verdict.problem("bound", "log lines", "%d lines of uid %d in %gs, past a burst of %d and %g a "
                                   "second" % (len(peer), item["uid"], elapsed, burst, rate))
        return None

    def describe(self, item):
        shown = [(request.get("op"), request.get("kind"), len((request.get("hold") or {}).get("devices") or [])
                  if isinstance(request.get("hold"), dict) else None, pause) if isinstance(request, dict)
                 else ("mutated", None, None, pause) for request, pause in item["requests"]]
        return "helper bounds, uid %d, classes %s, log %s, view %gs, planted %d atoms and %d env bytes: %s" % (
            item["uid"], item["classes"], item["log"], item["view_seconds"], item["planted_atoms"],
            item["planted_env"], verdict.one_line(repr(shown), 600))


def targets():
    return [ModuleTarget(), HelperTarget(), HelperSocketTarget(), HelperBoundsTarget()]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper: root's few writes for a pass that runs as an ordinary user.

``bcd-holds helper`` listens on a unix socket and speaks one JSON object per
line each way. Requests:

* ``{"op": "file.write", "kind": "cdi"|"allocation-env", "allocation_id": …, "content": …}``
* ``{"op": "file.remove", "kind": …, "allocation_id": …}``
* ``{"op": "slice.apply", "name": "bcd-alloc-….slice", "properties": {…}, "hugetlb_max": {…}}``
* ``{"op": "slice.remove", "name": …}``
* ``{"op": "kube.look"}``: what pods hold, asked of the kubelet (its socket is root's);
  the reply carries ``"view"``

Replies are ``{"ok": true}`` or ``{"ok": false, "error": …}``. The helper builds
every path itself from its own root, a kind and a checked allocation id;
accepts only slice names and cpulists of the documented forms; checks that a
CDI spec is valid CDI for that allocation; and serves only the peers it was
told to (checked with ``SO_PEERCRED``). ``node.helper_client.HelperClient`` is
the other end; a host given one sends every privileged write through it.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import struct
import threading

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import ALLOCATION_ID_RE, ENV_KEY_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import ANN_ALLOCATION, KIND
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_validate import validate_spec
from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import NODE_FILE_KINDS
from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import view_to_json
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import (
    check_slice_name,
    check_slice_request,
    SliceError,
)

MAX_REQUEST = 1 << 20  # one JSON line, content included
IO_TIMEOUT = 30.0
OPS = ("file.write", "file.remove", "slice.apply", "slice.remove", "kube.look")


class Refused(BcdError):
    """A request the helper will not carry out; the message goes back to the peer."""


# -- the server ----------------------------------------------------------------------

def _has_nul(value):
    """A NUL anywhere in parsed JSON (``\\u0000`` escapes pass the text check)."""
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def check_content(kind, allocation_id, content):
    """What the helper writes must be what a pass would write for that allocation."""
    if not isinstance(content, str):
        raise Refused("content must be a string")
    if "\0" in content:
        raise Refused("content contains NUL")
    if kind == "cdi":
        try:
            spec = json.loads(content)
        except ValueError as exc:
            raise Refused("content is not JSON: %s" % exc)
        if _has_nul(spec):
            raise Refused("content contains NUL")
        if not isinstance(spec, dict) or spec.get("kind") != KIND:
            raise Refused("a bcd CDI spec must be of kind %s" % KIND)
        annotations = spec.get("annotations") if isinstance(spec.get("annotations"), dict) else {}
        if annotations.get(ANN_ALLOCATION) != allocation_id:
            raise Refused("the spec's %s is not %s" % (ANN_ALLOCATION, allocation_id))
        problems = validate_spec(spec)
        if problems:
            raise Refused("not valid CDI: %s" % "; ".join(problems[:5]))
    else:
        for number, line in enumerate(content.splitlines(), 1):
            key, sep, _value = line.partition("=")
            if not sep or not ENV_KEY_RE.fullmatch(key):
                raise Refused("env line %d is not KEY=VALUE" % number)


def handle_request(host, request):
    """Carry out one request through ``host`` (a host without a helper: this process is root).
    Returns extra reply fields, or None."""
    if not isinstance(request, dict):
        raise Refused("a request must be a JSON object")
    op = request.get("op")
    if op not in OPS:
        raise Refused("unknown op %r; known: %s" % (op, ", ".join(OPS)))
    if op == "kube.look":
        return {"view": view_to_json(host.kube_side().look(host.inventory()))}
    if op.startswith("file."):
        kind = request.get("kind")
        allocation_id = request.get("allocation_id")
        if kind not in NODE_FILE_KINDS:
            raise Refused("unknown kind %r; known: %s" % (kind, ", ".join(sorted(NODE_FILE_KINDS))))
        if not isinstance(allocation_id, str) or not ALLOCATION_ID_RE.fullmatch(allocation_id):
            raise Refused("allocation_id %r does not match %s" % (allocation_id, ALLOCATION_ID_RE.pattern))
        if op == "file.write":
            content = request.get("content")
            check_content(kind, allocation_id, content)
            host.writer.write_node_file(kind, allocation_id, content.encode("utf-8"))
        else:
            host.writer.remove_node_file(kind, allocation_id)
        return None
    name = request.get("name")
    try:
        if op == "slice.apply":
            properties = request.get("properties") or {}
            huge = request.get("hugetlb_max") or {}
            check_slice_request(name, properties, huge)
            host.writer.apply_slice(name, properties, huge)
        else:
            check_slice_name(name)
            host.writer.remove_slice(name)
    except SliceError as exc:
        raise Refused(str(exc))
    return None


def peer_credentials(connection):
    """``(pid, uid, gid)`` of the peer, from ``SO_PEERCRED``."""
    data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", data)


class Policy(object):
    """Who may talk to the helper: root, the allowed users, members of the allowed groups."""

    def __init__(self, users=(), groups=()):
        self.uids = set(pwd.getpwnam(user).pw_uid if not str(user).isdigit() else int(user) for user in users)
        self.gids = set(grp.getgrnam(group).gr_gid if not str(group).isdigit() else int(group) for group in groups)

    def allows(self, uid, gid):
        if uid == 0 or uid in self.uids or gid in self.gids:
            return True
        if not self.gids:
            return False
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            return False
        return any(name in grp.getgrgid(gid_).gr_mem for gid_ in self.gids if _group_exists(gid_))


def _group_exists(gid):
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _reply(connection, ok, error=None, extra=None):
    message = {"ok": True} if ok else {"ok": False, "error": error}
    message.update(extra or {})
    try:
        connection.sendall((json.dumps(message) + "\n").encode("utf-8"))
    except OSError:
        pass


def serve_connection(host, connection, policy, log=None):
    """Answer one peer's requests until it hangs up; never raises."""
    with connection:
        connection.settimeout(IO_TIMEOUT)
        try:
            _pid, uid, gid = peer_credentials(connection)
        except OSError as exc:
            _reply(connection, False, "cannot read peer credentials: %s" % exc)
            return
        if not policy.allows(uid, gid):
            _reply(connection, False, "uid %d gid %d may not use this helper" % (uid, gid))
            return
        buffer = b""
        while True:
            try:
                chunk = connection.recv(65536)
            except (OSError, socket.timeout):
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                _answer(host, connection, line, uid, log)
            if len(buffer) > MAX_REQUEST:
                _reply(connection, False, "request longer than %d bytes" % MAX_REQUEST)
                return


def _answer(host, connection, line, uid, log):
    if not line.strip():
        return
    if len(line) > MAX_REQUEST:
        _reply(connection, False, "request longer than %d bytes" % MAX_REQUEST)
        return
    try:
        request = json.loads(line.decode("utf-8"))
        extra = handle_request(host, request)
    except (ValueError, UnicodeDecodeError) as exc:
        _reply(connection, False, "malformed request: %s" % exc)
    except Refused as exc:
        _reply(connection, False, str(exc))
    except (OSError, SliceError) as exc:
        _reply(connection, False, "failed: %s" % exc)
    else:
        if log:
            what = [request.get(key) for key in ("kind", "allocation_id", "name") if request.get(key)]
            log("uid %d: %s %s" % (uid, request.get("op"), " ".join(what)))
        _reply(connection, True, extra=extra)


def listen(socket_path, users=(), groups=()):
    """Bind the helper's socket: 0660 owned by root and the allowed group, else 0600 for the allowed user."""
    try:
        os.unlink(socket_path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(socket_path) or ".", mode=0o755, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    if groups:
        gid = grp.getgrnam(groups[0]).gr_gid if not str(groups[0]).isdigit() else int(groups[0])
        os.chown(socket_path, 0, gid)
        os.chmod(socket_path, 0o660)
    elif users:
        uid = pwd.getpwnam(users[0]).pw_uid if not str(users[0]).isdigit() else int(users[0])
        os.chown(socket_path, uid, 0)
        os.chmod(socket_path, 0o600)
    else:
        os.chmod(socket_path, 0o600)
    server.listen(16)
    return server


def serve(host, server, policy, log=None, stop=None):
    """Accept peers until ``stop`` (a threading.Event) is set; each peer in its own thread."""
    server.settimeout(0.5)
    while stop is None or not stop.is_set():
        try:
            connection, _address = server.accept()
        except socket.timeout:
            continue
        except OSError:
            if stop is not None and stop.is_set():
                return
            raise
        thread = threading.Thread(target=serve_connection, args=(host, connection, policy, log))
        thread.daemon = True
        thread.start()

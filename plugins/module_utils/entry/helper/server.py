# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The root helper's socket: who may talk to it, and how each peer is served (``bcd-holds helper``).

``listen`` binds the unix socket in a directory only root can write; ``serve`` accepts peers, each in a
thread of its own. Only the allowed peers are served (``SO_PEERCRED``, ``Policy``), at most
``MAX_CONNECTIONS`` at once, each within ``REQUEST_DEADLINE`` seconds and ``request.MAX_REQUEST``
bytes; whatever a peer sends gets an answer of one line, and nothing a peer does stops the helper.
Its requests are limited (``limits``), the node read once per ``reading.VIEW_SECONDS`` (``NodeView``),
and each is carried out by ``handle.handle_request``.
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import socket
import stat
import struct
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import slice_name
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.handle import handle_request
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import Limiter, LogLimit, RateLimits
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.mig import change_words
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import NodeView
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_DEPTH, MAX_REQUEST, Refused, read_request
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import ensure_dir
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError

REQUEST_DEADLINE = 10.0  # seconds from connecting to a complete request
MAX_CONNECTIONS = 16  # peers served at once; more are told the helper is busy
SOCKET_MODE_GROUP = 0o660
_ACCEPT_RETRY = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EINTR,
                 errno.EPROTO, errno.EPERM)
# where the helper's lines go: a LogLimit (a peer's lines limited), or any function of one line
Log = Callable[[str], object]


class HelperSetupError(BcdError):
    """The helper cannot listen safely (its socket's directory is not root's alone)."""


def peer_credentials(connection: socket.socket) -> Tuple[int, int, int]:
    """``(pid, uid, gid)`` of the peer, from ``SO_PEERCRED``."""
    data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", data)
    return pid, uid, gid


class Policy:
    """Who may talk to the helper: root, the allowed users, members of the allowed groups."""

    def __init__(self, users: Iterable[str] = (), groups: Iterable[str] = ()) -> None:
        self.uids = set(pwd.getpwnam(user).pw_uid if not str(user).isdigit() else int(user) for user in users)
        self.gids = set(grp.getgrnam(group).gr_gid if not str(group).isdigit() else int(group) for group in groups)

    def allows(self, uid: int, gid: int) -> bool:
        if uid == 0 or uid in self.uids or gid in self.gids:
            return True
        if not self.gids:
            return False
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            return False
        return any(name in grp.getgrgid(gid_).gr_mem for gid_ in self.gids if _group_exists(gid_))


def _group_exists(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _reply(connection: socket.socket, ok: bool, error: Optional[str] = None, extra: Optional[Dict[str, Any]] = None,
           retryable: bool = False) -> None:
    """One reply line. A refusal the same request may get past later (the node's state, the helper busy, a
    slow peer) says ``"retryable": true``; one without it is final for that request."""
    message: Dict[str, Any] = {"ok": True} if ok else {"ok": False, "error": error}
    if not ok and retryable:
        message["retryable"] = True
    message.update(extra or {})
    try:
        connection.sendall((json.dumps(message) + "\n").encode("utf-8"))
    except OSError:
        pass


def _hang_up(connection: socket.socket) -> None:
    """Say no more and read what the peer still sends, briefly: closing with its bytes unread would
    reset the connection, and the peer might never read the reason it was given."""
    try:
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(0.5)
        for _attempt in range(16):
            if not connection.recv(65536):
                break
    except OSError:
        pass


def serve_connection(host: Union[Host, NodeView], connection: socket.socket, policy: Policy, log: Optional[Log] = None,
                     deadline: float = REQUEST_DEADLINE, limiter: Optional[Limiter] = None) -> None:
    """Answer one peer's one request, within ``deadline`` seconds of its connecting; never raises.
    ``limiter`` (``RateLimits`` or a ``RateLimit``, shared by the connections of one helper) limits what it
    asks for; ``host`` is the helper's ``NodeView``, or a host read for this request alone."""
    with connection:
        end = time.monotonic() + deadline
        try:
            _pid, uid, gid = peer_credentials(connection)
        except OSError as exc:
            _reply(connection, False, "cannot read peer credentials: %s" % exc)
            return
        if not policy.allows(uid, gid):
            _reply(connection, False, "uid %d gid %d may not use this helper" % (uid, gid))
            _hang_up(connection)
            return
        chunks: List[bytes] = []  # the line's pieces, kept apart: no copy of the line per piece
        size, ended = 0, False
        while not ended:
            left = end - time.monotonic()
            if left <= 0:
                _reply(connection, False, "no complete request within %gs" % deadline, retryable=True)
                _hang_up(connection)
                return
            try:
                connection.settimeout(left)
                chunk = connection.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                break  # the peer finished sending: a last line without its newline is still answered
            newline = chunk.find(b"\n")
            ended = newline >= 0
            chunk = chunk[:newline] if ended else chunk
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REQUEST:
                _reply(connection, False, "request longer than %d bytes" % MAX_REQUEST)
                _hang_up(connection)
                return
        line = b"".join(chunks)
        if line.strip():
            connection.settimeout(max(0.1, end - time.monotonic()))
            _answer(host, connection, line, uid, log, limiter)


def _answer(host: Union[Host, NodeView], connection: socket.socket, line: bytes, uid: int, log: Optional[Log],
            limiter: Optional[Limiter] = None) -> None:
    try:
        request = read_request(line)
        if limiter is not None:
            limiter.check(uid, request)
        extra = handle_request(host, request)
    except (ValueError, UnicodeDecodeError) as exc:
        _reply(connection, False, "malformed request: %s" % exc)
    except RecursionError:
        _reply(connection, False, "a request nests deeper than %d levels" % MAX_DEPTH)
    except Refused as exc:
        _reply(connection, False, str(exc), retryable=exc.retryable)
        if log and getattr(exc, "first", False):  # a limited peer once a minute, not once a refusal: never dropped
            _log(log, None, "uid %d: %s" % (uid, exc))
    except (BcdError, OSError) as exc:  # I/O, a unit systemd could not start now: retryable; a request root refuses: not
        _reply(connection, False, "failed: %s" % exc, retryable=isinstance(exc, (OSError, RetryableError)))
    except Exception as exc:  # a bug must cost one reply, never the helper: say so, and log it
        _reply(connection, False, "internal error (%s); see the helper's log" % type(exc).__name__)
        if log:
            _log(log, uid, "uid %d: internal error answering a request: %s: %s" % (uid, type(exc).__name__, exc))
    else:
        if log and isinstance(request, dict):  # it is: handle_request carries out JSON objects alone
            _log(log, uid, "uid %d: %s %s" % (uid, request.get("op"), _what_it_touched(request)))
        _reply(connection, True, extra=extra)


def _log(log: Log, uid: Optional[int], line: str) -> None:
    """A peer's line: through a ``LogLimit`` as that peer's (``uid`` None: a line never dropped), else as it is."""
    if isinstance(log, LogLimit):
        log(line, uid)
    else:
        log(line)


def _what_it_touched(request: Dict[str, Any]) -> str:
    """The log names what an answered request changed: the slice unit, the file kind and allocation, or the GPU
    and the MIG op (``GPU-... destroy gi1/ci0``)."""
    if request.get("op") == "mig.change":
        return change_words(request.get("change"))
    allocation_id = request.get("allocation_id")
    if isinstance(request.get("hold"), dict):
        allocation_id = request["hold"].get("allocation_id")
    if request.get("op") in ("slice.apply", "slice.stop") and isinstance(allocation_id, str):
        return slice_name(allocation_id)
    return " ".join(value for value in (request.get("kind"), allocation_id) if isinstance(value, str))


def _check_socket_directory(directory: str) -> None:
    """The socket's directory must be a directory root owns that no one else can write, so nobody can
    swap the socket for a link between binding it and setting its owner and mode."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise HelperSetupError("the helper socket's directory %s is not a directory" % directory)
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise HelperSetupError("the helper socket's directory %s must be owned by uid %d and writable by no one "
                               "else (it is uid %d, mode %04o)" % (directory, os.geteuid(), info.st_uid,
                                                                   stat.S_IMODE(info.st_mode)))


def listen(socket_path: str, users: Sequence[str] = (), groups: Sequence[str] = ()) -> socket.socket:
    """Bind the helper's socket: 0660 owned by root and the allowed group, else 0600 for the allowed user.
    It is created under a umask that leaves it 0600, in a directory only root can write."""
    directory = os.path.dirname(os.path.abspath(socket_path))
    ensure_dir(directory, 0o755)  # it and any directory above it 0755, whatever the umask; an existing one as it is
    _check_socket_directory(directory)
    try:
        existing: Optional[os.stat_result] = os.lstat(socket_path)
    except FileNotFoundError:
        existing = None
    if existing is not None:
        if not (stat.S_ISSOCK(existing.st_mode) or stat.S_ISLNK(existing.st_mode)):
            raise HelperSetupError("%s exists and is not a socket; not replacing it" % socket_path)
        os.unlink(socket_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        server.bind(socket_path)
    finally:
        os.umask(old_umask)
    if groups:
        gid = grp.getgrnam(groups[0]).gr_gid if not str(groups[0]).isdigit() else int(groups[0])
        os.chown(socket_path, 0, gid, follow_symlinks=False)
        os.chmod(socket_path, SOCKET_MODE_GROUP)
    elif users:
        uid = pwd.getpwnam(users[0]).pw_uid if not str(users[0]).isdigit() else int(users[0])
        os.chown(socket_path, uid, 0, follow_symlinks=False)
    server.listen(64)
    return server


def _busy(connection: socket.socket, max_connections: int) -> None:
    """A peer beyond the limit is told at once and let go: it holds no thread."""
    with connection:
        connection.settimeout(1.0)
        _reply(connection, False, "busy: %d requests are being served; try again" % max_connections, retryable=True)


def serve(host: Union[Host, NodeView], server: socket.socket, policy: Policy, log: Optional[Log] = None,
          stop: Optional[threading.Event] = None, deadline: float = REQUEST_DEADLINE,
          max_connections: int = MAX_CONNECTIONS, limiter: Optional[Limiter] = None) -> None:
    """Accept peers until ``stop`` (a threading.Event) is set, each in its own thread, at most
    ``max_connections`` at once, each peer's operations limited by ``limiter`` (``RateLimits`` by default),
    the node's hardware read once per ``VIEW_SECONDS`` (``NodeView``, unless ``host`` is one already), a
    peer's lines to ``log`` limited (``LogLimit``, unless ``log`` is one). Running out of file descriptors
    or memory pauses accepting; it never stops the helper."""
    limits = limiter if limiter is not None else RateLimits()
    view = host if isinstance(host, NodeView) else NodeView(host)
    lines = log if log is None or isinstance(log, LogLimit) else LogLimit(log)
    server.settimeout(0.5)
    slots = threading.BoundedSemaphore(max_connections)
    pressed = False
    while stop is None or not stop.is_set():
        if lines is not None:
            lines.flush()
        try:
            connection, _address = server.accept()
        except socket.timeout:
            continue
        except OSError as exc:
            if stop is not None and stop.is_set():
                return
            if exc.errno in (errno.EBADF, errno.EINVAL):
                return  # the listening socket was closed
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM) and lines and not pressed:
                lines("accept failed (%s); pausing until descriptors free up" % exc)
            pressed = exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
            time.sleep(0.05 if exc.errno in _ACCEPT_RETRY else 0.5)
            continue
        pressed = False
        if not slots.acquire(blocking=False):
            _busy(connection, max_connections)
            continue
        try:
            thread = threading.Thread(target=_serve_one, args=(view, connection, policy, lines, deadline, slots,
                                                               limits))
            thread.daemon = True
            thread.start()
        except RuntimeError:  # no thread to be had: tell the peer, free the slot
            slots.release()
            _busy(connection, max_connections)


def _serve_one(host: Union[Host, NodeView], connection: socket.socket, policy: Policy, log: Optional[Log],
               deadline: float, slots: threading.BoundedSemaphore, limiter: Optional[Limiter] = None) -> None:
    try:
        serve_connection(host, connection, policy, log, deadline, limiter)
    finally:
        slots.release()

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small file helpers shared by the converger, the journal and the node key.

Every write here is crash-safe (temporary file, fsync, rename, fsync of the
directory) and sets the file mode itself, whatever the umask. Within
``directory_syncs_into(pending)`` the directory's fsync is left to the caller, who
fsyncs each directory once (``sync_directories``) before anything reports the writes:
a pass writing 1 024 holds fsyncs /etc/cdi once, not 1 024 times.  Temporary names
never end in ``.json`` or ``.yaml``: container runtimes load every such file in
``/etc/cdi``, dotfiles included.  ``PassLock`` keeps two passes from
interleaving on one node; in check mode it locks without creating anything. Its lock file
is opened as every state file is, by ``node/state_files.py`` (no link followed, a FIFO never
waited on, a regular file owned as expected), and its timeout holds whatever lies there.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Protocol, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import LOCK_NAME, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError

DEFAULT_DIR_MODE = 0o755


class FsError(RetryableError):
    """A path that cannot be used as asked (e.g. one that escapes ``root``)."""


class LockTimeout(BcdError):
    """Another pass held the node's lock for longer than we were willing to wait."""


def join_root(root: str, path: str) -> str:
    """``path`` (absolute, as seen on the node) placed under ``root``.

    Raises ``FsError`` when the result would lie outside ``root`` (``..``).
    """
    if not isinstance(root, str) or not root:
        raise FsError("root and path must be non-empty strings")
    if "\0" in root:
        raise FsError("a path must not contain a NUL character")
    return RootJoin(root)(path)


class RootJoin:
    """``join_root`` for one ``root``, normalized once: a host joins thousands of node paths a pass."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.base = os.path.normpath(os.path.abspath(root))
        self.prefix = self.base.rstrip("/") + "/"

    def __call__(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise FsError("root and path must be non-empty strings")
        if "\0" in path:
            raise FsError("a path must not contain a NUL character")
        joined = os.path.normpath(os.path.join(self.base, path.lstrip("/")))
        if joined != self.base and not joined.startswith(self.prefix):
            raise FsError("%s is outside root %s" % (path, self.root))
        return joined


class NodePaths(Protocol):
    """What a reader of a host's files asks of the host (``node/hosts.py``: ``Host``): where a node path lies
    under its root, and a small file's bytes."""

    def path(self, node_path: str) -> str:
        """The real path of ``node_path`` under the host's root."""

    def read(self, node_path: str) -> Optional[bytes]:
        """The bytes of ``node_path`` under the host's root, None when it is not there."""


def fsync_directory_fd(fd: int) -> None:
    """fsync the directory open as ``fd``: what makes a rename or removal in it durable."""
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is done anyway


def fsync_dir(dirpath: str) -> None:
    try:
        fd = os.open(dirpath, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        fsync_directory_fd(fd)
    finally:
        os.close(fd)


# The sets of directories whose fsync is deferred, innermost last (``directory_syncs_into``).
_DEFERRED: List[Set[str]] = []


@contextmanager
def directory_syncs_into(pending: Set[str]) -> Iterator[Set[str]]:
    """Within it, ``write_atomic``, ``create_exclusive``, ``remove_file`` and ``ensure_dir`` add the directory they
    changed to ``pending`` instead of fsyncing it: each file is still fsynced before its rename, so a rename
    shows the whole new file or the old one; what waits is the rename's own durability, until
    ``sync_directories(pending)``, which must come before anything reports those writes (the journal)."""
    _DEFERRED.append(pending)
    try:
        yield pending
    finally:
        _DEFERRED.pop()


def sync_directories(pending: Set[str]) -> None:
    """fsync each directory of ``pending`` once, parents before children, and empty it."""
    for dirpath in sorted(pending):
        fsync_dir(dirpath)
    pending.clear()


def _changed(dirpath: str) -> None:
    """``dirpath`` has a new, renamed or removed entry: fsync it now, or once later (``directory_syncs_into``)."""
    if _DEFERRED:
        _DEFERRED[-1].add(dirpath)
    else:
        fsync_dir(dirpath)


def ensure_dir(path: str, mode: int = DEFAULT_DIR_MODE) -> None:
    """Create ``path`` with ``mode`` and each missing directory above it with ``DEFAULT_DIR_MODE`` (0755, as
    the system's own are), whatever the umask; a directory that already exists is left as it is.

    The one way a directory is made on the node (``write_atomic``, ``create_exclusive``, the pass lock, the
    journal, the root helper's socket directory): only the directory asked for takes a narrower mode, so a
    first pass that creates a 0700 state directory under a bare root leaves ``/var`` and ``/var/lib`` 0755,
    and an account the state directory is later handed to can still reach it.
    """
    path = os.path.abspath(path)
    missing = []
    cur = path
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    for d in reversed(missing):
        wanted = mode if d == path else DEFAULT_DIR_MODE
        try:
            os.mkdir(d, wanted)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue
        os.chmod(d, wanted)
        _changed(os.path.dirname(d))


def owner_for(path: str, owner_from_dir: bool) -> Optional[Tuple[int, int]]:
    """The (uid, gid) a file written at ``path`` by root should get, or None.

    An existing file keeps its owner.  A new one takes its directory's owner
    when ``owner_from_dir`` is set (state files the unprivileged node passes
    must still be able to read and replace).  Only root can chown; others get None.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        st = os.stat(path)
        return (st.st_uid, st.st_gid)
    except FileNotFoundError:
        pass
    if owner_from_dir:
        st = os.stat(os.path.dirname(path))
        if (st.st_uid, st.st_gid) != (0, 0):
            return (st.st_uid, st.st_gid)
    return None


def _temp_name(path: str) -> str:
    d, base = os.path.split(path)
    # ".<name>.tmp-<random>": ends in neither .json nor .yaml; os.urandom is what secrets.token_hex reads, without
    # the import of secrets (and hmac, random) on every module run
    return os.path.join(d, ".%s.tmp-%s" % (base, os.urandom(6).hex()))


def _write_temp(path: str, data: bytes, mode: int, owner: Optional[Tuple[int, int]]) -> str:
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path: str, data: bytes, mode: int, dir_mode: int = DEFAULT_DIR_MODE,
                 owner_from_dir: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically and durably, with file mode ``mode``.

    The file's directory, when missing, is created with ``dir_mode`` and the missing ones above it 0755
    (``ensure_dir``).  When run as root, an existing file keeps its owner (and, with ``owner_from_dir``, a new
    one takes its directory's owner).  On failure the temporary file is removed and ``path`` is left as it was.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError("write_atomic wants bytes")
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    ensure_dir(d, dir_mode)
    tmp = _write_temp(path, bytes(data), mode, owner_for(path, owner_from_dir))
    try:
        os.rename(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _changed(d)


def create_exclusive(path: str, data: bytes, mode: int, dir_mode: int = DEFAULT_DIR_MODE,
                     owner_from_dir: bool = False) -> bool:
    """Create ``path`` atomically with ``data`` only if it does not exist yet.

    Returns False, changing nothing, when ``path`` already exists (another
    process may have won the race): the file is never replaced.  The content
    appears whole or not at all.
    """
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    ensure_dir(d, dir_mode)
    if os.path.lexists(path):
        return False
    tmp = _write_temp(path, bytes(data), mode, owner_for(path, owner_from_dir))
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise
            # no hard links here: fall back to a rename (a narrow race, never a torn file)
            if os.path.lexists(path):
                return False
            os.rename(tmp, path)
    finally:
        _unlink_quietly(tmp)
    _changed(d)
    return True


def remove_file(path: str) -> bool:
    """Remove ``path``; True if it existed.  The directory is fsynced (or deferred: ``directory_syncs_into``)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    _changed(os.path.dirname(os.path.abspath(path)))
    return True


class NotRegularFile(BcdError):
    """What ``read_regular`` found in a file's place instead of a regular file (a FIFO, a device, a socket, a
    directory); the message is its path."""


def read_regular(path: str, cap: int) -> bytes:
    """The first ``cap`` + 1 bytes of the regular file at ``path``: more than ``cap`` tells the caller the file is
    larger than it takes (``/dev/zero``'s read would never end). Opened without waiting, so a FIFO in its place
    answers at once instead of blocking a pass; anything but a regular file raises ``NotRegularFile``, and a
    missing one the ``OSError`` ``os.open`` raises. The one reader of the host's small files: hold specs, the
    vendor spec, the fakehw file, sysfs lists. A state file is read by ``node/state_files.py`` alone."""
    return read_regular_identified(path, cap)[0]


def read_regular_identified(path: str, cap: int) -> Tuple[bytes, Tuple[int, int, int, int, int]]:
    """``read_regular``'s bytes and what identifies the content of the file as opened: ``(st_dev, st_ino, st_size,
    st_mtime_ns, st_ctime_ns)`` of its descriptor, taken before the read (a write during the read changes them
    after, so the next look sees another identity)."""
    data, info = read_regular_stat(path, cap)
    return data, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def read_regular_stat(path: str, cap: int, check: Optional[Callable[[os.stat_result], None]] = None
                      ) -> Tuple[bytes, os.stat_result]:
    """``read_regular``'s bytes and the ``fstat`` of the descriptor they were read from, taken before the read;
    ``check`` (which raises to refuse) sees that ``fstat`` before a byte is read: who owns the file, its mode."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path)
        if check is not None:
            check(info)
        return handle.read(cap + 1), info


def read_bytes(path: str) -> Optional[bytes]:
    """The content of ``path``, or None when it does not exist (a parent that is a file included).
    For root's and the host's files; a state file is read by ``node/state_files.py`` alone."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


class PassLock:
    """An exclusive ``flock`` held for one pass, on ``<state_dir>/lock`` (``shared``: a shared one, for
    a reader such as a busy check, that waits for a pass and lets other readers in).

    ``with PassLock(state_dir):`` waits up to ``timeout`` seconds (only one
    try with ``blocking=False``) and raises ``LockTimeout`` naming the path.

    With ``create=True`` (a real pass) the state directory (0700) and the lock
    file (0600) are created when missing, and the directory itself is locked
    too, first.  With ``create=False`` (check mode) nothing is created: the
    lock file is locked when it exists, else the directory, else (no state
    directory at all: there is nothing to protect) nothing.
    """

    def __init__(self, state_dir: str, timeout: float = 120.0, blocking: bool = True,
                 create: bool = True, dir_mode: int = 0o700, shared: bool = False,
                 node_path: Optional[str] = None) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.files = StateFiles(self.state_dir, node_path)
        self.mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        self.path = self.files.where(LOCK_NAME)
        self.timeout = timeout
        self.blocking = blocking
        self.create = create
        self.dir_mode = dir_mode
        self._fds: List[int] = []

    def _open_targets(self) -> None:
        if self.create:
            ensure_dir(self.state_dir, self.dir_mode)
            directory = self.files.open_directory()
            if directory is not None:  # None only when removed this instant: the lock file's open says so
                self._fds.append(directory)
            lock = self.files.open(LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            if lock is None:  # O_CREAT: the file is opened or created, else open raises
                raise AssertionError("a created lock file is never None")
            self._fds.append(lock)
            return
        fd = self.files.open(LOCK_NAME)
        if fd is None:
            fd = self.files.open_directory()  # check mode: the directory, when there is one
        if fd is not None:
            self._fds.append(fd)

    def acquire(self) -> PassLock:
        if self._fds:
            raise RuntimeError("PassLock is not reentrant")
        deadline = time.monotonic() + max(0.0, float(self.timeout))
        try:
            self._open_targets()
            for fd in self._fds:
                while True:
                    try:
                        fcntl.flock(fd, self.mode | fcntl.LOCK_NB)
                        break
                    except OSError as exc:
                        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                            raise
                    if not self.blocking or time.monotonic() >= deadline:
                        waited = "" if not self.blocking else " after %gs" % self.timeout
                        raise LockTimeout(
                            "another pass holds the lock %s%s; try again when it has finished"
                            % (self.path, waited))
                    time.sleep(0.05)
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in reversed(fds):
            try:
                os.close(fd)  # closing the descriptor drops the flock
            except OSError:
                pass

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def __enter__(self) -> PassLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

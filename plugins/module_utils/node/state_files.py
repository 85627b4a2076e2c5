# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one bounded reader of the state directory: every file root opens there, another account can write.

On the role's nodes ``/var/lib/bcd`` belongs to the unprivileged ``bcd`` account, so whatever
root finds there may have been planted: a FIFO (an ``open`` that never returns), a link to
``/dev/zero`` (a read that never ends), a file of gigabytes, JSON nested a million levels deep.
``StateFiles`` is the only code that opens these files (a test holds every other module to
that), and it opens each one the same way:

* relative to a descriptor of the state directory, itself opened with ``O_NOFOLLOW``;
* with ``O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY``: a link is refused (``ELOOP``),
  and opening a FIFO returns at once;
* then ``fstat`` on the descriptor: a regular file, owned by the state directory's owner or by
  root (a root-owned file with more than one link, in a directory root does not own, is a hard
  link to something of root's and is refused);
* read to at most its cap, below (a file over it is refused, not truncated);
* JSON through ``support/bounded_json`` (at most 64 levels, integers of at most 40 digits,
  524 288 arrays, objects and values and 524 288 double quotes per file: the journal's lines together).

Each refusal is a ``StateFileError`` naming the file (its node path) and what is wrong; every
command turns it into one line and a documented exit code (``docs/node.md``). A file that is
simply absent reads as ``None``.

========================  ========  ===============================================
file                      cap       read by
========================  ========  ===============================================
``lock``                  never     opened for ``flock`` only (``fsutil.PassLock``)
                          read
``ledger.json``           16 MiB    ``state/ledger.py``
``releasing.json``        16 MiB    ``state/releases.py``
``releasing.unreadable``  never     its existence (``lstat``) is all that counts
                          read
``nodespec.json``         8 MiB     the stored input (``state/store.py``)
``last-pass.json``        4 KiB     ``bcd-holds metrics``
``events.jsonl``          16 MiB    the journal (``state/events.py``), whole: its
                                    acknowledgement rewrites it
``events.seq``            64 B      the journal's high-water mark
``node.key``              16 KiB    the node key, PEM (119 bytes for Ed25519)
``maintenance.json``      256 KiB   GPUs in maintenance (``state/store.py``; its content
                                    ``domain/maintenance.py``'s)
``health.json``           256 KiB   when each GPU last left maintenance (``state/store.py``;
                                    its content ``domain/health.py``'s)
``mig-layout.json``       1 MiB     the MIG layout as last seen (``state/mig_record.py``)
========================  ========  ===============================================

These names and caps are ``FILE_CAPS`` below, the one table of them (``DEFAULT_STATE_DIR`` beside it);
``tests/unit/plugins/module_utils/node/test_bounded_reader.py`` holds this list to it.

Nothing lists the state directory: root looks only at these names (``adopt``), so a directory of
200 000 planted files costs a pass nothing.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Dict, List, Optional, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError

KIB, MIB = 1024, 1024 * 1024
NEVER_READ = -1
# The state directory's node path, unless a module option or ``--state-dir`` names another.
DEFAULT_STATE_DIR = "/var/lib/bcd"

# The state directory's files, each named once, here: every module takes a state file's name from this
# table (the domain only parses and makes their content; the caller names the file).
LOCK_NAME = "lock"
LEDGER_NAME = "ledger.json"
RELEASES_NAME = "releasing.json"
MARKER_NAME = "releasing.unreadable"
NODESPEC_NAME = "nodespec.json"
LAST_PASS_NAME = "last-pass.json"
JOURNAL_NAME = "events.jsonl"
SEQ_NAME = "events.seq"
KEY_NAME = "node.key"
MAINTENANCE_NAME = "maintenance.json"
HEALTH_NAME = "health.json"
MIG_LAYOUT_NAME = "mig-layout.json"
# ... and the most of each that is read (``NEVER_READ``: opened for ``flock``, or only looked up).
FILE_CAPS: Dict[str, int] = {
    LOCK_NAME: NEVER_READ,
    LEDGER_NAME: 16 * MIB,  # the largest section's ledger is under 1 MB; a file costs about 3 times its size to read
    RELEASES_NAME: 16 * MIB,
    MARKER_NAME: NEVER_READ,
    NODESPEC_NAME: 8 * MIB,  # a devices section of at most 4 MiB as stored, and instances of 256 KiB
    LAST_PASS_NAME: 4 * KIB,
    JOURNAL_NAME: 16 * MIB,
    SEQ_NAME: 64,
    KEY_NAME: 16 * KIB,
    MAINTENANCE_NAME: 256 * KIB,  # {GPU UUID: {reason, since}} of at most 256 GPUs
    HEALTH_NAME: 256 * KIB,  # {GPU UUID: when faults logged before stopped counting}
    MIG_LAYOUT_NAME: 1 * MIB,  # per GPU (at most 256) its layout: 7 GPU instances of at most 7 compute instances
}
OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o600
# what opening something that is not a regular file may answer: a FIFO without a reader, a socket, a directory
_WRONG_KIND = (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP, errno.ETXTBSY)
_CHUNK = 1024 * 1024


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _size(count: int) -> str:
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if count >= unit and count % unit == 0:
            return "%d %s" % (count // unit, name)
    return "%d bytes" % count


class StateFiles:
    """The files of the state directory ``path`` (``node_path``: how messages name it)."""

    def __init__(self, path: str, node_path: Optional[str] = None) -> None:
        self.path = os.path.abspath(path)
        self.node_path = (node_path or self.path).rstrip("/") or "/"

    def where(self, name: str) -> str:
        """The node path of ``name``, as messages give it."""
        return "%s/%s" % (self.node_path.rstrip("/"), name)

    # -- the directory ----------------------------------------------------------------
    def _directory(self) -> Optional[Tuple[int, os.stat_result]]:
        """``(fd, fstat)`` of the state directory, or None when it does not exist."""
        try:
            fd = os.open(self.path, DIR_FLAGS)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, NotADirectoryError)) and not os.path.lexists(self.path):
                return None  # no directory (or a file where a parent should be): nothing is stored
            if os.path.islink(self.path):
                raise StateFileError(self.node_path, "the state directory is a symbolic link; refusing to follow it")
            if isinstance(exc, NotADirectoryError):
                raise StateFileError(self.node_path, "the state directory is not a directory")
            raise OSError(exc.errno, exc.strerror, self.node_path)
        return fd, os.fstat(fd)

    def open_directory(self) -> Optional[int]:
        """A descriptor of the state directory (``O_NOFOLLOW``), or None when it does not exist."""
        opened = self._directory()
        return None if opened is None else opened[0]

    def exists(self, name: str) -> bool:
        """Whether ``name`` is there, whatever it is (``lstat``; nothing is opened or followed)."""
        try:
            os.lstat(os.path.join(self.path, name))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self.where(name))
        return True

    # -- opening ----------------------------------------------------------------------
    def open(self, name: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> Optional[int]:
        """A descriptor of ``name`` opened with ``flags`` (plus ``OPEN_FLAGS``), checked to be a regular file
        owned as expected; None when it (or the directory) does not exist and ``flags`` do not create it.
        A file it creates (``O_CREAT``) gets ``mode`` and, when root creates it, the directory's owner."""
        if name not in FILE_CAPS:
            raise ValueError("%s is not a state file" % name)
        where = self.where(name)
        opened = self._directory()
        if opened is None:
            if flags & os.O_CREAT:
                raise StateFileError(self.node_path, "the state directory does not exist")
            return None
        directory, directory_info = opened
        try:
            created = False
            try:
                if flags & os.O_CREAT:
                    try:
                        fd = os.open(name, (flags | os.O_EXCL | OPEN_FLAGS), mode, dir_fd=directory)
                        created = True
                    except FileExistsError:
                        fd = os.open(name, (flags & ~os.O_CREAT) | OPEN_FLAGS, mode, dir_fd=directory)
                else:
                    fd = os.open(name, flags | OPEN_FLAGS, mode, dir_fd=directory)
            except FileNotFoundError:
                if flags & os.O_CREAT:
                    raise StateFileError(where, "vanished while it was opened; try again")
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise StateFileError(where, "is a symbolic link; root does not follow links in the state directory")
                if exc.errno in _WRONG_KIND:
                    raise StateFileError(where, "cannot be opened as a file (%s); refused" % (exc.strerror or exc))
                raise OSError(exc.errno, exc.strerror, where)  # trouble, not a refusal: a pass may retry
            try:
                if created:
                    self._own(fd, directory_info, mode)
                self._check(fd, where, directory_info)
            except BaseException:
                os.close(fd)
                raise
            return fd
        finally:
            os.close(directory)

    @staticmethod
    def _own(fd: int, directory_info: os.stat_result, mode: int) -> None:
        """A file root just created takes the directory's owner (the account's passes must replace it)."""
        if os.geteuid() == 0 and (directory_info.st_uid, directory_info.st_gid) != (0, 0):
            os.fchown(fd, directory_info.st_uid, directory_info.st_gid)
        os.fchmod(fd, mode)

    @staticmethod
    def _check(fd: int, where: str, directory_info: os.stat_result) -> os.stat_result:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(where, "is %s, not a regular file; refused" % _kind(info.st_mode))
        owner = directory_info.st_uid
        if info.st_uid not in (owner, 0):
            raise StateFileError(where, "belongs to uid %d, neither the state directory's owner (uid %d) nor root; "
                                        "refused" % (info.st_uid, owner))
        if info.st_uid == 0 and owner != 0 and info.st_nlink > 1:
            raise StateFileError(where, "is root's and has %d links, in a directory uid %d owns: a hard link to "
                                        "another file of root's; refused" % (info.st_nlink, owner))
        return info

    # -- reading ----------------------------------------------------------------------
    def read(self, name: str, cap: Optional[int] = None) -> Optional[bytes]:
        """The bytes of ``name`` (None when absent): at most its cap, else ``StateFileError``."""
        limit = FILE_CAPS.get(name, NEVER_READ) if cap is None else cap
        if limit == NEVER_READ:
            raise ValueError("%s is not read" % name)
        fd = self.open(name)
        if fd is None:
            return None
        try:
            return self._bounded(fd, self.where(name), limit)
        finally:
            os.close(fd)

    @staticmethod
    def _bounded(fd: int, where: str, limit: int) -> bytes:
        size = os.fstat(fd).st_size
        if size > limit:
            raise StateFileError(where, "is %d bytes, over its cap of %s; refused" % (size, _size(limit)))
        chunks: List[bytes] = []
        left = limit + 1
        try:
            while left > 0:
                chunk = os.read(fd, min(left, _CHUNK))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, where)
        if left <= 0:
            raise StateFileError(where, "grew past its cap of %s while it was read; refused" % _size(limit))
        return b"".join(chunks)

    def read_json(self, name: str, cap: Optional[int] = None) -> Any:
        """The JSON value of ``name``, None when absent; ``ValueError`` when it is not JSON (each file
        has its own answer to that), ``StateFileError`` past a bound."""
        content = self.read(name, cap)
        if content is None:
            return None
        return bounded_json.loads(content, self.where(name))

    def loads(self, content: Union[bytes, str], name: str) -> Any:
        """``content`` of ``name`` (or a line of it: ``name`` may say which) as bounded JSON."""
        return bounded_json.loads(content, self.where(name))

    # -- root's leftovers -------------------------------------------------------------
    def adopt(self) -> None:
        """As root: hand each state file to the directory's owner, by descriptor, when the passes' account
        changed. Root's leftovers of a root-mode install (regular, one link) go to the account that now
        owns the directory; the account's files, once the directory is root's again (the helper turned
        off), go to root: the account can no longer reach them, and the reader takes no third owner.
        Only the names above are looked at: the directory is never listed."""
        if os.geteuid() != 0:
            return
        opened = self._directory()
        if opened is None:
            return
        directory, directory_info = opened
        owner = directory_info.st_uid

        private = not directory_info.st_mode & 0o022  # no one but its owner adds files there

        def adoptable(info: os.stat_result) -> bool:
            return stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid != owner and (
                info.st_uid == 0 or (owner == 0 and private))

        try:
            for name in sorted(FILE_CAPS):
                try:
                    if not adoptable(os.stat(name, dir_fd=directory, follow_symlinks=False)):
                        continue
                    handle = os.open(name, os.O_RDONLY | OPEN_FLAGS, dir_fd=directory)
                except OSError:
                    continue  # gone, or replaced by a link meanwhile: left alone
                try:
                    if adoptable(os.fstat(handle)):
                        os.fchown(handle, owner, directory_info.st_gid)
                finally:
                    os.close(handle)
        finally:
            os.close(directory)


def read_file(path: str, cap: int, node_path: Optional[str] = None) -> Optional[bytes]:
    """``StateFiles(dirname).read(basename, cap)``: a state file given by its path (the node key's)."""
    directory, name = os.path.split(os.path.abspath(path))
    return StateFiles(directory, os.path.dirname(node_path) if node_path else None).read(name, cap)

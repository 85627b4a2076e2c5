# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's unit files and the paths they name, looked at under a node's root, for ``doctor``.

Nothing here follows a link out of ``root``: a node path is placed under it (``fsutil.join_root``),
its directory resolved and refused when that leads elsewhere (a test node's ``/`` is a directory,
and a link in it may point anywhere on the machine), and its last component is never followed when
read (``O_NOFOLLOW``). A unit file is read only when it is a regular file, with
``O_NONBLOCK`` (a FIFO answers at once) and at most ``MAX_UNIT_BYTES``; a unit that is a link to
``/dev/null`` is masked, any other link is named, not read (the role writes regular files). Its
drop-ins (``<unit>.d/*.conf`` beside it, as ``systemctl edit`` writes them) are read the same way, at
most ``MAX_DROPINS`` of them, from a listing of at most ``MAX_LISTED`` entries.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Iterable, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root

MAX_UNIT_BYTES = 64 * 1024
MAX_DROPINS = 16
MAX_LISTED = 256
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
MISSING, FILE, MASKED, UNUSABLE = "missing", "file", "masked", "unusable"


class UnitFile:
    """A unit as found: ``state`` (``MISSING``, ``FILE``, ``MASKED``, ``UNUSABLE`` with ``problem``), its
    text and its drop-ins' (``texts``, ``names``: node paths) when it is a file, and what could not be
    read of its drop-ins (``problems``)."""

    def __init__(self, name: str, node_path: str, state: str, texts: Iterable[str] = (), names: Iterable[str] = (),
                 problem: Optional[str] = None, problems: Iterable[str] = ()) -> None:
        self.name = name
        self.node_path = node_path
        self.state = state
        self.texts = list(texts)
        self.names = list(names)
        self.problem = problem
        self.problems = list(problems)


def local_path(root: str, node_path: str) -> Tuple[Optional[str], Optional[str]]:
    """``(path, problem)``: where ``node_path`` lies under ``root``, its directory resolved; ``problem``
    (and no path) when it names ``..`` out of ``root`` or its directory leads out through a link."""
    try:
        joined = join_root(root, node_path)
    except FsError as exc:
        return None, str(exc)
    base = os.path.realpath(root)
    directory = os.path.realpath(os.path.dirname(joined))
    if directory != base and not directory.startswith(base.rstrip("/") + "/"):
        return None, "%s leads out of the node's root %s (a link to %s); not followed" % (
            os.path.dirname(node_path), root, directory)
    return os.path.join(directory, os.path.basename(joined)), None


def lstat_node(root: str, node_path: str) -> Tuple[Optional[os.stat_result], Optional[str], Optional[str]]:
    """``(lstat or None when absent, path, problem)`` of ``node_path`` under ``root``, never followed."""
    path, problem = local_path(root, node_path)
    if path is None:  # local_path gives a path or a problem
        return None, None, problem
    try:
        return os.lstat(path), path, None
    except (FileNotFoundError, NotADirectoryError):
        return None, path, None
    except OSError as exc:
        return None, path, "%s cannot be looked at (%s)" % (node_path, exc.strerror or exc)


def stat_node(root: str, node_path: str) -> Tuple[Optional[os.stat_result], Optional[str]]:
    """``(stat or None when absent, problem)`` of ``node_path`` under ``root``, links followed only while
    they stay under it."""
    path, problem = local_path(root, node_path)
    if path is None:
        return None, problem
    real, base = os.path.realpath(path), os.path.realpath(root)
    if real != base and not real.startswith(base.rstrip("/") + "/"):
        return None, "%s is a link out of the node's root (to %s); not followed" % (node_path, real)
    try:
        return os.stat(real), None
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        return None, "%s cannot be looked at (%s)" % (node_path, exc.strerror or exc)


def read_bounded(path: str, cap: int = MAX_UNIT_BYTES) -> Tuple[Optional[bytes], Optional[str]]:
    """``(bytes, problem)`` of the regular file ``path``: at most ``cap`` bytes, no link followed."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "is a symbolic link; not followed"
        return None, "cannot be read (%s)" % (exc.strerror or exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "is not a regular file"
        if info.st_size > cap:
            return None, "is %d bytes, more than the %d a unit may have here; not read" % (info.st_size, cap)
        chunks: List[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            return None, "grew past %d bytes while it was read; not read" % cap
        return b"".join(chunks), None
    except OSError as exc:
        return None, "cannot be read (%s)" % (exc.strerror or exc)
    finally:
        os.close(fd)


def _text(content: bytes) -> Tuple[Optional[str], Optional[str]]:
    try:
        return content.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, "is not UTF-8 (%s)" % exc


def read_unit(root: str, directory: str, name: str) -> UnitFile:
    """The ``UnitFile`` of ``directory/name`` (node paths) under ``root``, with its drop-ins."""
    node_path = "%s/%s" % (directory.rstrip("/"), name)
    info, path, problem = lstat_node(root, node_path)
    if problem or path is None:  # no path: a problem says why
        return UnitFile(name, node_path, UNUSABLE, problem=problem)
    if info is None:
        return UnitFile(name, node_path, MISSING)
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError as exc:
            target = "? (%s)" % (exc.strerror or exc)
        if target == "/dev/null":
            return UnitFile(name, node_path, MASKED, problem="is masked (a link to /dev/null)")
        return UnitFile(name, node_path, UNUSABLE, problem="is a symbolic link (to %s); doctor reads the role's "
                                                           "units, regular files, and follows no link" % target[:200])
    content, problem = read_bounded(path)
    text = None
    if content is not None:
        text, problem = _text(content)
    if text is None:
        return UnitFile(name, node_path, UNUSABLE, problem=problem)
    texts, names, problems = [text], [node_path], []
    for dropin, dropin_text, dropin_problem in _dropins(path, node_path):
        if dropin_text is None:  # not read: a problem says why
            problems.append("%s %s" % (dropin, dropin_problem))
        else:
            texts.append(dropin_text)
            names.append(dropin)
    return UnitFile(name, node_path, FILE, texts, names, problems=problems)


def _dropins(path: str, node_path: str) -> List[Tuple[str, Optional[str], Optional[str]]]:
    """``(node path, text, problem)`` of each ``*.conf`` in ``<unit>.d``, by name, at most ``MAX_DROPINS``."""
    directory = path + ".d"
    try:
        info = os.lstat(directory)
    except OSError:
        return []
    if stat.S_ISLNK(info.st_mode):
        return [(node_path + ".d", None, "is a symbolic link; its drop-ins are not read")]
    if not stat.S_ISDIR(info.st_mode):
        return []
    names: List[str] = []
    listed = 0
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                listed += 1
                if listed > MAX_LISTED:
                    break
                if entry.name.endswith(".conf"):
                    names.append(entry.name)
    except OSError as exc:
        return [(node_path + ".d", None, "cannot be listed (%s)" % (exc.strerror or exc))]
    found: List[Tuple[str, Optional[str], Optional[str]]] = []
    for name in sorted(names)[:MAX_DROPINS]:
        content, problem = read_bounded(os.path.join(directory, name))
        text = None
        if content is not None:
            text, problem = _text(content)
        found.append(("%s.d/%s" % (node_path, name), text, problem))
    if len(names) > MAX_DROPINS or listed > MAX_LISTED:
        found.append((node_path + ".d", None, "has more drop-ins than the %d read" % MAX_DROPINS))
    return found

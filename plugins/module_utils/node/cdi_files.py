# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of the CDI spec directories, read for ``cdi-lint`` (``domain/cdi/lint.py``).

Every entry of ``/etc/cdi`` and ``/var/run/cdi`` under ``root`` that is not a directory
(runtimes skip subdirectories), by name, without following a link. Links decided: a link
is listed with ``content`` None and says so, because a runtime follows it but the target
may lie outside ``root`` (a test node's ``/`` is a temporary directory), or be a device or
a FIFO that blocks a read; the lint names it (WARN) rather than guessing. Only ``.json``
and ``.yaml`` files are read (the rest matter by name only: temporaries, damaged specs),
each with a size cap and ``O_NOFOLLOW | O_NONBLOCK``, and at most ``MAX_TOTAL_BYTES`` in all.

A spec directory that is itself a symbolic link is not read either: the CDI library
(``filepath.Walk`` from an ``lstat``) does not scan it at all, so the entry returned for
it has the name ``""`` and a ``problem`` that says so. A directory that is missing or
cannot be listed yields nothing (no files: nothing for the runtimes to load either).
"""

from __future__ import annotations

import os
import stat
from typing import List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.lint import (
    LOADED,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    SpecFile,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root

SPEC_DIRECTORIES = ("/etc/cdi", "/var/run/cdi")


def _read(path: str, size: int) -> Tuple[Optional[bytes], str]:
    """``(content, problem)``: at most one byte over ``MAX_FILE_BYTES`` (so the lint can say it is over)."""
    if size > MAX_FILE_BYTES:
        return None, "is %d bytes, over the %d checked; not checked, its devices not counted" % (size, MAX_FILE_BYTES)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, "cannot be read (%s); not checked" % (exc.strerror or exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the lstat
            return None, "is not a regular file; not checked"
        chunks: List[bytes] = []
        total = 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks), ""
    except OSError as exc:
        return None, "cannot be read (%s); not checked" % (exc.strerror or exc)
    finally:
        os.close(fd)


def _entries(local: str) -> List[Tuple[str, os.stat_result]]:
    """Up to ``MAX_FILES + 1`` ``(name, lstat)`` of ``local`` that are not directories, sorted by name (of
    those seen: past the bound the listing stops, and the lint says there were more)."""
    found: List[Tuple[str, os.stat_result]] = []
    with os.scandir(local) as listing:
        for entry in listing:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            if stat.S_ISDIR(info.st_mode):
                continue
            found.append((entry.name, info))
            if len(found) > MAX_FILES:
                break
    return sorted(found, key=lambda item: item[0])


def read_spec_dirs(root: str, directories: Sequence[str] = SPEC_DIRECTORIES) -> List[SpecFile]:
    """``SpecFile`` for each entry of ``directories`` (node paths, lowest priority first, as the CDI library
    scans them) under ``root`` that is not a directory, at most ``MAX_FILES`` + 1 in all."""
    found: List[SpecFile] = []
    budget = MAX_TOTAL_BYTES
    for directory in directories:
        try:
            local = join_root(root, directory)
            if stat.S_ISLNK(os.lstat(local).st_mode):
                found.append(SpecFile(directory, "", None, "is a symbolic link (to %s); the CDI library does not "
                                                           "scan it, so runtimes load none of its specs"
                                                           % os.readlink(local)[:200]))
                continue
            entries = _entries(local)
        except (FsError, OSError):
            continue
        for name, info in entries:
            if len(found) > MAX_FILES:
                return found
            path = os.path.join(local, name)
            if stat.S_ISLNK(info.st_mode):
                try:
                    target = os.readlink(path)[:200]
                except OSError:
                    target = "?"
                found.append(SpecFile(directory, name, None, "is a symbolic link (to %s); runtimes follow it, the "
                                                             "lint does not" % target))
            elif not name.endswith(LOADED):
                found.append(SpecFile(directory, name, None, "not read: runtimes do not load it"))
            elif not stat.S_ISREG(info.st_mode):
                found.append(SpecFile(directory, name, None, "is not a regular file; runtimes that read it may "
                                                             "block or fail; not checked"))
            elif MAX_FILE_BYTES >= info.st_size > budget:
                found.append(SpecFile(directory, name, None, "not checked: the files before it already hold "
                                                             "nearly %d bytes of specs, the most checked"
                                                             % MAX_TOTAL_BYTES))
            else:
                content, problem = _read(path, info.st_size)
                budget -= len(content) if content is not None else 0
                found.append(SpecFile(directory, name, content, problem))
    return found

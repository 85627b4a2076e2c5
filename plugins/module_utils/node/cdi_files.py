# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of the CDI spec directories, read for ``cdi-lint`` (``domain/cdi_lint.py``).

Every regular file of ``/etc/cdi`` and ``/var/run/cdi`` under ``root``, read with a size
cap and without following a link (a link is listed, unreadable, with why: a runtime
would follow it, so the lint names it rather than guessing what it points at).
"""

from __future__ import annotations

import os
import stat

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_lint import MAX_FILE_BYTES, MAX_FILES, SpecFile
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root

SPEC_DIRECTORIES = ("/etc/cdi", "/var/run/cdi")


def _read(path):
    """``(content, problem)``: at most one byte over ``MAX_FILE_BYTES``, so an oversized file shows as such."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not a regular file"
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), ""
    finally:
        os.close(fd)


def read_spec_dirs(root, directories=SPEC_DIRECTORIES):
    """``SpecFile`` for each entry of ``directories`` under ``root`` that is not a directory, by name,
    at most ``MAX_FILES`` + 1 (so the lint can say there were more)."""
    found = []
    for directory in directories:
        try:
            local = join_root(root, directory)
            names = sorted(os.listdir(local))
        except (FsError, OSError):
            continue
        for name in names:
            if len(found) > MAX_FILES:
                return found
            path = os.path.join(local, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                continue
            if stat.S_ISLNK(info.st_mode):
                found.append(SpecFile(directory, name, None, "a symbolic link (to %s)" % os.readlink(path)[:200]))
                continue
            content, problem = _read(path)
            found.append(SpecFile(directory, name, content, problem))
    return found

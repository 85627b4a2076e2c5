# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's installed library: the collection's ``module_utils`` that the role bcd.devices.bcd_holds
installs under ``<prefix>/lib/bcd-holds`` for ``bcd-holds`` and the root helper, and that a module may run
instead of the copy AnsiballZ ships (docs/performance.md, "The node library").

A module runs it only when it is exactly the controller's code and only root can change it:

* every ``*.py`` under it matches the controller's collection by content: ``library_digest`` on both
  sides, computed by the controller from its own collection and passed in (never a version string);
* the tree holds only directories and regular files, no links, every one owned by root and neither
  group- nor other-writable; nothing Python could import that the digest does not cover (a ``.pyc``
  outside ``__pycache__``, an extension module);
* every directory above it is root's and not writable by others (or sticky, like /tmp).

``refusal`` says why it may not run it, in one line for the module's warning, or None. Standard library
only, and imports nothing of the collection: the module that imports this ships it alone (AnsiballZ ships
whatever a module imports, see plugins/modules/node_library.py). It compiles on Python 3.8."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import stat
import sys
import types

PACKAGE = "ansible_collections.bcd.devices.plugins.module_utils"
# Where the role installs it, under <prefix>/lib/bcd-holds (roles/bcd_holds/vars/main.yml)
TREE = "ansible_collections/bcd/devices/plugins/module_utils"
DEFAULT_LIBRARY = "/usr/local/lib/bcd-holds"
# Bounds: the collection has about a hundred files; a tree far larger is not the collection's.
MAX_ENTRIES = 4096
MAX_FILE_BYTES = 16 * 1024 * 1024
# What Python imports besides source: a file of these outside __pycache__ is code the digest does not cover.
_OTHER_CODE = tuple(suffix for suffix in importlib.machinery.all_suffixes() if suffix != ".py")


class _Refused(Exception):
    """The node library may not run; the message says why. Private: ``refusal`` turns it into its answer (this
    file imports nothing of the collection, so not even its ``BcdError``)."""


def library_path(root, library):
    """The module_utils directory of the library installed at ``library`` (a node path) under ``root``."""
    return os.path.join(root or "/", library.lstrip("/"), TREE)


def _file_digest(path, size, follow=False):
    """The SHA-256 of the regular file at ``path``, read in one call when it is ``size`` bytes (lstat's; a short
    read of a regular file is its end); more reads only if it grew meanwhile, bounded by ``MAX_FILE_BYTES``.
    A link is not followed unless ``follow`` (the controller's own tree)."""
    digest = hashlib.sha256()
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    fd = os.open(path, flags)
    try:
        want, total = size + 1, 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, want)
            digest.update(chunk)
            total += len(chunk)
            if len(chunk) < want:
                break
            want = 1 << 16
    finally:
        os.close(fd)
    if total > MAX_FILE_BYTES:
        raise _Refused("%s is larger than %d bytes" % (path, MAX_FILE_BYTES))
    return digest.hexdigest()


def library_digest(directory, checked=None):
    """One SHA-256 over every ``*.py`` under ``directory``: its path relative to it and its content's digest,
    sorted by path. ``checked(path, lstat_result)`` is called for every entry of the tree first (the node's
    ownership checks); the controller calls it without.

    Every module run through the node library computes it, so it walks once with ``scandir`` (each entry's
    lstat from its ``DirEntry``), names each file by slicing rather than ``os.path.relpath``, and reads each
    file in one call: the same value as a plain walk, in about two thirds of the time (docs/performance.md)."""
    lines = []
    count = 0
    skip = len(directory.rstrip(os.sep)) + 1
    pending = [directory]
    while pending:
        top = pending.pop()
        with os.scandir(top) as listing:  # sorted: the same first refusal, every run
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            count += 1
            if count > MAX_ENTRIES:
                raise _Refused("%s has more than %d entries" % (directory, MAX_ENTRIES))
            info = entry.stat(follow_symlinks=False)
            if checked is not None:
                checked(entry.path, info)
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
            elif entry.name.endswith(".py") and (stat.S_ISREG(info.st_mode) or (checked is None and entry.is_file())):
                if info.st_size > MAX_FILE_BYTES:
                    raise _Refused("%s is larger than %d bytes" % (entry.path, MAX_FILE_BYTES))
                lines.append("%s\0%s\n" % (entry.path[skip:], _file_digest(entry.path, info.st_size, checked is None)))
    lines.sort()
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def _owned_by(info, owner):
    return info.st_uid == owner


def _entry_check(owner):
    def check(path, info):
        if stat.S_ISLNK(info.st_mode):
            raise _Refused("%s is a link" % path)
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            raise _Refused("%s is neither a file nor a directory" % path)
        if not _owned_by(info, owner):
            raise _Refused("%s is owned by uid %d, not root" % (path, info.st_uid))
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise _Refused("%s is writable by group or others (mode %04o)" % (path, stat.S_IMODE(info.st_mode)))
        name = os.path.basename(path)
        if (stat.S_ISREG(info.st_mode) and name.endswith(_OTHER_CODE)
                and os.path.basename(os.path.dirname(path)) != "__pycache__"):
            raise _Refused("%s is code the digest does not cover" % path)
    return check


def _check_ancestors(directory, owner):
    """Every directory above ``directory`` (links resolved: only their owner could change them) is root's and
    not writable by others, unless sticky: no other account can move the tree away or put another in its place."""
    parent = os.path.dirname(directory)
    while True:
        info = os.lstat(parent)
        if not _owned_by(info, owner):
            raise _Refused("%s is owned by uid %d, not root" % (parent, info.st_uid))
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            raise _Refused("%s is writable by group or others (mode %04o)" % (parent, stat.S_IMODE(info.st_mode)))
        if parent == os.path.dirname(parent):
            return
        parent = os.path.dirname(parent)


def refusal(directory, digest, owner=0):
    """Why the library at ``directory`` (its module_utils) may not run, or None when it is ``digest``'s code
    and only ``owner`` (root; the tests pass another) can change it."""
    try:
        real = os.path.realpath(directory)
        info = os.lstat(real)
        if not stat.S_ISDIR(info.st_mode):
            return "%s is not a directory" % directory
        _check_ancestors(real, owner)
        _entry_check(owner)(real, info)
        found = library_digest(real, _entry_check(owner))
    except _Refused as exc:
        return str(exc)
    except FileNotFoundError:
        return "%s is not installed (the role bcd.devices.bcd_holds installs it)" % directory
    except OSError as exc:
        return "%s cannot be read: %s" % (directory, exc.strerror or exc)
    if found != digest:
        return "%s is not the controller's code (its files differ from the collection's: another version)" % directory
    return None


def use_library(directory):
    """Make ``directory`` the collection's ``module_utils`` for every import that follows, with no bytecode
    written (its root-owned ``__pycache__`` is read where it matches the source). Call after ``refusal``
    returned None."""
    real = os.path.realpath(directory)
    sys.dont_write_bytecode = True
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    package = types.ModuleType(PACKAGE)
    spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [real]
    package.__spec__ = spec
    package.__path__ = [real]
    package.__package__ = PACKAGE
    sys.modules[PACKAGE] = package
    return real

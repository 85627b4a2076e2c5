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

import glob
import hashlib
import importlib.machinery
import json
import os
import pwd
import stat
import sys
import types
from typing import Any, Callable, Dict, List, Optional

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


def library_path(root: str, library: str) -> str:
    """The module_utils directory of the library installed at ``library`` (a node path) under ``root``."""
    return os.path.join(root or "/", library.lstrip("/"), TREE)


def _file_digest(path: str, size: int, follow: bool = False) -> str:
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


def library_digest(directory: str, checked: Optional[Callable[[str, os.stat_result], None]] = None) -> str:
    """One SHA-256 over every ``*.py`` under ``directory``: its path relative to it and its content's digest,
    sorted by path. ``checked(path, lstat_result)`` is called for every entry of the tree first (the node's
    ownership checks); the controller calls it without.

    Every module run through the node library computes it, so it walks once with ``scandir`` (each entry's
    lstat from its ``DirEntry``), names each file by slicing rather than ``os.path.relpath``, and reads each
    file in one call: the same value as a plain walk, in about two thirds of the time (docs/performance.md)."""
    lines: List[str] = []
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


def _owned_by(info: os.stat_result, owner: int) -> bool:
    return info.st_uid == owner


def _entry_check(owner: int) -> Callable[[str, os.stat_result], None]:
    def check(path: str, info: os.stat_result) -> None:
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


def _check_ancestors(directory: str, owner: int) -> None:
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


def refusal(directory: str, digest: str, owner: int = 0) -> Optional[str]:
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


def use_library(directory: str) -> str:
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


# -- the role's install, recorded and checked (docs/performance.md, "The role's re-run") ----------------------

# The manifest bcd.devices.bcd_holds writes after a full install (``bcd-holds installed --record``) and that the
# role's later runs check before anything else (``install_refusal``, through the node library module): what the
# role installed, as it found it on the node once everything was in place.
MANIFEST_FORMAT = 1
MAX_MANIFEST_BYTES = 256 * 1024
MAX_MANIFEST_ENTRIES = 512
ENTRY_KINDS = ("file", "dir", "link", "absent")


def _read_manifest(path: str, owner: int) -> Dict[str, Any]:
    """The manifest at ``path`` as a dict: a regular file of ``owner``'s (root's) that no one else may write, read
    without following a link and at most ``MAX_MANIFEST_BYTES``."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _Refused("%s is missing (the role has not recorded a complete install)" % path)
    except OSError as exc:
        raise _Refused("%s cannot be read: %s" % (path, exc.strerror or exc))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("%s is not a regular file" % path)
        if not _owned_by(info, owner) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise _Refused("%s is not root's alone (uid %d, mode %04o)" % (path, info.st_uid, stat.S_IMODE(info.st_mode)))
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST_BYTES:
        raise _Refused("%s is larger than %d bytes" % (path, MAX_MANIFEST_BYTES))
    try:
        manifest: object = json.loads(data.decode("utf-8"))
    except ValueError:
        raise _Refused("%s is not the role's manifest (not JSON)" % path)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT \
            or not isinstance(manifest.get("entries"), list) or len(manifest["entries"]) > MAX_MANIFEST_ENTRIES:
        raise _Refused("%s is not a manifest of format %d" % (path, MANIFEST_FORMAT))
    return manifest


def _account_refusal(account: Any) -> Optional[str]:
    """Why the recorded account no longer stands as recorded, or None (``account`` None: none recorded; any
    JSON value the manifest holds, which must be ``{name, uid, gid}``)."""
    if account is None:
        return None
    try:
        name, uid, gid = account["name"], account["uid"], account["gid"]
        found = pwd.getpwnam(name)
    except (KeyError, TypeError):
        return "the account %r the role created is missing" % (account.get("name") if isinstance(account, dict) else account)
    if (found.pw_uid, found.pw_gid) != (uid, gid):
        return "the account %s is uid %d gid %d, not %d %d as installed" % (name, found.pw_uid, found.pw_gid, uid, gid)
    return None


def _entry_refusal(entry: object) -> Optional[str]:
    """Why one recorded entry no longer stands as recorded, or None."""
    if not isinstance(entry, dict) or entry.get("kind") not in ENTRY_KINDS or not isinstance(entry.get("path"), str):
        return "the manifest has an entry that is not the role's: %.200r" % (entry,)
    path, kind = entry["path"], entry["kind"]
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None if kind == "absent" else "%s is missing" % path
    except OSError as exc:
        return "%s cannot be read: %s" % (path, exc.strerror or exc)
    if kind == "absent":
        return "%s is there, and the role removed it" % path
    if kind == "link":
        if not stat.S_ISLNK(info.st_mode) or os.readlink(path) != entry.get("target"):
            return "%s is not the link to %s the role's enabling made" % (path, entry.get("target"))
        return None
    wanted = stat.S_ISREG if kind == "file" else stat.S_ISDIR
    if not wanted(info.st_mode):
        return "%s is not the %s the role installed" % (path, "file" if kind == "file" else "directory")
    if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != (entry.get("uid"), entry.get("gid"), entry.get("mode")):
        return "%s is uid %d gid %d mode %04o, not as installed" % (path, info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))
    if kind == "file":
        if info.st_size > MAX_FILE_BYTES:
            return "%s is larger than %d bytes" % (path, MAX_FILE_BYTES)
        if _file_digest(path, info.st_size) != entry.get("sha256"):
            return "%s differs from what the role installed" % path
    return None


def install_refusal(manifest_path: str, digest: Optional[str], owner: int = 0) -> Optional[str]:
    """Why the node's install is not the one the role would make now, or None when it is: the manifest at
    ``manifest_path`` records ``digest`` (the controller's digest of everything the role's install reads: its
    variables, its files, the library's code; None: any) and every file, directory, link and absence it recorded
    is still as recorded (content, owner, mode), and the account it created still stands."""
    try:
        manifest = _read_manifest(manifest_path, owner)
    except _Refused as exc:
        return str(exc)
    if digest is not None and manifest.get("digest") != digest:
        return "the install was made by another version of the role or with other variables"
    why = _account_refusal(manifest.get("account"))
    if why is not None:
        return why
    for entry in manifest["entries"]:
        why = _entry_refusal(entry)
        if why is not None:
            return why
    return None


def recorded_entry(path: str, kind: str) -> Dict[str, Any]:
    """The manifest's entry for ``path`` as it is on the node now: ``kind`` file, dir or absent as the role says,
    a link's target, a file's content digest, owner and mode."""
    if kind == "absent":
        return {"path": path, "kind": "absent"}
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return {"path": path, "kind": "link", "target": os.readlink(path)}
    entry: Dict[str, Any] = {"path": path, "kind": kind, "uid": info.st_uid, "gid": info.st_gid, "mode": stat.S_IMODE(info.st_mode)}
    if kind == "file":
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("%s is not a regular file" % path)
        entry["sha256"] = _file_digest(path, info.st_size)
    elif not stat.S_ISDIR(info.st_mode):
        raise _Refused("%s is not a directory" % path)
    return entry


def install_manifest(spec: object) -> Dict[str, Any]:
    """The manifest of the install ``spec`` describes (``bcd-holds installed --record``): ``digest``, the
    ``account`` by name (or None), and node paths by what the role made of them: ``files``, ``dirs``, ``absent``,
    and ``link_globs`` (patterns of the links systemd's enabling made, each recorded with its target). Raises
    ValueError when the spec or a path is not what the role installs."""
    if not isinstance(spec, dict) or not isinstance(spec.get("digest"), str):
        raise ValueError("the install record needs a digest")
    entries: List[Dict[str, Any]] = []
    try:
        for kind, key in (("file", "files"), ("dir", "dirs"), ("absent", "absent")):
            for path in spec.get(key) or ():
                if not isinstance(path, str) or not path.startswith("/"):
                    raise ValueError("%s: %.200r is not an absolute path" % (key, path))
                entries.append(recorded_entry(path, kind))
        for pattern in spec.get("link_globs") or ():
            if not isinstance(pattern, str) or not pattern.startswith("/"):
                raise ValueError("link_globs: %.200r is not an absolute pattern" % (pattern,))
            entries.extend(recorded_entry(path, "link") for path in sorted(glob.glob(pattern))
                           if os.path.islink(path))
    except _Refused as exc:
        raise ValueError(str(exc))
    except OSError as exc:
        raise ValueError("%s: %s" % (exc.filename, exc.strerror or exc))
    if len(entries) > MAX_MANIFEST_ENTRIES:
        raise ValueError("the install record has more than %d entries" % MAX_MANIFEST_ENTRIES)
    account = None
    if spec.get("account"):
        try:
            found = pwd.getpwnam(spec["account"])
        except (KeyError, TypeError):
            raise ValueError("the account %.100r is missing" % (spec["account"],))
        account = {"name": found.pw_name, "uid": found.pw_uid, "gid": found.pw_gid}
    return {"format": MANIFEST_FORMAT, "digest": spec["digest"], "account": account, "entries": entries}

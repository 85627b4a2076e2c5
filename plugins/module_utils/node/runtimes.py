# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Finding the node's container runtimes, without starting anything.

``detect_runtimes`` looks for ``containerd``, ``dockerd`` (the daemon: the ``docker``
CLI's version is the client's), ``podman`` and ``crio`` in the usual directories under
``root`` and asks each ``--version``: no shell, no stdin, a minimal environment, a
timeout and a cap on what is read. A binary another account could have replaced
(writable by group or others, owned by neither root nor this user, or a link leading
out of ``root``) is not run; it is named in a warning instead.

``cdi_enabled`` reads whether CDI is switched on where that is a setting: containerd's
CRI plugin ``enable_cdi`` (off by default before 2.0) and Docker's ``features.cdi``
(needed before 28.2). Podman and CRI-O load CDI specs whenever they exist.
"""

from __future__ import annotations

import json
import os
import re
import select
import stat
import subprocess
import time

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_runtimes import runtime, version_from_output, version_key
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, join_root

SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = (("containerd", "containerd"), ("docker", "dockerd"), ("podman", "podman"), ("cri-o", "crio"))
MAX_OUTPUT = 64 * 1024
MAX_CONFIG = 1024 * 1024
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def run_version(argv, timeout):
    """``(rc, output)`` of ``argv``, its stdout and stderr read up to ``MAX_OUTPUT``; killed at ``timeout``."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=ENV, close_fds=True, start_new_session=True)
    chunks, size, deadline = [], 0, time.monotonic() + timeout
    try:
        while size < MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, timeout)
            ready, _w, _x = select.select([proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), MAX_OUTPUT - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        rc = proc.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return rc, b"".join(chunks).decode("utf-8", "replace")


def _trusted(root, path):
    """Why the binary at real path ``path`` must not be run, or None."""
    try:
        real = os.path.realpath(path)
        base = os.path.realpath(root)
        if base != "/" and not real.startswith(base.rstrip("/") + "/"):
            return "it leads out of %s" % root
        info = os.stat(real)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "it is writable by group or others"
    if info.st_uid not in (0, os.geteuid()):
        return "it is owned by uid %d" % info.st_uid
    if not info.st_mode & stat.S_IXUSR:
        return "it is not executable"
    return None


def find_binary(root, binary):
    """``(real path, node path)`` of ``binary`` in ``SEARCH_DIRS`` under ``root``, or None."""
    for directory in SEARCH_DIRS:
        node_path = "%s/%s" % (directory, binary)
        try:
            path = join_root(root, node_path)
        except FsError:
            continue
        if os.path.lexists(path):
            return path, node_path
    return None


def detect_runtimes(root="/", runner=None, timeout=5.0):
    """``(runtimes, warnings)``: each runtime found under ``root`` with its version (``cdi_runtimes.Runtime``,
    source ``auto``); a binary that is not run or says no version gives a warning, not an error."""
    runner = runner or run_version
    found, warnings = [], []
    for name, binary in BINARIES:
        located = find_binary(root, binary)
        if located is None:
            continue
        path, node_path = located
        why = _trusted(root, path)
        if why is not None:
            warnings.append("container runtime %s is not asked its version: %s" % (node_path, why))
            continue
        try:
            rc, output = runner([path, "--version"], timeout)
        except subprocess.TimeoutExpired:
            warnings.append("container runtime %s --version did not answer within %g s" % (node_path, timeout))
            continue
        except OSError as exc:
            warnings.append("container runtime %s cannot be run: %s" % (node_path, exc.strerror or exc))
            continue
        try:
            if rc != 0:
                raise ValueError("it exited %s" % rc)
            version = version_from_output(name, output)
            version_key(version)
        except ValueError as exc:
            warnings.append("container runtime %s: its version cannot be read: %s" % (node_path, exc))
            continue
        found.append(runtime(name, version, path=node_path, source="auto"))
    return found, warnings


def _read_config(root, node_path):
    """A configuration file's text (capped), or None when there is none; a link is not followed."""
    try:
        path = join_root(root, node_path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (FsError, OSError):
        return None
    try:
        return os.read(fd, MAX_CONFIG).decode("utf-8", "replace")
    finally:
        os.close(fd)


_ENABLE_CDI_RE = re.compile(r"^\s*enable_cdi\s*=\s*(true|false)\b", re.M)


def cdi_enabled(root, found):
    """``(enabled, why)`` for runtime ``found``: True or False when its configuration says (or its default
    does), None when it cannot tell; ``why`` names the setting and what to do."""
    key = version_key(found.version)
    if found.name == "containerd":
        config = _read_config(root, "/etc/containerd/config.toml")
        match = _ENABLE_CDI_RE.search(config or "")
        if match:
            on = match.group(1) == "true"
            return on, ("enable_cdi = %s in /etc/containerd/config.toml" % match.group(1)
                        + ("" if on else " (set it to true in the CRI plugin's section)"))
        if key >= (2, 0, 0):
            return True, "containerd 2 enables CDI by default"
        return False, "containerd 1.7 has CDI off unless enable_cdi = true is set in /etc/containerd/config.toml"
    if found.name == "docker":
        if key >= (28, 2, 0):
            return True, "Docker enables CDI by default from 28.2"
        config = _read_config(root, "/etc/docker/daemon.json")
        try:
            features = (json.loads(config) if config else {}).get("features") or {}
        except (ValueError, AttributeError):
            return None, "/etc/docker/daemon.json is not valid JSON"
        if isinstance(features, dict) and features.get("cdi") is True:
            return True, "features.cdi is true in /etc/docker/daemon.json"
        return False, 'set "features": {"cdi": true} in /etc/docker/daemon.json and restart dockerd'
    return True, "%s loads CDI specs whenever they exist" % found.name

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Finding the node's container runtimes, without starting anything.

``detect_runtimes`` looks for ``containerd``, ``dockerd`` (the daemon: the ``docker``
CLI's version is the client's), ``podman`` and ``crio`` in the usual directories under
``root`` and asks each ``--version``: no shell, stdin from /dev/null, a minimal
environment, a timeout and a cap on what is read. Links are resolved as the node sees
them: inside ``root``, an absolute target taken under ``root``, never above it. A binary
another account could have replaced (not a regular file, writable by group or others, or
owned by neither root nor this user) is not run; it is named in a warning instead.

``cdi_enabled`` reads whether CDI is switched on where that is a setting: containerd's
CRI plugin ``enable_cdi`` (default false in 1.7, true from 2.0: ``config_unix.go``'s
defaults at v1.7.27 and v2.0.0) and Docker's ``features.cdi`` (needed before 28.2; from
28.2 on only an explicit false turns it off: ``cdiEnabled`` in ``cmd/dockerd/daemon.go``
at v28.2.0). Podman resolves CDI device names whenever it is asked for one, and CRI-O
configures its CDI cache from ``cdi_spec_dirs`` with no switch to turn it off
(``pkg/config/config.go`` at v1.31.0).
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import signal
import stat
import subprocess
import time
from typing import Callable, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import (
    Runtime,
    runtime,
    version_from_output,
    version_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

__all__ = ["BINARIES", "SEARCH_DIRS", "cdi_enabled", "detect_runtimes", "resolve_in_root", "run_version"]

SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = (("containerd", "containerd"), ("docker", "dockerd"), ("podman", "podman"), ("cri-o", "crio"))
MAX_OUTPUT = 64 * 1024
MAX_CONFIG = 1024 * 1024
MAX_LINKS = 40  # as Linux's path walk allows
# A runner: ``(argv, timeout) -> (rc, output)`` (``run_version``'s).
VersionRunner = Callable[[List[str], float], Tuple[int, str]]
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def resolve_in_root(root: str, node_path: str) -> str:
    """The path on this machine that ``node_path`` (absolute, as the node sees it) leads to, every
    link followed as the node would follow it: an absolute target is taken under ``root`` and ``..``
    never climbs above it. Raises OSError (ENOENT, ELOOP, ...) like a path walk would."""
    base = os.path.abspath(root)
    parts = [p for p in node_path.split("/") if p]
    resolved: List[str] = []  # components under base, each an existing non-link (but the last may not exist)
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = os.path.join(base, *(resolved + [part]))
        try:
            info = os.lstat(here)
        except OSError:
            if parts:
                raise
            resolved.append(part)  # the last component need not exist; the caller finds out
            break
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), node_path)
            target = os.readlink(here)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if parts and not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), node_path)
        resolved.append(part)
    return os.path.join(base, *resolved) if resolved else base


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def run_version(argv: Sequence[str], timeout: float) -> Tuple[int, str]:
    """``(rc, output)`` of ``argv``, stdout and stderr together, read up to ``MAX_OUTPUT`` bytes; the
    process (and its session) is killed at ``timeout`` (``subprocess.TimeoutExpired``)."""
    # bcd-holds runs this code too, with no AnsibleModule and so no run_command (ansible-test 2.21's pylint).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                            stderr=subprocess.STDOUT, env=dict(ENV), cwd="/", close_fds=True, start_new_session=True)
    stdout = proc.stdout
    if stdout is None:  # stdout=PIPE: for the type checker
        raise AssertionError("a piped stdout is never None")
    chunks: List[bytes] = []
    size, deadline = 0, time.monotonic() + timeout
    try:
        while size < MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, timeout)
            ready, _w, _x = select.select([stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(stdout.fileno(), MAX_OUTPUT - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        rc = proc.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        stdout.close()
    return rc, b"".join(chunks).decode("utf-8", "replace")


def _why_not_run(root: str, node_path: str) -> Tuple[Optional[str], Optional[str]]:
    """``(path to run, None)``, or ``(None, why the binary at node path must not be run)``."""
    try:
        path = resolve_in_root(root, node_path)
        info = os.stat(path)
    except OSError as exc:
        return None, "it cannot be resolved under %s: %s" % (root, exc.strerror or exc)
    if not stat.S_ISREG(info.st_mode):
        return None, "it is not a regular file"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None, "it is writable by group or others"
    if info.st_uid not in (0, os.geteuid()):
        return None, "it is owned by uid %d, neither root nor this user" % info.st_uid
    if not info.st_mode & stat.S_IXUSR:
        return None, "it is not executable"
    return path, None


def find_binary(root: str, binary: str) -> Optional[str]:
    """The node path of the first ``binary`` in ``SEARCH_DIRS`` under ``root`` (a link counts, even a
    broken one: the caller says why it is not run), or None."""
    for directory in SEARCH_DIRS:
        node_path = "%s/%s" % (directory, binary)
        try:
            os.lstat(resolve_in_root(root, directory) + "/" + binary)
        except OSError:
            continue
        return node_path
    return None


def detect_runtimes(root: str = "/", runner: Optional[VersionRunner] = None,
                    timeout: float = 5.0) -> Tuple[List[Runtime], List[str]]:
    """``(runtimes, warnings)``: each runtime found under ``root`` with its version
    (``cdi_runtimes.Runtime``, source ``auto``, path the node path asked); a binary that is not run,
    fails, hangs past ``timeout`` or prints no version gives a warning naming it, never an exception.
    ``runner``: ``(argv, timeout) -> (rc, output)``, ``run_version`` by default."""
    runner = runner or run_version
    found: List[Runtime] = []
    warnings: List[str] = []
    for name, binary in BINARIES:
        node_path = find_binary(root, binary)
        if node_path is None:
            continue
        path, why = _why_not_run(root, node_path)
        if path is None:  # why says why
            warnings.append("container runtime %s is not asked its version: %s" % (node_path, why))
            continue
        try:
            rc, output = runner([path, "--version"], timeout)
        except subprocess.TimeoutExpired:
            warnings.append("container runtime %s --version did not answer within %g s" % (node_path, timeout))
            continue
        except (OSError, subprocess.SubprocessError) as exc:
            warnings.append("container runtime %s cannot be run: %s" % (node_path, getattr(exc, "strerror", None)
                                                                        or exc))
            continue
        try:
            if rc != 0:
                raise ValueError("it exited %s" % rc)
            version = version_from_output(name, output)
            found.append(runtime(name, version, path=node_path, source="auto"))
        except ValueError as exc:
            warnings.append("container runtime %s: its version cannot be read: %s" % (node_path, exc))
    return found, warnings


# --- whether CDI is switched on ----------------------------------------------------------------

def _read_config(root: str, node_path: str) -> Tuple[Optional[str], Optional[str]]:
    """``(text, None)``, ``(None, None)`` when the file is not there, or ``(None, why)`` when it is
    there but cannot be read (not a regular file, over ``MAX_CONFIG``, unreadable)."""
    try:
        path = resolve_in_root(root, node_path)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None, None
        return None, "%s cannot be read: %s" % (node_path, exc.strerror or exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "%s is not a regular file" % node_path
        data = os.read(fd, MAX_CONFIG + 1)
        if len(data) > MAX_CONFIG:
            return None, "%s is larger than %d bytes" % (node_path, MAX_CONFIG)
    except OSError as exc:
        return None, "%s cannot be read: %s" % (node_path, exc.strerror or exc)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace"), None


CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
# The CRI plugin's table: config version 1 ("cri"), 2 ("io.containerd.grpc.v1.cri"), 3 (containerd 2).
_CRI_TABLES = ("plugins.cri", "plugins.io.containerd.grpc.v1.cri", "plugins.io.containerd.cri.v1.runtime")
_TABLE_RE = lazy_pattern(r"^\s*\[([^\[\]]+)\]\s*(?:#.*)?$")
_KEY_RE = lazy_pattern(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=\s*(true|false)\s*(?:#.*)?$")
_IMPORTS_RE = lazy_pattern(r"^\s*imports\s*=", re.M)


def _toml_key(text: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in text.split("."))


def _containerd_enable_cdi(text: str) -> Optional[str]:
    """``"true"``/``"false"`` as the CRI plugin's ``enable_cdi`` reads in ``text``, or None. A line-based
    read: table headers and ``key = bool`` lines, dotted keys allowed; enough for what containerd's
    own ``config default`` and its documentation write."""
    table, value = "", None
    for line in text.splitlines():
        header = _TABLE_RE.match(line)
        if header:
            table = _toml_key(header.group(1))
            continue
        pair = _KEY_RE.match(line)
        if not pair:
            continue
        key = _toml_key(pair.group(1))
        full = "%s.%s" % (table, key) if table else key
        if full in tuple(t + ".enable_cdi" for t in _CRI_TABLES):
            value = pair.group(2)
    return value


def cdi_enabled(root: str, found: Runtime) -> Tuple[Optional[bool], str]:
    """``(enabled, why)`` for ``found`` (a ``Runtime``): True or False when its configuration says (or
    its default does), None when it cannot tell; ``why`` names the setting, and what to do when off."""
    key = version_key(found.version)
    if found.name == "containerd":
        default = key >= (2, 0, 0)
        text, why = _read_config(root, CONTAINERD_CONFIG)
        if why:
            return None, why
        setting = _containerd_enable_cdi(text or "")
        if setting is not None:
            on = setting == "true"
            return on, ("enable_cdi = %s in %s" % (setting, CONTAINERD_CONFIG)
                        + ("" if on else " (set it to true in the CRI plugin's section and restart containerd)"))
        if text and _IMPORTS_RE.search(text):
            return None, ("%s imports other files, which are not read; containerd %s has CDI %s unless one "
                          "sets enable_cdi" % (CONTAINERD_CONFIG, found.version, "on" if default else "off"))
        if default:
            return True, "containerd 2 enables CDI by default"
        return False, ("containerd 1.7 has CDI off unless enable_cdi = true is set in %s" % CONTAINERD_CONFIG)
    if found.name == "docker":
        default = key >= (28, 2, 0)
        text, why = _read_config(root, DOCKER_CONFIG)
        if why:
            return None, why
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return None, "%s is not valid JSON" % DOCKER_CONFIG
        features = data.get("features") if isinstance(data, dict) else None
        cdi = features.get("cdi") if isinstance(features, dict) else None
        if isinstance(cdi, bool):
            return cdi, ("features.cdi is %s in %s" % ("true" if cdi else "false", DOCKER_CONFIG)
                         + ("" if cdi else ' (set "features": {"cdi": true} and restart dockerd)'))
        if default:
            return True, "Docker enables CDI by default from 28.2"
        return False, ('Docker before 28.2 has CDI off: set "features": {"cdi": true} in %s and restart dockerd'
                       % DOCKER_CONFIG)
    if found.name == "podman":
        return True, "podman loads CDI specs whenever a CDI device is asked for"
    if found.name == "cri-o":
        return True, "CRI-O loads CDI specs from its cdi_spec_dirs, with no setting to turn that off"
    return None, "%s: not a runtime this check knows" % found.name

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find NVIDIA's CDI spec on the node and read it (parsed by ``domain/cdi/vendor.py``).

Which file is used:

* ``<root>/etc/cdi`` and ``<root>/var/run/cdi`` are scanned for ``*.json``,
  ``*.yaml`` and ``*.yml`` (dotfiles included, as runtimes load them); our own
  ``bcd-*.json`` files and specs of another ``kind`` are skipped.
* CDI gives ``/var/run/cdi`` priority over ``/etc/cdi`` (a runtime resolves a
  device found in both from ``/var/run/cdi``), so an NVIDIA spec there wins
  over any in ``/etc/cdi``. Within one directory the first file by name is
  used, with a warning: runtimes drop a device name defined by two files of
  one directory from both.
* With a probe (the host), the spec that wins is checked against the node
  (``domain/cdi/staleness.py``): the spec returned keeps only the edits that
  are true there, and says what is stale. With the node's inventory too, its
  ``MIG-`` devices are compared with the node's MIG instances.
* A WSL2 spec has a single device, ``all`` (backed by ``/dev/dxg``); it then
  stands for every GPU, and MIG devices have no edits.
* A spec file is opened without waiting and read to at most ``MAX_SPEC_BYTES``: a FIFO,
  device or socket in its place, a larger file, or one nested deeper than ``MAX_DEPTH``,
  is a warning, never a pass that hangs or takes seconds.
* A long-lived reader (the root helper, through its host) passes a ``ParsedSpecCache``: a file
  whose identity as opened (device, inode, size, mtime and ctime) and bytes are those it last
  parsed is not parsed again. A pass reads and parses the spec once, without one.
"""

from __future__ import annotations

import copy
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import check_vendor
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import (
    NVIDIA_KIND,
    SPEC_DIRS,
    SPEC_EXTENSIONS,
    SpecFileError,
    VendorSpec,
    build_vendor_spec,
    parse_spec_text,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NotRegularFile, read_regular_identified
from ansible_collections.bcd.devices.plugins.module_utils.support.bounded_json import structure_problem

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

# NVIDIA's spec of 64 GPUs and MIG devices is some 50 KiB; PyYAML reads well under a MiB a second,
# and a pass reads the spec every time.
MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 64  # NVIDIA's spec nests 6 levels
MAX_CACHED = 16  # files a ParsedSpecCache keeps; CDI directories hold a few

# What a spec file's bytes parse to: ``(data, None)``, data any JSON or YAML value, or ``(None, why)``.
ParsedSpec = Tuple[Any, Optional[str]]
# A file's identity as opened (``fsutil.read_regular_identified``).
Identity = Tuple[int, int, int, int, int]


class DriverProbe(Protocol):
    """What answers the stale-edit checks (``domain/cdi/staleness.py``): the host, when it can tell what
    the node has (``Host.driver_probe``)."""

    def device_number(self, node_path: str) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the device node at ``node_path``; None when there is none."""

    def file_exists(self, node_path: str) -> bool:
        """Whether ``node_path`` exists on the node."""

    def driver_version(self) -> Optional[str]:
        """The running driver's version, None without one."""


class ParsedSpecCache:
    """What the spec files parsed to, for a long-lived reader (the root helper): by the file's path, with
    its identity as opened (``fsutil.read_regular_identified``) and its bytes. An entry is used only while
    both are the same, so a changed file (its content, or only its times) is parsed again; what is handed
    out is a copy, so nothing a caller does to it reaches the next. ``parses`` counts the parses done.
    At most ``MAX_CACHED`` files; past that the cache starts again empty."""

    def __init__(self) -> None:
        self._entries: Dict[str, Tuple[Identity, bytes, ParsedSpec]] = {}
        self._lock = threading.Lock()
        self.parses = 0

    def parsed(self, path: str, identity: Identity, raw: bytes, parse: Callable[[], ParsedSpec]) -> ParsedSpec:
        """``parse()``'s outcome for the file at ``path`` as read (``identity``, ``raw``): the one kept when
        both are what it was parsed from, else parsed now and kept."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry[0] == identity and entry[1] == raw:
                return copy.deepcopy(entry[2])
        outcome = parse()
        with self._lock:
            self.parses += 1
            if path not in self._entries and len(self._entries) >= MAX_CACHED:
                self._entries.clear()
            self._entries[path] = (identity, raw, copy.deepcopy(outcome))
        return outcome


def _candidate_files(root: str, spec_dir: str, warnings: List[str]) -> List[str]:
    """Names of the spec files in ``<root><spec_dir>``, sorted."""
    local = os.path.join(root, spec_dir.lstrip("/"))
    try:
        names = os.listdir(local)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        warnings.append("%s is not a directory; no CDI specs read from it" % spec_dir)
        return []
    except OSError as exc:
        warnings.append("cannot list %s: %s" % (spec_dir, exc.strerror or exc))
        return []
    out = []
    for name in sorted(names):
        if not name.endswith(SPEC_EXTENSIONS):
            continue
        if name.startswith("bcd-") and name.endswith(".json"):
            continue  # a hold of ours
        if os.path.isdir(os.path.join(local, name)):
            continue
        out.append(name)
    return out


def _read_identified(path: str) -> Tuple[bytes, Identity]:
    """The bytes of the regular file at ``path``, at most ``MAX_SPEC_BYTES``; ``ValueError`` for a FIFO, a
    device or a socket in a spec's place (opened without waiting: a FIFO would block a pass forever) or a
    larger file (``/dev/zero``'s read would never end). With them, the file's identity
    as opened (``fsutil.read_regular_identified``)."""
    try:
        raw, identity = read_regular_identified(path, MAX_SPEC_BYTES)
    except NotRegularFile:
        raise ValueError("not a regular file")
    if len(raw) > MAX_SPEC_BYTES:
        raise ValueError("larger than %d KiB; a real one is a few dozen" % (MAX_SPEC_BYTES // 1024))
    return raw, identity


def _parse_spec(raw: bytes, node_path: str) -> ParsedSpec:
    """``(data, None)``: what the file's bytes parse to; ``(None, why)`` when they do not."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, "not UTF-8 text (%s)" % exc.reason
    problem = structure_problem(raw, MAX_DEPTH)  # PyYAML reads ahead through every bracket, a second per 100 000
    if problem is not None:
        return None, problem
    try:
        return parse_spec_text(text, node_path), None
    except SpecFileError as exc:
        return None, str(exc)


def _read_nvidia_spec(root: str, node_path: str, warnings: List[str], cache: Optional[ParsedSpecCache] = None) -> Optional[Tuple[Dict[str, Any], bytes]]:
    """The parsed spec and its bytes when ``node_path`` is an NVIDIA spec;
    None (with a warning when the file is bad) otherwise."""
    local = os.path.join(root, node_path.lstrip("/"))
    try:
        raw, identity = _read_identified(local)
    except OSError as exc:
        warnings.append("cannot read CDI spec %s: %s" % (node_path, exc.strerror or exc))
        return None
    except ValueError as exc:
        warnings.append("cannot read CDI spec %s: %s" % (node_path, exc))
        return None
    if cache is None:
        data, problem = _parse_spec(raw, node_path)
    else:
        data, problem = cache.parsed(local, identity, raw, lambda: _parse_spec(raw, node_path))
    if problem is not None:
        warnings.append("cannot read CDI spec %s: %s" % (node_path, problem))
        return None
    if not isinstance(data, dict):
        warnings.append(
            "cannot read CDI spec %s: it holds no CDI spec (no mapping at the top)" % node_path
        )
        return None
    if data.get("kind") != NVIDIA_KIND:
        return None
    return data, raw


def load_vendor_spec(root: str = "/", probe: Optional[DriverProbe] = None, cache: Optional[ParsedSpecCache] = None,
                     inventory: Optional[Inventory] = None) -> VendorSpec:
    """Read NVIDIA's CDI spec under ``root`` (see the module docstring for
    which file wins), checked against the node through ``probe`` when given,
    its MIG devices against ``inventory``'s when that is given too;
    with ``cache``, a file parsed before and unchanged is not parsed again.
    Never raises for the files' content: problems are in the result's
    ``warnings``; without a usable spec ``path`` is None."""
    warnings: List[str] = []
    chosen: Optional[VendorSpec] = None
    chosen_data: Optional[Dict[str, Any]] = None
    for spec_dir in reversed(SPEC_DIRS):  # highest priority first
        usable: List[Tuple[VendorSpec, Dict[str, Any]]] = []
        for name in _candidate_files(root, spec_dir, warnings):
            node_path = "%s/%s" % (spec_dir, name)
            found = _read_nvidia_spec(root, node_path, warnings, cache)
            if found is None:
                continue
            try:
                usable.append((build_vendor_spec(node_path, found[0], found[1]), found[0]))
            except SpecFileError as exc:
                warnings.append("cannot use CDI spec %s: %s" % (node_path, exc))
            except RecursionError:
                warnings.append("cannot use CDI spec %s: it is nested too deeply" % node_path)
        if usable and chosen is not None:
            chosen.shadowed.extend(spec.path for spec, _data in usable if spec.path)
        elif usable:
            chosen, chosen_data = usable[0]
            if len(usable) > 1:
                warnings.append(
                    "several NVIDIA CDI specs in %s (%s); using %s. Runtimes drop a device "
                    "that two files of one directory define: keep one spec"
                    % (spec_dir, ", ".join(s.path or "?" for s, _data in usable), chosen.path)
                )
    if chosen is None:
        return VendorSpec(warnings=warnings)
    chosen.warnings = warnings + chosen.warnings
    if probe is not None:
        chosen = check_vendor(chosen, chosen_data, probe, inventory)
    return chosen

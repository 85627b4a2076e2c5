# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``cdi-lint``: the CDI spec directories as a runtime loads them, checked.

A hold works only if the runtime's CDI library loads it, and that library judges the
directories, not one file: it loads every ``.json`` and ``.yaml`` file of ``/etc/cdi``
(priority 0) and ``/var/run/cdi`` (priority 1, which wins), dotfiles included, skips
subdirectories, and rejects a file that does not parse (strictly: an unknown field or a
key given twice) or validate as a whole. The same qualified device name in two files of
one directory is a ``conflicting device``: the library drops it, from both files and from
the other directory too; in both directories (no conflict) the higher priority wins.
``lint`` reports, for ``kind`` (``bcd.dev/gpu``):

* a spec file no runtime would load (ERROR, with its first problems); a YAML file that
  cannot be checked because PyYAML is missing, a file that cannot be read, a link, or a
  file over the bounds (WARN: not checked, its devices not counted);
* a device name defined twice at one priority (ERROR: the CDI library drops it from
  both), or in both directories (WARN, naming the file that wins);
* a foreign file claiming the kind (not ``/etc/cdi/bcd-<allocation>.json``: another tool
  writes under our kind, and the converger neither owns nor removes it), and a
  ``bcd-*.json`` of another kind (WARN);
* temporary files a crashed atomic write left (``node/fsutil.py``: ``.<name>.tmp-<12
  hex>``; WARN: safe to delete while no pass runs) and damaged hold specs set aside
  (``cdi.damaged_spec_path``; WARN: kept for inspection).

It is pure: ``SpecFile`` carries what ``node/cdi_files.py`` read. Nothing here raises for
what a file holds (non-mapping JSON, deep nesting, YAML aliases and cycles, wrong types):
each failure is a finding. The work is bounded: ``MAX_FILES`` files, ``MAX_FILE_BYTES``
per file and ``MAX_TOTAL_BYTES`` in all are parsed, ``MAX_VALUES`` parsed values (YAML
aliases counted each time they are used) and ``MAX_DEPTH`` levels are validated per file,
and every message is at most ``MAX_MESSAGE`` characters, printable, on one line. Keys
given twice are found in JSON only (PyYAML keeps the last one silently).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Literal, NoReturn, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import vendor as cdi_vendor
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    DAMAGED_FILE_RE,
    KIND,
    SPEC_DIR,
    SPEC_FILE_RE,
    SPEC_PREFIX,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.validate import validate_spec
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

Level = Literal["WARN", "ERROR"]
WARN: Level = "WARN"
ERROR: Level = "ERROR"
MAX_FILES = 4096
MAX_FILE_BYTES = 4 * 1024 * 1024
# PyYAML reads about 0.4 MiB a second: this keeps a doctor run on hostile directories under a minute.
MAX_TOTAL_BYTES = 16 * 1024 * 1024
MAX_VALUES = 1000000
MAX_DEPTH = 64  # a valid spec nests 6 deep at most
MAX_MESSAGE = 300
MAX_PROBLEMS_SHOWN = 3
LOADED = (".json", ".yaml")  # what the CDI library loads (not .yml), dotfiles included
HIGH_PRIORITY_DIRS = ("/var/run/cdi", "/run/cdi")
# node.fsutil's temporary names: ".<name>.tmp-<12 hex>" (tests check the two agree)
TEMP_FILE_RE = lazy_pattern(r"^\..+\.tmp-[0-9a-f]{12}$")


def directory_priority(directory: str) -> int:
    """The CDI library's priority of a spec directory: 1 for ``/var/run/cdi`` (and ``/run/cdi``), else 0."""
    return 1 if directory.rstrip("/") in HIGH_PRIORITY_DIRS else 0


def _printable(text: object) -> str:
    """``text`` on one line: control characters, undecodable bytes of a file name and the like escaped."""
    return printable(text)


def _short(text: object) -> str:
    shown = _printable(text)
    return shown if len(shown) <= MAX_MESSAGE else shown[:MAX_MESSAGE - 3] + "..."


@record(frozen=True)
class SpecFile:
    """One file of a spec directory. ``directory`` is its node path (``/etc/cdi``), ``name`` the file
    name, ``content`` its bytes, or None when it was not read; ``problem`` then says why, as a phrase
    that follows the path (``is a symbolic link ...``, ``cannot be read (...)``). The name ``""``
    stands for the directory itself, which cannot be scanned as ``problem`` says (ERROR for
    ``/etc/cdi``, where holds are written; WARN elsewhere)."""

    directory: str
    name: str
    content: Optional[bytes]
    problem: str = ""

    @property
    def path(self) -> str:
        return "%s/%s" % (self.directory.rstrip("/"), self.name)

    @property
    def priority(self) -> int:
        return directory_priority(self.directory)


@record(frozen=True)
class Finding:
    """``level`` (``WARN`` or ``ERROR``), ``path`` (a node path) and ``message`` (a phrase that follows it)."""

    level: Level
    path: str
    message: str

    def summary(self) -> str:
        """One line: ``<path>: <message>``, bounded and printable."""
        return "%s: %s" % (_short(self.path), _short(self.message))


def _finding(level: Level, path: object, message: object) -> Finding:
    return Finding(level, _short(path), _short(message))


class _Unloadable(Exception):
    """Why no runtime loads a file (an ERROR), or ``level`` WARN when it could not be checked."""

    def __init__(self, why: str, level: Level = ERROR) -> None:
        super().__init__(why)
        self.why = why
        self.level = level


def _strict_pairs(pairs: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    """``json`` object hook: the runtimes' parser (``yaml.UnmarshalStrict``) refuses a key given twice."""
    seen: Dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Unloadable("has the key %r twice in one object; the runtimes' strict parser refuses "
                              "the whole file" % (key[:60],))
        seen[key] = value
    return seen


def _no_constant(name: str) -> NoReturn:
    raise _Unloadable("holds %s, which is not JSON; runtimes refuse the whole file" % name)


def _parse(spec_file: SpecFile) -> Any:
    """The parsed content, JSON first (strictly) and then YAML through ``cdi_vendor``; raises ``_Unloadable``."""
    if spec_file.content is None:
        raise _Unloadable("was not read")
    try:
        text = spec_file.content.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _Unloadable("is not UTF-8 text; runtimes refuse the whole file")
    try:
        return json.loads(text, object_pairs_hook=_strict_pairs, parse_constant=_no_constant)
    except RecursionError:
        raise _Unloadable("is nested too deeply to be a CDI spec")
    except ValueError as exc:  # not JSON: YAML, as the runtimes' reader takes either whatever the name
        json_error = exc
    if not cdi_vendor.HAS_YAML:
        if spec_file.name.endswith(".json"):
            raise _Unloadable("is not valid JSON (%s); runtimes refuse the whole file" % json_error)
        raise _Unloadable("is not JSON, and YAML cannot be checked without PyYAML (install python3-yaml); "
                          "not checked, its devices not counted", WARN)
    try:
        return cdi_vendor.parse_spec_text(text, spec_file.name)
    except cdi_vendor.SpecFileError as exc:
        raise _Unloadable("%s; runtimes refuse the whole file" % exc)
    except ImportError as exc:  # HAS_YAML said yes but the import fails: a broken PyYAML
        raise _Unloadable("YAML cannot be checked: PyYAML does not import (%s); not checked, its devices not "
                          "counted" % exc, WARN)
    except RecursionError:
        raise _Unloadable("is nested too deeply to be a CDI spec")
    except Exception as exc:  # pylint: disable=broad-except  # hostile YAML must become a finding
        raise _Unloadable("could not be parsed (%s: %s)" % (type(exc).__name__, exc))


def _check_size(data: Any) -> None:
    """Walk ``data`` without recursion, each use of a shared (aliased) value counted: raises
    ``_Unloadable`` past ``MAX_VALUES`` values or ``MAX_DEPTH`` levels (a YAML cycle is too deep)."""
    stack: List[Tuple[Any, int]] = [(data, 0)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise _Unloadable("holds more than %d values (YAML aliases counted at each use); not a CDI spec a "
                              "runtime should be given" % MAX_VALUES)
        if depth > MAX_DEPTH:
            raise _Unloadable("is nested more than %d deep (or refers to itself); not a CDI spec" % MAX_DEPTH)
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _load(spec_file: SpecFile) -> Dict[str, Any]:
    """The spec a runtime would load from ``spec_file``; raises ``_Unloadable``."""
    data = _parse(spec_file)
    if not isinstance(data, dict):
        raise _Unloadable("holds no CDI spec (no mapping at the top); runtimes refuse the whole file")
    _check_size(data)
    try:
        problems = validate_spec(data)
    except RecursionError:
        raise _Unloadable("is nested too deeply to be a CDI spec")
    except Exception as exc:  # pylint: disable=broad-except  # a validator bug must not hide the other findings
        raise _Unloadable("could not be validated (%s: %s)" % (type(exc).__name__, exc))
    if problems:
        shown = "; ".join(_printable(problem)[:120] for problem in problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        raise _Unloadable("is not valid CDI, so runtimes refuse the whole file: %s%s"
                          % (shown, " (and %d more)" % more if more > 0 else ""))
    return data


def _kind_findings(spec_file: SpecFile, spec_kind: object, kind: str) -> List[Finding]:
    """Check 3: our kind in a file the converger does not own, or a ``bcd-*.json`` of another kind."""
    name = spec_file.name
    hold_name = SPEC_FILE_RE.fullmatch(name) is not None and spec_file.directory.rstrip("/") == SPEC_DIR
    if spec_kind == kind:
        if hold_name:
            return []
        where = (" (bcd writes holds only to %s)" % SPEC_DIR) if SPEC_FILE_RE.fullmatch(name) else ""
        return [_finding(WARN, spec_file.path, "claims kind %s but is no hold of bcd's%s; the converger neither "
                                               "owns nor removes it" % (kind, where))]
    if name.startswith(SPEC_PREFIX) and name.endswith(".json"):
        if hold_name:
            why = "; the converger reads it as a hold it cannot read back: rename it"
        else:
            why = "; the converger neither owns nor removes it"
        return [_finding(WARN, spec_file.path, "is named as a bcd hold but its kind is %r%s"
                                               % (_printable(spec_kind)[:80], why))]
    return []


def _device_findings(defined: Dict[str, List[SpecFile]], kind: str) -> List[Finding]:
    """Check 2, as the CDI library resolves names: a conflict at one priority drops the device everywhere;
    otherwise the higher priority wins."""
    findings: List[Finding] = []
    for device_name in sorted(defined):
        holders = defined[device_name]
        qualified = "%s=%s" % (kind, device_name)
        by_priority: Dict[int, List[SpecFile]] = {}
        for holder in holders:
            by_priority.setdefault(holder.priority, []).append(holder)
        conflicted = [group for _priority, group in sorted(by_priority.items()) if len(group) > 1]
        for group in conflicted:
            others = [holder.path for holder in holders if holder.priority != group[0].priority]
            also = (" (and from %s too: a conflict drops the name everywhere)" % ", ".join(others)) if others else ""
            findings.append(_finding(ERROR, group[0].path,
                                     "%s is also defined by %s at the same priority: the CDI library drops it "
                                     "from both%s" % (qualified, ", ".join(h.path for h in group[1:]), also)))
        if not conflicted and len(by_priority) > 1:
            low, high = by_priority[min(by_priority)][0], by_priority[max(by_priority)][0]
            findings.append(_finding(WARN, low.path, "%s is also defined by %s, which wins (%s has priority)"
                                                     % (qualified, high.path, high.directory.rstrip("/"))))
    return findings


def lint(files: Iterable[SpecFile], kind: str = KIND) -> List[Finding]:
    """Findings about ``files`` (``SpecFile``, in the order the runtimes scan them): errors first, then
    warnings, each in the order found. No findings: every spec loads, each device of ``kind`` is defined
    once, nothing is left over."""
    findings: List[Finding] = []
    listed = list(files)
    if len(listed) > MAX_FILES:
        message = "more than %d files in the spec directories; only the first %d are checked" % (MAX_FILES, MAX_FILES)
        findings.append(_finding(WARN, listed[MAX_FILES].directory, message))
        listed = listed[:MAX_FILES]
    defined: Dict[str, List[SpecFile]] = {}  # device name of ``kind`` -> the files that define it
    parsed_bytes = 0
    for spec_file in listed:
        name = spec_file.name
        if not name:  # the directory itself (node/cdi_files.py: a linked spec directory the library skips)
            level = ERROR if spec_file.directory.rstrip("/") == SPEC_DIR else WARN
            findings.append(_finding(level, spec_file.directory, spec_file.problem or "cannot be scanned"))
            continue
        if TEMP_FILE_RE.fullmatch(name):
            findings.append(_finding(WARN, spec_file.path, "a temporary file a crashed write left; no runtime loads "
                                                           "it, delete it while no pass runs"))
            continue
        if DAMAGED_FILE_RE.fullmatch(name):
            findings.append(_finding(WARN, spec_file.path, "a damaged hold spec set aside, kept for inspection; no "
                                                           "runtime loads it: read it (who edits bcd's files?), then "
                                                           "remove it"))
            continue
        if not name.endswith(LOADED):
            continue
        if spec_file.content is None:
            findings.append(_finding(WARN, spec_file.path, spec_file.problem or "could not be read; not checked"))
            continue
        if len(spec_file.content) > MAX_FILE_BYTES:
            findings.append(_finding(WARN, spec_file.path, "is over %d bytes; not checked, its devices not counted"
                                                           % MAX_FILE_BYTES))
            continue
        parsed_bytes += len(spec_file.content)
        if parsed_bytes > MAX_TOTAL_BYTES:
            findings.append(_finding(WARN, spec_file.path, "not checked: the files before it already hold %d bytes "
                                                           "of specs, the most checked" % MAX_TOTAL_BYTES))
            continue
        try:
            data = _load(spec_file)
        except _Unloadable as exc:
            findings.append(_finding(exc.level, spec_file.path, exc.why))
            continue
        findings.extend(_kind_findings(spec_file, data.get("kind"), kind))
        if data.get("kind") == kind:
            for device in data["devices"]:  # validated: a list of mappings with a string name each, once
                defined.setdefault(device["name"], []).append(spec_file)
    findings.extend(_device_findings(defined, kind))
    return sorted(findings, key=lambda finding: 0 if finding.level == ERROR else 1)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``cdi-lint``: the CDI spec directories as a runtime loads them, checked.

A runtime loads every ``.json`` and ``.yaml`` file of ``/etc/cdi`` (priority 0) and
``/var/run/cdi`` (priority 1, which wins), dotfiles included, and rejects a file that
does not parse or validate as a whole. The same qualified device name in two files of
one directory is dropped from both (``conflicting device``); in both directories the
higher priority wins. ``lint`` reports, for ``bcd.dev/gpu``:

* a spec file that no runtime would load (ERROR, with its first problems);
* a device name defined twice at one priority (ERROR: neither is usable), or in both
  directories (WARN, naming the file that wins);
* a foreign file claiming the kind (not ``bcd-<allocation>.json``: another tool writes
  under our kind, and the converger neither owns nor removes it), and a ``bcd-*.json``
  of another kind (WARN);
* temporary files a crashed write left (WARN: safe to delete while no pass runs) and
  damaged specs set aside (WARN: kept for someone to read, then remove).

Every count is bounded: ``MAX_FILES`` files and ``MAX_FILE_BYTES`` per file are looked at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import DAMAGED_FILE_RE, KIND, SPEC_FILE_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_validate import validate_spec
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi_vendor import SpecFileError, parse_spec_text

WARN, ERROR = "WARN", "ERROR"
MAX_FILES = 4096
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_MESSAGE = 300
LOADED = (".json", ".yaml")  # what the CDI library loads (not .yml)
HIGH_PRIORITY_DIRS = ("/var/run/cdi", "/run/cdi")
# node.fsutil's temporary names: ".<name>.tmp-<12 hex>" (tests check the two agree)
TEMP_FILE_RE = re.compile(r"^\..+\.tmp-[0-9a-f]{12}$")


@dataclass(frozen=True)
class SpecFile:
    """One file of a spec directory: ``directory`` its node path, ``content`` None when unreadable
    (``problem`` says why)."""

    directory: str
    name: str
    content: Optional[bytes]
    problem: str = ""

    @property
    def path(self):
        return "%s/%s" % (self.directory, self.name)

    @property
    def priority(self):
        return 1 if self.directory in HIGH_PRIORITY_DIRS else 0


@dataclass(frozen=True)
class Finding:
    level: str
    path: str
    message: str

    def summary(self):
        return "%s: %s" % (self.path, self.message)


def _short(text):
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def _load(spec_file):
    """``(spec dict, None)`` or ``(None, why no runtime loads it)``."""
    if spec_file.content is None:
        return None, "cannot be read: %s" % (spec_file.problem or "unreadable")
    if len(spec_file.content) > MAX_FILE_BYTES:
        return None, "is over %d bytes; not checked" % MAX_FILE_BYTES
    try:
        text = spec_file.content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    try:
        data = parse_spec_text(text, spec_file.name)
    except SpecFileError as exc:
        return None, str(exc)
    except RecursionError:
        return None, "is nested too deeply"
    if not isinstance(data, dict):
        return None, "holds no CDI spec (no mapping at the top)"
    try:
        problems = validate_spec(data)
    except RecursionError:
        return None, "is nested too deeply"
    if problems:
        shown = "; ".join(problems[:3]) + (" (and %d more)" % (len(problems) - 3) if len(problems) > 3 else "")
        return None, "is not valid CDI, so runtimes refuse the whole file: %s" % shown
    return data, None


def lint(files, kind=KIND):
    """Findings about ``files`` (``SpecFile``), worst first within the order found."""
    findings = []  # type: List[Finding]
    files = list(files)
    if len(files) > MAX_FILES:
        findings.append(Finding(WARN, files[MAX_FILES].directory,
                                "%d files; only the first %d are checked" % (len(files), MAX_FILES)))
        files = files[:MAX_FILES]
    defined = {}  # (priority, device name) -> the paths defining it
    for spec_file in files:
        name = spec_file.name
        if TEMP_FILE_RE.match(name):
            findings.append(Finding(WARN, spec_file.path, "a temporary file a crashed write left; no runtime loads "
                                                          "it, delete it while no pass runs"))
            continue
        if DAMAGED_FILE_RE.match(name):
            findings.append(Finding(WARN, spec_file.path, "a damaged hold spec set aside; no runtime loads it, read "
                                                          "it (who edits bcd's files?), then remove it"))
            continue
        if not name.endswith(LOADED):
            continue
        if spec_file.content is None and spec_file.problem.startswith("a symbolic link"):
            findings.append(Finding(WARN, spec_file.path, _short("is %s; runtimes follow it, the lint does not"
                                                                 % spec_file.problem)))
            continue
        data, why = _load(spec_file)
        if why is not None:
            findings.append(Finding(ERROR, spec_file.path, _short(why)))
            continue
        ours = SPEC_FILE_RE.match(name) is not None and spec_file.directory == "/etc/cdi"
        if data.get("kind") != kind:
            if ours:
                findings.append(Finding(WARN, spec_file.path, _short("is named as a bcd hold but its kind is %r"
                                                                     % (data.get("kind"),))))
            continue
        if not ours:
            findings.append(Finding(WARN, spec_file.path, "claims kind %s but is no hold of bcd's; the converger "
                                                          "neither owns nor removes it" % kind))
        for device in data.get("devices") or []:
            device_name = device.get("name") if isinstance(device, dict) else None
            if isinstance(device_name, str):
                defined.setdefault((spec_file.priority, device_name), []).append(spec_file.path)
    for (priority, device_name), paths in sorted(defined.items()):
        if len(paths) > 1:
            findings.append(Finding(ERROR, paths[0], _short(
                "%s=%s is also defined by %s at the same priority: the CDI library drops it from both"
                % (kind, device_name, ", ".join(paths[1:])))))
        if priority == 0 and (1, device_name) in defined:
            findings.append(Finding(WARN, paths[0], _short(
                "%s=%s is also defined by %s, which wins (/var/run/cdi has priority)"
                % (kind, device_name, defined[(1, device_name)][0]))))
    return sorted(findings, key=lambda finding: 0 if finding.level == ERROR else 1)

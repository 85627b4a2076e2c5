# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container runtimes and the CDI versions they load.

Every runtime that reads ``/etc/cdi`` does so through the CDI reference library it
vendors, and that library refuses a spec whose ``cdiVersion`` it does not know (and
one with a field it does not know). So a hold's spec must be written at a version
the *oldest* library on the node knows: ``ceiling`` finds that runtime. ``TABLE``
below is the one place that says which release vendors which library; it is code,
not a data file beside it, because module_utils travel to a node inside AnsiballZ,
which carries only ``.py`` files.

A library release X.Y.Z knows the spec versions up to X.Y.0 (checked in
cncf-tags/container-device-interface: ``validSpecVersions`` in ``pkg/cdi/spec.go``
up to v0.5.4, ``pkg/cdi/version.go`` from v0.6.0 on). Each row of ``TABLE`` gives a
release from which a runtime vendors a library, and the newest spec version that
library knows; a release older than a runtime's first row sets no limit
(``max_cdi_version`` None: it has no CDI support, or in Podman 3's case a library
that checks no ``cdiVersion``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Literal, Optional, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import version_key as cdi_version_key
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

__all__ = [
    "ALIASES",
    "MAX_RUNTIMES",
    "RUNTIME_NAMES",
    "Runtime",
    "TABLE",
    "canonical_name",
    "ceiling",
    "max_cdi_version",
    "parse_runtimes_option",
    "runtime",
    "version_from_output",
    "version_key",
]

RUNTIME_NAMES = ("containerd", "docker", "podman", "cri-o")
# Other spellings an operator may use for a runtime's name (the option, fakehw files).
ALIASES = {"crio": "cri-o", "cri_o": "cri-o", "dockerd": "docker", "moby": "docker"}
MAX_RUNTIMES = 8
MAX_VERSION_TEXT = 32
MAX_OUTPUT = 4096  # of a --version output, looked at

# runtime -> ((first release, newest cdiVersion its CDI library knows), ...), oldest first.
#
# The library is tags.cncf.io/container-device-interface (before v0.6.2 also published as
# github.com/container-orchestrated-devices/container-device-interface), at the version the
# release tag's go.mod requires (Docker: vendor.mod up to 28.x, go.mod from docker-v29.0.0); no tag
# replaces it, except CRI-O v1.25.5 (=> v0.5.3, same spec version).
#
# Release lines: a row applies from its release on, to every later release up to the next row, so
# each release line (major.minor) whose first release vendors a different library than the row
# before it starts with its own row (containerd 2.0.0, Docker 26.0.0). That is what keeps a patch
# row of an older line (containerd 1.7.27, Docker 25.0.17: a newer library in a patch release made
# after the next line existed) from leaking into the next line's early releases.
#
# "checked" = read from the tags' go.mod/vendor.mod in the upstream repositories (every tag of the
# range, not only the first), December 2026, by whoever wrote this table; ranges are inclusive.
TABLE: Dict[str, Tuple[Tuple[Tuple[int, int, int], str], ...]] = {
    "containerd": (
        # v1.6.x: no CDI (checked: no CDI library in go.mod).
        ((1, 7, 0), "0.5.0"),   # v1.7.0-v1.7.11: c-o-d/container-device-interface v0.5.4 (checked)
        ((1, 7, 12), "0.6.0"),  # v1.7.12: c-o-d v0.6.1; v1.7.13-v1.7.15: tags.cncf.io v0.6.2 (checked)
        ((1, 7, 16), "0.7.0"),  # v1.7.16-v1.7.26: tags.cncf.io v0.7.2 (checked; the issue said from 1.7.20)
        ((1, 7, 27), "0.8.0"),  # v1.7.27-v1.7.34 (1.7 line, after 2.0): tags.cncf.io v0.8.1 (checked)
        ((2, 0, 0), "0.8.0"),   # v2.0.0-v2.0.2: v0.8.0; v2.0.3-v2.0.4: v0.8.1 (checked)
        ((2, 0, 5), "1.0.0"),   # v2.0.5-v2.0.11: v1.0.0 (checked)
        ((2, 1, 0), "1.0.0"),   # v2.1.0-v2.2.0: v1.0.1 (checked)
        ((2, 2, 1), "1.1.0"),   # v2.2.1-v2.2.7, v2.3.0-v2.3.4: v1.1.0 (checked)
    ),
    "docker": (
        # v24.0.x: no CDI (checked: no CDI library in vendor.mod).
        ((25, 0, 0), "0.6.0"),   # v25.0.0-v25.0.16: tags.cncf.io v0.6.2 (checked)
        ((25, 0, 17), "0.8.0"),  # v25.0.17 (25.0 line, after 28.x): v0.8.1 (checked; not in the issue)
        ((26, 0, 0), "0.6.0"),   # v26.0.0-v26.0.2: v0.6.2 (checked)
        ((26, 1, 0), "0.7.0"),   # v26.1.0: v0.7.1; v26.1.1-v27.3.1: v0.7.2 (checked; make e2e: Debian's
        #                          26.1.5 loads 0.7.0 and refuses 0.8.0, "invalid version", tests/e2e/test_docker_cdi.py)
        ((27, 4, 0), "0.8.0"),   # v27.4.0-v28.0.0: v0.8.0; v28.0.1-v28.0.4: v0.8.1 (checked)
        ((28, 1, 0), "1.0.0"),   # v28.1.0-v28.5.2, docker-v29.0.0-docker-v29.1.5: v1.0.1 (checked)
        ((29, 2, 0), "1.1.0"),   # docker-v29.2.0-docker-v29.7.2: v1.1.0 (checked)
    ),
    "podman": (
        # v3.2-v3.4: a pre-release library (f99e8b6c10b9, 2021) that checks no cdiVersion: no row.
        ((4, 0, 0), "0.2.0"),   # v4.0.x: c-o-d pseudo-version 46367ec063fd, knows 0.1.0, 0.2.0 (checked)
        ((4, 1, 0), "0.4.0"),   # v4.1.x-v4.2.x: c-o-d v0.4.0 (checked; the issue starts at 4.3)
        ((4, 3, 0), "0.5.0"),   # v4.3.x: v0.5.2; v4.4.x: v0.5.3; v4.5.0-v4.6.x: v0.5.4 (checked)
        ((4, 7, 0), "0.6.0"),   # v4.7.x: c-o-d v0.6.1; v4.8.0-v5.0.x: tags.cncf.io v0.6.2 (checked)
        ((5, 1, 0), "0.7.0"),   # v5.1.x: v0.7.2 (checked)
        ((5, 2, 0), "0.8.0"),   # v5.2.0-v5.4.x: v0.8.0 (checked)
        ((5, 5, 0), "1.0.0"),   # v5.5.0-v5.8.2: v1.0.1 (checked)
    ),
    "cri-o": (
        # v1.23 and older: no CDI library in go.mod (checked).
        ((1, 24, 0), "0.3.0"),  # v1.24.x: c-o-d v0.3.2 (checked; the issue starts at 1.28)
        ((1, 25, 0), "0.5.0"),  # v1.25.x: v0.5.0-v0.5.3; v1.26.x: v0.5.3; v1.27.x: v0.5.4 (checked)
        ((1, 28, 0), "0.6.0"),  # v1.28.x: c-o-d v0.6.0; v1.29.x: tags.cncf.io v0.6.2 (checked)
        ((1, 30, 0), "0.7.0"),  # v1.30.x: v0.7.2 (checked)
        ((1, 31, 0), "0.8.0"),  # v1.31.x-v1.32.1: v0.8.0; v1.32.2-v1.32.13: v0.8.1 (checked)
        ((1, 33, 0), "1.0.0"),  # v1.33.x-v1.34.x: v1.0.1 (checked)
        ((1, 35, 0), "1.1.0"),  # v1.35.0-v1.36.3: v1.1.0 (checked)
    ),
}

# Up to three dot-separated numbers, then anything not a digit (-ce, -rc.1, +dfsg, ~ds1, -1).
_VERSION_RE = lazy_pattern(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?")
_MAX_PART_DIGITS = 9
# What the option takes as a version: 5, 5.4, v5.4.2, 1.6.20~ds1, 27.3.1-ce, 2.0.0-rc.1, 5.4.2+ds1-2.
_VERSION_TEXT_RE = lazy_pattern(r"v?[0-9]{1,9}(?:\.[0-9]{1,9}){0,2}(?:[-+~._][A-Za-z0-9.+~_-]*)?")


@record(frozen=True)
class Runtime:
    """A container runtime on the node: its name, its version, and the newest ``cdiVersion`` its CDI
    library loads (None: a release without CDI support, which loads no spec and sets no limit).
    ``path`` is the binary asked, ``source`` where the runtime came from (``auto``, ``option``,
    ``fakehw``)."""

    name: str
    version: str
    max_cdi_version: Optional[str]
    path: str = ""
    source: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "version": self.version, "max_cdi_version": self.max_cdi_version}


def version_key(text: object) -> Tuple[int, ...]:
    """``(major, minor, patch)`` of a release version: ``v2.0.5``, ``27.3.1-ce``, ``2.0.0-rc.1``,
    ``1.6.20~ds1``, ``5.4.2+ds1-2``; missing parts are 0, parts after the third are ignored.
    ValueError for text without a version (or not a string or number)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError("a version must be a string, not %s" % type_name(text))
    if isinstance(text, int) and not 0 <= text < 10 ** _MAX_PART_DIGITS:
        raise ValueError("%s is not a version" % ("a negative number" if text < 0 else "a number this large"))
    shown = str(text)[:MAX_VERSION_TEXT + 8].strip()
    match = _VERSION_RE.match(shown)
    if match is None:
        raise ValueError("%r is not a version" % (shown[:MAX_VERSION_TEXT],))
    parts = tuple(part or "0" for part in match.groups())
    if any(len(part) > _MAX_PART_DIGITS for part in parts):
        raise ValueError("%r is not a version (a part has more than %d digits)"
                         % (shown[:MAX_VERSION_TEXT], _MAX_PART_DIGITS))
    return tuple(int(part) for part in parts)


def canonical_name(name: object) -> str:
    """``name`` as one of ``RUNTIME_NAMES`` (case and ``ALIASES`` forgiven); ValueError otherwise."""
    if isinstance(name, str):
        folded = name.strip().lower()
        folded = ALIASES.get(folded, folded)
        if folded in RUNTIME_NAMES:
            return folded
        raise ValueError("must be one of %s, not %r" % (", ".join(RUNTIME_NAMES), name[:40]))
    raise ValueError("must be one of %s, not %s" % (", ".join(RUNTIME_NAMES), type_name(name)))


def max_cdi_version(name: str, version: object) -> Optional[str]:
    """The newest ``cdiVersion`` release ``version`` of runtime ``name`` loads; None before its CDI
    support. ValueError for an unknown runtime or a version that is not one."""
    rows = TABLE[canonical_name(name)]
    key = version_key(version)
    best = None
    for first, cdi_version in rows:  # oldest first: the last row at or before the release wins
        if key >= first:
            best = cdi_version
    return best


def runtime(name: str, version: object, path: str = "", source: str = "") -> Runtime:
    """A ``Runtime`` with its CDI version looked up (``name`` as ``canonical_name`` takes it)."""
    canonical = canonical_name(name)
    return Runtime(name=canonical, version=str(version), max_cdi_version=max_cdi_version(canonical, version),
                   path=path, source=source)


def ceiling(runtimes: Optional[Iterable[Runtime]]) -> Optional[Runtime]:
    """The runtime whose library loads the oldest CDI version (the one that limits what is written),
    or None when no runtime loads CDI specs. Ties go to the first listed."""
    best = None
    for item in runtimes or ():
        if item.max_cdi_version is None:
            continue
        if best is None or cdi_version_key(item.max_cdi_version) < cdi_version_key(best.max_cdi_version):
            best = item
    return best


# --- what a runtime's --version prints -----------------------------------------------------------

_OUTPUT_PATTERNS = {
    # containerd containerd.io 1.7.27 05044ec...; containerd github.com/containerd/containerd/v2 v2.0.5 fb4c30d;
    # Debian: containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1
    "containerd": lazy_pattern(r"^containerd[ \t]+\S+[ \t]+(v?[0-9][^\s]*)", re.M),
    # Docker version 27.3.1, build 41ca978 (dockerd --version; the CLI prints the same for itself)
    "docker": lazy_pattern(r"^Docker version[ \t]+(v?[0-9][^\s,]*)", re.M),
    # podman version 5.4.2
    "podman": lazy_pattern(r"^podman(?:-remote)? version[ \t]+(v?[0-9][^\s]*)", re.M),
    # crio version 1.31.0 (first line, newer); a "Version:  1.28.1" line (older)
    "cri-o": lazy_pattern(r"^(?:crio version[ \t]+|Version:[ \t]+)(v?[0-9][^\s]*)", re.M),
}


def version_from_output(name: str, text: object) -> str:
    """The release version in runtime ``name``'s ``--version`` output (its first 4 KiB), without a
    leading ``v`` (``2.0.5``, ``1.6.20~ds1``); ValueError when it is not there."""
    pattern = _OUTPUT_PATTERNS[canonical_name(name)]
    if not isinstance(text, str):
        raise ValueError("no output to read a version from (%s)" % type_name(text))
    head = text[:MAX_OUTPUT]
    match = pattern.search(head)
    if match is None:
        first = (head.strip().splitlines() or [""])[0][:80]
        raise ValueError("no version in its output (%r)" % first if first else "no version in its output (it is empty)")
    version: str = match.group(1)
    if version.startswith("v"):
        version = version[1:]
    if len(version) > MAX_VERSION_TEXT:
        raise ValueError("no version in its output (%r is too long for one)" % version[:40])
    version_key(version)
    return version


# --- the cdi_runtimes option -------------------------------------------------------------------

def parse_runtimes_option(value: object, source: str = "option",
                          where: str = "cdi_runtimes") -> Union[Literal["auto"], List[Runtime]]:
    """``cdi_runtimes``: the string ``auto`` (or None), or a list of at most ``MAX_RUNTIMES`` mappings
    ``{name, version}``; ``crio``/``cri_o`` are taken for ``cri-o``, ``dockerd``/``moby`` for ``docker``,
    in any case. Returns ``"auto"`` or a list of ``Runtime`` (``source``); every error is a ValueError
    naming the entry and the field (``where``: how the message names the option)."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return "auto"
    if isinstance(value, str):
        raise ValueError("%s: must be auto or a list of {name, version}, not %r" % (where, value[:40]))
    if not isinstance(value, list):
        raise ValueError("%s: must be auto or a list of {name, version}, not %s" % (where, type_name(value)))
    if len(value) > MAX_RUNTIMES:
        raise ValueError("%s: lists %d runtimes; at most %d" % (where, len(value), MAX_RUNTIMES))
    runtimes: List[Runtime] = []
    for index, item in enumerate(value):
        at = "%s[%d]" % (where, index)
        if not isinstance(item, dict):
            raise ValueError("%s: must be a mapping {name, version}, not %s" % (at, type_name(item)))
        unknown = sorted(repr(key)[:40] if not isinstance(key, str) else key[:40]
                         for key in item if key not in ("name", "version"))
        if unknown:
            raise ValueError("%s.%s: unknown field (known: name, version)" % (at, unknown[0]))
        try:
            name = canonical_name(item.get("name"))
        except ValueError as exc:
            raise ValueError("%s.name: %s" % (at, exc)) from None
        runtimes.append(runtime(name, _option_version(at, item.get("version")), source=source))
    return runtimes


def _option_version(at: str, version: object) -> str:
    """An option entry's version as text, without a leading ``v``; ValueError naming ``at``."""
    if isinstance(version, bool) or not isinstance(version, (str, int, float)):
        raise ValueError("%s.version: must be a version like 5.4.2, not %s" % (at, type_name(version)))
    if isinstance(version, int) and not 0 <= version < 10 ** _MAX_PART_DIGITS:
        raise ValueError("%s.version: must be a version like 5.4.2, not %s" % (at, type_name(version)))
    text = version[:MAX_VERSION_TEXT + 8] if isinstance(version, str) else str(version)
    text = text.strip()
    if len(text) > MAX_VERSION_TEXT or (isinstance(version, str) and len(version.strip()) > MAX_VERSION_TEXT):
        raise ValueError("%s.version: must be a version like 5.4.2 of at most %d characters, not %r..."
                         % (at, MAX_VERSION_TEXT, text[:20]))
    if not _VERSION_TEXT_RE.fullmatch(text):
        raise ValueError("%s.version: must be a version like 5.4.2, not %r" % (at, text))
    return text[1:] if text.startswith("v") else text

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container runtimes and the CDI versions they load.

Every runtime that reads ``/etc/cdi`` does so through the CDI reference library it
vendors, and that library refuses a spec whose ``cdiVersion`` it does not know (and
one with a field it does not know). So a hold's spec must be written at a version
the *oldest* library on the node knows: ``ceiling`` finds that runtime. The table
below is the one place that says which release vendors which library; it is code,
not a data file beside it, because module_utils travel to a node inside AnsiballZ,
which carries only ``.py`` files.

A library release X.Y.Z knows the spec versions up to X.Y.Z. Each row gives the
first release of a runtime that vendors a newer library, and the newest spec
version that library knows; a release older than a runtime's first row has no CDI
support and sets no limit (it loads no spec at all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.errors import type_name

RUNTIME_NAMES = ("containerd", "docker", "podman", "cri-o")
ALIASES = {"crio": "cri-o", "cri_o": "cri-o", "dockerd": "docker", "moby": "docker"}
MAX_RUNTIMES = 8
MAX_VERSION_TEXT = 32
MAX_OUTPUT = 4096  # of a --version output, looked at

# (first release, newest cdiVersion its CDI library knows), oldest first. The library is
# tags.cncf.io/container-device-interface (before 0.6.0: github.com/container-orchestrated-devices/
# container-device-interface), as the release's go.mod (Docker: vendor.mod) requires it.
# Rows marked "checked" were read from the tag's go.mod; the others follow issue 13's list, which
# was gathered from the runtimes' release notes, and are to be checked the same way.
TABLE = {
    "containerd": (
        ((1, 7, 0), "0.5.0"),   # v1.7.0: CDI support added (enable_cdi), library v0.5.x
        ((1, 7, 20), "0.7.0"),  # v1.7.20: library v0.7.x
        ((1, 7, 27), "0.8.0"),  # v1.7.27 (1.7 branch): library v0.8.x; 2.0.0-2.0.4 likewise
        ((2, 0, 5), "1.0.0"),   # v2.0.5 through v2.2.0: library v1.0.x
        ((2, 2, 1), "1.1.0"),   # v2.2.1: library v1.1.x
    ),
    "docker": (
        ((25, 0, 0), "0.6.0"),  # 25.0: CDI support (features.cdi), library v0.6.x
        ((26, 1, 0), "0.7.0"),  # 26.1: library v0.7.x
        ((27, 4, 0), "0.8.0"),  # 27.4: library v0.8.x
        ((28, 1, 0), "1.0.0"),  # 28.1: library v1.0.x
        ((29, 2, 0), "1.1.0"),  # 29.2: library v1.1.x
    ),
    "podman": (
        ((4, 3, 0), "0.5.0"),   # 4.3 (Debian bookworm's 4.3.1: "unknown field annotations", checked here)
        ((4, 7, 0), "0.6.0"),   # 4.7: library v0.6.x
        ((5, 1, 0), "0.7.0"),   # 5.1: library v0.7.x
        ((5, 2, 0), "0.8.0"),   # 5.2-5.4 (Debian trixie's 5.4.2 loads 0.8.0, refuses 1.0.0: checked here)
        ((5, 5, 0), "1.0.0"),   # 5.5: library v1.0.x
    ),
    "cri-o": (
        ((1, 28, 0), "0.6.0"),  # 1.28: library v0.6.x
        ((1, 30, 0), "0.7.0"),  # 1.30: library v0.7.x
        ((1, 31, 0), "0.8.0"),  # 1.31: library v0.8.x
        ((1, 33, 0), "1.0.0"),  # 1.33: library v1.0.x
        ((1, 35, 0), "1.1.0"),  # 1.35: library v1.1.x
    ),
}

_VERSION_RE = re.compile(r"v?([0-9]{1,6})(?:\.([0-9]{1,6}))?(?:\.([0-9]{1,6}))?")
_VERSION_TEXT_RE = re.compile(r"^v?[0-9]{1,6}(\.[0-9]{1,6}){0,2}([-+~._][A-Za-z0-9.+~_-]*)?$")


@dataclass(frozen=True)
class Runtime:
    """A container runtime on the node: its name, its version, and the newest ``cdiVersion`` its CDI
    library loads (None: a release without CDI support). ``path`` is the binary asked, ``source``
    where the runtime came from (``auto``, ``option``, ``fakehw``)."""

    name: str
    version: str
    max_cdi_version: Optional[str]
    path: str = ""
    source: str = ""

    def to_dict(self):
        return {"name": self.name, "version": self.version, "max_cdi_version": self.max_cdi_version}


def version_key(text):
    # type: (Any) -> Tuple[int, int, int]
    """``(major, minor, patch)`` of a release version: ``v2.0.5``, ``27.3.1-ce``, ``1.6.20~ds1``,
    ``5.4.2+ds1-2``; missing parts are 0. ValueError for text without a version."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError("a version must be a string, not %s" % type_name(text))
    match = _VERSION_RE.match(str(text).strip()[:MAX_VERSION_TEXT])
    if match is None:
        raise ValueError("%r is not a version" % (str(text)[:MAX_VERSION_TEXT],))
    return tuple(int(part or 0) for part in match.groups())


def max_cdi_version(name, version):
    # type: (str, Any) -> Optional[str]
    """The newest ``cdiVersion`` release ``version`` of runtime ``name`` loads; None before CDI support."""
    key = version_key(version)
    best = None
    for first, cdi_version in TABLE[name]:
        if key >= first:
            best = cdi_version
    return best


def runtime(name, version, path="", source=""):
    # type: (str, Any, str, str) -> Runtime
    """A ``Runtime`` with its CDI version looked up."""
    return Runtime(name=name, version=str(version), max_cdi_version=max_cdi_version(name, version),
                   path=path, source=source)


def _cdi_key(version):
    major, minor, patch = (int(part) for part in version.split("."))
    return (major, minor, patch)


def ceiling(runtimes):
    # type: (Any) -> Optional[Runtime]
    """The runtime whose library loads the oldest CDI version (the one that limits what is written), or
    None when no runtime loads CDI specs. Ties go to the first listed."""
    best = None
    for item in runtimes or ():
        if item.max_cdi_version is None:
            continue
        if best is None or _cdi_key(item.max_cdi_version) < _cdi_key(best.max_cdi_version):
            best = item
    return best


# --- what a runtime's --version prints ---------------------------------------------

_OUTPUT_PATTERNS = {
    # containerd containerd.io 1.7.27 05044ec...; containerd github.com/containerd/containerd/v2 v2.0.5 fb4c30d;
    # Debian: containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1
    "containerd": re.compile(r"^containerd\s+\S+\s+(v?[0-9][^\s]*)", re.M),
    # Docker version 27.3.1, build 41ca978
    "docker": re.compile(r"^Docker version\s+(v?[0-9][^\s,]*)", re.M),
    # podman version 5.4.2
    "podman": re.compile(r"^podman(?:-remote)? version\s+(v?[0-9][^\s]*)", re.M),
    # crio version 1.31.0 (newer); a "Version:  1.28.1" line (older)
    "cri-o": re.compile(r"^(?:crio version\s+|Version:\s+)(v?[0-9][^\s]*)", re.M),
}


def version_from_output(name, text):
    # type: (str, Any) -> str
    """The release version in runtime ``name``'s ``--version`` output; ValueError when it is not there."""
    if not isinstance(text, str):
        raise ValueError("no output")
    match = _OUTPUT_PATTERNS[name].search(text[:MAX_OUTPUT])
    if match is None:
        first = (text.strip().splitlines() or [""])[0][:80]
        raise ValueError("no version in its output (%r)" % first)
    version = match.group(1)
    version_key(version)
    return version[:MAX_VERSION_TEXT]


# --- the cdi_runtimes option ------------------------------------------------------------

def parse_runtimes_option(value, source="option", where="cdi_runtimes"):
    # type: (Any, str, str) -> Any
    """``cdi_runtimes``: the string ``auto``, or a list of at most ``MAX_RUNTIMES`` mappings
    ``{name, version}`` (``crio``/``cri_o`` and ``dockerd`` are taken for ``cri-o`` and ``docker``).
    Returns ``"auto"`` or a list of ``Runtime``; ValueError naming the entry and the field
    (``where``: how the message names the option)."""
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, str):
        raise ValueError("%s: must be auto or a list of {name, version}, not %r" % (where, value[:40]))
    if not isinstance(value, list):
        raise ValueError("%s: must be auto or a list of {name, version}, not %s" % (where, type_name(value)))
    if len(value) > MAX_RUNTIMES:
        raise ValueError("%s: lists %d runtimes; at most %d" % (where, len(value), MAX_RUNTIMES))
    runtimes = []  # type: List[Runtime]
    for index, item in enumerate(value):
        at = "%s[%d]" % (where, index)
        if not isinstance(item, dict):
            raise ValueError("%s: must be a mapping {name, version}, not %s" % (at, type_name(item)))
        unknown = sorted(str(key)[:40] for key in item if key not in ("name", "version"))
        if unknown:
            raise ValueError("%s.%s: unknown field (known: name, version)" % (at, unknown[0]))
        name = item.get("name")
        if not isinstance(name, str):
            raise ValueError("%s.name: must be one of %s, not %s" % (at, ", ".join(RUNTIME_NAMES), type_name(name)))
        name = ALIASES.get(name.strip().lower(), name.strip().lower())
        if name not in RUNTIME_NAMES:
            raise ValueError("%s.name: must be one of %s, not %r" % (at, ", ".join(RUNTIME_NAMES),
                                                                     item["name"][:40]))
        version = item.get("version")
        if isinstance(version, bool) or not isinstance(version, (str, int, float)):
            raise ValueError("%s.version: must be a version like 5.4.2, not %s" % (at, type_name(version)))
        version = str(version).strip()
        if len(version) > MAX_VERSION_TEXT or not _VERSION_TEXT_RE.match(version):
            raise ValueError("%s.version: must be a version like 5.4.2, not %r" % (at, version[:40]))
        runtimes.append(runtime(name, version.lstrip("v"), source=source))
    return runtimes

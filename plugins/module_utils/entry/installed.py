# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds installed``: the record of the role's last full install, written and checked.

The role bcd.devices.bcd_holds runs ``installed --record`` after a full install, with what it installed on stdin
(``node/library.install_manifest``); its later runs check the record in the same module run as their pass
(``node/library.install_refusal``, through the node library module) and install again only where it no longer
stands. ``installed`` alone says whether the node is still as recorded, and ``doctor`` reports the same
(docs/performance.md, "The role's re-run")."""

from __future__ import annotations

import os
from typing import Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.node import library
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes

DEFAULT_MANIFEST = library.DEFAULT_LIBRARY + "/installed.json"
MAX_RECORD_BYTES = 64 * 1024  # what the role sends: some fifty paths


def manifest_path(root: str, manifest: str) -> str:
    """The record's real path: ``manifest``, a node path, under ``root``."""
    if not manifest.startswith("/") or "/../" in manifest + "/" or "\0" in manifest:
        raise ValueError("the manifest must be an absolute node path without '..': %r" % manifest)
    return os.path.join(root or "/", manifest.lstrip("/"))


def record(root: str, manifest: str, spec_text: bytes) -> int:
    """Write the record of the install ``spec_text`` (JSON) describes at ``manifest`` under ``root``, root's 0600;
    the count of entries recorded. Raises ValueError on a spec that is not the role's."""
    if len(spec_text) > MAX_RECORD_BYTES:
        raise ValueError("the install spec is longer than %d bytes" % MAX_RECORD_BYTES)
    spec = bounded_json.loads(spec_text, "the install spec")
    found = library.install_manifest(spec)
    write_atomic(manifest_path(root, manifest), json_bytes(found, indent=1), 0o600)
    return len(found["entries"])


def check(root: str, manifest: str, digest: Optional[str] = None) -> Tuple[bool, str]:
    """``(as recorded, message)``: whether the node is still as the role's last full install left it."""
    why = library.install_refusal(manifest_path(root, manifest), digest)
    if why is None:
        return True, "the install is as the role recorded it (%s)" % manifest
    return False, why

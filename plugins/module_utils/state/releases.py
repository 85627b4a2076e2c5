# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pending Kubernetes releases on disk: ``<state_dir>/releasing.json`` and its marker.

``releasing.json`` (0600) maps each allocation whose Kubernetes hold is being
released to its device ids, generation and the UTC time the release began. An
unreadable file is never deleted: it is renamed aside
(``releasing.json.unreadable-<UTC timestamp>``) and the marker
``releasing.unreadable`` is written, so every GPU stays claimed until the kube side
is known (docs/kubernetes.md). Only ``state.store.NodeState`` calls these; both files are
read through the bounded reader (``node/state_files.py``: 16 MiB; the marker is never opened,
only looked up).
"""

from __future__ import annotations

import calendar
import os
import time
from typing import TYPE_CHECKING, Dict, Mapping

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import ALLOCATION_ID
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import PendingRelease, Releases
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import remove_file, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import MARKER_NAME, RELEASES_NAME
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import StateFiles

_ALLOCATION_ID_RE = lazy_pattern(ALLOCATION_ID)
MAX_ASIDE = 64  # releasing.json.unreadable-<stamp>-<n> tried per second, at most


def _since(text: object) -> float:
    try:
        if not isinstance(text, str):
            raise TypeError("not text")
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError, OverflowError):
        raise ValueError("since %r is not a UTC time such as 2026-12-02T09:00:00Z" % (text,))


def parse_releases(content: bytes, where: str = RELEASES_NAME) -> Dict[str, PendingRelease]:
    """``{allocation_id: PendingRelease}``; raises ``ValueError`` on anything malformed, ``StateFileError``
    past the bounded parser's limits."""
    data = bounded_json.loads(content, where)
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise ValueError('not an object with "releases"')
    pending: Dict[str, PendingRelease] = {}
    for allocation_id, record in data["releases"].items():
        if not _ALLOCATION_ID_RE.fullmatch(allocation_id) or not isinstance(record, dict) \
                or not isinstance(record.get("device_ids"), list) \
                or not all(isinstance(d, str) for d in record["device_ids"]) \
                or isinstance(record.get("generation"), bool) or not isinstance(record.get("generation"), int):
            raise ValueError("release %r is malformed" % allocation_id)
        pending[allocation_id] = PendingRelease(allocation_id, list(record["device_ids"]), record["generation"],
                                                _since(record.get("since")), record.get("taken_back") is True)
    return pending


def load_releases(files: StateFiles) -> Releases:
    """The pending releases of the state directory ``files`` (a ``StateFiles``)."""
    releases = Releases(marker=files.exists(MARKER_NAME))
    content = files.read(RELEASES_NAME)
    if content is None:
        return releases
    try:
        releases.pending = parse_releases(content, files.where(RELEASES_NAME))
    except ValueError as exc:
        releases.unreadable = str(exc)
    return releases


def releases_bytes(pending: Mapping[str, PendingRelease]) -> bytes:
    data = {"releases": dict((alloc, pending[alloc].to_json()) for alloc in sorted(pending))}
    return json_bytes(data)


def save_releases(state_path: str, pending: Mapping[str, PendingRelease]) -> None:
    path = os.path.join(state_path, RELEASES_NAME)
    if pending:
        write_atomic(path, releases_bytes(pending), 0o600, 0o700, owner_from_dir=True)
    else:
        remove_file(path)


def quarantine(state_path: str, now: float) -> str:
    """Set an unreadable ``releasing.json`` aside (never deleted) and write the marker."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    path = os.path.join(state_path, RELEASES_NAME)
    aside = "%s.unreadable-%s" % (path, stamp)
    number = 1
    while os.path.lexists(aside):  # never replace an earlier one set aside in the same second
        number += 1
        if number > MAX_ASIDE:
            raise StateFileError(aside, "%d copies of %s set aside in one second; refusing to try more"
                                 % (MAX_ASIDE, RELEASES_NAME))
        aside = "%s.unreadable-%s-%d" % (path, stamp, number)
    if os.path.lexists(path):
        os.rename(path, aside)
    write_atomic(os.path.join(state_path, MARKER_NAME), ("%s\n" % os.path.basename(aside)).encode(), 0o600, 0o700,
                 owner_from_dir=True)
    return aside


def clear_marker(state_path: str) -> None:
    remove_file(os.path.join(state_path, MARKER_NAME))

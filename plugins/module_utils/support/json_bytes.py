# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way a file the collection writes is turned into JSON bytes.

Two shapes, both the standard library's ``json.dumps``:

* **compact** (``indent=None``, the default): ``json.dumps(value, sort_keys=True, separators=(",", ":"))``
  and a newline, for the node's own state files, which only a program reads (the ledger, the pending
  releases, the stored input, maintenance, health, the last pass, a fakehw host's slice records). This is
  ``json``'s C encoder, the fastest on every Python the node may have (docs/performance.md, "Records and
  dataclasses; JSON"); the keys sorted, so the same value always makes the same bytes and a file that did
  not change is not rewritten.
* **indented** (``indent=2``): for the CDI specs in ``/etc/cdi``, which people read; ``domain/cdi/hold_spec``
  passes the options its bytes have always had (keys in the spec's order, text not escaped to ASCII), so
  a spec on disk does not change. ``json`` indents in C from Python 3.13, in Python before it.

The event journal is not written here: its lines and the canonical bytes a signature covers are the
journal's own format (``state/events.py``).
"""

from __future__ import annotations

import json
from typing import Any, Optional

COMPACT = (",", ":")


def json_bytes(value: Any, indent: Optional[int] = None, sort_keys: bool = True, ensure_ascii: bool = True) -> bytes:
    """``value`` as JSON text and a newline, in UTF-8: compact unless ``indent`` is given."""
    if indent is None:
        text = json.dumps(value, sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=COMPACT)
    else:
        text = json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return (text + "\n").encode("utf-8")

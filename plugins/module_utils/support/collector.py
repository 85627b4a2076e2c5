# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Python's cyclic collector run less often while a process makes many objects at once.

A collection walks every object it tracks, and it runs each time some hundreds of new objects have been
made; a step that makes hundreds of thousands of objects which live until it ends walks them, and what was
there before, again and again. Two callers (docs/performance.md):

* a pass (``entry/converge.py``): the input and the plan of the largest section, walked some 280 times a
  bind, near a tenth of its CPU;
* the controller's payload build (``plugins/plugin_utils/node_library.py``): ansible-core parses every file
  the module can reach into syntax trees, and each collection walked everything Ansible had loaded too
  (``freeze``: that heap is frozen first).

The build's and the pass's garbage is still collected, and everything is put back after, because both
run in processes that live on (the root helper, Ansible's worker)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def fewer_collections(young: int = 20000, freeze: bool = False) -> Iterator[None]:
    """The young generation collected at ``young`` new objects (or the process's own threshold, if higher)
    inside the block. With ``freeze``, what exists before the block is frozen (no collection walks it) unless
    the heap is frozen already, and thawed after; a heap another caller froze is left frozen."""
    before = gc.get_threshold()
    thaw = freeze and gc.get_freeze_count() == 0
    if thaw:
        gc.freeze()
    gc.set_threshold(max(before[0], young), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if thaw:
            gc.unfreeze()

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Regular expressions compiled on first use.

Every module run imports module_utils afresh, and compiling its 62 module-level patterns cost 3 ms of a
no-op that uses a handful of them (a node without Kubernetes, vendor specs or runtimes to probe never
needs theirs). ``lazy_pattern(source, flags)`` stands where ``re.compile(source, flags)`` stood: its
``pattern`` is the source, and its first ``match``, ``fullmatch``, ``search``, ``sub``, ``subn``,
``findall``, ``finditer`` or ``split`` compiles it and puts the compiled pattern's own methods in their
place, so every later call is the ``re`` method itself, with no wrapper between.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

_METHODS = ("match", "fullmatch", "search", "sub", "subn", "findall", "finditer", "split")


class LazyPattern:
    """A regular expression compiled when first used (see the module docstring)."""

    __slots__ = ("pattern", "flags") + _METHODS
    match: Callable[..., Any]
    fullmatch: Callable[..., Any]
    search: Callable[..., Any]
    sub: Callable[..., Any]
    subn: Callable[..., Any]
    findall: Callable[..., Any]
    finditer: Callable[..., Any]
    split: Callable[..., Any]

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        for name in _METHODS:
            setattr(self, name, functools.partial(self._first_call, name))

    def compiled(self) -> Any:
        """The compiled pattern (compiled now if it was not yet; ``re`` caches it)."""
        compiled = re.compile(self.pattern, self.flags)
        for name in _METHODS:
            setattr(self, name, getattr(compiled, name))
        return compiled

    def _first_call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.compiled(), name)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # groups, groupindex, ...: the compiled pattern's
        if name.startswith("__"):  # copy, pickle and hasattr probes are this object's, never a compile
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return "lazy_pattern(%r)" % self.pattern


def lazy_pattern(pattern: str, flags: int = 0) -> LazyPattern:
    """``re.compile(pattern, flags)``, compiled on first use."""
    return LazyPattern(pattern, flags)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Speed tricks: every place the collection does a thing otherwise than the plain way because the plain way was
measured too slow, and nothing else.

The budget they serve: a task that changes nothing costs at most 5 % more than Ansible's own run of the same
options (``noop small/echo`` <= 1.05 at 16 holds, 1.10 at 256) and, without the role, at most 1.7 times ``ping``
(docs/performance.md, "Targets"). Every module run imports the converger afresh on the node, so what an import
costs is paid by every task on every host. A trick stays only while its figure, measured on every Python a node
may have (3.8 to 3.13; the controller's 3.11 to 3.13 for the payload build) by ``hack/measure_speed.py``, shows
that it pays: docs/performance.md, "Speed tricks, measured (issue 47)", holds the figures and each verdict, and
the code's comments give only the reasons. Each trick names its plain way, so that dropping it is putting that
back:

- ``compile_once()``: a module run from Ansible's zip payload compiles each of the collection's files once, not
  twice (plain: nothing; ``zipimport`` compiles each file twice);
- ``fewer_collections()``: the collector runs less often while a pass, or the controller's payload build, makes
  many objects (plain: nothing);
- ``lazy_pattern()``: a module-level regular expression is compiled when first used (plain: ``re.compile``);
- ``on_first_call()``: a record's ``__init__`` is compiled when the first record of its class is made (plain:
  when the class is declared, as ``dataclasses`` does).

Two live elsewhere, for a reason of their own: ``support/records.py`` itself (records instead of
``dataclasses``: the shape of every class), and ``plugins/modules/node_library.py``'s collector kept off while
it imports the library (its payload is ansible-core's own and ``node/library.py``, nothing of this module).
Dropped by its figures (issue 47): freezing what a module run imported before its ``main``.
"""

from __future__ import annotations

import functools
import gc
import importlib.machinery
import posixpath
import re
import sys
import zipimport
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover - type checkers only
    from types import ModuleType

# -- compile_once: the zip payload's files compiled once -------------------------------------------------------

PACKAGE = __name__.rpartition(".support.")[0]  # ansible_collections.bcd.devices.plugins.module_utils


class _ZipFinder:
    """A ``sys.meta_path`` finder for ``PACKAGE``'s modules in a zip.

    To make a module's spec, ``zipimporter.find_spec`` asks the importer for the module's file name, and
    ``zipimporter.get_filename`` finds it by compiling the module's source; the import then compiles it again to
    run it (CPython 3.8 to 3.13). This finder makes the same spec ``zipimport`` would, with the file name it
    already knows, and leaves loading to ``zipimport``, which compiles the source once."""

    prefix = PACKAGE + "."

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        # pylint: disable=unused-argument
        if not fullname.startswith(self.prefix) or not path:
            return None
        last = fullname.rpartition(".")[2]
        for entry in path:
            loader = sys.path_importer_cache.get(entry)
            if not isinstance(loader, zipimport.zipimporter):
                continue  # not a directory in a zip: the usual finders answer
            try:
                package = loader.is_package(last)
            except zipimport.ZipImportError:
                continue  # not in this directory of the zip
            # a zip's member path, joined as zipimport joins it on the node (POSIX); nothing is opened
            location = posixpath.join(entry, last)
            # a ModuleSpec made here, not importlib.util.spec_from_loader: before 3.10 that asks get_filename
            # whatever origin it is given
            spec = importlib.machinery.ModuleSpec(
                # a zipimporter is a loader (it has exec_module since 3.10, load_module before), though
                # typeshed's stub does not say it is one
                fullname, loader,  # type: ignore[arg-type]
                origin=posixpath.join(location, "__init__.py") if package else location + ".py", is_package=package)
            spec.has_location = True  # __file__, as zipimport sets it
            if package:
                spec.submodule_search_locations = [location]
                # the finder of the package's own directory, as Python's path finder would make it
                sys.path_importer_cache.setdefault(location, zipimport.zipimporter(location))
            return spec
        return None


def compile_once() -> bool:
    """Put the finder in front of ``sys.meta_path`` when this module was imported from a zip (Ansible's payload, a
    module run without the node library), and say so; elsewhere (the node library, ``bcd-holds``, the root
    helper, the tests: files whose byte code is cached) do nothing. Each module calls it before it imports the
    rest of the collection. Idempotent."""
    if not isinstance(globals().get("__loader__"), zipimport.zipimporter):
        return False
    if not any(isinstance(finder, _ZipFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ZipFinder())
    return True


# -- fewer_collections: the cyclic collector walks less --------------------------------------------------------

@contextmanager
def fewer_collections(young: int = 20000, freeze: bool = False) -> Iterator[None]:
    """The young generation collected at ``young`` new objects (or the process's own threshold, if higher) inside
    the block: a step that makes hundreds of thousands of objects that live until it ends (a pass over a large
    section; the controller's payload build, ansible-core parsing every file the module can reach) would walk
    them, and what was there before, again and again. With ``freeze``, what exists before the block is frozen
    (no collection walks it) unless the heap is frozen already, and thawed after; a heap another caller froze is
    left frozen. The block's own garbage is still collected, and everything is put back after, because both
    callers run in processes that live on (the root helper, Ansible's worker)."""
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


# -- lazy_pattern: regular expressions compiled on first use -----------------------------------------------------

_METHODS = ("match", "fullmatch", "search", "sub", "subn", "findall", "finditer", "split")


class LazyPattern:
    """A regular expression compiled when first used: a node without Kubernetes, vendor specs or runtimes to
    probe never uses most of the collection's module-level patterns. It stands where ``re.compile(source,
    flags)`` stood: its ``pattern`` is the source, and its first ``match``, ``fullmatch``, ``search``, ``sub``,
    ``subn``, ``findall``, ``finditer`` or ``split`` compiles it and puts the compiled pattern's own methods in
    their place, so every later call is the ``re`` method itself, with no wrapper between."""

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

    def compiled(self) -> re.Pattern[str]:
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


# -- on_first_call: a record's __init__ compiled when first called -------------------------------------------------

def on_first_call(cls: type, name: str, make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A stand-in for ``cls``'s method ``name``: its first call makes the method (``make()``: a record's compiled
    ``__init__``), puts it in its own place on ``cls`` and calls it, so every call after it is the made method
    itself. A module run declares every record class it imports and makes records of a third of them."""
    made: List[Callable[..., Any]] = []

    def first_call(*args: Any, **kwargs: Any) -> Any:
        if not made:
            made.append(make())
            if cls.__dict__.get(name) is first_call:
                type.__setattr__(cls, name, made[0])
        return made[0](*args, **kwargs)

    return first_call

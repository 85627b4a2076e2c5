# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's modules compiled once, not twice, when a module runs from Ansible's zip payload.

A module as Ansible ships it (no node library) runs from an AnsiballZ payload, and Python imports its
``module_utils`` with ``zipimport``. To make a module's spec, ``zipimporter.find_spec`` asks the importer
for the module's file name, and ``zipimporter.get_filename`` finds it by compiling the module's source; the
import then compiles it again to run it (CPython 3.8 to 3.13, every ``zipimport``). For this collection's
70-odd files that second compile is some 0.08 s of CPU on the node in every task on every host
(docs/performance.md, "Without the role").

``compile_once()``, called by each module before it imports the rest of the collection, puts a finder in
front of ``sys.meta_path`` that answers only for this collection's ``module_utils`` inside a zip: it makes
the same spec ``zipimport`` would, with the file name it already knows, and leaves loading to ``zipimport``
itself, which compiles the source once. Anywhere else (the node library, ``bcd-holds``, the root helper,
the tests) the modules are files with their bytecode cached, and it does nothing.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipimport

PACKAGE = __name__.rpartition(".entry.")[0]  # ansible_collections.bcd.devices.plugins.module_utils


class _ZipFinder:
    """A ``sys.meta_path`` finder for ``PACKAGE``'s modules in a zip (see the module's docstring)."""

    prefix = PACKAGE + "."

    def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
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
            location = os.path.join(entry, last)
            # a ModuleSpec made here, not importlib.util.spec_from_loader: before 3.10 that asks get_filename
            # whatever origin it is given
            spec = importlib.machinery.ModuleSpec(  # a zipimporter is a loader, though typeshed's stub says otherwise
                fullname, loader, origin=os.path.join(location, "__init__.py") if package else location + ".py",  # type: ignore[arg-type]
                is_package=package)
            spec.has_location = True  # __file__, as zipimport sets it
            if package:
                spec.submodule_search_locations = [location]
                # the finder of the package's own directory, as Python's path finder would make it
                sys.path_importer_cache.setdefault(location, zipimport.zipimporter(location))
            return spec
        return None


def compile_once():
    """Install the finder when this module was imported from a zip; otherwise do nothing. Idempotent."""
    if not isinstance(globals().get("__loader__"), zipimport.zipimporter):
        return False
    if not any(isinstance(finder, _ZipFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ZipFinder())
    return True

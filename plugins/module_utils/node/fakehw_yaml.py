# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PyYAML's SafeLoader, made strict for the fakehw file: a key given twice in one mapping is refused
(plain PyYAML keeps the last one silently).

PyYAML is optional on a node: ``node/fakehw.py`` imports this module only to read a file that is not JSON,
and only where PyYAML is installed, and PyYAML itself is imported on the first call. It ships no type
hints, so what it gives is ``Any`` to mypy, and the loader is a class derived from ``Any``:
``pyproject.toml`` lets this module, and no other, do that.
"""

from __future__ import annotations

from typing import Any, Dict, Set, Tuple

_YAML: Dict[str, Any] = {}


def strict_loader() -> Tuple[Any, Any]:
    """``(yaml, loader)``: PyYAML and a SafeLoader that refuses a key given twice in one mapping, made on
    first use."""
    if not _YAML:
        import yaml  # pylint: disable=import-outside-toplevel

        class _StrictLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
            """SafeLoader that refuses duplicate keys."""

        def _construct_strict_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
            keys: Set[object] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<" merges may be overridden; that is not a duplicate
                key = loader.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in keys
                except TypeError:  # an unhashable key; construct_mapping says so
                    duplicate = False
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, "duplicate key %r" % (key,), key_node.start_mark
                    )
                try:
                    keys.add(key)
                except TypeError:
                    pass
            return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

        _StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_strict_mapping)
        _YAML.update(yaml=yaml, loader=_StrictLoader)
    return _YAML["yaml"], _YAML["loader"]

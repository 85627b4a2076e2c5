# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks every field of a fakehw file goes through, and the error they raise.

``fakehw_data`` (the file's sections) and ``fakehw_mig`` (its GPUs' MIG side) both check with these, so each
refusal names the field the same way (``gpus[1].uuid: required``). Nothing here knows a section of the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.support.speed import LazyPattern

MAX_INT = 2 ** 63 - 1

GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}$")
MIG_UUID_RE = lazy_pattern(r"^MIG-[A-Za-z0-9-]{1,128}(/[0-9]{1,9}/[0-9]{1,9})?$")
# Names and ids: printable, no whitespace at the ends, no control characters.
TEXT_RE = lazy_pattern(r"^[^\x00-\x1f\x7f]{1,512}$")
TEXT_SHAPE = "a non-empty string without control characters"


class FakeHwError(BcdError):
    """The fakehw file cannot be read or is not valid. The message names the
    file or the field and is fit to show to a user."""


def err(where: str, message: str) -> FakeHwError:
    return FakeHwError("%s: %s" % (where, message))


def mapping(value: object, where: str, allowed: Sequence[str]) -> Dict[str, Any]:
    """``value`` when it is a mapping of the ``allowed`` fields (their values are the callers' to check)."""
    if not isinstance(value, dict):
        raise err(where, "must be a mapping, not %s" % type_name(value))
    for key in value:
        if not isinstance(key, str):
            raise err(where, "keys must be strings, not %s" % type_name(key))
        if key not in allowed:
            raise err(where, "unknown field %r (known: %s)" % (key, ", ".join(allowed)))
    return value


def checked_list(value: object, where: str) -> List[Any]:
    """``value`` when it is a list (its items are the callers' to check); empty when absent."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise err(where, "must be a list, not %s" % type_name(value))
    return value


def checked_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise err(where, "must be a non-negative integer, not %s" % type_name(value))
    if value < 0:
        raise err(where, "must be a non-negative integer, not %d" % value)
    if value > MAX_INT:
        raise err(where, "is too large")
    return value


def optional_int(value: object, where: str) -> Optional[int]:
    """A non-negative integer, None when absent."""
    return None if value is None else checked_int(value, where)


def int_or(value: object, where: str, default: int) -> int:
    """A non-negative integer, ``default`` when absent."""
    return default if value is None else checked_int(value, where)


def required_int(value: object, where: str) -> int:
    if value is None:
        raise err(where, "required")
    return checked_int(value, where)


def boolean(value: object, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise err(where, "must be true or false, not %s" % type_name(value))
    return value


def checked_text(value: object, where: str, required: bool, pattern: LazyPattern, shape: str) -> str:
    if not isinstance(value, str):
        raise err(where, "must be a string, not %s" % type_name(value))
    if value == "" and required:
        raise err(where, "required")
    if not pattern.match(value) or value != value.strip():
        raise err(where, "must be %s, not %r" % (shape, value[:80]))
    return value


def text(value: object, where: str) -> Optional[str]:
    """A name or an id (``TEXT_RE``), None when absent."""
    return None if value is None else checked_text(value, where, False, TEXT_RE, TEXT_SHAPE)


def required_text(value: object, where: str, pattern: LazyPattern = TEXT_RE, shape: str = TEXT_SHAPE) -> str:
    if value is None:
        raise err(where, "required")
    return checked_text(value, where, True, pattern, shape)


def gpu_uuid(value: object, where: str) -> str:
    return required_text(value, where, pattern=GPU_UUID_RE, shape="a GPU UUID (GPU-...)")

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Load a fakehw hardware file: the GPUs, VMs and pods of a test host.

A host is fakehw when the ``fakehw`` option names such a file (DESIGN.md,
"The hosts: real and fakehw"); everything a real host would learn from NVML,
libvirt and the kubelet comes from it instead. The file is read here, without
waiting and to a bound: JSON first; YAML needs PyYAML, which is optional
(``fakehw_yaml``). It is input like any other, so what it holds is validated
strictly (``fakehw_data``): any wrong type, missing or duplicate id, negative
number or unknown field raises ``FakeHwError`` with a message that names the
field (``gpus[1].uuid: required``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
from typing import Any, Dict, List, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_checks import FakeHwError
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_data import (
    ACTIVE_DOMAIN_STATES,
    DOMAIN_STATES,
    FakeDriver,
    FakeHw,
    fakehw_from_data,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig_fields import settle_mig_mode
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import NotRegularFile, read_regular, write_atomic
from ansible_collections.bcd.devices.plugins.module_utils.support.bounded_json import structure_problem
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes

# What a fakehw host imports of the file's model, from here as before the split.
__all__ = [
    "ACTIVE_DOMAIN_STATES",
    "DOMAIN_STATES",
    "FakeDriver",
    "FakeHw",
    "FakeHwError",
    "HAS_YAML",
    "fakehw_from_data",
    "load_fakehw",
    "parse_fakehw_text",
    "read_fakehw_data",
    "reset_fakehw_gpus",
    "write_fakehw_data",
]

# PyYAML is imported only to read a file that is not JSON (fakehw_yaml); whether it is there is
# known without importing it.
HAS_YAML = importlib.util.find_spec("yaml") is not None


# A node of 64 GPUs is some 20 KiB; PyYAML reads well under a MiB a second, and every pass reads the file.
MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 64


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey("duplicate key %r" % key)
        result[key] = value
    return result


def parse_fakehw_text(text: str, source: str = "fakehw file") -> FakeHw:
    """Parse fakehw content (JSON, else YAML) and validate it."""
    return fakehw_from_data(_parsed(text, source), source=source)


def _parsed(text: str, source: str) -> Any:
    """The content's data (any JSON or YAML value), as JSON (else YAML) reads it, not yet validated."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_pairs)
    except _DuplicateKey as exc:
        raise FakeHwError("%s: %s" % (source, exc))
    except RecursionError:
        raise FakeHwError("%s: nested too deeply" % source)
    except ValueError as json_exc:
        if not HAS_YAML:
            raise FakeHwError(
                "%s is not valid JSON (%s) and PyYAML is not installed to read it as YAML"
                % (source, json_exc)
            )
        problem = structure_problem(text.encode("utf-8", "surrogatepass"), MAX_DEPTH)  # before PyYAML reads ahead
        if problem is not None:
            raise FakeHwError("%s: %s" % (source, "nested too deeply" if problem.startswith("nested") else problem))
        from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_yaml import strict_loader  # pylint: disable=import-outside-toplevel
        yaml, loader = strict_loader()
        try:
            return yaml.load(text, Loader=loader)  # a SafeLoader
        except yaml.YAMLError as yaml_exc:
            raise FakeHwError("%s is neither valid JSON nor valid YAML: %s" % (source, _one_line(yaml_exc)))
        except RecursionError:
            raise FakeHwError("%s: nested too deeply" % source)
        except (ValueError, TypeError, OverflowError) as exc:  # a scalar PyYAML cannot convert: 10 000 digits
            raise FakeHwError("%s is neither valid JSON nor valid YAML: %s" % (source, _one_line(exc)))


def load_fakehw(path: str) -> FakeHw:
    """Read and validate the fakehw file at ``path``. Raises ``FakeHwError``. The file is opened without
    waiting (a FIFO in its place would block every pass) and must be a regular file."""
    return parse_fakehw_text(_read_text(path), source="fakehw file %s" % path)


def _read_text(path: str) -> str:
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile:
        raise FakeHwError("fakehw file %s is not a regular file" % path)
    except OSError as exc:
        raise FakeHwError("cannot read fakehw file %s: %s" % (path, exc.strerror or exc))
    if len(raw) > MAX_FILE_BYTES:
        raise FakeHwError("fakehw file %s is larger than %d bytes" % (path, MAX_FILE_BYTES))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FakeHwError("fakehw file %s is not UTF-8: %s" % (path, exc))


def reset_fakehw_gpus(path: str, uuids: List[str]) -> Dict[str, bool]:
    """A GPU reset on a fakehw node: each GPU of ``uuids`` loses its ``health`` faults in the hardware file, as a
    reset clears NVML's pending page retirements and row remappings, unless its ``health.reset_clears`` is false (a
    GPU a reset does not help: its faults stay), and its pending MIG mode (``mig_mode_pending``) takes effect
    (docs/fakehw.md, "MIG"). ``{uuid: whether its faults were cleared}``. The file is
    validated first and written again as JSON, atomically, with its mode; ``FakeHwError`` when it is not valid or
    does not list a GPU."""
    source = "fakehw file %s" % path
    data, _hw = read_fakehw_data(path)  # the file as a pass reads it, or the reason it is not
    listed = dict((item.get("uuid"), item) for item in (data or {}).get("gpus") or [])
    missing = [uuid for uuid in uuids if uuid not in listed]
    if missing:
        raise FakeHwError("%s does not list %s" % (source, ", ".join(missing)))
    cleared: Dict[str, bool] = {}
    for uuid in uuids:
        health = listed[uuid].get("health") or {}
        cleared[uuid] = health.get("reset_clears") is not False
        if cleared[uuid]:
            listed[uuid].pop("health", None)
        settle_mig_mode(listed[uuid], reboot=False)
    write_fakehw_data(path, data)
    return cleared


def read_fakehw_data(path: str) -> Tuple[Any, FakeHw]:
    """The fakehw file at ``path`` as read (its data, to change and write back with ``write_fakehw_data``) and what
    it says. Raises ``FakeHwError`` as ``load_fakehw`` does."""
    source = "fakehw file %s" % path
    data = _parsed(_read_text(path), source)
    return data, fakehw_from_data(data, source=source)


def write_fakehw_data(path: str, data: Any) -> None:
    """Write ``data`` to the fakehw file at ``path`` again as JSON, atomically, with its mode (``OSError`` when it
    cannot be written)."""
    content = json_bytes(data, indent=2, sort_keys=False, ensure_ascii=False)
    write_atomic(path, content, stat.S_IMODE(os.stat(path).st_mode))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

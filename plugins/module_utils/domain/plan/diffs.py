# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``--diff`` of a plan's files and slices, as a person reads it.

Ansible renders an entry ``{before, after, before_header, after_header}`` as one unified diff, so each
entry here is one diff a person can read:

* a file that several steps touch (a hold released and bound again) is one entry, from what is on the
  node before the pass to what the last step leaves;
* a file removed while a file of the same kind is created for an allocation that takes one of its
  devices (a GPU moving between allocations) is one entry from the old file to the new one, so the diff
  shows the lines that differ, not two whole specs;
* a slice's settings are listed in one fixed order (``slices.PROPERTY_ORDER``), so a line does not move
  when nothing changed;
* a CDI spec shows what bcd decides whole (its devices and their edits, its env lines, its annotations) and
  the vendor's common edits, copied from NVIDIA's spec into every hold, as one line: how many mounts, hooks,
  device nodes, ... from which vendor spec, and a digest of them all, so the line changes when they do
  (``reviewed_spec``), each device on a line of its own (``review_json``). A new hold's diff is then some 20
  lines, not some 600. ``full`` (the module's ``diff_detail: full``) shows the file as it is on disk, every
  line; the file written is always whole."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import PROPERTY_ORDER

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.actions import Action, FileChange, SliceOp, SpecAside

Diff = Dict[str, str]  # one --diff entry: before_header, after_header, before, after

# The names the summary gives a spec's edits (CDI's keys), in the order it lists them.
EDIT_NAMES = (("deviceNodes", "device node"), ("mounts", "mount"), ("hooks", "hook"),
              ("additionalGIDs", "additional GID"), ("intelRdt", "intelRdt setting"))
VENDOR_LINE = "vendor common edits"


def _text(content: Optional[bytes]) -> str:
    return (content or b"").decode("utf-8", "replace")


def _count(value: object) -> int:
    return len(value) if isinstance(value, (list, dict)) else 1


def reviewed_spec(content: Optional[bytes], vendor_path: Optional[str] = None) -> str:
    """A CDI spec's text as ``--diff`` shows it: the spec with its common ``containerEdits`` other than ``env``
    (the vendor's, which bcd copies and never decides) replaced by one line that counts them, names the vendor
    spec and carries a digest of them. A spec that is not such JSON (a damaged one) is shown as it is."""
    text = _text(content)
    try:
        spec = json.loads(text)
    except ValueError:
        return text
    edits = spec.get("containerEdits") if isinstance(spec, dict) else None
    if not isinstance(edits, dict):
        return text
    vendor = dict((key, value) for key, value in edits.items() if key != "env")
    if not vendor:
        return text
    named = dict(EDIT_NAMES)
    order = [key for key, _name in EDIT_NAMES if key in vendor] + sorted(key for key in vendor if key not in named)
    counts = ", ".join("%d %s%s" % (_count(vendor[key]), named.get(key, key), "" if _count(vendor[key]) == 1 else "s")
                       for key in order)
    digest = hashlib.sha256(json.dumps(vendor, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
    shown: Dict[str, Any] = {}
    for key, value in spec.items():
        if key == "containerEdits":
            value = dict((name, edit) for name, edit in edits.items() if name == "env")
            value[VENDOR_LINE] = "%s from %s, sha256 %s (diff_detail: full shows them)" % (
                counts, vendor_path or "the vendor spec", digest[:16])
        shown[key] = value
    return review_json(shown) + "\n"


def review_json(value: object, depth: int = 0) -> str:
    """JSON laid out for a diff a person reads: the spec's own keys one a line (annotations, env lines), each
    device on one line of its own, so a change shows as the lines it changes and a new hold as a screenful."""
    pad = "  " * depth
    if isinstance(value, dict) and value and depth <= 1:
        items = ["%s  %s: %s" % (pad, json.dumps(key, ensure_ascii=False), review_json(item, depth + 1))
                 for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    scalars = isinstance(value, list) and all(not isinstance(item, (dict, list)) for item in value)
    if isinstance(value, list) and value and (depth <= 1 or (scalars and depth <= 2)):
        return "[\n" + ",\n".join(pad + "  " + review_json(item, depth + 1) for item in value) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


class _Shown:
    """How a plan's files are shown: specs reviewed (``reviewed_spec``) unless ``full``."""

    def __init__(self, full: bool = False, vendor_path: Optional[str] = None) -> None:
        self.full, self.vendor_path = full, vendor_path

    def __call__(self, kind: str, content: Optional[bytes]) -> str:
        if self.full or kind != "cdi" or content is None:
            return _text(content)
        return reviewed_spec(content, self.vendor_path)


def stable_settings(text: Optional[str]) -> str:
    """A slice's ``key=value`` lines in ``PROPERTY_ORDER``, other keys after them by name, huge page limits last."""
    def key(line: str) -> Tuple[int, int, str]:
        name = line.split("=", 1)[0]
        if name.startswith("hugetlb."):
            return (2, 0, name)
        if name in PROPERTY_ORDER:
            return (0, PROPERTY_ORDER.index(name), name)
        return (1, 0, name)
    return "".join(line + "\n" for line in sorted((text or "").splitlines(), key=key))


def _slice_diff(op: SliceOp) -> Diff:
    entry = op.diff()
    entry["before"], entry["after"] = stable_settings(entry["before"]), stable_settings(entry["after"])
    return entry


class _File:
    """One node file across the steps of a plan: its content before the pass and after the last step."""

    def __init__(self, change: Union[FileChange, SpecAside], devices: Iterable[str]) -> None:
        self.kind, self.path = change.kind, change.path
        self.before, self.after = change.before, change.after
        self.devices = set(devices)

    def entry(self, shown: _Shown) -> Diff:
        return {"before_header": self.path if self.before is not None else "%s (absent)" % self.path,
                "after_header": self.path if self.after is not None else "%s (removed)" % self.path,
                "before": shown(self.kind, self.before), "after": shown(self.kind, self.after)}


def _moved(removed: _File, created: _File, shown: _Shown) -> Diff:
    return {"before_header": "%s (removed)" % removed.path, "after_header": "%s (created)" % created.path,
            "before": shown(removed.kind, removed.before), "after": shown(created.kind, created.after)}


def plan_diffs(actions: Iterable[Action], full: bool = False, vendor_path: Optional[str] = None) -> List[Diff]:
    """The ``--diff`` entries of ``actions``' files and slices, in the order the plan first touches them; specs
    reviewed (their vendor edits as one line, ``reviewed_spec``) unless ``full``."""
    shown = _Shown(full, vendor_path)
    slots: List[Union[_File, Diff]] = []  # a _File, or a finished entry (a slice, a spec set aside)
    files: Dict[str, _File] = {}
    for action in actions:
        device_ids = getattr(action, "device_ids", ())  # the kinds that name devices carry them (actions/)
        for change in action.node_files():
            if change.change not in ("create", "update", "remove"):  # a damaged spec set aside: its own entry
                slots.append(change.diff())
            elif change.path in files:
                files[change.path].after = change.after
                files[change.path].devices.update(device_ids)
            else:
                files[change.path] = _File(change, device_ids)
                slots.append(files[change.path])
        op = action.slice_op()
        if op is not None:
            slots.append(_slice_diff(op))
    # a removed file and a created one of the same kind that share a device: one diff, old to new
    pairs: Dict[int, _File] = {}
    taken: Set[int] = set()
    for removed in (f for f in slots if isinstance(f, _File) and f.before is not None and f.after is None):
        for created in (f for f in slots if isinstance(f, _File) and f.before is None and f.after is not None):
            if created.kind == removed.kind and id(created) not in taken and removed.devices & created.devices:
                pairs[id(removed)] = created
                taken.add(id(created))
                break
    entries: List[Diff] = []
    for slot in slots:
        if not isinstance(slot, _File):
            entries.append(slot)
        elif id(slot) in pairs:
            entries.append(_moved(slot, pairs[id(slot)], shown))
        elif id(slot) not in taken and slot.before != slot.after:
            entries.append(slot.entry(shown))
    return entries

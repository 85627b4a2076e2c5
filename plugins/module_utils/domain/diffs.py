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
  when nothing changed."""

from __future__ import annotations

from typing import Dict

from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import PROPERTY_ORDER


def _text(content):
    return (content or b"").decode("utf-8", "replace")


def stable_settings(text):
    """A slice's ``key=value`` lines in ``PROPERTY_ORDER``, other keys after them by name, huge page limits last."""
    def key(line):
        name = line.split("=", 1)[0]
        if name.startswith("hugetlb."):
            return (2, 0, name)
        if name in PROPERTY_ORDER:
            return (0, PROPERTY_ORDER.index(name), name)
        return (1, 0, name)
    return "".join(line + "\n" for line in sorted((text or "").splitlines(), key=key))


def _slice_diff(op):
    entry = op.diff()
    entry["before"], entry["after"] = stable_settings(entry["before"]), stable_settings(entry["after"])
    return entry


class _File:
    """One node file across the steps of a plan: its content before the pass and after the last step."""

    def __init__(self, change, devices):
        self.kind, self.path = change.kind, change.path
        self.before, self.after = change.before, change.after
        self.devices = set(devices)

    def entry(self):
        return {"before_header": self.path if self.before is not None else "%s (absent)" % self.path,
                "after_header": self.path if self.after is not None else "%s (removed)" % self.path,
                "before": _text(self.before), "after": _text(self.after)}


def _moved(removed, created):
    return {"before_header": "%s (removed)" % removed.path, "after_header": "%s (created)" % created.path,
            "before": _text(removed.before), "after": _text(created.after)}


def plan_diffs(actions):
    """The ``--diff`` entries of ``actions``' files and slices, in the order the plan first touches them."""
    slots = []  # a _File, or a finished entry (a slice, a spec set aside)
    files = {}  # type: Dict[str, _File]
    for action in actions:
        device_ids = getattr(action, "device_ids", ())  # the kinds that name devices carry them (actions.py)
        for change in action.node_files():
            if change.change not in ("create", "update", "remove"):  # a damaged spec set aside: its own entry
                slots.append(change.diff())
            elif change.path in files:
                files[change.path].after = change.after
                files[change.path].devices.update(device_ids)
            else:
                files[change.path] = _File(change, device_ids)
                slots.append(files[change.path])
        if action.slice_op() is not None:
            slots.append(_slice_diff(action.slice_op()))
    # a removed file and a created one of the same kind that share a device: one diff, old to new
    pairs, taken = {}, set()
    for removed in (f for f in slots if isinstance(f, _File) and f.before is not None and f.after is None):
        for created in (f for f in slots if isinstance(f, _File) and f.before is None and f.after is not None):
            if created.kind == removed.kind and id(created) not in taken and removed.devices & created.devices:
                pairs[id(removed)] = created
                taken.add(id(created))
                break
    entries = []
    for slot in slots:
        if not isinstance(slot, _File):
            entries.append(slot)
        elif id(slot) in pairs:
            entries.append(_moved(slot, pairs[id(slot)]))
        elif id(slot) not in taken and slot.before != slot.after:
            entries.append(slot.entry())
    return entries

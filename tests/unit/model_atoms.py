# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What both model-based tests (``test_model_invariants``: the converger; ``test_model_helper``: root's helper
beside a hostile account) say about atoms and the devices sections they send: an atom's class and GPU, when
two atoms claim one device, an assignment as the control plane sends it, and a generation's edits applied."""

from __future__ import annotations

import copy


def device_class(atom):
    return "gpu.mig" if "/gi" in atom else "gpu.slot" if "/s" in atom else "gpu"


def gpu_of(atom):
    return atom.split("/")[0]


def conflict(one, other):
    """Two atoms claim the same device: equal, or a whole GPU and a part of it."""
    return one == other or (gpu_of(one) == gpu_of(other) and ("/" not in one or "/" not in other))


def assignment(allocation_id, atoms, binding, limits):
    data = {"allocation_id": allocation_id, "reservation_id": "rsv_" + allocation_id, "binding": binding,
            "devices": [{"id": atom, "device_class": device_class(atom)} for atom in atoms]}
    if limits:
        data["limits"] = dict(limits)
    return data


def booked(limits, field_name):
    return int((limits or {}).get(field_name) or 0)


def edited(wanted, edits):
    """``wanted`` (allocation -> assignment) after a generation's ``edits``: ``("add", id, atoms, binding,
    limits)``, ``("move", id, atoms)``, ``("rebind", id, binding)``, ``("limits", id, limits or None)``,
    ``("drop", id)``; an edit of an allocation not wanted does nothing."""
    wanted = copy.deepcopy(wanted)
    for edit in edits:
        kind, allocation_id = edit[0], edit[1]
        if kind == "add":
            wanted.pop(allocation_id, None)
            wanted[allocation_id] = assignment(allocation_id, edit[2], edit[3], edit[4])
        elif allocation_id not in wanted:
            continue
        elif kind == "move":
            wanted[allocation_id]["devices"] = [{"id": a, "device_class": device_class(a)} for a in edit[2]]
        elif kind == "rebind":
            wanted[allocation_id]["binding"] = edit[2]
        elif kind == "limits":
            wanted[allocation_id].pop("limits", None)
            if edit[2]:
                wanted[allocation_id]["limits"] = dict(edit[2])
        elif kind == "drop":
            del wanted[allocation_id]
    return wanted

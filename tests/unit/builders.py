# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The holds the unit tests send, built in one place.

``hold`` is one assignment as the control plane sends it (the module's ``devices`` option,
``bcd-holds converge --spec``); ``mig``, ``slot`` and ``kube`` are its common variants; and
``request`` is a hold as the unprivileged side sends it to the root helper
(``domain.input.assignment.hold_request``). Any field given by name replaces the built one in place,
so a test can send anything, hostile values included.
"""

from __future__ import annotations

from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A

# ``device_class`` values that are not a class: the class the id names, or no key at all.
CLASS_OF_ID = object()
NO_CLASS = object()


def class_of(device_id):
    """The class a device id names: ``gpu.mig`` for ``<gpu>/gi<n>/ci<n>``, ``gpu.slot`` for
    ``<gpu>/s<n>``, ``gpu`` otherwise."""
    if "/gi" in device_id:
        return "gpu.mig"
    if "/s" in device_id:
        return "gpu.slot"
    return "gpu"


def device(device_id, device_class=CLASS_OF_ID):
    """One entry of a hold's ``devices``."""
    if device_class is NO_CLASS:
        return {"id": device_id}
    if device_class is CLASS_OF_ID:
        device_class = class_of(device_id)
    return {"id": device_id, "device_class": device_class}


def hold(allocation_id, *device_ids, device_class=CLASS_OF_ID, **fields):
    """A plain hold (``BINDING_HOLD``) of ``device_ids``, reservation ``rsv_<allocation_id>``.

    Each device gets the class its id names unless ``device_class`` names one for all (or is
    ``NO_CLASS``); ``binding``, ``reservation_id``, ``devices``, ``limits``, ``env`` or any other
    field given replaces or adds to what is built.
    """
    data = {"allocation_id": allocation_id, "reservation_id": "rsv_%s" % (allocation_id,), "binding": "BINDING_HOLD",
            "devices": [device(i, device_class) for i in device_ids]}
    data.update(fields)
    return data


def mig(allocation_id, *device_ids, **fields):
    """A hold of MIG instances, each ``device_class: gpu.mig`` whatever its id."""
    return hold(allocation_id, *device_ids, device_class="gpu.mig", **fields)


def slot(allocation_id, *device_ids, **fields):
    """A hold of slots, each ``device_class: gpu.slot`` whatever its id."""
    return hold(allocation_id, *device_ids, device_class="gpu.slot", **fields)


def kube(allocation_id, *device_ids, **fields):
    """A Kubernetes hold (``BINDING_KUBERNETES``)."""
    return hold(allocation_id, *device_ids, binding="BINDING_KUBERNETES", **fields)


def request(allocation_id="a1", device_id=GPU_A, **fields):
    """A hold as the unprivileged side sends it to the root helper: one device without a class,
    ``generation`` 3, reservation ``r-<allocation_id>``, no limits and no env unless given."""
    data = {"allocation_id": allocation_id, "reservation_id": "r-%s" % (allocation_id,), "generation": 3,
            "binding": "BINDING_HOLD", "devices": [device(device_id, NO_CLASS)], "limits": None, "env": []}
    data.update(fields)
    return data

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to write instead, for a refusal caused by a bad id or device class.

A refusal's message is the spec page's, exactly (``nvidia0 not present``, ``device class GPU
cannot be held``). Shown to a person (the module's warnings, ``bcd-holds converge``), it is
followed by what the node does have: its GPUs (index and UUID), a GPU's MIG instances, or the
device classes a hold may name. The events and ``failures`` keep the bare message.
"""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.domain.atoms import CLASSES
from ansible_collections.bcd.devices.plugins.module_utils.domain.refusals import Reason

# A node lists at most this many GPUs or MIG instances in a hint; the rest are counted.
MAX_LISTED = 16


def _listed(items):
    shown = ", ".join(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        shown += " and %d more" % (len(items) - MAX_LISTED)
    return shown


def node_gpus(inventory):
    """``GPU <index> <uuid>`` for each GPU, or why there are none to name."""
    if not inventory.gpus:
        return "this node lists no GPU" + (" (%s)" % inventory.error if inventory.error else "")
    gpus = sorted(inventory.gpus, key=lambda gpu: (gpu.index, gpu.uuid))
    return "this node has " + _listed(["GPU %d %s" % (gpu.index, gpu.uuid) for gpu in gpus])


def refusal_hint(reason, message, inventory):
    """The hint that follows ``message`` ("; ..."), or "" when there is nothing to add."""
    if reason == Reason.UNSUPPORTED_DEVICE and message.startswith("device class ") and message.endswith(" cannot be held"):
        return "; a device_class is one of %s (empty reads as gpu)" % ", ".join(CLASSES)
    if reason != Reason.DEVICE_MISSING:
        return ""
    if message.endswith(" not present"):
        return "; " + node_gpus(inventory)
    uuid, sep, _rest = message.partition(" has no MIG instance ")
    if sep:
        gpu = inventory.gpu(uuid)
        if gpu is None:
            return ""
        if not gpu.mig:
            return "; %s has no MIG instances (MIG mode off, or none created)" % uuid
        instances = sorted(gpu.mig, key=lambda inst: (inst.gi, inst.ci))
        return "; %s has %s" % (uuid, _listed(["gi%d/ci%d" % (inst.gi, inst.ci) for inst in instances]))
    return ""

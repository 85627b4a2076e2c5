# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to write instead, for a refusal caused by a bad id, device class or binding; a huge page size as a person
books it.

A refusal's message is the spec page's, exactly (``nvidia0 not present``, ``device class GPU
cannot be held``, ``binding HOLD is not supported``). Shown to a person (the module's warnings,
``bcd-holds converge``), it is followed by what to write instead where that can be told (the
canonical spelling of an id, the device class an id looks like, the UUID of a GPU named by its
index, the binding meant) and by what the node does have: its GPUs (index and UUID), a GPU's MIG
instances, the device classes a hold may name, the bindings it takes. The events and
``failures`` keep the bare message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import BINDING_HOLD, BINDING_KUBERNETES
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import CLASS_MIG, CLASS_SLOT, CLASSES, MIG_ID_RE, SLOT_ID_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

BINDINGS = (BINDING_HOLD, BINDING_KUBERNETES)
# The words a person may write for a class: "GPU", "mig", "slot".
CLASS_WORDS = {"gpu": "gpu", "mig": CLASS_MIG, "gpu.mig": CLASS_MIG, "slot": CLASS_SLOT, "gpu.slot": CLASS_SLOT}
# Any spelling of a MIG instance or slot id a person may write: upper case, leading zeros.
_LOOSE_MIG_RE = lazy_pattern(r"^([^/]+)/gi([0-9]{1,6})/ci([0-9]{1,6})$", re.IGNORECASE)
_LOOSE_SLOT_RE = lazy_pattern(r"^([^/]+)/s([0-9]{1,6})$", re.IGNORECASE)
_INDEX_RE = lazy_pattern(r"^[0-9]{1,6}$")

# A node lists at most this many GPUs or MIG instances in a hint; the rest are counted.
MAX_LISTED = 16


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        shown += " and %d more" % (len(items) - MAX_LISTED)
    return shown


def node_gpus(inventory: Inventory) -> str:
    """``GPU <index> <uuid>`` for each GPU, or why there are none to name."""
    if not inventory.gpus:
        return "this node lists no GPU" + (" (%s)" % inventory.error if inventory.error else "")
    gpus = sorted(inventory.gpus, key=lambda gpu: (gpu.index, gpu.uuid))
    return "this node has " + _listed(["GPU %d %s" % (gpu.index, gpu.uuid) for gpu in gpus])


def _gpu_spelled(uuid: str, inventory: Inventory) -> str:
    """The node's spelling of a GPU UUID written in another case, else the UUID as written."""
    for gpu in inventory.gpus:
        if gpu.uuid.lower() == uuid.lower():
            return gpu.uuid
    return uuid


def canonical_part(device_id: str, inventory: Inventory) -> Optional[Tuple[str, str]]:
    """``(device_class, id)`` a loosely written MIG instance or slot id stands for (``GPU-a/GI01/CI0`` is
    ``gpu.mig``, ``GPU-a/gi1/ci0``), or None when it is neither."""
    match = _LOOSE_MIG_RE.fullmatch(device_id)
    if match:
        canonical = "%s/gi%d/ci%d" % (_gpu_spelled(match.group(1), inventory), int(match.group(2)), int(match.group(3)))
        return (CLASS_MIG, canonical) if MIG_ID_RE.fullmatch(canonical) else None
    match = _LOOSE_SLOT_RE.fullmatch(device_id)
    if match:
        canonical = "%s/s%d" % (_gpu_spelled(match.group(1), inventory), int(match.group(2)))
        return (CLASS_SLOT, canonical) if SLOT_ID_RE.fullmatch(canonical) else None
    return None


def _missing_gpu_hint(device_id: str, inventory: Inventory) -> str:
    """What to write for an id read as a whole GPU that the node does not list, or "" when nothing fits."""
    part = canonical_part(device_id, inventory)
    if part is not None:
        device_class, canonical = part
        what = "a MIG instance" if device_class == CLASS_MIG else "a slot"
        if canonical == device_id:
            return "%s looks like %s id: add device_class: %s" % (device_id, what, device_class)
        return "%s looks like %s id: write id: %s with device_class: %s" % (device_id, what, canonical, device_class)
    if _INDEX_RE.fullmatch(device_id):
        index = int(device_id)
        for gpu in inventory.gpus:
            if gpu.index == index:
                return "write id: %s for GPU %d (a hold names a GPU by its UUID)" % (gpu.uuid, index)
        return ""
    spelled = _gpu_spelled(device_id, inventory)
    if spelled != device_id:
        return "write id: %s (the UUID as the node spells it)" % spelled
    return ""


def _missing_hint(message: str, inventory: Inventory) -> str:
    """The hints for a ``device-missing`` message: one per missing device that a hint fits, then the node's
    GPUs when a missing GPU got none (the devices are joined by ``; ``, which no id can hold: ids are
    CDI names, checked before presence)."""
    hints: List[str] = []
    unexplained = False
    for part in message.split("; "):
        if part.endswith(" not present"):
            hint = _missing_gpu_hint(part[:-len(" not present")], inventory)
            if hint:
                hints.append(hint)
            else:
                unexplained = True
            continue
        uuid, sep, _rest = part.partition(" has no MIG instance ")
        gpu = inventory.gpu(uuid) if sep else None
        if gpu is None:
            continue
        if not gpu.mig:
            hints.append("%s has no MIG instances (MIG mode off, or none created)" % uuid)
        else:
            instances = sorted(gpu.mig, key=lambda inst: (inst.gi, inst.ci))
            hints.append("%s has %s" % (uuid, _listed(["gi%d/ci%d" % (inst.gi, inst.ci) for inst in instances])))
    if unexplained:
        hints.append(node_gpus(inventory))
    return "".join("; " + hint for hint in hints)


_MALFORMED_RE = lazy_pattern(r'^"(.*)" is not a (MIG instance|slot) id \(')


def _malformed_hint(message: str, inventory: Inventory) -> str:
    """What to write for a malformed MIG instance or slot id: its canonical spelling, or its class."""
    match = _MALFORMED_RE.match(message)
    if not match:
        return ""
    device_id, asked = match.group(1), CLASS_MIG if match.group(2) == "MIG instance" else CLASS_SLOT
    part = canonical_part(device_id, inventory)
    if part is None:
        if "/" not in device_id:
            return "; %s looks like a whole GPU: write device_class: gpu" % device_id
        return ""
    device_class, canonical = part
    if device_class != asked:
        what = "a MIG instance" if device_class == CLASS_MIG else "a slot"
        return "; %s looks like %s id: write id: %s with device_class: %s" % (device_id, what, canonical, device_class)
    return "; write %s (no leading zeros, lower case)" % canonical


def binding_hint(message: str) -> str:
    """The bindings the node takes, after an ``unsupported-binding`` message; the one meant first when the
    binding was written another way (``HOLD``, ``binding_hold``)."""
    takes = "this node takes binding: %s" % " or ".join(BINDINGS)
    prefix = "binding "
    suffix = " is not supported"
    if message.startswith(prefix) and message.endswith(suffix):
        written = message[len(prefix):-len(suffix)].strip().upper()
        meant = written if written.startswith("BINDING_") else "BINDING_" + written
        if meant in BINDINGS:
            return "; did you mean %s? %s" % (meant, takes)
    return "; " + takes


_HUGE_PAGES_RE = lazy_pattern(r"^ResourcesExhausted: ([0-9]+) hugepages of ([0-9]+) KiB needed, ([0-9]+) free$")
# The page sizes a hold books, by the kernel's size in KiB: how a person reads them, and the limit that books them.
PAGE_SIZES = {2048: ("2 MiB", "hugepages_2mi"), 1048576: ("1 GiB", "hugepages_1gi")}


def huge_pages_hint(message: str) -> str:
    """The spec's huge page message names the page size as the kernel's pool does (``8 hugepages of 1048576 KiB
    needed, 2 free``); said again as a person books it: ``; that is 8 × 1 GiB huge pages (hugepages_1gi),
    2 free``. "" for any other message."""
    match = _HUGE_PAGES_RE.match(message)
    if not match or int(match.group(2)) not in PAGE_SIZES:
        return ""
    size, limit = PAGE_SIZES[int(match.group(2))]
    return "; that is %s × %s huge pages (%s), %s free" % (match.group(1), size, limit, match.group(3))


def refusal_hint(reason: str, message: str, inventory: Inventory) -> str:
    """The hint that follows ``message`` ("; ..."), or "" when there is nothing to add."""
    if reason == Reason.UNSUPPORTED_BINDING:
        return binding_hint(message)
    if reason == Reason.UNSUPPORTED_DEVICE:
        if message.startswith("device class ") and message.endswith(" cannot be held"):
            written = message[len("device class "):-len(" cannot be held")]
            meant = CLASS_WORDS.get(written.strip().lower())
            hint = "; did you mean %s? a device_class" % meant if meant else "; a device_class"
            return hint + " is one of %s (empty reads as gpu)" % ", ".join(CLASSES)
        return _malformed_hint(message, inventory)
    if reason == Reason.DEVICE_MISSING:
        return _missing_hint(message, inventory)
    if reason == Reason.RESOURCES_EXHAUSTED:
        return huge_pages_hint(message)
    return ""

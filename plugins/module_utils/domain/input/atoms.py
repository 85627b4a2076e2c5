# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Atoms: the bookable units of a GPU node, and their resolution against the inventory.

==========  ======================  ==========  ==============================
class       id                      parent GPU  ``NVIDIA_VISIBLE_DEVICES`` name
==========  ======================  ==========  ==============================
gpu         ``GPU-…``               itself      the GPU's UUID
gpu.mig     ``GPU-…/gi<N>/ci<M>``   ``GPU-…``   the MIG device's ``MIG-…`` UUID
gpu.slot    ``GPU-…/s<N>``          ``GPU-…``   the parent GPU's UUID
==========  ======================  ==========  ==============================

A slot is bookkeeping only: the driver sees the whole GPU (MPS or time-slicing
shares it). An empty device class reads as ``gpu``.

One MIG instance or slot has one spelling: ``gi1``, never ``gi01``. A number with
a leading zero is a malformed id (``unsupported-device``), so two spellings can
never bind the same instance twice, and the id in a file name, an annotation and
an event is the one the control plane sent. Holds read back from disk (which an
older release may have written with another spelling) are still compared by
what they are (``Atom.key``), not by how they are spelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Optional, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import DeviceRef
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory

CLASS_GPU = "gpu"
CLASS_MIG = "gpu.mig"
CLASS_SLOT = "gpu.slot"
CLASSES = (CLASS_GPU, CLASS_MIG, CLASS_SLOT)

# New input: canonical numbers only (no leading zero). Read back: any spelling an older release took.
_NUMBER = r"(0|[1-9][0-9]{0,5})"
MIG_ID_RE = lazy_pattern(r"^([^/]+)/gi%s/ci%s$" % (_NUMBER, _NUMBER))
SLOT_ID_RE = lazy_pattern(r"^([^/]+)/s%s$" % _NUMBER)
_MIG_ID_READ_RE = lazy_pattern(r"^([^/]+)/gi([0-9]{1,6})/ci([0-9]{1,6})$")
_SLOT_ID_READ_RE = lazy_pattern(r"^([^/]+)/s([0-9]{1,6})$")
# A CDI device name (the atom id with "/" as "_") must match this.
CDI_NAME_RE = lazy_pattern(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")

# What an atom is, whatever its id's spelling (``Atom.key``): its class, its GPU, then gi and ci or the slot.
AtomKey = Tuple[Union[str, int, None], ...]


class AtomRefused(BcdError):
    """An atom that cannot be held: ``reason`` is the failure reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@record(frozen=True)
class Atom:
    """A parsed atom; ``mig_uuid`` is filled in once resolved against the inventory."""

    id: str
    device_class: str
    gpu_uuid: str
    gi: Optional[int] = None
    ci: Optional[int] = None
    slot: Optional[int] = None
    mig_uuid: Optional[str] = None

    @property
    def key(self) -> AtomKey:
        """What the atom is, whatever the spelling of its id: conflicts compare these."""
        if self.device_class == CLASS_MIG:
            return (CLASS_MIG, self.gpu_uuid, self.gi, self.ci)
        if self.device_class == CLASS_SLOT:
            return (CLASS_SLOT, self.gpu_uuid, self.slot)
        return (CLASS_GPU, self.gpu_uuid)

    @property
    def whole(self) -> bool:
        return self.device_class == CLASS_GPU

    @property
    def cdi_name(self) -> str:
        return self.id.replace("/", "_")

    @property
    def visible_name(self) -> Optional[str]:
        """The name ``NVIDIA_VISIBLE_DEVICES`` uses for what the driver sees."""
        return self.mig_uuid if self.device_class == CLASS_MIG else self.gpu_uuid


def parse_atom(device_id: str, device_class: str = "", read_back: bool = False) -> Atom:
    """Parse an atom id of a given class; raise ``AtomRefused`` (unsupported-device). ``read_back``
    takes the spellings a hold on disk may carry (leading zeros)."""
    device_class = device_class or CLASS_GPU
    mig_re, slot_re = (_MIG_ID_READ_RE, _SLOT_ID_READ_RE) if read_back else (MIG_ID_RE, SLOT_ID_RE)
    if device_class == CLASS_GPU:
        atom = Atom(id=device_id, device_class=CLASS_GPU, gpu_uuid=device_id)
    elif device_class == CLASS_MIG:
        match = mig_re.fullmatch(device_id)
        if not match:
            raise AtomRefused(Reason.UNSUPPORTED_DEVICE, "%s is not a MIG instance id (<gpu>/gi<n>/ci<n>)"
                              % quoted(device_id, quote='"'))
        atom = Atom(id=device_id, device_class=CLASS_MIG, gpu_uuid=match.group(1),
                    gi=int(match.group(2)), ci=int(match.group(3)))
    elif device_class == CLASS_SLOT:
        match = slot_re.fullmatch(device_id)
        if not match:
            raise AtomRefused(Reason.UNSUPPORTED_DEVICE, "%s is not a slot id (<gpu>/s<n>)" % quoted(device_id, quote='"'))
        atom = Atom(id=device_id, device_class=CLASS_SLOT, gpu_uuid=match.group(1), slot=int(match.group(2)))
    else:
        raise AtomRefused(Reason.UNSUPPORTED_DEVICE, "device class %s cannot be held" % quoted(device_class, quote=""))
    return atom


def atom_from_id(device_id: str) -> Atom:
    """An atom read back from a hold's ``bcd.dev/device-id`` annotation: the class follows from the form."""
    if _MIG_ID_READ_RE.fullmatch(device_id):
        return parse_atom(device_id, CLASS_MIG, read_back=True)
    if _SLOT_ID_READ_RE.fullmatch(device_id):
        return parse_atom(device_id, CLASS_SLOT, read_back=True)
    return parse_atom(device_id, CLASS_GPU)


def resolve_atom(atom: Atom, inventory: Inventory) -> Union[Tuple[Atom, None], Tuple[None, str]]:
    """Return the atom with its MIG UUID, or the ``device-missing`` message when it is not held now."""
    gpu = inventory.gpu(atom.gpu_uuid)
    if gpu is None:
        return None, "%s not present" % atom.gpu_uuid
    if atom.device_class == CLASS_MIG:
        if atom.gi is None or atom.ci is None:  # parse_atom sets both for a MIG instance
            return None, "%s names a MIG instance without its gi and ci" % atom.id
        instance = gpu.mig_instance(atom.gi, atom.ci)
        if instance is None:
            return None, "%s has no MIG instance gi%d/ci%d" % (atom.gpu_uuid, atom.gi, atom.ci)
        return Atom(id=atom.id, device_class=atom.device_class, gpu_uuid=atom.gpu_uuid,
                    gi=atom.gi, ci=atom.ci, mig_uuid=instance.uuid), None
    return atom, None


def resolve_devices(refs: Iterable[DeviceRef], inventory: Inventory) -> List[Atom]:
    """Check a hold's devices in order (docs/troubleshooting.md): every class and form first
    (``unsupported-device``, the first bad one decides), then presence
    (``device-missing``, naming every missing device joined by ``; ``).
    """
    parsed: List[Atom] = []
    for ref in refs:
        atom = parse_atom(ref.id, ref.device_class)
        if not CDI_NAME_RE.fullmatch(atom.cdi_name):
            raise AtomRefused(Reason.UNSUPPORTED_DEVICE, "%s cannot name a CDI device" % quoted(ref.id, quote='"'))
        parsed.append(atom)
    resolved: List[Atom] = []
    missing: List[str] = []
    for atom in parsed:
        found, why = resolve_atom(atom, inventory)
        if found is not None:
            resolved.append(found)
        elif why is not None and why not in missing:
            missing.append(why)
    if missing:
        raise AtomRefused(Reason.DEVICE_MISSING, "; ".join(missing))
    return resolved


def visible_devices(atoms: Iterable[Atom]) -> List[str]:
    """``NVIDIA_VISIBLE_DEVICES`` names for a hold: each GPU once, each MIG device's UUID, in order."""
    names: List[str] = []
    for atom in atoms:
        name = atom.visible_name
        if name and name not in names:
            names.append(name)
    return names


def atoms_of(device_ids: Iterable[str]) -> List[Atom]:
    """Atoms of device ids read back from a file; ids that do not parse are skipped."""
    atoms: List[Atom] = []
    for device_id in device_ids:
        try:
            atoms.append(atom_from_id(device_id))
        except AtomRefused:
            continue
    return atoms

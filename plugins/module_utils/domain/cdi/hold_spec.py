# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hold's CDI spec (``/etc/cdi/bcd-<allocation>.json``): rendering and reading back.

A hold *is* its CDI spec: it survives a reboot, and each device's
``bcd.dev/device-id`` annotation carries the real atom id, so a pass reads the
node's holds from these files and never from memory of an earlier run.

Rendering follows docs/user-guide.md ("The CDI spec"): NVIDIA's per-device edits for
what each atom stands for, the vendor's common edits once without its
``NVIDIA_VISIBLE_DEVICES=void``, our annotations and env. bcd's env lines win: a vendor env entry (common or per device) that
sets ``NVIDIA_VISIBLE_DEVICES``, any ``BCD_*`` or another key bcd's own lines set is dropped, since a
runtime applies the spec's env in order and the last line of a key wins. Every rendered spec is
validated against the CDI rules before anyone writes it.

Its ``cdiVersion`` is the lowest its content allows (0.6.0 at least: it carries
annotations), raised to the vendor spec's when that is later, and never above what the
oldest CDI library among the node's container runtimes loads (``domain/cdi/runtimes.py``):
a hold whose content needs more than that is refused with ``invalid-assignment``, naming
the runtime, its version and the field. A device the node's stale vendor spec leaves
without a device node, or a MIG device of the node it does not name (``domain/cdi/staleness.py``),
is refused with ``device-missing``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import TYPE_CHECKING, AbstractSet, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime, ceiling
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.validate import validate_spec
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import minimum_version, requirements_above, version_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import ALLOCATION_ID
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import (
    CLASS_MIG,
    Atom,
    AtomRefused,
    atom_from_id,
    visible_devices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import Reason
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import cgroup_parent_of
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
    from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import Assignment

KIND = "bcd.dev/gpu"
SPEC_DIR = "/etc/cdi"
SPEC_PREFIX = "bcd-"
ENV_DIR = "/run/bcd/allocations"
MPS_PIPE_DIRECTORY = "/run/nvidia-mps"
BASE_VERSION = "0.6.0"
# Bump whenever render_hold gives other bytes for the same inputs: a pass trusts a kept hold whose
# render key and file digests it recorded (``render_record``) without rendering it again, and a new
# revision makes every key new. tests/unit/plugins/module_utils/domain/cdi/test_hold_spec.py pins the output.
# 2: a vendor env line setting one of bcd's own keys is dropped (issue 23); 3: a hold without a reservation id
# carries no bcd.dev/reservation-id annotation, where it had an empty one (issue 32)
RENDER_REVISION = 3

ANN_ALLOCATION = "bcd.dev/allocation-id"
ANN_RESERVATION = "bcd.dev/reservation-id"
ANN_GENERATION = "bcd.dev/generation"
ANN_CGROUP_PARENT = "bcd.dev/cgroup-parent"
ANN_BINDING = "bcd.dev/binding"
ANN_DEVICE_ID = "bcd.dev/device-id"

SPEC_FILE_RE = lazy_pattern(r"^bcd-(%s)\.json$" % ALLOCATION_ID)
# A damaged spec set aside, never deleted: its name ends in neither .json nor .yaml, so no runtime loads it.
DAMAGED_FILE_RE = lazy_pattern(r"^bcd-(%s)\.json\.damaged-[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$" % ALLOCATION_ID)


class RenderError(BcdError):
    """A spec that would not be valid CDI; nothing is written for it."""


class RenderRefused(RenderError):
    """A hold this node cannot honour as asked: refused with ``reason`` (a failure reason of the spec page)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def cdi_spec_path(allocation_id: str) -> str:
    return "%s/%s%s.json" % (SPEC_DIR, SPEC_PREFIX, allocation_id)


def damaged_spec_path(allocation_id: str, now: float) -> str:
    """Where a damaged spec is set aside (``-2``, ``-3``… are added if that name is taken)."""
    return "%s.damaged-%s" % (cdi_spec_path(allocation_id), time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))


def env_file_path(allocation_id: str) -> str:
    return "%s/%s.env" % (ENV_DIR, allocation_id)


def cdi_device(atom_id: str) -> str:
    return "%s=%s" % (KIND, atom_id.replace("/", "_"))


@record(frozen=True)
class HoldRender:
    """Everything a hold's files are rendered from."""

    allocation_id: str
    reservation_id: str
    generation: int
    atoms: Tuple[Atom, ...] = ()
    kubernetes: bool = False
    cgroup_parent: Optional[str] = None
    mps: bool = False
    env: Tuple[str, ...] = ()

    @property
    def has_slot(self) -> bool:
        return any(atom.device_class == "gpu.slot" for atom in self.atoms)


def _fallback_edits(atom: Atom) -> Dict[str, Any]:
    """One env edit naming the atom, for a device that carries no vendor edits
    (a Kubernetes hold, or no vendor spec): CDI rejects a device without edits."""
    key = "BCD_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", atom.cdi_name).upper()
    return {"env": ["%s=%s" % (key, atom.id)]}


def _device_edits(atom: Atom, vendor: Optional[VendorSpec], own: AbstractSet[str]) -> Optional[Dict[str, Any]]:
    if vendor is None:
        return None
    edits = vendor.edits_for_mig(atom.mig_uuid) if atom.device_class == CLASS_MIG else vendor.edits_for_gpu(atom.gpu_uuid)
    if not isinstance(edits, dict) or not isinstance(edits.get("env"), list):
        return edits
    kept = dict(edits)
    kept["env"] = vendor_env(edits["env"], own)
    if not kept["env"]:
        del kept["env"]
    return kept


def _env_key(line: object) -> Optional[str]:
    return line.split("=", 1)[0] if isinstance(line, str) else None


def own_env_keys(hold: HoldRender) -> Set[str]:
    """The env keys bcd's own lines of a hold set: ``NVIDIA_VISIBLE_DEVICES``, every ``BCD_*`` it writes, and
    the others of ``common_env`` (``CUDA_MPS_PIPE_DIRECTORY`` on a slot under MPS)."""
    return set(line.split("=", 1)[0] for line in common_env(hold)) | {"NVIDIA_VISIBLE_DEVICES"}


def vendor_env(lines: List[Any], own: AbstractSet[str]) -> List[Any]:
    """A vendor spec's env ``lines`` without those that would override bcd's: a key in ``own`` or any
    ``BCD_*`` (a later line of a key wins in the container)."""
    return [line for line in lines if _env_key(line) not in own and not str(_env_key(line)).startswith("BCD_")]


def _has_edits(edits: Optional[Dict[str, Any]]) -> bool:
    return edits is not None and any(edits.get(key) for key in edits)


def common_env(hold: HoldRender) -> List[str]:
    """The env lines shared by the CDI spec and the env file, in order."""
    lines = ["BCD_ALLOCATION_ID=%s" % hold.allocation_id]
    if hold.cgroup_parent:
        lines.append("BCD_CGROUP_PARENT=%s" % hold.cgroup_parent)
    if hold.mps and hold.has_slot:
        lines.append("CUDA_MPS_PIPE_DIRECTORY=%s" % MPS_PIPE_DIRECTORY)
    return lines


def render_spec(hold: HoldRender, vendor: Optional[VendorSpec] = None, notes: Optional[List[str]] = None,
                runtimes: Sequence[Runtime] = ()) -> Dict[str, Any]:
    """The hold's CDI spec as a dict; raises ``RenderError`` when it would not be valid CDI, and
    ``RenderRefused`` when the node cannot honour it (see the module docstring).

    ``notes``, when a list, collects what an operator should know: a device the
    vendor spec does not name gets no vendor edits. ``runtimes`` are the node's
    container runtimes (``cdi_runtimes.Runtime``).
    """
    annotations = {ANN_ALLOCATION: hold.allocation_id}
    if hold.reservation_id:  # optional in the assignment: a hold without one carries no empty annotation
        annotations[ANN_RESERVATION] = hold.reservation_id
    annotations[ANN_GENERATION] = str(hold.generation)
    if hold.cgroup_parent:
        annotations[ANN_CGROUP_PARENT] = hold.cgroup_parent
    if hold.kubernetes:
        annotations[ANN_BINDING] = "kubernetes"
    use_vendor = vendor if (vendor is not None and not hold.kubernetes and vendor.path) else None

    own = own_env_keys(hold)
    devices: List[Dict[str, Any]] = []
    for atom in hold.atoms:
        if use_vendor is not None:
            _refuse_unusable(atom, use_vendor)
        edits = _device_edits(atom, use_vendor, own)
        if not _has_edits(edits):
            if use_vendor is not None and notes is not None:
                notes.append("%s: the vendor spec %s does not name %s; the device carries no vendor edits"
                             % (hold.allocation_id, use_vendor.path, atom.visible_name))
            edits = _fallback_edits(atom)
        devices.append({
            "name": atom.cdi_name,
            "annotations": {ANN_DEVICE_ID: atom.id},
            "containerEdits": edits,
        })

    env = common_env(hold)
    common: Dict[str, Any] = {}
    if not hold.kubernetes:
        env.append("NVIDIA_VISIBLE_DEVICES=%s" % ",".join(visible_devices(hold.atoms)))
        if use_vendor is not None:
            vendor_edits = dict(use_vendor.common_edits or {})
            their_env = vendor_edits.pop("env", None) or []
            if not isinstance(their_env, list):  # the vendor spec's own warning says it is not valid CDI
                raise RenderError("the CDI spec of %s would be invalid: the vendor spec %s has env %s, not a list"
                                  % (hold.allocation_id, use_vendor.path, type_name(their_env)))
            env.extend(line for line in vendor_env(their_env, own) if line not in env)
            common.update((key, value) for key, value in vendor_edits.items() if value)
    container_edits: Dict[str, Any] = {"env": env}
    for key in sorted(common, key=_edit_rank):
        container_edits[key] = common[key]
    spec: Dict[str, Any] = {
        "cdiVersion": BASE_VERSION,
        "kind": KIND,
        "annotations": annotations,
        "devices": devices,
        "containerEdits": container_edits,
    }
    # A Kubernetes hold carries none of the vendor's edits but the same version rule (0.6.0, or the
    # vendor spec's when later): the runtime that reads NVIDIA's spec reads this one.
    required = max([BASE_VERSION, minimum_version(spec)], key=version_key)
    versions = [required]
    if vendor is not None and vendor.path and vendor.cdi_version:
        versions.append(vendor.cdi_version)
    spec["cdiVersion"] = _within(hold, spec, required, max(versions, key=version_key), runtimes)
    problems = validate_spec(spec)
    if problems:
        raise RenderError("the CDI spec of %s would be invalid: %s" % (hold.allocation_id, "; ".join(problems)))
    return spec


def lowered(wanted: str, runtimes: Sequence[Runtime]) -> str:
    """``wanted`` (a CDI version), lowered to what every runtime on the node loads (``runtimes``: the
    oldest library among them, ``runtimes.ceiling``); as it is when no runtime sets a limit."""
    oldest = ceiling(runtimes)
    if oldest is None or oldest.max_cdi_version is None:  # ceiling's runtime always has one
        return wanted
    limit = oldest.max_cdi_version
    return limit if version_key(wanted) > version_key(limit) else wanted


def _within(hold: HoldRender, spec: Dict[str, Any], required: str, wanted: str, runtimes: Sequence[Runtime]) -> str:
    """``wanted``, lowered to what every runtime on the node loads (``lowered``); refused when even
    ``required`` (what the content needs) is more than the oldest runtime loads."""
    oldest = ceiling(runtimes)
    if oldest is not None and oldest.max_cdi_version is not None \
            and version_key(required) > version_key(oldest.max_cdi_version):
        limit = oldest.max_cdi_version
        needs = requirements_above(spec, limit)
        fields = ", ".join(reason for _version, reason in needs[:4]) or "its content"
        raise RenderRefused(
            Reason.INVALID_ASSIGNMENT,
            "its CDI spec needs cdiVersion %s (%s), and %s %s on this node loads at most %s"
            % (required, fields, oldest.name, oldest.version, limit))
    return lowered(wanted, runtimes)


def _refuse_unusable(atom: Atom, vendor: VendorSpec) -> None:
    """A device whose vendor edits name only device nodes the node does not have is not handed out, nor a
    MIG device of the node the spec does not name (made after it was generated: no device node of its own)."""
    uuid = atom.mig_uuid if atom.device_class == CLASS_MIG else atom.gpu_uuid
    where = vendor.unnamed_mig_device(uuid) if atom.device_class == CLASS_MIG else None
    if where:
        raise RenderRefused(
            Reason.DEVICE_MISSING,
            "the vendor spec %s does not name %s (%s): the MIG layout changed since it was generated, and the device "
            "would carry none of its device nodes; regenerate the spec (nvidia-ctk cdi generate)" % (vendor.path, uuid, where))
    why = vendor.unusable_reason(uuid)
    if why:
        raise RenderRefused(
            Reason.DEVICE_MISSING,
            "%s has none of the device nodes the vendor spec %s names for it (%s); regenerate the spec "
            "(nvidia-ctk cdi generate)" % (uuid, vendor.path, why))


_EDIT_ORDER = ("env", "deviceNodes", "mounts", "hooks", "netDevices", "intelRdt", "additionalGids")


def _edit_rank(key: str) -> Tuple[int, str]:
    """Common edits in the order CDI documents them; unknown keys last, by name."""
    return (_EDIT_ORDER.index(key), key) if key in _EDIT_ORDER else (len(_EDIT_ORDER), key)


def spec_bytes(spec: Dict[str, Any]) -> bytes:
    """A CDI spec as ``/etc/cdi`` holds it, for people to read: indented by two, in the spec's order, text
    as it is (the bytes every release wrote, so no spec is rewritten on upgrade)."""
    return json_bytes(spec, indent=2, sort_keys=False, ensure_ascii=False)


def _hold_render(assignment: Assignment, atoms: Iterable[Atom], generation: int, mps: bool) -> HoldRender:
    return HoldRender(
        allocation_id=assignment.allocation_id,
        reservation_id=assignment.reservation_id,
        generation=generation,
        atoms=tuple(atoms),
        kubernetes=assignment.kubernetes,
        cgroup_parent=cgroup_parent_of(assignment),
        mps=mps,
        env=tuple(assignment.env),
    )


def render_hold(assignment: Assignment, atoms: Iterable[Atom], generation: int, vendor: Optional[VendorSpec], mps: bool = False,
                notes: Optional[List[str]] = None, runtimes: Sequence[Runtime] = ()) -> Tuple[bytes, bytes]:
    """``(spec bytes, env file bytes)`` of a hold: the one rendering both a pass and the root helper use,
    so root writes only what it built from the node's own vendor spec and atoms."""
    hold = _hold_render(assignment, atoms, generation, mps)
    spec = render_spec(hold, vendor, notes, runtimes)
    try:
        return spec_bytes(spec), render_env(hold)
    except UnicodeEncodeError as exc:  # a "\ud800" of JSON input or of the vendor spec: no UTF-8 carries it
        raise RenderError("the files of %s would not be UTF-8: %r is a lone surrogate"
                          % (hold.allocation_id, exc.object[exc.start:exc.end][:8]))


def digest_of(content: Optional[bytes]) -> Optional[str]:
    """sha256 (hex) of a file's bytes; None for no file."""
    return hashlib.sha256(content).hexdigest() if content is not None else None


def render_key(assignment: Assignment, atoms: Iterable[Atom], generation: int, vendor: Optional[VendorSpec], mps: bool = False,
               runtimes: Sequence[Runtime] = ()) -> str:
    """A digest of everything ``render_hold`` reads: the hold's fields and atoms, the vendor spec (its
    path and the digest of its bytes), the node's runtimes and the render revision. Equal keys render
    equal bytes, with one deliberate exception: which of the vendor's edits are stale on the node is
    not in the key, so a kept hold is not rewritten because the driver changed under an old vendor
    spec (``holds_info`` marks it); it is once a fresh vendor spec appears (a new digest)."""
    inputs = (RENDER_REVISION, _hold_render(assignment, atoms, generation, mps),
              getattr(vendor, "path", None), getattr(vendor, "digest", None),
              sorted((r.name, r.version, r.max_cdi_version or "") for r in runtimes))
    return hashlib.sha256(repr(inputs).encode("utf-8")).hexdigest()


def render_record(key: str, spec: Optional[bytes], env: Optional[bytes], notes: Iterable[str]) -> Dict[str, Any]:
    """What a pass keeps of a hold it rendered, so the next one can tell it is unchanged without rendering:
    the key, the digests of the two files, and the notes the render made (said again on every pass)."""
    return {"key": key, "spec": digest_of(spec), "env": digest_of(env), "notes": list(notes)}


def unchanged(record: object, key: str, spec_content: Optional[bytes], env_content: Optional[bytes]) -> bool:
    """Whether the files on disk are what ``key`` rendered when ``record`` was kept."""
    return (isinstance(record, dict) and record.get("key") == key and spec_content is not None
            and record.get("spec") == digest_of(spec_content) and record.get("env") == digest_of(env_content))


def visible_atoms(atoms: Sequence[Atom], content: bytes) -> Optional[List[Atom]]:
    """The atoms of a hold whose devices the inventory lacks now (before ``mig-layout`` has made its MIG
    instances again after a reboot), with the MIG UUIDs its spec on disk names: a plain hold's
    ``NVIDIA_VISIBLE_DEVICES`` lists each atom's visible name in order. None when the spec does not
    say (a Kubernetes hold carries no such line) or says something else."""
    try:
        spec = json.loads(content.decode("utf-8"))
        lines = spec["containerEdits"]["env"]
        names = [line.split("=", 1)[1] for line in lines if line.startswith("NVIDIA_VISIBLE_DEVICES=")]
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None
    if len(names) != 1:
        return None
    listed = names[0].split(",")
    seen: Set[Optional[str]] = set()
    resolved: List[Atom] = []
    for atom in atoms:
        if atom.device_class != CLASS_MIG and atom.gpu_uuid in seen:
            resolved.append(atom)
            continue
        if not listed:
            return None
        name = listed.pop(0)
        if atom.device_class == CLASS_MIG:
            if not name.startswith("MIG-") or (atom.mig_uuid not in (None, name)):
                return None
            atom = Atom(id=atom.id, device_class=atom.device_class, gpu_uuid=atom.gpu_uuid, gi=atom.gi,
                        ci=atom.ci, mig_uuid=name)
        elif name != atom.gpu_uuid:
            return None
        seen.add(name if atom.device_class != CLASS_MIG else None)
        resolved.append(atom)
    return resolved if not listed else None


def render_env(hold: HoldRender) -> bytes:
    """The env file: ``BCD_ALLOCATION_ID``, ``BCD_CGROUP_PARENT``, ``CUDA_MPS_PIPE_DIRECTORY``,
    ``BCD_RESERVATION_ID``, ``NVIDIA_VISIBLE_DEVICES`` (Kubernetes holds too), then the assignment's lines."""
    lines = common_env(hold)
    lines.append("BCD_RESERVATION_ID=%s" % hold.reservation_id)
    lines.append("NVIDIA_VISIBLE_DEVICES=%s" % ",".join(visible_devices(hold.atoms)))
    lines.extend(hold.env)
    return ("\n".join(lines) + "\n").encode("utf-8")


@record
class LiveHold:
    """A hold as read back from its CDI spec on the node."""

    allocation_id: str
    path: str
    content: bytes
    device_ids: List[str] = field(default_factory=list)
    atoms: List[Atom] = field(default_factory=list)
    reservation_id: str = ""
    reservation_annotated: bool = False  # the spec has the annotation (a hold bound before revision 3: even empty)
    generation: Optional[int] = None
    kubernetes: bool = False
    cgroup_parent: Optional[str] = None
    problem: Optional[str] = None  # why the file could not be read back fully


def read_hold(allocation_id: str, path: str, content: bytes) -> LiveHold:
    """Parse one ``bcd-*.json``. A file that cannot be parsed is still a hold
    (its allocation id comes from the file name) with ``problem`` set."""
    hold = LiveHold(allocation_id=allocation_id, path=path, content=content)
    try:
        spec = json.loads(content.decode("utf-8"))
        if not isinstance(spec, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        hold.problem = "cannot parse %s: %s" % (path, exc)
        return hold
    except RecursionError:
        hold.problem = "cannot parse %s: nested too deeply" % path
        return hold
    annotations = spec.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
    reservation = annotations.get(ANN_RESERVATION, "")
    hold.reservation_annotated = ANN_RESERVATION in annotations
    hold.reservation_id = reservation if isinstance(reservation, str) else _scalar_text(reservation)
    try:
        hold.generation = int(annotations.get(ANN_GENERATION, ""))  # absent: ValueError, as for a non-number
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, which json.loads reads
        hold.generation = None
    hold.kubernetes = annotations.get(ANN_BINDING) == "kubernetes"
    parent = annotations.get(ANN_CGROUP_PARENT)
    hold.cgroup_parent = parent if isinstance(parent, str) and parent else None
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        device_annotations = device.get("annotations") if isinstance(device, dict) else None
        device_id = device_annotations.get(ANN_DEVICE_ID) if isinstance(device_annotations, dict) else None
        if not isinstance(device_id, str) or not device_id:
            hold.problem = "%s: a device has no %s annotation" % (path, ANN_DEVICE_ID)
            continue
        try:
            hold.atoms.append(atom_from_id(device_id))
        except AtomRefused as exc:
            hold.problem = "%s: %s" % (path, exc.message)
            continue
        hold.device_ids.append(device_id)
    named = annotations.get(ANN_ALLOCATION)
    if named is not None and named != allocation_id:
        hold.problem = "%s: names allocation %s" % (path, repr(named[:120]) if isinstance(named, str) else type_name(named))
    return hold


def _scalar_text(value: object) -> str:
    """An annotation that is not text, as text: a number or boolean as written, anything else (a list,
    a mapping, nested as deep as JSON goes) as nothing."""
    return "" if isinstance(value, (list, dict)) else str(value)


def env_atoms(hold: LiveHold, found: Sequence[Optional[Atom]]) -> Optional[List[Atom]]:
    """A kept hold's atoms (``LiveHold``) for its env file where some are missing from the inventory
    (``found`` has None for them): those present as found, the others as its spec names them (a whole
    GPU or slot names itself; a MIG instance needs the UUID in the spec's ``NVIDIA_VISIBLE_DEVICES``).
    None when that is not known."""
    if all(atom is not None or read.device_class != CLASS_MIG for atom, read in zip(found, hold.atoms)):
        return [atom if atom is not None else read for atom, read in zip(found, hold.atoms)]
    from_spec = visible_atoms(hold.atoms, hold.content)
    if from_spec is None:
        return None
    return [atom if atom is not None else spec_atom for atom, spec_atom in zip(found, from_spec)]

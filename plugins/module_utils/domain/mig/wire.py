# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG forms that cross the root helper's socket (``mig.look``, ``mig.change``), each read strictly.

Root reads the account's op (``op_from_data``), and the account reads root's replies (``node_from_data``,
``done_from_data``), by one allowlist grammar: an object has the keys listed here and no other, each value is of
the type and within the bounds given, each name matches nvidia-smi's grammar (``layout.py``'s patterns), and a
list is measured before any of its items is read. Anything else is a ``WireError`` whose message starts with the
field (``change.gi: must be a whole number from 0 to 64, not True``); no input raises anything else.

The op, the ``change`` of ``{"op": "mig.change", "change": ...}`` (``MigOp.as_data``'s form; a key whose value
may be null may be left out)::

    {"kind": "mode", "gpu": "GPU-...", "enabled": true}
    {"kind": "destroy", "gpu": "GPU-...", "gi": 0..64, "ci": 0..64 or null (the GPU instance whole)}
    {"kind": "create", "gpu": "GPU-...", "gi": 0..64 or null (a new GPU instance), "profile": "3g.40gb",
     "placement": 0..7 or null, "compute": ["1c.3g.40gb", "2c.3g.40gb"]}   # at most 7, each one of the profile's

Root's replies: ``mig.look``'s ``"mig"`` is the node (``node_to_data``)::

    {"source": "nvidia-smi", "error": null,
     "gpus": [{"uuid": "GPU-...", "index": 0, "product": "NVIDIA A100-SXM4-40GB", "mode": true, "pending": true,
               "capability": {"product": ..., "memory_slices": 8, "compute_slices": 7,
                              "profiles": [{"name": "3g.20gb", "id": 9, "slices": 3, "instances": 2,
                                            "memory_mib": 19968, "placements": [[0, 4], [4, 4]]}]},
               "instances": [{"gi": 1, "profile": "3g.20gb", "placement": [4, 4],
                              "compute": [{"ci": 0, "profile": "3g.20gb", "uuid": "MIG-..."}]}]}],
     "processes": [{"gpu": "GPU-...", "pid": 4242, "name": "python3", "gi": 1, "ci": 0}]}

at most ``MAX_GPUS`` GPUs, ``MAX_GPU_INSTANCES`` GPU instances of ``MAX_COMPUTE_INSTANCES`` compute instances each,
``MAX_PROCESSES`` processes; ``mig.change``'s ``"done"`` is ``{"made": <a GPU instance, as above> or null,
"error": <the tool's words> or null}`` (``done_to_data``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import (
    CI_PROFILE_RE,
    GI_PROFILE_RE,
    GPU_UUID_RE,
    MAX_COMPUTE,
    MAX_INDEX,
    MAX_PLACEMENT,
    LayoutError,
    compute_slices,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import (
    OP_KINDS,
    ComputeInstance,
    GiProfile,
    GpuInstance,
    GpuProcess,
    MigCapability,
    MigDone,
    MigGpu,
    MigNode,
    MigOp,
    Placement,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.support.speed import LazyPattern

MAX_ID = 64  # a GPU instance or compute instance id
MAX_GPUS = 256
MAX_GPU_INSTANCES = 8  # of one GPU
MAX_COMPUTE_INSTANCES = 8  # of one GPU instance
MAX_PROCESSES = 4096
MAX_PROFILES = 32  # GPU instance profiles of one product
MAX_PLACEMENTS = 8  # of one profile
MAX_SLICES = 8  # memory or compute slices of a GPU
MAX_PROFILE_ID = 255
MAX_MEMORY_MIB = 1 << 24  # 16 TiB
MAX_PID = 1 << 22  # the kernel's largest pid_max
MAX_PROCESS_NAME = 1024
MAX_ERROR = 4096  # characters of a tool's or root's words
UNKNOWN = "unknown"  # a GPU instance's profile the source could not tell (fakehw_mig, a file without profiles)
MIG_UUID_RE = lazy_pattern(r"^MIG-[A-Za-z0-9-]{1,128}(/[0-9]{1,9}/[0-9]{1,9})?\Z")
PRODUCT_RE = lazy_pattern(r"^[ -~]{1,96}\Z")
SOURCE_RE = lazy_pattern(r"^[a-z][a-z0-9-]{0,31}\Z")

# the keys of each op kind besides "kind" and "gpu": (required, optional)
_OP_KEYS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "mode": (("enabled",), ()),
    "destroy": (("gi",), ("ci",)),
    "create": (("profile",), ("gi", "placement", "compute")),
}


class WireError(BcdError, ValueError):
    """A MIG form that is not one; the message starts with the field it is about."""


# -- the grammar's pieces ---------------------------------------------------------------------------------

def _object(value: object, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> Dict[str, Any]:
    """``value`` when it is a JSON object with every key of ``required``, and no key but those and ``optional``."""
    if not isinstance(value, dict):
        raise WireError("%s: must be a JSON object, not %s" % (where, quoted(value, '"')))
    known = tuple(required) + tuple(optional)
    unknown = [key for key in value if not isinstance(key, str) or key not in known]
    if unknown:
        names = ", ".join(quoted(key, '"') for key in unknown[:3])
        raise WireError("%s: takes no %s (it takes %s)" % (where, names, ", ".join(known)))
    for key in required:
        if key not in value:
            raise WireError("%s.%s: required" % (where, key))
    return value


def _list(value: object, where: str, most: int, least: int = 0) -> List[Any]:
    """``value`` when it is a JSON list of ``least`` to ``most`` items (none read yet)."""
    if not isinstance(value, list):
        raise WireError("%s: must be a list, not %s" % (where, quoted(value, '"')))
    if not least <= len(value) <= most:
        raise WireError("%s: must list %d to %d items, not %d" % (where, least, most, len(value)))
    return value


def _whole(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise WireError("%s: must be a whole number from %d to %d, not %s" % (where, low, high, quoted(value, '"')))
    return value


def _whole_or_none(value: object, where: str, low: int, high: int) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise WireError("%s: must be a whole number from %d to %d or null, not %s"
                        % (where, low, high, quoted(value, '"')))
    return value


def _flag(value: object, where: str, nullable: bool = False) -> Optional[bool]:
    if value is None and nullable:
        return None
    if not isinstance(value, bool):
        raise WireError("%s: must be true or false%s, not %s"
                        % (where, " or null" if nullable else "", quoted(value, '"')))
    return value


def _text(value: object, where: str, most: int, what: str) -> str:
    """A string of 1 to ``most`` characters without a NUL."""
    if not isinstance(value, str) or not 1 <= len(value) <= most or "\0" in value:
        raise WireError("%s: must be %s, not %s" % (where, what, quoted(value, '"')))
    return value


def _named(value: object, where: str, pattern: LazyPattern, what: str, most: int = 160) -> str:
    """A string that ``pattern`` matches whole (each ends in ``\\Z``), of at most ``most`` characters."""
    if not isinstance(value, str) or len(value) > most or not pattern.match(value):
        raise WireError("%s: must be %s, not %s" % (where, what, quoted(value, '"')))
    return value


def _gpu_uuid(value: object, where: str) -> str:
    return _named(value, where, GPU_UUID_RE, "a GPU UUID (GPU-...)")


def _gi_profile(value: object, where: str, unknown: bool = False) -> str:
    if unknown and value == UNKNOWN:
        return UNKNOWN
    return _named(value, where, GI_PROFILE_RE, 'a GPU instance profile name such as "3g.40gb"', 32)


def _ci_profile(value: object, where: str) -> str:
    """A compute instance profile as a source names it: ``unknown``, a GPU instance profile (one spanning it), or
    ``<n>c.<GPU instance profile>``."""
    if value == UNKNOWN:
        return UNKNOWN
    if isinstance(value, str) and len(value) <= 40:
        match = CI_PROFILE_RE.match(value)
        if GI_PROFILE_RE.match(match.group(2) if match is not None else value):
            return value
    raise WireError('%s: must be a compute instance profile name such as "1c.3g.40gb", not %s'
                    % (where, quoted(value, '"')))


def _no_duplicates(seen: List[object], key: object, where: str, what: str) -> None:
    if key in seen:
        raise WireError("%s: %s %s is listed twice" % (where, what, quoted(key, '"')))
    seen.append(key)


# -- the op (root reads it) ----------------------------------------------------------------------------

def op_from_data(data: object, where: str = "change") -> MigOp:
    """The ``MigOp`` of a ``mig.change``'s ``change``; ``WireError`` naming the field for anything else."""
    if not isinstance(data, dict):
        raise WireError("%s: must be a JSON object, not %s" % (where, quoted(data, '"')))
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in OP_KINDS:
        raise WireError("%s.kind: must be one of %s, not %s" % (where, ", ".join(OP_KINDS), quoted(kind, '"')))
    required, optional = _OP_KEYS[kind]
    fields = _object(data, where, ("kind", "gpu") + required, optional)
    gpu = _gpu_uuid(fields["gpu"], where + ".gpu")
    if kind == "mode":
        return MigOp(kind=kind, gpu=gpu, enabled=_flag(fields["enabled"], where + ".enabled"))
    if kind == "destroy":
        return MigOp(kind=kind, gpu=gpu, gi=_whole(fields["gi"], where + ".gi", 0, MAX_ID),
                     ci=_whole_or_none(fields.get("ci"), where + ".ci", 0, MAX_ID))
    gi = _whole_or_none(fields.get("gi"), where + ".gi", 0, MAX_ID)
    profile = _gi_profile(fields["profile"], where + ".profile")
    placement = _whole_or_none(fields.get("placement"), where + ".placement", 0, MAX_PLACEMENT)
    raw = fields.get("compute")
    names = _list(raw if raw is not None else [], where + ".compute", MAX_COMPUTE)
    compute: List[str] = []
    for n, name in enumerate(names):
        field = "%s.compute[%d]" % (where, n)
        if not isinstance(name, str):
            raise WireError("%s: must be a compute instance profile name, not %s" % (field, quoted(name, '"')))
        try:
            compute_slices(name, profile, field)
        except LayoutError as exc:
            raise WireError(str(exc))
        compute.append(name)
    return MigOp(kind=kind, gpu=gpu, gi=gi, profile=profile, placement=placement, compute=tuple(compute))


# -- root's replies (the account reads them) ---------------------------------------------------------------

def _placement_data(placement: Placement) -> List[int]:
    return [placement.start, placement.size]


def _placement(value: object, where: str, least: int = 0) -> Placement:
    pair = _list(value, where, 2, 2)
    return Placement(start=_whole(pair[0], where + "[0]", 0, MAX_PLACEMENT),
                     size=_whole(pair[1], where + "[1]", least, MAX_SLICES))


def instance_to_data(inst: GpuInstance) -> Dict[str, Any]:
    """A GPU instance as root replies it: its compute instances without their ``gi`` (the instance's own)."""
    return {"gi": inst.gi, "profile": inst.profile, "placement": _placement_data(inst.placement),
            "compute": [{"ci": ci.ci, "profile": ci.profile, "uuid": ci.uuid} for ci in inst.compute]}


def instance_from_data(data: object, where: str) -> GpuInstance:
    """A GPU instance of root's reply (``instance_to_data``'s form)."""
    fields = _object(data, where, ("gi", "profile", "placement", "compute"))
    gi = _whole(fields["gi"], where + ".gi", 0, MAX_ID)
    profile = _gi_profile(fields["profile"], where + ".profile", unknown=True)
    placement = _placement(fields["placement"], where + ".placement")
    compute: List[ComputeInstance] = []
    seen: List[object] = []
    for n, item in enumerate(_list(fields["compute"], where + ".compute", MAX_COMPUTE_INSTANCES)):
        at = "%s.compute[%d]" % (where, n)
        ci_fields = _object(item, at, ("ci", "profile", "uuid"))
        ci = _whole(ci_fields["ci"], at + ".ci", 0, MAX_ID)
        _no_duplicates(seen, ci, at + ".ci", "compute instance")
        ci_profile = _ci_profile(ci_fields["profile"], at + ".profile")
        uuid = ci_fields["uuid"]
        if uuid is not None:
            uuid = _named(uuid, at + ".uuid", MIG_UUID_RE, "a MIG UUID (MIG-...) or null")
        compute.append(ComputeInstance(gi=gi, ci=ci, profile=ci_profile, uuid=uuid))
    return GpuInstance(gi=gi, profile=profile, placement=placement, compute=tuple(compute))


def _capability_to_data(cap: MigCapability) -> Dict[str, Any]:
    return {"product": cap.product, "memory_slices": cap.memory_slices, "compute_slices": cap.compute_slices,
            "profiles": [{"name": p.name, "id": p.id, "slices": p.slices, "instances": p.instances,
                          "memory_mib": p.memory_mib, "placements": [_placement_data(pl) for pl in p.placements]}
                         for p in cap.profiles]}


def _capability(data: object, where: str) -> Optional[MigCapability]:
    if data is None:
        return None
    fields = _object(data, where, ("product", "memory_slices", "compute_slices", "profiles"))
    profiles: List[GiProfile] = []
    seen: List[object] = []
    for n, item in enumerate(_list(fields["profiles"], where + ".profiles", MAX_PROFILES)):
        at = "%s.profiles[%d]" % (where, n)
        p = _object(item, at, ("name", "id", "slices", "instances", "memory_mib", "placements"))
        name = _gi_profile(p["name"], at + ".name")
        _no_duplicates(seen, name, at + ".name", "profile")
        placements = tuple(_placement(pl, "%s.placements[%d]" % (at, m), least=1)
                           for m, pl in enumerate(_list(p["placements"], at + ".placements", MAX_PLACEMENTS)))
        profiles.append(GiProfile(name=name, id=_whole(p["id"], at + ".id", 0, MAX_PROFILE_ID),
                                  slices=_whole(p["slices"], at + ".slices", 1, MAX_SLICES),
                                  instances=_whole(p["instances"], at + ".instances", 0, MAX_SLICES),
                                  memory_mib=_whole(p["memory_mib"], at + ".memory_mib", 0, MAX_MEMORY_MIB),
                                  placements=placements))
    return MigCapability(product=_named(fields["product"], where + ".product", PRODUCT_RE, "a product name"),
                         memory_slices=_whole(fields["memory_slices"], where + ".memory_slices", 1, MAX_SLICES),
                         compute_slices=_whole(fields["compute_slices"], where + ".compute_slices", 1, MAX_SLICES),
                         profiles=tuple(profiles))


def _gpu_to_data(gpu: MigGpu) -> Dict[str, Any]:
    return {"uuid": gpu.uuid, "index": gpu.index, "product": gpu.product, "mode": gpu.mode, "pending": gpu.pending,
            "capability": _capability_to_data(gpu.capability) if gpu.capability is not None else None,
            "instances": [instance_to_data(inst) for inst in gpu.instances]}


def _gpu(data: object, where: str) -> MigGpu:
    fields = _object(data, where, ("uuid", "index", "product", "mode", "pending", "capability", "instances"))
    uuid = _gpu_uuid(fields["uuid"], where + ".uuid")
    index = _whole(fields["index"], where + ".index", 0, MAX_INDEX)
    product = fields["product"]
    if product is not None:
        product = _named(product, where + ".product", PRODUCT_RE, "a product name or null")
    mode = _flag(fields["mode"], where + ".mode", nullable=True)
    pending = _flag(fields["pending"], where + ".pending", nullable=True)
    capability = _capability(fields["capability"], where + ".capability")
    instances: List[GpuInstance] = []
    seen: List[object] = []
    for n, item in enumerate(_list(fields["instances"], where + ".instances", MAX_GPU_INSTANCES)):
        inst = instance_from_data(item, "%s.instances[%d]" % (where, n))
        _no_duplicates(seen, inst.gi, "%s.instances[%d].gi" % (where, n), "GPU instance")
        instances.append(inst)
    return MigGpu(uuid=uuid, index=index, product=product, mode=mode, pending=pending, capability=capability,
                  instances=tuple(instances))


def _process(data: object, where: str) -> GpuProcess:
    fields = _object(data, where, ("gpu", "pid", "name", "gi", "ci"))
    name = fields["name"]
    if not isinstance(name, str) or len(name) > MAX_PROCESS_NAME or "\0" in name:
        raise WireError("%s.name: must be a process name of at most %d characters, not %s"
                        % (where, MAX_PROCESS_NAME, quoted(name, '"')))
    return GpuProcess(gpu=_gpu_uuid(fields["gpu"], where + ".gpu"), pid=_whole(fields["pid"], where + ".pid", 0, MAX_PID),
                      name=name, gi=_whole_or_none(fields["gi"], where + ".gi", 0, MAX_ID),
                      ci=_whole_or_none(fields["ci"], where + ".ci", 0, MAX_ID))


def node_to_data(node: MigNode) -> Dict[str, Any]:
    """What root replies to ``mig.look``: the node's MIG side as it read it."""
    return {"source": node.source, "error": node.error, "gpus": [_gpu_to_data(gpu) for gpu in node.gpus],
            "processes": [{"gpu": p.gpu, "pid": p.pid, "name": p.name, "gi": p.gi, "ci": p.ci} for p in node.processes]}


def node_from_data(data: object, where: str = "mig") -> MigNode:
    """The ``MigNode`` of root's ``mig.look`` reply; ``WireError`` naming the field for anything else."""
    fields = _object(data, where, ("source", "error", "gpus", "processes"))
    gpus: List[MigGpu] = []
    seen: List[object] = []
    for n, item in enumerate(_list(fields["gpus"], where + ".gpus", MAX_GPUS)):
        gpu = _gpu(item, "%s.gpus[%d]" % (where, n))
        _no_duplicates(seen, gpu.uuid, "%s.gpus[%d].uuid" % (where, n), "GPU")
        gpus.append(gpu)
    processes = [_process(item, "%s.processes[%d]" % (where, n))
                 for n, item in enumerate(_list(fields["processes"], where + ".processes", MAX_PROCESSES))]
    error = fields["error"]
    return MigNode(gpus=gpus, processes=processes,
                   source=_named(fields["source"], where + ".source", SOURCE_RE, "a source name such as nvidia-smi"),
                   error=None if error is None else _text(error, where + ".error", MAX_ERROR, "a message or null"))


def done_to_data(done: MigDone) -> Dict[str, Any]:
    """What root replies to ``mig.change``: the GPU instance made, or the tool's words."""
    return {"made": instance_to_data(done.made) if done.made is not None else None, "error": done.error}


def done_from_data(data: object, op: MigOp, where: str = "done") -> MigDone:
    """The ``MigDone`` of ``op`` from root's ``mig.change`` reply; ``WireError`` naming the field for anything
    else."""
    fields = _object(data, where, ("made", "error"))
    made, error = fields["made"], fields["error"]
    return MigDone(op=op, made=None if made is None else instance_from_data(made, where + ".made"),
                   error=None if error is None else _text(error, where + ".error", MAX_ERROR, "a message or null"))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GPU's MIG layout as plain data: what the GPU can be cut into, what it is cut into now, and one change.

Every MIG source (``nvidia-smi mig``, a fakehw file) produces a ``MigNode``; the layout planner
(``domain/mig/plan.py``) reads nothing else, and every change it plans is a ``MigOp`` that a host carries
out (``node/mig_smi.py`` on a real node, ``node/fakehw_mig.py`` on a fakehw one, the root helper's
``mig.change`` between them).

Names are nvidia-smi's, without its ``MIG `` prefix: a GPU instance profile is ``3g.40gb`` (``nvidia-smi mig
-lgip``), a compute instance profile ``1c.3g.40gb``, or the GPU instance's own name for the compute instance that
spans it (``nvidia-smi mig -lcip``). A placement is where a GPU instance sits in the GPU's memory slices
(``nvidia-smi mig -lgipp``: ``{0,4}:4`` is two placements, starting at slice 0 and 4, each 4 slices long).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record

# A compute instance profile id per compute slice count, as NVML numbers them
# (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE): nvidia-smi mig -cci takes these ids.
CI_PROFILE_IDS: Dict[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

MODE_OPS = ("mode",)
OP_KINDS = ("mode", "destroy", "create")


@record(frozen=True)
class Placement:
    """Where a GPU instance sits: ``start`` memory slice, ``size`` slices long."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end


@record(frozen=True)
class GiProfile:
    """A GPU instance profile as ``nvidia-smi mig -lgip`` and ``-lgipp`` show it."""

    name: str  # 3g.40gb, 1g.10gb+me
    id: int  # the profile id nvidia-smi mig -cgi takes
    slices: int  # compute slices (the 3 of 3g.40gb)
    instances: int  # how many the GPU can have at once (Instances Total)
    memory_mib: int  # its memory
    placements: Tuple[Placement, ...] = ()


@record(frozen=True)
class MigCapability:
    """What a GPU model can be cut into."""

    product: str
    memory_slices: int = 8
    compute_slices: int = 7
    profiles: Tuple[GiProfile, ...] = ()

    def profile(self, name: str) -> Optional[GiProfile]:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None


@record(frozen=True)
class ComputeInstance:
    """A compute instance of a GPU instance: what a ``MIG-`` device is. ``profile`` is ``1c.3g.40gb``, or the GPU
    instance's own profile name when it spans the whole instance. ``uuid`` is None where the source could not tie
    a ``MIG-`` UUID to it."""

    gi: int
    ci: int
    profile: str
    uuid: Optional[str] = None


@record(frozen=True)
class GpuInstance:
    """A GPU instance and its compute instances."""

    gi: int
    profile: str
    placement: Placement
    compute: Tuple[ComputeInstance, ...] = ()


@record(frozen=True)
class MigGpu:
    """One GPU's MIG side. ``mode`` is MIG mode now (None: the GPU cannot do MIG); ``pending`` is the mode it
    takes at its next reset or reboot (equal to ``mode`` when nothing is pending). ``capability`` is None for a
    GPU that cannot do MIG."""

    uuid: str
    index: int
    product: Optional[str] = None
    mode: Optional[bool] = None
    pending: Optional[bool] = None
    capability: Optional[MigCapability] = None
    instances: Tuple[GpuInstance, ...] = ()

    def instance(self, gi: int) -> Optional[GpuInstance]:
        for instance in self.instances:
            if instance.gi == gi:
                return instance
        return None


@record(frozen=True)
class GpuProcess:
    """A process using a GPU (or one of its MIG devices, ``gi``/``ci`` set) as the driver lists it."""

    gpu: str
    pid: int
    name: str = ""
    gi: Optional[int] = None
    ci: Optional[int] = None


@record
class MigNode:
    """The MIG side of a node: its GPUs, the processes using them, where this was read from (``nvidia-smi``,
    ``fakehw``, ``none``), and why it could not be read (then ``gpus`` says nothing)."""

    gpus: List[MigGpu] = field(default_factory=list)
    processes: List[GpuProcess] = field(default_factory=list)
    source: str = "none"
    error: Optional[str] = None

    def gpu(self, uuid: str) -> Optional[MigGpu]:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None


@record(frozen=True)
class MigOp:
    """One change to one GPU, as a host carries it out and the root helper checks it:

    * ``mode``: MIG mode ``enabled`` on or off (``nvidia-smi -i <gpu> -mig 1|0``);
    * ``destroy``: compute instance ``ci`` of GPU instance ``gi``, or with ``ci`` None the GPU instance and every
      compute instance it still has;
    * ``create``: a GPU instance of ``profile`` at ``placement`` (a start slice), then a compute instance of each
      profile of ``compute`` in it; with ``gi`` set, only the compute instances, in that existing GPU instance.
    """

    kind: str
    gpu: str
    enabled: Optional[bool] = None
    gi: Optional[int] = None
    ci: Optional[int] = None
    profile: Optional[str] = None
    placement: Optional[int] = None
    compute: Tuple[str, ...] = ()

    def as_data(self) -> Dict[str, object]:
        """The op as JSON data (the root helper's ``mig.change``, the returned plan): only its kind's fields."""
        data: Dict[str, object] = {"kind": self.kind, "gpu": self.gpu}
        if self.kind == "mode":
            data["enabled"] = self.enabled
        elif self.kind == "destroy":
            data["gi"] = self.gi
            data["ci"] = self.ci
        else:
            data["gi"] = self.gi
            data["profile"] = self.profile
            data["placement"] = self.placement
            data["compute"] = list(self.compute)
        return data


@record(frozen=True)
class MigDone:
    """What became of one ``MigOp``: the GPU instance and compute instances it made (a create), or why it failed
    (``error``, the tool's words)."""

    op: MigOp
    made: Optional[GpuInstance] = None
    error: Optional[str] = None


def ci_profile_name(slices: int, gi_profile: GiProfile) -> str:
    """The compute instance profile of ``slices`` compute slices in a GPU instance of ``gi_profile``: the GPU
    instance's own name when it spans it, else ``<n>c.<gi profile>`` as ``nvidia-smi mig -lcip`` names it."""
    if slices == gi_profile.slices:
        return gi_profile.name
    return "%dc.%s" % (slices, gi_profile.name)


def ci_slices(name: str, gi_profile: GiProfile) -> Optional[int]:
    """The compute slices of compute instance profile ``name`` in a GPU instance of ``gi_profile``; None when it
    is not one of that instance's (``2c.3g.40gb`` in a 3g.40gb: 2; ``3g.40gb``: 3)."""
    if name == gi_profile.name:
        return gi_profile.slices
    head, dot, rest = name.partition(".")
    if not dot or rest != gi_profile.name or not head.endswith("c") or not head[:-1].isdigit() or len(head) > 3:
        return None
    slices = int(head[:-1])
    if slices < 1 or slices >= gi_profile.slices or slices not in CI_PROFILE_IDS:
        return None
    return slices

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG layout as an operator writes it, checked, and the GPUs it picks: ``{GPU uuid: WantedGpu}``.

The module's ``layout`` option is a list of entries, each for some GPUs of the node::

    - devices: all                    # or [0, 2, GPU-...]: indexes as nvidia-smi numbers them, or GPU UUIDs
      products: [NVIDIA A100-SXM4-80GB]   # optional: only GPUs of these products (case and a leading
                                          # "NVIDIA " ignored)
      mig_enabled: true
      instances:                      # GPU instances, in the order they are made
        - profile: 3g.40gb
          placement: 4                # optional: the start memory slice; the planner picks one when absent
          compute: [1c.3g.40gb, 2c.3g.40gb]   # optional: its compute instances; one spanning it when absent
        - {profile: 1g.10gb, count: 2}        # count: that many alike (no placement then)

The other form, a mig-parted configuration document, is read in ``mig_parted.py`` into the same result.
Entries are read in order; a GPU that two entries pick (or one entry names twice, by index and by UUID) is
refused naming both, as is a GPU the node does not have. An entry with ``mig_enabled: false`` lists no
instances; one with ``mig_enabled: true`` and none wants MIG on and no instance.

This checks shapes only: bounds, names against nvidia-smi's grammar, and what the names alone decide (a compute
instance profile belongs to its GPU instance's, and they take no more compute slices than it has). Whether the
GPU has a profile, where it may sit and whether the instances fit are the planner's (``plan.py``): it knows the
GPU's capability. Every refusal is a ``LayoutError`` whose message starts with the field
(``layout[1].instances[0].profile: "9g.1tb" is not a MIG profile name``); no input raises anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import CI_PROFILE_IDS
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory

MAX_ENTRIES = 64  # layout entries, and entries of one mig-parted config
MAX_DEVICES = 64  # GPUs one entry names
MAX_INDEX = 255  # a GPU index
MAX_INSTANCES = 7  # GPU instances a GPU is given, counts expanded (no GPU has more than 7 compute slices)
MAX_COUNT = 7
MAX_PLACEMENT = 7  # a start memory slice (GPUs have 8 at most)
MAX_COMPUTE = 7  # compute instances of one GPU instance
MAX_PRODUCTS = 16
MAX_PRODUCT = 96  # characters of a product name
# nvidia-smi's names (``nvidia-smi mig -lgip``, the MIG user guide's tables): 1g.10gb, 1g.10gb+me,
# 1g.24gb+gfx, 1g.24gb+me.all, 1g.24gb-me (RTX PRO 6000 Blackwell). Each ends in \Z: a name and a newline is no name
GI_PROFILE_RE = lazy_pattern(r"^([0-9]{1,2})g\.[0-9]{1,4}gb(\+me|\+gfx|\+me\.all|-me)?\Z")
# a compute instance profile within one (``nvidia-smi mig -lcip``): 1c.3g.40gb, 2c.1g.24gb+gfx
CI_PROFILE_RE = lazy_pattern(r"^([0-9])c\.(.+)\Z")
GPU_UUID_RE = lazy_pattern(r"^GPU-[A-Za-z0-9-]{1,128}\Z")
_PRODUCT_RE = lazy_pattern(r"^[ -~]{1,%d}\Z" % MAX_PRODUCT)
_ENTRY_KEYS = ("devices", "products", "mig_enabled", "instances")
_INSTANCE_KEYS = ("profile", "placement", "count", "compute")


class LayoutError(BcdError, ValueError):
    """A layout that cannot be taken; the message starts with the field it is about."""


@record(frozen=True)
class WantedInstance:
    """A GPU instance wanted: its ``profile``, where it starts (None: the planner places it) and its compute
    instance profiles (empty: one compute instance spanning it)."""

    profile: str
    placement: Optional[int] = None
    compute: Tuple[str, ...] = ()


@record(frozen=True)
class WantedGpu:
    """What one GPU is to be: MIG mode, and its GPU instances in the order they are made. ``source`` is the entry
    that picked it (``layout[1]``, ``mig-configs.all-1g.10gb[0]``), for messages."""

    uuid: str
    index: int
    mig_enabled: bool
    instances: Tuple[WantedInstance, ...]
    source: str


# -- names --------------------------------------------------------------------------------------------------

def whole(value: object, where: str, low: int, high: int, what: str = "a whole number") -> int:
    """``value`` when it is an integer (not a boolean) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise LayoutError("%s: must be %s from %d to %d, not %s" % (where, what, low, high, quoted(value, '"')))
    return value


def gi_profile(value: object, where: str) -> str:
    """A GPU instance profile name (``3g.40gb``), checked against nvidia-smi's grammar."""
    if not isinstance(value, str):
        raise LayoutError('%s: must be a GPU instance profile name such as "1g.10gb", not %s' % (where, quoted(value, '"')))
    if len(value) > 32 or not GI_PROFILE_RE.match(value):
        raise LayoutError("%s: %s is not a MIG profile name" % (where, quoted(value, '"')))
    return value


def gi_slices(profile: str) -> int:
    """The compute slices of a GPU instance profile, from its checked name (the 3 of 3g.40gb)."""
    return int(profile.split("g.", 1)[0])


def compute_slices(value: object, gi: str, where: str) -> int:
    """The compute slices of compute instance profile ``value`` in a GPU instance of profile ``gi``: ``Nc.<gi>``
    (N from 1 to the GI's slices, one NVML has a profile for), or ``gi`` itself for one spanning it."""
    size = gi_slices(gi)
    if value == gi:
        return size
    match = CI_PROFILE_RE.match(value) if isinstance(value, str) and len(value) <= 40 else None
    if match is None or match.group(2) != gi:
        if isinstance(value, str) and match is None and GI_PROFILE_RE.match(value):
            raise LayoutError("%s: %s is a GPU instance profile; the compute instances of a %s GPU instance are "
                              "%s" % (where, quoted(value, '"'), gi, _ci_names(gi)))
        raise LayoutError("%s: %s is not a compute instance profile of a %s GPU instance (%s)"
                          % (where, quoted(value, '"'), gi, _ci_names(gi)))
    slices = int(match.group(1))
    if slices < 1 or slices > size:
        raise LayoutError("%s: %s takes %d compute slices; a %s GPU instance has %d"
                          % (where, quoted(value, '"'), slices, gi, size))
    if slices not in CI_PROFILE_IDS:
        raise LayoutError("%s: %s: no compute instance profile has %d slices" % (where, quoted(value, '"'), slices))
    return slices


def _ci_names(gi: str) -> str:
    names = ["%dc.%s" % (n, gi) for n in sorted(CI_PROFILE_IDS) if n < gi_slices(gi)] + [gi]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def text_list(value: object, where: str, most: int, what: str, one: str = "a product name") -> List[str]:
    """A list of 1 to ``most`` names (``what``; ``one`` of them: a string alone is one), each printable ASCII."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not 1 <= len(items) <= most:
        raise LayoutError("%s: must be a list of 1 to %d %s, not %s" % (where, most, what, quoted(value, '"')))
    for n, item in enumerate(items):
        if not isinstance(item, str) or not _PRODUCT_RE.match(item) or not item.strip():
            raise LayoutError("%s: must be %s, 1 to %d printable ASCII characters, not %s"
                              % (where if isinstance(value, str) else "%s[%d]" % (where, n), one, MAX_PRODUCT,
                                 quoted(item, '"')))
    return list(items)


def product_key(name: Optional[str]) -> Optional[str]:
    """A product name as compared: case folded, a leading ``NVIDIA `` and outer spaces dropped (older drivers
    print ``A100-SXM4-40GB``, newer ``NVIDIA A100-SXM4-40GB``)."""
    if name is None:
        return None
    key = " ".join(name.split()).casefold()
    return key[len("nvidia "):] if key.startswith("nvidia ") else key


def unknown_keys(raw: Dict[object, object], known: Tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in known:
            raise LayoutError("%s: unknown key %s (%s)" % (where, quoted(key, '"'), ", ".join(known)))


# -- GPUs ---------------------------------------------------------------------------------------------------

def gpu_label(gpu: Gpu) -> str:
    return "GPU %d (%s)" % (gpu.index, gpu.uuid)


def present_gpu(value: object, inventory: Inventory, where: str) -> Gpu:
    """The GPU an index or a GPU UUID names; refused when it is neither or the node has no such GPU."""
    if isinstance(value, str) and GPU_UUID_RE.match(value):
        found = inventory.gpu(value)
        name = value
    elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INDEX:
        found = next((gpu for gpu in inventory.gpus if gpu.index == value), None)
        name = "GPU %d" % value
    else:
        raise LayoutError("%s: must be a GPU index from 0 to %d or a GPU UUID (GPU-...), not %s"
                          % (where, MAX_INDEX, quoted(value, '"')))
    if found is None:
        present = ", ".join(str(gpu.index) for gpu in sorted(inventory.gpus, key=lambda gpu: gpu.index))
        why = "; the GPUs could not be listed: %s" % inventory.error if inventory.error else \
            " (the node's GPUs: %s)" % (present or "none")
        raise LayoutError("%s: %s is not present%s" % (where, name, why))
    return found


def all_gpus(inventory: Inventory) -> List[Gpu]:
    return sorted(inventory.gpus, key=lambda gpu: gpu.index)


class Picks:
    """The GPUs the entries picked so far, and which field picked each: a GPU picked twice is refused, naming
    both fields."""

    def __init__(self) -> None:
        self.wanted: Dict[str, WantedGpu] = {}
        self._by: Dict[str, str] = {}

    def take(self, gpu: Gpu, by: str, wanted: WantedGpu) -> None:
        if gpu.uuid in self._by:
            raise LayoutError("%s picks %s, which %s picks too; a GPU may be picked by one entry only"
                              % (by, gpu_label(gpu), self._by[gpu.uuid]))
        self._by[gpu.uuid] = by
        self.wanted[gpu.uuid] = wanted


def named_once(picked: Iterable[Tuple[Gpu, str]]) -> None:
    """Refuse an entry that names one GPU twice (``[0, 0]``, or an index and its UUID)."""
    seen: Dict[str, str] = {}
    for gpu, where in picked:
        if gpu.uuid in seen:
            raise LayoutError("%s names %s, which %s names too" % (where, gpu_label(gpu), seen[gpu.uuid]))
        seen[gpu.uuid] = where


# -- the native form ----------------------------------------------------------------------------------------

def wanted_from_layout(layout: object, inventory: Inventory) -> Dict[str, WantedGpu]:
    """``{GPU uuid: WantedGpu}`` of the ``layout`` option, checked, for the GPUs of ``inventory``; a GPU no entry
    picks is not in it (left as it is)."""
    if not isinstance(layout, list):
        raise LayoutError("layout: must be a list of entries ({devices, mig_enabled, instances}), not %s"
                          % quoted(layout, '"'))
    if len(layout) > MAX_ENTRIES:
        raise LayoutError("layout: %d entries; at most %d" % (len(layout), MAX_ENTRIES))
    picks = Picks()
    for n, raw in enumerate(layout):
        where = "layout[%d]" % n
        if not isinstance(raw, dict):
            raise LayoutError("%s: must be a mapping ({devices, mig_enabled, instances}), not %s"
                              % (where, quoted(raw, '"')))
        enabled, instances = _entry(raw, where)
        for gpu, by in _picked(raw, inventory, where):
            picks.take(gpu, by, WantedGpu(gpu.uuid, gpu.index, enabled, instances, where))
    return picks.wanted


def _entry(raw: Dict[object, object], where: str) -> Tuple[bool, Tuple[WantedInstance, ...]]:
    unknown_keys(raw, _ENTRY_KEYS, where)
    for key in ("devices", "mig_enabled"):
        if key not in raw:
            raise LayoutError("%s.%s: missing; every entry says which GPUs (devices) and whether MIG is on "
                              "(mig_enabled)" % (where, key))
    enabled = raw["mig_enabled"]
    if not isinstance(enabled, bool):
        raise LayoutError("%s.mig_enabled: must be true or false, not %s" % (where, quoted(enabled, '"')))
    listed = raw.get("instances")
    if listed is None:
        listed = []
    if not isinstance(listed, list) or len(listed) > MAX_INSTANCES:
        raise LayoutError("%s.instances: must be a list of at most %d GPU instances, not %s"
                          % (where, MAX_INSTANCES, "%d of them" % len(listed) if isinstance(listed, list)
                             else quoted(listed, '"')))
    if not enabled and listed:
        raise LayoutError("%s.instances: mig_enabled is false, so no instance may be listed" % where)
    instances: List[WantedInstance] = []
    for k, item in enumerate(listed):
        instances.extend(_instances(item, "%s.instances[%d]" % (where, k)))
        if len(instances) > MAX_INSTANCES:
            raise LayoutError("%s.instances: more than %d GPU instances once counts are expanded; a GPU has at most "
                              "%d" % (where, MAX_INSTANCES, MAX_INSTANCES))
    return enabled, tuple(instances)


def _instances(raw: object, where: str) -> List[WantedInstance]:
    if not isinstance(raw, dict):
        raise LayoutError("%s: must be a mapping ({profile, placement, count, compute}), not %s" % (where, quoted(raw, '"')))
    unknown_keys(raw, _INSTANCE_KEYS, where)
    if "profile" not in raw:
        raise LayoutError('%s.profile: missing; a GPU instance profile name such as "1g.10gb" is required' % where)
    profile = gi_profile(raw["profile"], where + ".profile")
    placement = raw.get("placement")
    if placement is not None:
        placement = whole(placement, where + ".placement", 0, MAX_PLACEMENT, "a start memory slice")
    count = 1 if raw.get("count") is None else whole(raw["count"], where + ".count", 1, MAX_COUNT)
    if placement is not None and count != 1:
        raise LayoutError("%s.count: %d instances cannot all start at placement %d; give each its own entry"
                          % (where, count, placement))
    compute: Tuple[str, ...] = ()
    if raw.get("compute") is not None:
        compute = _compute(raw["compute"], profile, where + ".compute")
    return [WantedInstance(profile, placement, compute)] * count


def _compute(raw: object, profile: str, where: str) -> Tuple[str, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_COMPUTE:
        raise LayoutError("%s: must be a list of 1 to %d compute instance profile names, not %s"
                          % (where, MAX_COMPUTE, "%d of them" % len(raw) if isinstance(raw, list) else quoted(raw, '"')))
    used = sum(compute_slices(name, profile, "%s[%d]" % (where, n)) for n, name in enumerate(raw))
    if used > gi_slices(profile):
        raise LayoutError("%s: the compute instances take %d compute slices; a %s GPU instance has %d"
                          % (where, used, profile, gi_slices(profile)))
    names = tuple(str(name) for name in raw)
    return () if names == (profile,) else names  # one spanning compute instance: as when none is listed


def _picked(raw: Dict[object, object], inventory: Inventory, where: str) -> List[Tuple[Gpu, str]]:
    """The GPUs an entry picks, each with the field that picks it."""
    products = None if raw.get("products") is None else \
        text_list(raw["products"], where + ".products", MAX_PRODUCTS, "product names such as \"NVIDIA A100-SXM4-80GB\"")
    keys = None if products is None else set(product_key(name) for name in products)
    devices = raw["devices"]
    if devices == "all":
        return [(gpu, where + ".devices") for gpu in all_gpus(inventory) if keys is None or product_key(gpu.name) in keys]
    if not isinstance(devices, list) or not 1 <= len(devices) <= MAX_DEVICES:
        raise LayoutError('%s.devices: must be "all" or a list of 1 to %d GPU indexes or UUIDs, not %s'
                          % (where, MAX_DEVICES, "%d of them" % len(devices) if isinstance(devices, list)
                             else quoted(devices, '"')))
    picked = [(present_gpu(value, inventory, "%s.devices[%d]" % (where, n)), "%s.devices[%d]" % (where, n))
              for n, value in enumerate(devices)]
    named_once(picked)
    for gpu, by in picked:
        if keys is not None and product_key(gpu.name) not in keys:
            raise LayoutError("%s: %s is not one of %s.products (it is %s)"
                              % (by, gpu_label(gpu), where, quoted(gpu.name, '"') if gpu.name else "of no known product"))
    return picked

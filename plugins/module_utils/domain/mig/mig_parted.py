# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A mig-parted configuration document, read into the layout the module converges (``{GPU uuid: WantedGpu}``,
``layout.py``), so a site keeps the files it has::

    version: v1
    mig-configs:
      all-1g.10gb:                          # the name the module's mig_config picks
        - device-filter: ["0x20B010DE"]     # optional: PCI device ids (device, vendor), or product names
          devices: all                      # or [0, 1]: GPU indexes
          mig-enabled: true
          mig-devices: {"1g.10gb": 4, "1c.3g.40gb": 3}

The format is NVIDIA/mig-parted's ``api/spec/v1`` (``spec.go``, ``helpers.go``; ``examples/config.yaml``,
``deployments/systemd/config-default.yaml``), read as mig-parted reads it:

* ``version`` must be ``v1``; a key mig-parted does not know is refused, at the top and in an entry;
  ``devices`` and ``mig-enabled`` are required, ``mig-devices`` too when ``mig-enabled`` is true (``{}``: MIG
  on, no instance); ``mig-enabled: false`` lists none; a count is 0 or more and not every count is 0.
* The config named by ``mig_config`` is applied (with none named, the document's only one). Its entries are
  read in order; an entry picks each GPU that ``devices`` names (``all``: every GPU) and ``device-filter``
  matches (none: every GPU). A PCI device id (``0x20B010DE``, or with its subsystem ``0x20B010DE:0x145F10DE``)
  matches the GPU's when the caller knows it (``pci_device_ids``); a filter that is not a PCI device id matches
  the product name (this module's addition: case and a leading ``NVIDIA `` ignored). A GPU whose PCI device id
  is not known is refused by an entry that filters by id only, rather than guessed.
* ``mig-devices`` counts GPU instance profiles (``3g.40gb``: a GPU instance with one compute instance spanning
  it) and compute instance profiles (``1c.3g.40gb``: a compute instance of that size in a ``3g.40gb`` GPU
  instance). As mig-parted's ``SetMigConfig`` makes them: the profiles larger first (GPU instance slices, then
  compute slices), and each compute instance in the GPU instance made just before it when that one is of its
  profile and has the compute slices left, else in a new one; so ``1c.3g.40gb: 4`` is two GPU instances, of 3
  and 1 compute instances.

Where this differs from mig-parted, it refuses what mig-parted would do silently or do twice: a GPU two entries
pick (mig-parted applies both, the last wins), a GPU index the node does not have (mig-parted skips it), a
count over 7 and more than 7 GPU instances on a GPU. ``devices`` may also name GPU UUIDs. Indexes are
nvidia-smi's (mig-parted counts the GPUs in PCI order, the same order unless ``CUDA_VISIBLE_DEVICES`` or the
driver says otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.layout import (
    CI_PROFILE_RE,
    GI_PROFILE_RE,
    MAX_COUNT,
    MAX_DEVICES,
    MAX_ENTRIES,
    MAX_INSTANCES,
    MAX_PRODUCTS,
    LayoutError,
    Picks,
    WantedGpu,
    WantedInstance,
    all_gpus,
    compute_slices,
    gi_slices,
    gpu_label,
    named_once,
    present_gpu,
    product_key,
    text_list,
    unknown_keys,
    whole,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory

MAX_CONFIGS = 256  # mig-configs of a document (mig-parted's default file has about 60)
MAX_PROFILES = 32  # keys of one mig-devices
CONFIG_NAME_RE = lazy_pattern(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}\Z")
# mig-parted's DeviceID string: <device><vendor> as one hexadecimal number, optionally :<subdevice><subvendor>
PCI_ID_RE = lazy_pattern(r"^0[xX]([0-9A-Fa-f]{1,8})(?::0[xX]([0-9A-Fa-f]{1,8}))?\Z")
_DOCUMENT_KEYS = ("version", "mig-configs")
_ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")

PciId = Tuple[int, Optional[int]]  # (device << 16 | vendor, subsystem the same way or None)


def wanted_from_mig_parted(document: object, config: object, inventory: Inventory,
                           pci_device_ids: Optional[Mapping[str, str]] = None) -> Dict[str, WantedGpu]:
    """``{GPU uuid: WantedGpu}`` of config ``config`` (None: the document's only one) of the mig-parted document
    ``document``, for the GPUs of ``inventory``; ``pci_device_ids`` is ``{GPU uuid: "0x20B010DE"}`` where the
    caller knows them. A GPU no entry picks is not in it (left as it is)."""
    configs = _configs(document)
    name = _config_name(config, configs)
    known = dict(pci_device_ids or {})
    picks = Picks()
    for n, raw in enumerate(configs[name]):
        where = "mig-configs.%s[%d]" % (name, n)
        if not isinstance(raw, dict):
            raise LayoutError("%s: must be a mapping ({devices, mig-enabled, mig-devices}), not %s"
                              % (where, quoted(raw, '"')))
        enabled, instances = _entry(raw, where)
        for gpu, by in _picked(raw, inventory, known, where):
            picks.take(gpu, by, WantedGpu(gpu.uuid, gpu.index, enabled, instances, where))
    return picks.wanted


def _configs(document: object) -> Dict[str, List[object]]:
    """The document's configs, checked down to each being a list of entries (mig-parted refuses a document with
    an empty one); only the config applied is read further."""
    if not isinstance(document, dict):
        raise LayoutError("mig_parted: must be a mig-parted config document ({version: v1, mig-configs: ...}), "
                          "not %s" % quoted(document, '"'))
    unknown_keys(document, _DOCUMENT_KEYS, "mig_parted")
    if document.get("version") != "v1":
        raise LayoutError('mig_parted.version: must be "v1", the version of mig-parted\'s format this reads, not %s'
                          % ("missing" if "version" not in document else quoted(document["version"], '"')))
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not 1 <= len(configs) <= MAX_CONFIGS:
        raise LayoutError("mig_parted.mig-configs: must be a mapping of 1 to %d config names to their entries, "
                          "not %s" % (MAX_CONFIGS, "%d of them" % len(configs) if isinstance(configs, dict)
                                      else quoted(configs, '"')))
    out: Dict[str, List[object]] = {}
    for key, entries in configs.items():
        if not isinstance(key, str) or not CONFIG_NAME_RE.match(key):
            raise LayoutError("mig_parted.mig-configs: %s is not a config name (letters, digits, '_', '.', '+' or "
                              "'-', at most 128)" % quoted(key, '"'))
        if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
            raise LayoutError("mig-configs.%s: must be a list of 1 to %d entries, not %s"
                              % (key, MAX_ENTRIES, "%d of them" % len(entries) if isinstance(entries, list)
                                 else quoted(entries, '"')))
        out[key] = entries
    return out


def _config_name(config: object, configs: Dict[str, List[object]]) -> str:
    names = list(configs)
    if config is None:
        if len(names) == 1:
            return names[0]
        raise LayoutError("mig_config: missing; the document has %d mig-configs, so which one to apply must be "
                          "named" % len(names))
    if not isinstance(config, str) or config not in configs:
        shown = ", ".join(names[:8]) + (" and %d more" % (len(names) - 8) if len(names) > 8 else "")
        raise LayoutError("mig_config: %s is not one of the document's mig-configs (%s)" % (quoted(config, '"'), shown))
    return config


def _entry(raw: Dict[object, object], where: str) -> Tuple[bool, Tuple[WantedInstance, ...]]:
    unknown_keys(raw, _ENTRY_KEYS, where)
    for key in ("devices", "mig-enabled"):
        if key not in raw:
            raise LayoutError("%s.%s: missing; mig-parted requires devices and mig-enabled in every entry" % (where, key))
    enabled = raw["mig-enabled"]
    if not isinstance(enabled, bool):
        raise LayoutError("%s.mig-enabled: must be true or false, not %s" % (where, quoted(enabled, '"')))
    devices = raw.get("mig-devices")
    if devices is None:
        if enabled:
            raise LayoutError("%s.mig-devices: missing; mig-enabled is true, so mig-devices says which MIG devices "
                              "({} for none)" % where)
        return False, ()
    if not isinstance(devices, dict) or len(devices) > MAX_PROFILES:
        raise LayoutError("%s.mig-devices: must be a mapping of at most %d MIG profile names to counts, not %s"
                          % (where, MAX_PROFILES, "%d of them" % len(devices) if isinstance(devices, dict)
                             else quoted(devices, '"')))
    if not enabled and devices:
        raise LayoutError("%s.mig-devices: mig-enabled is false, so no MIG device may be listed" % where)
    return enabled, _packed(devices, where + ".mig-devices")


def _profile(key: object, where: str) -> Tuple[str, int]:
    """``(GPU instance profile, compute slices)`` of a mig-devices key: ``3g.40gb`` is (3g.40gb, 3),
    ``1c.3g.40gb`` (3g.40gb, 1), ``3c.3g.40gb`` (3g.40gb, 3) as mig-parted names it ``3g.40gb``."""
    if not isinstance(key, str):
        raise LayoutError('%s: %s is not a MIG profile name such as "1g.10gb" or "1c.3g.40gb"' % (where, quoted(key, '"')))
    if len(key) <= 32 and GI_PROFILE_RE.match(key):
        return key, gi_slices(key)
    match = CI_PROFILE_RE.match(key) if len(key) <= 40 else None
    if match is None or not GI_PROFILE_RE.match(match.group(2)):
        raise LayoutError("%s: %s is not a MIG profile name" % (where, quoted(key, '"')))
    gi = match.group(2)
    return gi, compute_slices(key, gi, '%s["%s"]' % (where, key))


def _packed(devices: Dict[object, object], where: str) -> Tuple[WantedInstance, ...]:
    """The GPU instances of a mig-devices mapping, as mig-parted makes them (the module's docstring)."""
    wanted: List[Tuple[str, int]] = []  # (GPU instance profile, compute slices) for each MIG device, in order
    for key, count in devices.items():
        gi, slices = _profile(key, where)
        wanted.extend([(gi, slices)] * whole(count, '%s["%s"]' % (where, key), 0, MAX_COUNT))
    if devices and not wanted:
        raise LayoutError("%s: every count is 0; mig-parted refuses that (write {} for MIG on and no device)" % where)
    wanted.sort(key=lambda item: (-gi_slices(item[0]), -item[1]))  # stable: the document's order among equals
    made: List[Tuple[str, List[int]]] = []  # (GPU instance profile, compute slices of each compute instance)
    for gi, slices in wanted:
        if made and made[-1][0] == gi and sum(made[-1][1]) + slices <= gi_slices(gi):
            made[-1][1].append(slices)
        else:
            made.append((gi, [slices]))
    if len(made) > MAX_INSTANCES:
        raise LayoutError("%s: %d GPU instances once packed; a GPU has at most %d" % (where, len(made), MAX_INSTANCES))
    # one compute instance spanning its GPU instance is written as none (as the native form writes it); a spanning
    # one is alone in its GPU instance, so every other is named <n>c.<profile>
    return tuple(WantedInstance(gi, None, () if parts == [gi_slices(gi)] else tuple("%dc.%s" % (n, gi) for n in parts))
                 for gi, parts in made)


# -- which GPUs an entry picks ---------------------------------------------------------------------------------

def pci_id(text: str) -> Optional[PciId]:
    """A PCI device id as mig-parted writes one (``0x20B010DE``, ``0x20B010DE:0x145F10DE``), else None."""
    match = PCI_ID_RE.match(text.strip())
    if match is None:
        return None
    return int(match.group(1), 16), None if match.group(2) is None else int(match.group(2), 16)


def _matches(wanted: PciId, known: PciId) -> bool:
    """mig-parted's ``DeviceID.Matches``: the device and vendor, and the subsystem when the filter has one."""
    return wanted[0] == known[0] and (wanted[1] is None or wanted[1] == known[1])


def _picked(raw: Dict[object, object], inventory: Inventory, known: Dict[str, str],
            where: str) -> List[Tuple[Gpu, str]]:
    filters = None if raw.get("device-filter") is None else \
        text_list(raw["device-filter"], where + ".device-filter", MAX_PRODUCTS,
                  'PCI device ids such as "0x20B010DE" or product names', "a PCI device id or a product name")
    devices = raw["devices"]
    if devices == "all":
        named = [(gpu, where + ".devices") for gpu in all_gpus(inventory)]
    elif isinstance(devices, list) and len(devices) <= MAX_DEVICES:
        named = [(present_gpu(value, inventory, "%s.devices[%d]" % (where, n)), "%s.devices[%d]" % (where, n))
                 for n, value in enumerate(devices)]
        named_once(named)
    else:
        raise LayoutError('%s.devices: must be "all" or a list of at most %d GPU indexes, not %s'
                          % (where, MAX_DEVICES, "%d of them" % len(devices) if isinstance(devices, list)
                             else quoted(devices, '"')))
    return [(gpu, by) for gpu, by in named if filters is None or _filtered(filters, gpu, known, where)]


def _filtered(filters: List[str], gpu: Gpu, known: Dict[str, str], where: str) -> bool:
    """Whether ``device-filter`` matches ``gpu``; refused when only a PCI device id it cannot compare could."""
    own = pci_id(known[gpu.uuid]) if isinstance(known.get(gpu.uuid), str) else None
    untold = None
    for text in filters:
        wanted = pci_id(text)
        if wanted is None:
            if gpu.name and product_key(text) == product_key(gpu.name):
                return True
        elif own is None:
            untold = untold or text
        elif _matches(wanted, own):
            return True
    if untold is not None:
        raise LayoutError("%s.device-filter: %s is a PCI device id, and the PCI device id of %s is not known, so "
                          "whether the entry picks it cannot be told; filter by product name instead (%s)"
                          % (where, quoted(untold, '"'), gpu_label(gpu), quoted(gpu.name or "unknown", '"')))
    return False

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read NVIDIA's own CDI spec, so a hold can carry NVIDIA's device edits.

``nvidia-ctk cdi generate`` writes a spec of kind ``nvidia.com/gpu`` to
``/var/run/cdi/nvidia.yaml`` (current toolkits, refreshed by a service) or
``/etc/cdi/nvidia.yaml`` (manual setups; JSON is possible too). A hold's spec
copies, for each atom, the edits of NVIDIA's ``GPU-<uuid>`` or ``MIG-<uuid>``
device, plus NVIDIA's common edits once (without its
``NVIDIA_VISIBLE_DEVICES=void``). Devices are matched by UUID names only: the
index names (``"0"``, ``"0:1"``) change meaning when GPUs are renumbered.

Which file of ``/etc/cdi`` and ``/var/run/cdi`` is used is the loader's choice
(``node/vendor_spec.py``); this file parses one.

YAML needs PyYAML (``HAS_YAML``); without it a YAML file is read only if it is
JSON, and otherwise produces a warning. PyYAML follows YAML 1.1, which reads
the unquoted MIG name ``1:0`` (Go's YAML writer does not quote it) as the
base-60 number 60; the loader here resolves no base-60 numbers and keeps every
device name as the text written in the file.

Nothing here raises for a bad file: unreadable or malformed files become
strings in ``VendorSpec.warnings`` and are skipped.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
from typing import Any, Dict, List, Optional, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.validate import validate_spec
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import CdiVersionError, version_key
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

# PyYAML is imported when a spec is not JSON (_yaml_tools); whether it is there is known without
# importing it.
HAS_YAML = importlib.util.find_spec("yaml") is not None
YAML_IMPORT_ERROR: Optional[str] = None if HAS_YAML else "No module named 'yaml'"

__all__ = [
    "HAS_YAML",
    "NVIDIA_KIND",
    "SPEC_DIRS",
    "VendorSpec",
    "build_vendor_spec",
    "parse_spec_text",
]

NVIDIA_KIND = "nvidia.com/gpu"
# Lowest priority first, as the CDI library orders them.
SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_EXTENSIONS = (".json", ".yaml", ".yml")
VOID_ENV = "NVIDIA_VISIBLE_DEVICES=void"
WSL_DEVICE = "all"


@record
class VendorSpec:
    """NVIDIA's CDI spec as bcd uses it.

    ``path`` is the node path of the file read (without the root prefix), or
    None when the node has no usable NVIDIA spec; ``cdi_version`` its
    ``cdiVersion`` ("" without a spec); ``devices`` maps each device name to
    its ``containerEdits``; ``common_edits`` are the spec-level
    ``containerEdits`` without ``NVIDIA_VISIBLE_DEVICES=void`` (an ``env``
    left empty is dropped); ``digest`` is the sha256 (hex) of the file's
    bytes, so a converger can notice a changed spec (None without a spec);
    ``warnings`` say what could not be read or is wrong with what was read.
    Once checked against the node (``domain.cdi.staleness.check_vendor``), its
    edits are only the true ones: ``stale`` lists what differs from the node,
    ``unusable`` the devices (by name) left without a device node that is there, and
    ``unnamed_mig`` the node's MIG devices it does not name (by lower-case ``MIG-`` UUID,
    each with ``GPU-… gi<G>/ci<C>``: a MIG layout changed since it was generated).
    ``shadowed`` names the NVIDIA specs of ``/etc/cdi`` that ``/var/run/cdi``'s wins over.
    """

    path: Optional[str] = None
    cdi_version: str = ""
    devices: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    common_edits: Dict[str, Any] = field(default_factory=dict)
    digest: Optional[str] = None
    warnings: List[str] = field(default_factory=list)
    stale: List[str] = field(default_factory=list)
    unusable: Dict[str, str] = field(default_factory=dict)
    unnamed_mig: Dict[str, str] = field(default_factory=dict)
    shadowed: List[str] = field(default_factory=list)  # NVIDIA specs of a lower-priority directory, not used

    @property
    def is_wsl(self) -> bool:
        """A WSL2 spec: its only device is ``all``, which stands for every GPU."""
        return set(self.devices) == {WSL_DEVICE}

    def edits_for_gpu(self, gpu_uuid: str) -> Optional[Dict[str, Any]]:
        """A copy of the edits of device ``GPU-<uuid>`` (``gpu_uuid`` as the
        inventory gives it, ``GPU-`` included); on WSL the ``all`` device's
        edits for any GPU; None when the spec does not name the GPU."""
        if self.is_wsl:
            return copy.deepcopy(self.devices[WSL_DEVICE])
        return self._lookup(gpu_uuid, "GPU-")

    def edits_for_mig(self, mig_uuid: Optional[str]) -> Optional[Dict[str, Any]]:
        """A copy of the edits of device ``MIG-<uuid>``; None when the spec
        does not name it (always on WSL, which has no MIG devices)."""
        if self.is_wsl:
            return None
        return self._lookup(mig_uuid, "MIG-")

    def unusable_reason(self, uuid: Optional[str]) -> Optional[str]:
        """Why device ``GPU-``/``MIG-<uuid>`` (or WSL's ``all``) has no true device node on the
        node, or None when it has one (or the spec does not name it)."""
        if not self.unusable or not isinstance(uuid, str):
            return None
        if self.is_wsl:
            return self.unusable.get(WSL_DEVICE)
        wanted = uuid.lower()
        for name, why in self.unusable.items():
            if name.lower() == wanted:
                return why
        return None

    def unnamed_mig_device(self, mig_uuid: Optional[str]) -> Optional[str]:
        """Where the node's MIG device ``MIG-<uuid>`` is (``GPU-… gi<G>/ci<C>``) when the spec, checked
        against the node, does not name it; None otherwise."""
        return self.unnamed_mig.get(mig_uuid.lower()) if isinstance(mig_uuid, str) else None

    def _lookup(self, uuid: Optional[str], prefix: str) -> Optional[Dict[str, Any]]:
        if not isinstance(uuid, str) or not uuid.startswith(prefix):
            return None
        edits = self.devices.get(uuid)
        if edits is None:
            # nvidia-smi and NVML print lower-case hex; tolerate a caller's case.
            wanted = uuid.lower()
            for name, candidate in self.devices.items():
                if name.lower() == wanted:
                    edits = candidate
                    break
        return copy.deepcopy(edits) if edits is not None else None


# --- YAML -------------------------------------------------------------------

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_STR_TAG = "tag:yaml.org,2002:str"
_YAML: Dict[str, Any] = {}


def _yaml_tools() -> Tuple[Any, Any]:  # PyYAML has no annotations here: its module and classes are Any
    """``(yaml, loader)``: PyYAML and a SafeLoader without YAML 1.1's base-60 numbers (``1:0`` stays a
    string), made on first use."""
    if not _YAML:
        import yaml  # pylint: disable=import-outside-toplevel

        # libyaml's parser where PyYAML has it: ten times faster on a large spec (a 200 KB one cost the pure
        # Python parser 1.5 s of CPU, make fuzz found); the resolvers below run in Python either way.
        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        # PyYAML is untyped here (no stubs on a node): its loader is Any, a base class mypy cannot check
        class _CdiYamlLoader(base):  # type: ignore[misc,valid-type]  # pylint: disable=too-many-ancestors
            """SafeLoader without YAML 1.1's base-60 numbers."""

        _CdiYamlLoader.yaml_implicit_resolvers = {
            first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }
        # PyYAML's int and float patterns, less their sexagesimal alternatives.
        _CdiYamlLoader.add_implicit_resolver(
            _INT_TAG,
            lazy_pattern(
                r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+)$""",
                re.X,
            ),
            list("-+0123456789"),
        )
        _CdiYamlLoader.add_implicit_resolver(
            _FLOAT_TAG,
            lazy_pattern(
                r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
                re.X,
            ),
            list("-+0123456789."),
        )
        _YAML.update(yaml=yaml, loader=_CdiYamlLoader)
    return _YAML["yaml"], _YAML["loader"]


def _keep_names_as_text(yaml: Any, node: Any, seen: Optional[Set[int]] = None) -> None:
    """Make every plain scalar under a ``name`` key a string, whatever it looks
    like (``0:1``, ``010``, ``1_0`` are device names, not numbers)."""
    if seen is None:
        seen = set()
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if (
                isinstance(key, yaml.ScalarNode) and key.value == "name"
                and isinstance(value, yaml.ScalarNode) and not value.style  # plain: None from PyYAML's parser, "" from libyaml's
                and value.tag in (_INT_TAG, _FLOAT_TAG)
            ):
                value.tag = _STR_TAG
            _keep_names_as_text(yaml, value, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _keep_names_as_text(yaml, item, seen)


def _load_yaml(text: str) -> Any:
    yaml, loader_class = _yaml_tools()
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _keep_names_as_text(yaml, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


# --- reading files ----------------------------------------------------------


class SpecFileError(BcdError):
    """A spec file could not be read or parsed (becomes a warning)."""


def parse_spec_text(text: str, name: str) -> Any:
    """Parse a spec file as the runtimes do: JSON or YAML whatever the name
    (their YAML reader takes both); YAML only with PyYAML."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        json_error = exc
    if not HAS_YAML:
        if name.endswith(".json"):
            raise SpecFileError("not valid JSON (%s)" % json_error)
        raise SpecFileError(
            "cannot read YAML: PyYAML is not installed on this node (%s); install "
            "python3-yaml, or have nvidia-ctk write JSON (--format=json)" % YAML_IMPORT_ERROR
        )
    yaml = _yaml_tools()[0]
    try:
        return _load_yaml(text)
    except yaml.YAMLError as exc:
        if name.endswith(".json"):
            raise SpecFileError("not valid JSON (%s)" % json_error)
        raise SpecFileError("not valid YAML (%s)" % " ".join(str(exc).split()))
    except (ValueError, TypeError, RecursionError) as exc:
        raise SpecFileError("not valid YAML (%s)" % exc)


def build_vendor_spec(node_path: str, data: Dict[str, Any], raw: bytes) -> VendorSpec:
    """A VendorSpec from a parsed NVIDIA spec; raises SpecFileError when the
    spec is too broken to use at all."""
    version = data.get("cdiVersion")
    try:
        key = version_key(version)
    except CdiVersionError:
        raise SpecFileError("its cdiVersion %r is not a CDI version" % (version,))
    version = "%d.%d.%d" % key  # "v0.5.0", which the library allows, as "0.5.0"
    devices_in = data.get("devices")
    if not isinstance(devices_in, list):
        raise SpecFileError("its devices are not a list")

    spec = VendorSpec(path=node_path, cdi_version=version, digest=hashlib.sha256(raw).hexdigest())
    for idx, device in enumerate(devices_in):
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str) or not name:
            spec.warnings.append("CDI spec %s: devices[%d] has no name; skipped" % (node_path, idx))
            continue
        edits = device.get("containerEdits")
        if not isinstance(edits, dict):
            spec.warnings.append(
                "CDI spec %s: device %r has no containerEdits mapping; skipped" % (node_path, name)
            )
            continue
        if name in spec.devices:
            spec.warnings.append(
                "CDI spec %s: device %r is defined twice; the first is used" % (node_path, name)
            )
            continue
        spec.devices[name] = edits

    common = data.get("containerEdits")
    if common is None:
        common = {}
    if not isinstance(common, dict):
        spec.warnings.append("CDI spec %s: its containerEdits are not a mapping; ignored" % node_path)
        common = {}
    common = copy.deepcopy(common)
    if isinstance(common.get("env"), list):
        common["env"] = [entry for entry in common["env"] if entry != VOID_ENV]
        if not common["env"]:
            del common["env"]
    spec.common_edits = common

    for problem in validate_spec(data):
        spec.warnings.append("CDI spec %s is not valid CDI (runtimes refuse it): %s" % (node_path, problem))
    if spec.devices and not spec.is_wsl and not any(
        name.startswith(("GPU-", "MIG-")) for name in spec.devices
    ):
        spec.warnings.append(
            "CDI spec %s names no device by UUID (GPU-... or MIG-...), so holds get no "
            "NVIDIA edits; regenerate it with nvidia-ctk cdi generate "
            "--device-name-strategy=uuid" % node_path
        )
    return spec

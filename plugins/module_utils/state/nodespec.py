# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stored input: ``<state_dir>/nodespec.json``, the last real pass's input, which the node's timers run again.

One JSON object (``support/json_bytes``: compact, keys sorted): the ``generation``, the ``devices`` section as
the pass took it, the ``instances`` (VMs and their GPUs), and the options the timers' passes must pass the
same way, ``cdi_runtimes`` (only when not ``auto``) and ``env_allow`` (only when given). ``bcd-holds converge
--spec`` reads a spec a person wrote in the same shape. ``state.store.NodeState`` reads and writes the file
(``store_nodespec``, ``load_nodespec``) through the bounded reader; this module is its format.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import MAX_INTEGER
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes

# ``(generation, devices, instances, cdi_runtimes, env_allow)``: the devices as sent (the pass checks them one by
# one), the instances checked, ``cdi_runtimes`` ``auto`` when absent and ``env_allow`` None (both checked by the pass)
Nodespec = Tuple[Optional[int], List[Any], List[Dict[str, Any]], Any, Any]

_INSTANCE_KEYS = ("instance_id", "gpus")


def _instances(value: object, where: str) -> List[Dict[str, Any]]:
    """The VM instances of an input, as the holds module's options take them: mappings of an
    ``instance_id`` (text) and ``gpus`` (a list of text), nothing else."""
    instances = [] if value is None else value
    if not isinstance(instances, list):
        raise StateFileError(where, "instances must be a list, not %s" % type_name(instances))
    checked = []
    for index, instance in enumerate(instances):
        name = "instances[%d]" % index
        if not isinstance(instance, dict):
            raise StateFileError(where, "%s must be a mapping with instance_id and gpus, not %s"
                                 % (name, type_name(instance)))
        unknown = sorted(repr(str(key)[:40]) for key in instance if key not in _INSTANCE_KEYS)
        if unknown:
            raise StateFileError(where, "%s: unknown key %s" % (name, ", ".join(unknown[:4])))
        instance_id, gpus = instance.get("instance_id"), instance.get("gpus")
        gpus = [] if gpus is None else gpus
        if not isinstance(instance_id, str):
            raise StateFileError(where, "%s.instance_id must be text, not %s" % (name, type_name(instance_id)))
        if not isinstance(gpus, list):
            raise StateFileError(where, "%s.gpus must be a list of GPU ids, not %s" % (name, type_name(gpus)))
        for position, gpu in enumerate(gpus):
            if not isinstance(gpu, str):
                raise StateFileError(where, "%s.gpus[%d] must be a GPU id (text), not %s"
                                     % (name, position, type_name(gpu)))
        checked.append({"instance_id": instance_id, "gpus": list(gpus)})
    return checked


def nodespec_from_data(data: object, where: str, generation_required: bool = True) -> Nodespec:
    """``(generation, devices, instances, cdi_runtimes, env_allow)`` from a ``{generation, devices, instances,
    cdi_runtimes, env_allow}`` mapping, as the timers' stored input and ``bcd-holds converge --spec`` carry it
    (``cdi_runtimes`` is ``auto`` when absent, ``env_allow`` None, both checked by the pass; the devices by the pass, one by
    one); ``StateFileError`` naming ``where``. Unless ``generation_required`` (a spec a person wrote:
    the node numbers it), a missing generation is None."""
    if not isinstance(data, dict):
        raise StateFileError(where, "must be a mapping with generation and devices, not %s" % type_name(data))
    generation, devices = data.get("generation"), data.get("devices")
    if generation is None and not generation_required:
        pass
    elif isinstance(generation, bool) or not isinstance(generation, int):
        raise StateFileError(where, "generation must be an integer, not %s" % type_name(generation))
    elif not -MAX_INTEGER - 1 <= generation <= MAX_INTEGER:
        raise StateFileError(where, "generation must be a 64-bit integer")
    if not isinstance(devices, list):
        raise StateFileError(where, "devices must be a list, not %s" % type_name(devices))
    instances = _instances(data.get("instances"), where)
    cdi_runtimes = data.get("cdi_runtimes")
    return generation, devices, instances, "auto" if cdi_runtimes is None else cdi_runtimes, data.get("env_allow")


def nodespec_bytes(generation: int, devices: Sequence[object], instances: Optional[Sequence[Mapping[str, Any]]],
                   cdi_runtimes: object = "auto", env_allow: Optional[Sequence[str]] = None) -> bytes:
    """The stored input as its file holds it."""
    data: Dict[str, Any] = {"generation": generation, "devices": devices, "instances": instances or []}
    if cdi_runtimes != "auto":
        data["cdi_runtimes"] = cdi_runtimes
    if env_allow is not None:
        data["env_allow"] = list(env_allow)
    return json_bytes(data)

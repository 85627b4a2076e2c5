# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.gpu_reset: reset GPUs in maintenance that nothing claims, and read their health again.

Its options are documented in plugins/modules/gpu_reset.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Sequence

from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import reset_gpus
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import LOCK_OPTIONS, NODE_OPTIONS, Module, argument_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType


def _health_text(uuid: str, healthy: bool, problems: Sequence[str]) -> str:
    return "%s: %s\n" % (printable(uuid), "healthy" if healthy else "unhealthy: " + printable("; ".join(problems)))


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(argument_spec=argument_spec(
        NODE_OPTIONS, LOCK_OPTIONS,
        gpus=dict(type="list", elements="str", required=True),
    ), supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    try:
        done = reset_gpus(host_from_params(params), params["gpus"], params["state_dir"], module.check_mode,
                          params["lock_timeout"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc))
    result: Dict[str, Any] = {"changed": done["changed"], "gpus": done["gpus"], "msg": done["msg"]}
    if module._diff:
        before = "".join(_health_text(uuid, not problems, problems) for uuid, problems in done["before"].items())
        if done["after"] is None:
            after = "".join("%s: to be reset, then its health read again\n" % printable(uuid) for uuid in done["before"])
        else:
            after = "".join(
                "%s: could not be reset: %s\n" % (printable(uuid), printable(entry["error"])) if entry["error"]
                else "%s: reset; %s" % (
                    printable(uuid), _health_text(uuid, entry["healthy"], entry["problems"]).split(": ", 1)[1])
                for uuid, entry in done["after"].items())
        result["diff"] = {"before": before, "after": after, "before_header": "GPU health", "after_header": "GPU health"}
    if done["failed"]:
        module.fail_json(**result)
    module.exit_json(**result)

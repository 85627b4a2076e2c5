# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.mig_layout: converge the GPUs' MIG layout, never under a hold (``entry/mig_layout.py``).

Its options are documented in plugins/modules/mig_layout.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

from ansible_collections.bcd.devices.plugins.module_utils.entry.mig_layout import MigLayoutError, converge_layout, wanted_of
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import HELPER_OPTIONS, LOCK_OPTIONS, NODE_OPTIONS, Module, argument_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType

INSTANCE_OPTIONS = dict(
    profile=dict(type="str", required=True),
    placement=dict(type="int"),
    count=dict(type="int", default=1),
    compute=dict(type="list", elements="str"),
)
ENTRY_OPTIONS = dict(
    devices=dict(type="raw", required=True),
    products=dict(type="list", elements="str"),
    mig_enabled=dict(type="bool", required=True),
    instances=dict(type="list", elements="dict", options=INSTANCE_OPTIONS),
)


def _lines(instances: List[Dict[str, Any]]) -> str:
    return "".join("  %s %s (GPU instance %s at %s)%s\n" % (
        printable(i["device_id"]), printable(i["profile"]), printable(i["gi_profile"]), i["placement"],
        " %s" % printable(i["uuid"]) if i["uuid"] else "") for i in instances) or "  (no MIG instance)\n"


def diff_of(done: Dict[str, Any]) -> Dict[str, str]:
    """Each GPU's instances before and after (in check mode: those that stay, and the changes planned)."""
    before, after = [], []
    for gpu in done["gpus"]:
        head = "%s (GPU %d)\n" % (printable(gpu["uuid"]), gpu["index"])
        before.append(head + _lines(gpu["before"]))
        if gpu["refused"]:
            after.append(head + "  not changed: %s\n" % printable(gpu["refused"]) + _lines(gpu["before"]))
        elif done["check_mode"]:
            after.append(head + _lines(gpu["kept"]) + "".join("  + %s\n" % printable(op["text"]) for op in gpu["ops"]))
        else:
            after.append(head + _lines(gpu["after"]))
    return {"before": "".join(before), "after": "".join(after), "before_header": "MIG layout", "after_header": "MIG layout"}


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in."""
    module: Module = basic.AnsibleModule(argument_spec=argument_spec(
        NODE_OPTIONS, HELPER_OPTIONS, LOCK_OPTIONS,
        layout=dict(type="list", elements="dict", options=ENTRY_OPTIONS),
        mig_parted=dict(type="dict"),
        mig_config=dict(type="str"),
    ), supports_check_mode=True, mutually_exclusive=[("layout", "mig_parted")], required_one_of=[("layout", "mig_parted")],
        required_together=[("mig_parted", "mig_config")])
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    try:
        host = host_from_params(params)
        wanted = wanted_of(host, params["layout"], params["mig_parted"], params["mig_config"])
        done = converge_layout(host, wanted, params["state_dir"], module.check_mode, params["lock_timeout"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(str(exc)) if isinstance(exc, MigLayoutError) else printable(exc))
    result: Dict[str, Any] = {"changed": done["changed"], "gpus": done["gpus"], "held_missing": done["held_missing"],
                              "msg": done["msg"]}
    if module._diff:
        result["diff"] = diff_of(done)
    if done["failed"]:
        module.fail_json(**result)
    module.exit_json(**result)

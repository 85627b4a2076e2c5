# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.maintenance: GPUs taken out of (or back into) service, under a recovery's lease or not.

Its options are documented in plugins/modules/maintenance.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable

from ansible_collections.bcd.devices.plugins.module_utils.domain.maintenance import DEFAULT_LEASE_SECONDS, DEFAULT_RERAISE_AFTER
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import set_maintenance
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import LOCK_OPTIONS, NODE_OPTIONS, Module, argument_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType


def _diff_text(records: Iterable[Dict[str, Any]]) -> str:
    # a reason may come from maintenance.json (the account's to write): escaped, one line per record; a live lease
    # is shown by its id (its end moves with every refresh, which changes nothing a person needs to see)
    return "".join("%s: %s%s\n" % (printable(record["uuid"]), printable(record["reason"]),
                                   " (recovery %s)" % printable(record["lease"]["id"])
                                   if record.get("lease") and record["lease"]["live"] else "")
                   for record in records)


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(argument_spec=argument_spec(
        NODE_OPTIONS, LOCK_OPTIONS,
        gpus=dict(type="list", elements="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        reason=dict(type="str"),
        lease=dict(type="str"),
        lease_seconds=dict(type="float", default=DEFAULT_LEASE_SECONDS),
        reraise_after=dict(type="float", default=DEFAULT_RERAISE_AFTER),
    ), required_if=[("state", "present", ("reason",))], supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    try:
        done = set_maintenance(
            host_from_params(params), params["gpus"], params["state"] == "present", params["reason"],
            params["state_dir"], module.check_mode, params["lock_timeout"], params["lease"], params["lease_seconds"],
            params["reraise_after"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc))
    result: Dict[str, Any] = {"changed": done["changed"], "maintenance": done["after"],
                              "lease_holder": done["lease_holder"], "lease_until": done["lease_until"]}
    for key in ("gpus", "msg"):
        if key in done:
            result[key] = done[key]
    if module._diff:
        path = "%s/maintenance.json" % params["state_dir"]
        result["diff"] = {"before": _diff_text(done["before"]), "after": _diff_text(done["after"]),
                          "before_header": path, "after_header": path}
    module.exit_json(**result)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.holds_info: what the node holds, read only.

Its options are documented in plugins/modules/holds_info.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import (
    HELPER_OPTIONS,
    LOCK_OPTIONS,
    NODE_OPTIONS,
    RUNTIME_OPTIONS,
    Module,
    argument_spec,
    warn,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.status import node_status, status_table
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(
        argument_spec=argument_spec(NODE_OPTIONS, HELPER_OPTIONS, RUNTIME_OPTIONS, LOCK_OPTIONS), supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    try:
        host = host_from_params(module.params)
        status = node_status(host, module.params["state_dir"], module.params["cdi_runtimes"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc))
    warn(module, host.node_id(), status.pop("warnings"))
    status["table"] = status_table(status).splitlines()
    module.exit_json(changed=False, **status)

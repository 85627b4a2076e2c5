# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.gpu_busy: whether GPUs are busy, and healthy, read only.

Its options are documented in plugins/modules/gpu_busy.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import busy_check, busy_message
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_host import host_from_params
from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import LOCK_OPTIONS, NODE_OPTIONS, Module, argument_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(argument_spec=argument_spec(
        NODE_OPTIONS, LOCK_OPTIONS,
        gpus=dict(type="list", elements="str"),
    ), supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    params = module.params
    try:
        entries = busy_check(host_from_params(params), params["gpus"], params["state_dir"], params["lock_timeout"])
    except (BcdError, OSError) as exc:
        module.fail_json(msg=printable(exc))
    module.exit_json(changed=False, msg=busy_message(entries), gpus=entries)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module bcd.devices.events: the journaled events, and their acknowledgement.

Its options are documented in plugins/modules/events.py, which runs this bundled; the action plugin of the same
name runs it from the node's installed library when it is the controller's code (node/library.py)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Dict

from ansible_collections.bcd.devices.plugins.module_utils.entry.module_options import LOCK_OPTIONS, NODE_OPTIONS, Module, argument_spec, warn
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import load_fakehw
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import join_root
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import refuse_unless_isolated
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:
    from types import ModuleType


def _node_id(params: Dict[str, Any]) -> str:
    """The node's name for warnings, as its host would say it (``host.node_id()``): a fakehw node's own id,
    else the hostname. Not the journal's ``node_id``: the journal is the account's to write. The fakehw file
    is read only for a fakehw node; no other host code is loaded (docs/performance.md)."""
    if params.get("fakehw"):
        try:
            node_id = load_fakehw(params["fakehw"]).node_id
        except (BcdError, OSError):
            node_id = None
        if node_id:
            return node_id
    return socket.gethostname()


def main(basic: ModuleType) -> None:
    """The module's run; ``basic`` is ``ansible.module_utils.basic``, which the module passes in (this
    library runs without Ansible too: bcd-holds imports its siblings)."""
    module: Module = basic.AnsibleModule(
        argument_spec=argument_spec(NODE_OPTIONS, LOCK_OPTIONS, ack_through=dict(type="int")), supports_check_mode=True)
    refuse_unless_isolated(module)  # root: no Python another account steers (node/isolation.py)
    try:
        # only the state directory under root: no host, so neither the node's readers nor their imports
        state = NodeState(join_root(module.params["root"], module.params["state_dir"]), module.params["state_dir"])
        events, acknowledged = state.list_and_acknowledge(module.params["ack_through"], module.check_mode,
                                                          module.params["lock_timeout"])
    except BcdError as exc:
        module.fail_json(msg=printable(exc))
    except OSError as exc:
        module.fail_json(msg=printable("cannot use the state directory %s: %s" % (module.params["state_dir"], exc)))
    warn(module, _node_id(module.params), state.warnings())
    module.exit_json(changed=acknowledged > 0, events=events, acknowledged=acknowledged)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every module shares (documented by the doc fragment ``bcd.devices.node``).

It imports no layer but one constant of the state directory's table (``node/state_files.py``, which every
module reaches anyway): every module imports it, and AnsiballZ ships whatever a module's imports reach (the
host factory is ``entry/module_host.py``, for the modules that need a host)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable

from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import DEFAULT_STATE_DIR
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:  # Ansible is the caller's (the modules pass ``basic`` in): never imported here at run time
    from ansible.module_utils.basic import AnsibleModule

# An option's settings in an ``argument_spec`` (``type``, ``default``, ``choices``, ``options``...), as Ansible reads them.
OptionSpec = Dict[str, Dict[str, Any]]

NODE_OPTIONS: OptionSpec = dict(
    root=dict(type="path", default="/"),
    fakehw=dict(type="path"),
    state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
)
HELPER_OPTIONS: OptionSpec = dict(
    helper_socket=dict(type="path"),
)
LOCK_OPTIONS: OptionSpec = dict(
    lock_timeout=dict(type="float", default=120),
)
RUNTIME_OPTIONS: OptionSpec = dict(
    cdi_runtimes=dict(type="raw", default="auto"),
)


def argument_spec(*groups: OptionSpec, **own: Dict[str, Any]) -> OptionSpec:
    """The shared option groups and the module's own options, as one ``argument_spec``."""
    spec: OptionSpec = {}
    for group in groups:
        spec.update(group)
    spec.update(own)
    return spec


def warn(module: AnsibleModule, node: str, texts: Iterable[str]) -> None:
    """Hand warnings to Ansible, each naming ``node`` (the ``node_id`` its events carry: ``host.node_id()``),
    so that on a fleet one can tell which node said "host memory unreadable"; each text escaped
    (``support/text.py``)."""
    for text in texts:
        module.warn(printable("%s: %s" % (node, text)))

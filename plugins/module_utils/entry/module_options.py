# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every module shares (documented by the doc fragment ``bcd.devices.node``).

It imports no layer but one constant of the state directory's table (``node/state_files.py``, which every
module reaches anyway): every module imports it, and AnsiballZ ships whatever a module's imports reach (the
host factory is ``entry/module_host.py``, for the modules that need a host)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, NoReturn, Protocol

from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import DEFAULT_STATE_DIR
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

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


class Module(Protocol):
    """Ansible's ``AnsibleModule`` as the modules' code uses it. The module passes ``basic`` in (``main(basic)``):
    this library runs without Ansible too, and imports none of it."""

    params: Dict[str, Any]
    check_mode: bool
    _diff: bool

    def fail_json(self, msg: str, **kwargs: Any) -> NoReturn:
        """End the run failed, with ``msg`` and the result ``kwargs``."""

    def exit_json(self, **kwargs: Any) -> NoReturn:
        """End the run with the result ``kwargs``."""

    def warn(self, warning: str) -> None:
        """Add a warning to the result."""


def warn(module: Module, node: str, texts: Iterable[str]) -> None:
    """Hand warnings to Ansible, each naming ``node`` (the ``node_id`` its events carry: ``host.node_id()``),
    so that on a fleet one can tell which node said "host memory unreadable"; each text escaped
    (``support/text.py``)."""
    for text in texts:
        module.warn(printable("%s: %s" % (node, text)))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every module shares (documented by the doc fragment ``bcd.devices.node``), and the one
host and state factory the modules use."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.domain.text import printable
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import make_host
from ansible_collections.bcd.devices.plugins.module_utils.state.store import DEFAULT_STATE_DIR, NodeState

NODE_OPTIONS = dict(
    root=dict(type="path", default="/"),
    fakehw=dict(type="path"),
    state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
)
HELPER_OPTIONS = dict(
    helper_socket=dict(type="path"),
)
LOCK_OPTIONS = dict(
    lock_timeout=dict(type="float", default=120),
)
RUNTIME_OPTIONS = dict(
    cdi_runtimes=dict(type="raw", default="auto"),
)


def argument_spec(*groups, **own):
    """The shared option groups and the module's own options, as one ``argument_spec``."""
    spec = {}
    for group in groups:
        spec.update(group)
    spec.update(own)
    return spec


def host_from_params(params):
    """The host the module's options name."""
    return make_host(params["root"], params.get("fakehw"), helper_socket=params.get("helper_socket"))


def state_of(host, params):
    """The host's state directory the module's options name."""
    return NodeState(host.path(params["state_dir"]), params["state_dir"])


def warn(module, host, texts):
    """Hand warnings to Ansible, each naming the node (the ``node_id`` its events carry), so that on a
    fleet one can tell which node said "host memory unreadable"; each text escaped (``domain/text.py``)."""
    node = host.node_id()
    for text in texts:
        module.warn(printable("%s: %s" % (node, text)))

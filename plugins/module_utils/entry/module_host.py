# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one host factory of the modules that read or change the node's devices (``holds``, ``holds_info``,
``gpu_busy``, ``maintenance``): the node layer comes with it, so a module that needs only its state
directory (``events``) does not import this."""

from __future__ import annotations

from typing import Any, Dict

from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import Host, make_host


def host_from_params(params: Dict[str, Any]) -> Host:
    """The host the module's options name."""
    return make_host(params["root"], params.get("fakehw"), helper_socket=params.get("helper_socket"))

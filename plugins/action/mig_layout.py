# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of bcd.devices.mig_layout: runs it from the node's installed library when that is this controller's
code, else as Ansible ships it (plugins/plugin_utils/node_library.py)."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.plugin_utils.node_library import NodeLibraryAction


class ActionModule(NodeLibraryAction):
    MODULE = "mig_layout"

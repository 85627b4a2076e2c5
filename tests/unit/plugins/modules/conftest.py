# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module test needs: the module's own process, as on a node."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def module_process(monkeypatch):
    """A module runs in a process of its own, where ansible-core's module_utils are in module mode. Once a test
    in the same pytest process imports controller code (an action plugin, plugin_utils, ansible-doc), ansible-core
    turns a module's warnings into the controller's display instead of the result's ``warnings``, and a test of
    them passes or fails by the order the tests ran in."""
    from ansible.module_utils import _internal  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(_internal, "is_controller", False, raising=False)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""patch_module_args, as the unit tests import it.

Every ansible-core the collection supports (2.19 and later: meta/runtime.yml) ships it as
``ansible.module_utils.testing.patch_module_args``; the stand-in that 2.16 to 2.18 needed is gone
with them. The tests keep importing it from here, one place to change should it move."""

from __future__ import annotations

from ansible.module_utils.testing import patch_module_args

__all__ = ["patch_module_args"]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""patch_module_args for every ansible-core the collection supports.

ansible-core 2.19 ships ``ansible.module_utils.testing.patch_module_args``; 2.16 to 2.18
do not, and their modules read the arguments from ``basic._ANSIBLE_ARGS`` instead.
The unit tests run under the oldest and the newest ansible-core (make units-matrix), so
they take it from here."""

from __future__ import annotations

import contextlib
import json

try:
    from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+
except ImportError:  # ansible-core 2.16 to 2.18
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    @contextlib.contextmanager
    def patch_module_args(args=None):
        """Give the next AnsibleModule ``args`` as its arguments, as the 2.19 helper does."""
        args = dict(args or {})
        args.setdefault("_ansible_remote_tmp", "/tmp")
        args.setdefault("_ansible_keep_remote_files", False)
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved

__all__ = ["patch_module_args"]

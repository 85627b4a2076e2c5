# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""patch_module_args, as the unit tests import it, and ``run_main``: one module run in this process.

Every ansible-core the collection supports (2.19 and later: meta/runtime.yml) ships it as
``ansible.module_utils.testing.patch_module_args``; the stand-in that 2.16 to 2.18 needed is gone
with them. The tests keep importing it from here, one place to change should it move."""

from __future__ import annotations

import sys

import pytest
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

__all__ = ["patch_module_args", "run_main"]


def run_main(capsys, main, args):
    """``(stdout, stderr)`` of a module's ``main()`` run with ``args``, as a module process starts: with no
    warnings (in this one process the last run's would linger) and never a traceback."""
    getattr(ansible_warnings, "_global_warnings", {}).clear()
    getattr(ansible_warnings, "_global_deprecations", {}).clear()
    if "ansible.utils.display" in sys.modules:  # controller code loaded by another test shows each text once
        getattr(sys.modules["ansible.utils.display"].Display(), "_warns", set()).clear()
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            main()
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out, err

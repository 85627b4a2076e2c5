# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offline stand-in for the get-pip.py script that `ansible-test sanity` downloads.

ansible-test bootstraps pip into each sanity virtual environment with a get-pip.py
fetched from a host these machines cannot reach. noxfile.py's sanity sessions copy this file to
the cache path ansible-test looks at first (~/.ansible/test/cache/get_pip_<ver>.py),
so the bootstrap takes pip from the interpreter's own ensurepip and then installs the
pinned pip that ansible-test asked for from the package index.
"""

import ensurepip
import os
import runpy
import sys

# --no-setuptools and --no-wheel are get-pip.py's own flags; `pip install` rejects them.
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap(upgrade=True)
# Let pip read the machine's own configuration (certificates, index, local wheels)
# even where the caller pointed PIP_CONFIG_FILE elsewhere.
os.environ.pop("PIP_CONFIG_FILE", None)
sys.argv = ["pip", "install"] + args
runpy.run_module("pip", run_name="__main__", alter_sys=True)

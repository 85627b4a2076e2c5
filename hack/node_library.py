#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Install the collection's library under a fakehw node's root as the role bcd.devices.bcd_holds does
(roles/bcd_holds/tasks/install.yml): the module_utils' *.py files through the same tar archive (root's,
u=rwX,go=rX), then byte-compiled with the role's command (checked-hash .pyc, umask 022). For make bench
and the tests, which run as root.

    hack/node_library.py ROOT [--prefix /usr/local]
"""

import argparse
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "plugins", "module_utils")
TREE = "ansible_collections/bcd/devices/plugins/module_utils"
VARS = os.path.join(REPO, "roles", "bcd_holds", "vars", "main.yml")


def compile_program():
    """The program the role's "Byte-compile the library" task runs (its vars' ``__bcd_holds_compile``)."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(VARS) as handle:
        return yaml.safe_load(handle)["__bcd_holds_compile"]


def library_files():
    """The module_utils' *.py files relative to it, sorted (the role's find task)."""
    found = []
    for top, _dirs, files in os.walk(SOURCE):
        found += [os.path.relpath(os.path.join(top, name), SOURCE) for name in files if name.endswith(".py")]
    return sorted(found)


def install(root, prefix="/usr/local", python=sys.executable):
    """The library under ``root``; returns its module_utils directory."""
    dest = os.path.join(root, prefix.lstrip("/"), "lib", "bcd-holds", TREE)
    os.makedirs(dest, mode=0o755, exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".bcd-holds-lib.tar") as archive:
        subprocess.run(["tar", "-C", SOURCE, "-cf", archive.name, "--owner=0", "--group=0", "--numeric-owner",
                        "--mode=u=rwX,go=rX", "--sort=name"] + library_files(), check=True)
        subprocess.run(["tar", "-C", dest, "-xf", archive.name], check=True)
    subprocess.run([python, "-I", "-c", compile_program(), dest], check=True, stdout=subprocess.DEVNULL)
    return dest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("root")
    parser.add_argument("--prefix", default="/usr/local")
    args = parser.parse_args(argv)
    print(install(args.root, args.prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Makes, ahead of ansible-test, the virtual environment of each sanity test whose pinned
requirements name a package by a direct URL (``name @ https://...``) instead of a release.

ansible-test 2.22 pins pylint's ``dill`` to a source archive of an unreleased commit (upstream's
comment: "needed until dill released with 3.15 support"). pip fetches such a URL itself, never
through the package index, and these machines reach no host but the index (as with get-pip.py,
hack/get_pip_stand_in.py), so ansible-test's own install of that venv fails and the test with it.

This makes the venv where ansible-test looks for it (the path it derives from the same pip
commands, with its ``marker.txt``, so ansible-test reuses it and installs nothing): the same
commands, run by ansible-test's own pip script, with each ``name @ URL`` line replaced by
``name``, the newest release the package index serves. Python 3.15 is not on these machines, so
the commit that adds 3.15 support is not needed on the 3.13 the tests run on. It prints each
replacement. A venv already made (by ansible-test or an earlier run) is left alone.

Run by noxfile.py's sanity sessions, with the Python of the ansible-core under test, in the copy of the
collection (ansible-test's data context), with HOME where ansible-test keeps its venvs:

    python hack/sanity_offline_venvs.py 3.13
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

try:
    from ansible_test._internal.commands.sanity import hash_pip_commands
    from ansible_test._internal.constants import SUPPORTED_PYTHON_VERSIONS
    from ansible_test._internal.data import data_context
    from ansible_test._internal.host_configs import VirtualPythonConfig
    from ansible_test._internal.python_requirements import PipInstall, collect_requirements, prepare_pip_script
    from ansible_test._internal.util import ANSIBLE_TEST_DATA_ROOT, ANSIBLE_TEST_TARGET_TOOLS_ROOT
except ImportError as error:  # another ansible-test's internals (make canary): it installs its venvs itself
    print("sanity: hack/sanity_offline_venvs.py does not know this ansible-test (%s); it makes its venvs itself" % error)
    sys.exit(0)

DIRECT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*\S+.*$", re.M)


def offline(command):
    """The command with each ``name @ URL`` requirement replaced by ``name``; None when it has none."""
    if not isinstance(command, PipInstall):
        return None
    requirements, found = [], []
    for path, contents in command.requirements:
        found.extend(match.group(0) for match in DIRECT.finditer(contents))
        requirements.append((path, DIRECT.sub(lambda match: match.group("name"), contents)))
    return (dataclasses.replace(command, requirements=requirements), found) if found else None


def make(test, version):
    # ansible-test's create_sanity_virtualenv: the same commands, the same path, the same metadata.
    python = VirtualPythonConfig(version=version, path=sys.executable)
    commands = collect_requirements(python=python, controller=True, ansible=False, coverage=False, minimize=False,
                                    command=None, sanity=test)
    replaced, found = [], []
    for command in commands:
        changed = offline(command)
        replaced.append(changed[0] if changed else command)
        found.extend(changed[1] if changed else [])
    if not found:
        return
    path = Path(os.path.expanduser("~/.ansible/test/venv")) / ("sanity.%s" % test) / version / hash_pip_commands(commands)
    if (path / "marker.txt").exists():
        return
    for line in found:
        print("sanity: ansible-test's %s venv: '%s' is fetched from its URL, which this machine cannot reach;"
              " installing %s from the package index instead" % (test, line.split("#")[0].strip(), line.split("@")[0].strip()), flush=True)
    subprocess.run(["rm", "-rf", str(path)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    venv_python = str(path / "bin" / "python")
    subprocess.run([venv_python], input=prepare_pip_script(replaced), text=True, check=True)
    (path / "meta.install.json").write_text(json.dumps([command.serialize() for command in replaced], indent=4))
    checked = json.loads(subprocess.run([venv_python, os.path.join(ANSIBLE_TEST_TARGET_TOOLS_ROOT, "yamlcheck.py")],
                                        capture_output=True, text=True, check=True).stdout)
    (path / "meta.yaml.json").write_text(json.dumps(checked["cloader"] if checked["yaml"] else None))
    names = [line.split("@")[0].strip() for line in found]
    have = subprocess.run([venv_python, "-c", "import sys; from importlib.metadata import version\n"
                           "print(', '.join('%s %s' % (name, version(name)) for name in sys.argv[1:]))"] + names,
                          capture_output=True, text=True, check=True).stdout.strip()
    print("sanity: made %s (%s)" % (path, have))
    (path / "marker.txt").touch()


def main():
    version = sys.argv[1]
    assert version in SUPPORTED_PYTHON_VERSIONS, version
    data_context()  # ansible-test's view of the collection in the current directory
    requirements = Path(ANSIBLE_TEST_DATA_ROOT) / "requirements"
    for path in sorted(requirements.glob("sanity.*.txt")):
        test = path.name[len("sanity."):-len(".txt")]
        if DIRECT.search(path.read_text()):
            if test.startswith("import"):
                sys.exit("sanity_offline_venvs: %s names a package by URL; the import test's venvs are not made here" % path)
            make(test, version)


if __name__ == "__main__":
    main()

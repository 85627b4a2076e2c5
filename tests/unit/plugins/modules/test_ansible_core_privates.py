# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-core's private names, fenced: ``core_module_args`` in plugins/modules/node_library.py is the one
place the collection's plugins use one, and under every ansible-core release the collection supports (the
Makefile's CORES, held to docs/compatibility.md's table by tests/unit/docs/test_compatibility.py) each name it
uses is there and does what the function expects of it.

Each release runs in its own interpreter (its venv from hack/core_venv.sh, as make units and the install test
find it): the task's options, encoded as the controller encodes them under each serialization profile, come back
from ``core_module_args`` with Ansible's ``_ansible_*`` settings, and what ``hand_over`` hands on is what the
next ``AnsibleModule`` of the process reads, its check mode and a profile's dates included."""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
PLUGINS = REPO / "plugins"
MODULE = PLUGINS / "modules" / "node_library.py"
FENCE = "core_module_args"


def cores():
    """The supported releases, oldest first: the Makefile's CORES."""
    found = re.search(r"^CORES \?= (.+)$", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert found, "the Makefile has no CORES"
    return found.group(1).split()


def ansible_names(tree):
    """``{local name: ansible module}`` bound by the file's ``import ansible...`` and ``from ansible... import``."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ansible":
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ansible":
            for alias in node.names:
                names[alias.asname or alias.name] = "%s.%s" % (node.module, alias.name)
    return names


def private_uses(path):
    """``[(line, text, enclosing function)]``: each private name of ansible-core the file imports or reaches
    through a name it imported from ansible (``basic._load_params``, ``from ansible.x import _y``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = ansible_names(tree)
    enclosing = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            for inner in ast.walk(function):
                enclosing.setdefault(id(inner), function.name)  # the outermost function: ast.walk goes outside in
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ansible":
            uses.extend((node.lineno, "%s.%s" % (node.module, alias.name), enclosing.get(id(node)))
                        for alias in node.names if alias.name.startswith("_"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            uses.append((node.lineno, "%s.%s" % (names[node.value.id], node.attr), enclosing.get(id(node))))
    return uses


def fenced_names():
    """``[(ansible module, attribute)]`` that the fence reaches through the names it imported from ansible."""
    tree = ast.parse(MODULE.read_text(encoding="utf-8"))
    names = ansible_names(tree)
    fence = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == FENCE)
    found = set()
    for node in ast.walk(fence):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            found.add((names[node.value.id], node.attr))
    return sorted(found)


def test_every_private_name_of_ansible_core_the_plugins_use_is_in_the_fence():
    outside = ["%s:%d %s (in %s)" % (path.relative_to(REPO), line, text, where or "the module's body")
               for path in sorted(PLUGINS.rglob("*.py")) for line, text, where in private_uses(path)
               if not (path == MODULE and where == FENCE)]
    assert outside == [], "ansible-core's private names outside %s of %s" % (FENCE, MODULE.relative_to(REPO))
    inside = set(text for _line, text, _where in private_uses(MODULE))
    assert inside == {"ansible.module_utils.basic._load_params", "ansible.module_utils.basic._ANSIBLE_PROFILE",
                      "ansible.module_utils.basic._ANSIBLE_ARGS"}, "the fence's docstring says why each is used"


# Run by each release's Python: every name the fence uses is there, and the fence hands the task's options on.
CHECK = r'''
import datetime, json, sys
sys.path.insert(0, sys.argv[1])
from ansible.module_utils import basic
from ansible.module_utils.common import json as module_json
from ansible_collections.bcd.devices.plugins.modules import node_library

owners = {"ansible.module_utils.basic": basic, "ansible.module_utils.common.json": module_json}
missing = ["%s.%s" % (owner, name) for owner, name in json.loads(sys.argv[2]) if not hasattr(owners[owner], name)]
assert not missing, "gone from this ansible-core: %s" % missing

when = datetime.date(2026, 1, 1)
for profile, sent_when in (("legacy", "2026-01-01"), ("modern", when)):
    task = {"module": "holds", "module_args": {"generation": 3, "when": when}, "path": "/usr/local/lib/x",
            "digest": "0" * 64, "_ansible_check_mode": True, "_ansible_diff": True, "_ansible_verbosity": 2}
    encoder = module_json.get_module_encoder(profile, module_json.Direction.CONTROLLER_TO_MODULE)
    # what AnsiballZ's loader does before a module's main: the encoded options and their profile
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": task}, cls=encoder).encode()
    basic._ANSIBLE_PROFILE = profile

    raw, hand_over = node_library.core_module_args()
    expected = dict(task, module_args={"generation": 3, "when": sent_when})
    assert raw == expected, (profile, raw)
    options = node_library.sent_by_the_action(raw)
    assert options == {"module": "holds", "module_args": expected["module_args"], "path": "/usr/local/lib/x",
                       "digest": "0" * 64}, (profile, options)

    params = dict((key, value) for key, value in raw.items() if key.startswith("_ansible_"))
    params.update(options["module_args"])
    params["_ansible_module_name"] = "bcd.devices.holds"
    hand_over(params)
    module = basic.AnsibleModule(argument_spec={"generation": {"type": "int"}, "when": {"type": "raw"}},
                                 supports_check_mode=True)
    assert module.params == {"generation": 3, "when": sent_when}, (profile, module.params)
    assert module.check_mode is True, profile
print("ok")
'''


@pytest.mark.parametrize("core", cores())
def test_the_fenced_names_are_there_and_hand_the_options_on_under(core):
    done = subprocess.run(["bash", str(REPO / "hack" / "core_venv.sh"), core], cwd=str(REPO), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    python = Path(done.stdout.strip()) / "python"
    names = fenced_names()
    assert ("ansible.module_utils.basic", "_ANSIBLE_ARGS") in names
    ran = subprocess.run([str(python), "-c", CHECK, str(REPO / ".build"), json.dumps(names)], cwd=str(REPO),
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", "ansible-core %s: %s%s" % (core, ran.stdout, ran.stderr)

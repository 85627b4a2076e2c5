# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""bcd.devices.node_library run by hand, as a user could: options the action plugin would not send are
checked and normalized by AnsibleModule as any module's are (the action plugin's own are taken as sent, so a
task's options are decoded and checked once, by the module the library runs)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.plugin_utils.node_library import controller_digest

REPO = Path(__file__).resolve().parents[4]
ANSIBLE = Path(sys.executable).parent / "ansible"
TREE = "usr/local/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils"

pytestmark = pytest.mark.skipif(not ANSIBLE.exists(), reason="needs ansible")


def adhoc(tmp_path, args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "home" / "tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    done = subprocess.run([str(ANSIBLE), "localhost", "-c", "local", "-m", "bcd.devices.node_library",
                           "-a", json.dumps(args)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=120, check=False)
    # what the user reads: localhost | SUCCESS => {...} or localhost | FAILED! => {...}
    status, _sep, shown = done.stdout[done.stdout.index("localhost | "):].partition(" => ")
    result = json.loads(shown)
    result["failed"] = status.endswith("FAILED!")
    return result


def test_a_module_not_in_the_choices_is_refused_by_its_options(tmp_path):
    result = adhoc(tmp_path, {"module": "copy", "path": "/nonexistent", "digest": "0" * 64})
    assert result["failed"] and "value of module must be one of: holds, holds_info, events, gpu_busy, gpu_reset, maintenance, mig_layout" \
        in result["msg"]


def test_an_option_the_module_does_not_have_is_refused(tmp_path):
    result = adhoc(tmp_path, {"module": "holds", "path": "/nonexistent", "digest": "0" * 64, "root": "/"})
    assert result["failed"] and "Unsupported parameters" in result["msg"] and "root" in result["msg"]


def test_a_path_the_action_would_not_send_is_normalized_first(tmp_path):
    """``~`` is expanded as a ``type: path`` option's is, then the library there is checked: missing."""
    result = adhoc(tmp_path, {"module": "holds_info", "path": "~/no-library/" + TREE, "digest": "0" * 64})
    assert not result["failed"] and result["changed"] is False
    assert result["node_library_refused"].startswith(os.path.expanduser("~/no-library/"))
    assert "is not installed" in result["node_library_refused"]


def test_the_action_plugins_options_reach_the_library_check(tmp_path):
    result = adhoc(tmp_path, {"module": "holds", "module_args": {"generation": 1, "devices": []},
                              "path": str(tmp_path / TREE), "digest": controller_digest()})
    assert not result["failed"] and result["node_library_refused"] == "%s is not installed (the role bcd.devices.bcd_holds installs it)" % (tmp_path / TREE)


def test_the_collector_is_off_for_the_librarys_import_and_on_for_the_pass(monkeypatch):
    """What the library's import makes lives as long as the process, so the cyclic collector does not run while
    it is imported; the pass runs with it, as every module does (a pass over a large section makes garbage), and
    so does a run whose import failed."""
    from ansible_collections.bcd.devices.plugins.modules import node_library  # pylint: disable=import-outside-toplevel

    seen = {}

    class Entry:
        @staticmethod
        def main(_basic):
            seen["pass"] = gc.isenabled()

    def imported(name):
        seen["import"] = gc.isenabled()
        seen["name"] = name
        if name.endswith(".holds_info"):
            raise ImportError("no such module")
        return Entry

    monkeypatch.setattr(node_library.importlib, "import_module", imported)
    monkeypatch.setattr(node_library.gc, "freeze", lambda: seen.setdefault("frozen", gc.isenabled()))
    assert gc.isenabled()
    node_library.run_from_library("holds", {"generation": 1}, {"_ansible_check_mode": True}, lambda params: None)
    assert seen == {"import": False, "frozen": False, "pass": True,
                    "name": "ansible_collections.bcd.devices.plugins.module_utils.entry.modules.holds"}
    with pytest.raises(ImportError):
        node_library.run_from_library("holds_info", {}, {}, lambda params: None)
    assert gc.isenabled()


def test_the_role_s_install_check_is_taken_only_as_the_action_plugin_sends_it():
    """The ``install`` option (the role's own tasks): a manifest path and a digest, nothing else; anything else goes
    to ``AnsibleModule``, which says what is wrong, and the options without it are passed on as they came."""
    from ansible_collections.bcd.devices.plugins.modules.node_library import sent_by_the_action

    base = {"module": "holds", "module_args": {}, "path": "/usr/local/lib/x", "digest": "0" * 64}
    assert sent_by_the_action(dict(base)) == base  # no install key added
    good = dict(base, install={"manifest": "/usr/local/lib/bcd-holds/installed.json", "digest": "d" * 64})
    assert sent_by_the_action(good) == good
    for install in ({"manifest": "relative.json", "digest": "d"}, {"manifest": "/m"}, "yes", [1],
                    {"manifest": "/m", "digest": "d", "more": 1}, {"manifest": "/m", "digest": 7}):
        assert sent_by_the_action(dict(base, install=install)) is None, install

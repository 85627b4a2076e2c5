# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules under become: node/isolation.py refuses a root Python another account can steer.

The checks on their own (variables, the user site, each sys.path entry and its parents), then a
real module (bcd.devices.holds_info through ansible-playbook, AnsiballZ, as root with the
system Python): a normal run passes, and one with PYTHONPATH, or a HOME the attacker owns with a
user site in it, is refused with a message naming the cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.node import isolation
from ansible_collections.bcd.devices.plugins.module_utils.node.isolation import isolation_problems, path_problem

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PYTHON = "/usr/bin/python3"
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another account")


@pytest.fixture
def roots(tmp_path):
    """A root-owned tree: tmp_path/lib (0755) with a zip file (0644) in it."""
    tmp_path.chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o755)
    payload = lib / "payload.zip"
    payload.write_bytes(b"PK")
    payload.chmod(0o644)
    return tmp_path


def test_a_clean_interpreter_has_no_problem(roots):
    assert isolation_problems(environ={"HOME": "/root", "PATH": "/usr/bin"},
                              path=[str(roots / "lib"), str(roots / "lib" / "payload.zip"), str(roots / "missing")],
                              user_site=str(roots / "no-such-site")) == []


@pytest.mark.parametrize("name", isolation.STEERING_VARIABLES)
def test_a_variable_that_steers_python_is_refused(roots, name):
    assert isolation_problems(environ={name: "/x"}, path=[str(roots / "lib")], user_site="") == ["%s is set" % name]
    assert isolation_problems(environ={name: ""}, path=[str(roots / "lib")], user_site="") == []


@pytest.mark.parametrize("entry", ["", "."])
def test_the_current_directory_on_the_path_is_refused(entry):
    assert "the current directory is on sys.path" in isolation_problems(environ={}, path=[entry], user_site="")[0]


@as_root
def test_an_entry_another_account_owns_or_may_write_is_refused(roots):
    lib = roots / "lib"
    assert path_problem(str(lib)) is None
    (lib / "payload.zip").chmod(0o666)
    assert "writable by its group or by others" in path_problem(str(lib / "payload.zip"))
    (lib / "payload.zip").chmod(0o644)
    lib.chmod(0o775)
    assert "writable by its group or by others" in path_problem(str(lib / "payload.zip"))
    assert "writable" in path_problem(str(lib / "not-there-yet"))   # anyone in the group may create it
    lib.chmod(0o755)
    os.chown(str(lib), NOBODY, NOBODY)
    assert "owned by uid %d" % NOBODY in path_problem(str(lib / "payload.zip"))
    problems = isolation_problems(environ={}, path=[str(lib)], user_site="")
    assert problems and "can be changed by another account" in problems[0]


@as_root
def test_a_sticky_directory_is_roots_only_where_its_child_is(roots):
    shared = roots / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                            # like /tmp
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    assert path_problem(str(mine)) is None
    assert path_problem(str(mine / "payload.zip")) is None
    theirs = shared / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(str(theirs), NOBODY, NOBODY)
    assert "owned by uid" in path_problem(str(theirs / "lib"))
    # the sticky directory itself on the path, or a missing entry in it: anyone may add a file there
    assert "writable by its group or by others" in path_problem(str(shared))
    assert "writable by its group or by others" in path_problem(str(shared / "not-there-yet.zip"))
    shared.chmod(0o777)                             # without the sticky bit anyone may rename mine
    assert "writable by its group or by others" in path_problem(str(mine))


@as_root
def test_an_entry_reached_through_a_link_another_account_may_change_is_refused(roots):
    theirs = roots / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "lib").symlink_to(roots / "lib")      # resolves to root's lib, but they may swap the link
    assert path_problem(str(roots / "lib")) is None
    assert path_problem(str(theirs / "lib")) is None
    os.chown(str(theirs), NOBODY, NOBODY)
    assert "owned by uid %d" % NOBODY in path_problem(str(theirs / "lib"))
    (roots / "link").symlink_to(theirs)             # and a root link to their directory
    assert "owned by uid %d" % NOBODY in path_problem(str(roots / "link"))


@as_root
def test_a_user_site_under_a_home_the_account_owns_is_refused(roots):
    home = roots / "home"
    site = home / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert isolation_problems(environ={}, path=[str(site)], user_site=str(site)) == []
    os.chown(str(home), NOBODY, NOBODY)
    problems = isolation_problems(environ={}, path=[str(roots / "lib"), str(site)], user_site=str(site))
    assert len(problems) == 1 and problems[0].startswith("the user site %s (under $HOME) is on sys.path" % site)
    # a home of theirs with no user site in it puts nothing of theirs on the path: nothing to refuse
    assert isolation_problems(environ={}, path=[str(roots / "lib")], user_site=str(site)) == []


class FakeModule(object):
    def __init__(self):
        self.failed = None

    def fail_json(self, **result):
        self.failed = result
        raise SystemExit(1)


def test_refuse_unless_isolated_fails_the_module_as_root_only(monkeypatch):
    monkeypatch.setattr(isolation, "isolation_problems", lambda: ["PYTHONPATH is set"])
    module = FakeModule()
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 1000)
    isolation.refuse_unless_isolated(module)
    assert module.failed is None
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    with pytest.raises(SystemExit):
        isolation.refuse_unless_isolated(module)
    assert module.failed["msg"].startswith("refusing to run as root in a Python another account can steer: "
                                           "PYTHONPATH is set (")


# -- a real module run as root, through AnsiballZ ------------------------------------------------

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: read the node
      bcd.devices.holds_info:
        root: {root}
        fakehw: {fakehw}
      environment: {environment}
      register: info
      ignore_errors: true
    - name: show
      ansible.builtin.copy:
        content: "{{{{ info | to_json }}}}"
        dest: {out}
"""


def run_module(tmp_path, make_node, environment):
    node = make_node()
    out = tmp_path / "result.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(root=node.root, fakehw=node.fakehw, out=out, environment=json.dumps(environment)))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_PIPELINING="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"), ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + PYTHON, str(play)],
                          env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout
    return json.loads(out.read_text())


needs_module_run = pytest.mark.skipif(
    os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists() or not os.path.exists(PYTHON),
    reason="needs root, ansible-playbook beside %s and %s" % (sys.executable, PYTHON))


@needs_module_run
def test_a_normal_module_run_as_root_passes(tmp_path, make_node):
    result = run_module(tmp_path, make_node, {})
    assert not result.get("failed"), result
    assert "refusing" not in json.dumps(result)


@needs_module_run
def test_a_module_run_as_root_with_pythonpath_is_refused(tmp_path, make_node):
    result = run_module(tmp_path, make_node, {"PYTHONPATH": str(tmp_path)})
    assert result["failed"] and result["msg"].startswith(
        "refusing to run as root in a Python another account can steer: PYTHONPATH is set"), result


@needs_module_run
def test_a_module_run_as_root_with_the_account_s_home_is_refused(tmp_path, make_node):
    version = subprocess.run([PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout.strip()
    home = tmp_path / "attacker-home"
    (home / ".local" / "lib" / ("python" + version) / "site-packages").mkdir(parents=True)
    for path in [home] + list(home.rglob("*")):
        os.chown(str(path), NOBODY, NOBODY)
    result = run_module(tmp_path, make_node, {"HOME": str(home)})
    assert result["failed"], result
    site = "%s/.local/lib/python%s/site-packages" % (home, version)
    assert "the user site %s (under $HOME) is on sys.path and can be changed by another account" % site in result["msg"], result

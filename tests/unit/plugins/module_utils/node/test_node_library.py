# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node/library.py: a module runs the node's installed library only when it is the controller's code and
root's alone; every other case is refused with its reason (and the module then runs as shipped)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.node import library
from ansible_collections.bcd.devices.plugins.plugin_utils.node_library import controller_digest, wanted_library

REPO = Path(__file__).resolve().parents[5]
sys.path.insert(0, str(REPO / "hack"))
import node_library as installer  # noqa: E402  pylint: disable=wrong-import-position

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the role installs the library as root")


@pytest.fixture(name="installed")
def fixture_installed(tmp_path):
    """A node root with the library as the role installs it; returns its module_utils directory."""
    root = tmp_path / "root"
    root.mkdir()
    return Path(installer.install(str(root)))


def tree_listing(directory):
    return sorted((str(path.relative_to(directory)), path.stat().st_mtime_ns) for path in directory.rglob("*"))


def test_the_digest_is_the_collection_module_utils_by_content(tmp_path):
    copy = tmp_path / "copy"
    for name in installer.library_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((REPO / "plugins" / "module_utils" / name).read_bytes())
    assert library.library_digest(str(copy)) == controller_digest()
    (copy / "support" / "text.py").write_bytes((copy / "support" / "text.py").read_bytes() + b"\n")
    assert library.library_digest(str(copy)) != controller_digest()


def plain_digest(directory):
    """The digest as its definition reads, walked the plain way: every ``*.py`` under ``directory``, its
    relative path and the SHA-256 of its content, sorted; one SHA-256 over those lines."""
    lines = []
    for top, _dirs, files in os.walk(directory):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(top, name)
                with open(path, "rb") as handle:
                    lines.append("%s\0%s\n" % (os.path.relpath(path, directory), hashlib.sha256(handle.read()).hexdigest()))
    return hashlib.sha256("".join(sorted(lines)).encode("utf-8", "surrogateescape")).hexdigest()


def test_the_digest_is_its_plain_definition(tmp_path):
    """The node computes the digest on every module run, so it walks and reads the quick way; the value must be
    the plain walk's, on the collection and on a tree with empty, large and nested files."""
    assert library.library_digest(str(REPO / "plugins" / "module_utils")) == plain_digest(str(REPO / "plugins" / "module_utils"))
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "empty.py").write_bytes(b"")
    (tree / "a" / "large.py").write_bytes(b"x = 1\n" * 50000)
    (tree / "a" / "b" / "deep.py").write_bytes(b"y = 2\n")
    (tree / "a" / "notes.txt").write_bytes(b"not code")
    assert library.library_digest(str(tree)) == plain_digest(str(tree))
    assert library.library_digest(str(tree) + "/") == plain_digest(str(tree))


@needs_root
def test_the_library_the_role_installs_may_run(installed):
    assert library.refusal(str(installed), controller_digest()) is None
    assert list(installed.glob("domain/__pycache__/*.pyc")), "the role byte-compiles what it installs"


@needs_root
def test_a_node_without_the_library_is_refused(tmp_path):
    why = library.refusal(library.library_path(str(tmp_path), library.DEFAULT_LIBRARY), controller_digest())
    assert why.endswith("is not installed (the role bcd.devices.bcd_holds installs it)")


@needs_root
@pytest.mark.parametrize("change", ["edited", "added", "removed"])
def test_a_skewed_library_is_refused(installed, change):
    if change == "edited":
        path = installed / "domain" / "plan" / "planner.py"
        path.write_bytes(path.read_bytes().replace(b"def ", b"def  ", 1))
    elif change == "added":
        (installed / "domain" / "extra.py").write_text("X = 1\n")
        os.chmod(installed / "domain" / "extra.py", 0o644)
    else:
        (installed / "support" / "text.py").unlink()
    assert "is not the controller's code" in library.refusal(str(installed), controller_digest())


@needs_root
@pytest.mark.parametrize("where", ["domain", "support/text.py", "domain/__pycache__", "."])
def test_a_writable_directory_or_file_is_refused(installed, where):
    path = installed / where
    os.chmod(path, path.stat().st_mode | 0o020)
    assert library.refusal(str(installed), controller_digest()) == (
        "%s is writable by group or others (mode %04o)" % (os.path.realpath(path), path.stat().st_mode & 0o7777))


@needs_root
def test_a_writable_directory_above_it_is_refused_unless_sticky(installed):
    above = installed.parent.parent  # .../ansible_collections/bcd/devices
    os.chmod(above, 0o777)
    assert library.refusal(str(installed), controller_digest()) == (
        "%s is writable by group or others (mode 0777)" % above)
    os.chmod(above, 0o1777)  # like /tmp: nobody else can move the tree away
    assert library.refusal(str(installed), controller_digest()) is None


@needs_root
@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_link_in_the_tree_is_refused(installed, tmp_path, what):
    if what == "file":
        target = installed / "support" / "text.py"
        moved = tmp_path / "text.py"
        target.rename(moved)
        target.symlink_to(moved)
        link = target
    else:
        link = installed / "entry" / "more"
        link.symlink_to(installed / "domain")
    assert library.refusal(str(installed), controller_digest()) == "%s is a link" % link


@needs_root
def test_a_library_reached_through_a_link_is_checked_where_it_is(installed, tmp_path):
    link = tmp_path / "lib-link"
    link.symlink_to(installed)
    assert library.refusal(str(link), controller_digest()) is None


@needs_root
@pytest.mark.parametrize("where", ["support/text.py", "state", "domain/__pycache__", "."])
def test_a_file_or_directory_another_account_owns_is_refused(installed, where):
    path = installed / where
    os.chown(path, 65534, 65534)
    assert library.refusal(str(installed), controller_digest()) == "%s is owned by uid 65534, not root" % (
        os.path.realpath(path))


@needs_root
def test_a_directory_above_another_account_owns_is_refused(installed):
    above = installed.parent.parent.parent.parent  # .../lib/bcd-holds
    os.chown(above, 65534, 65534)
    assert library.refusal(str(installed), controller_digest()) == "%s is owned by uid 65534, not root" % above


@needs_root
def test_code_the_digest_does_not_cover_is_refused(installed):
    stray = installed / "domain" / "stray.pyc"
    stray.write_bytes((next(installed.glob("support/__pycache__/text.*.pyc"))).read_bytes())
    os.chmod(stray, 0o644)
    assert library.refusal(str(installed), controller_digest()) == "%s is code the digest does not cover" % stray


@needs_root
def test_a_module_imports_the_library_and_writes_nothing(installed):
    """In a new interpreter, as the module node_library does: every collection import comes from the library,
    read from its byte code, and nothing is written into it."""
    before = tree_listing(installed)
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from ansible_collections.bcd.devices.plugins.module_utils.node import library\n"
        "assert library.refusal(sys.argv[1], sys.argv[2]) is None\n"
        "library.use_library(sys.argv[1])\n"
        "from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds\n"
        "from ansible_collections.bcd.devices.plugins.module_utils.domain.plan import planner\n"
        "print(holds.__file__); print(planner.__cached__); print(sys.dont_write_bytecode)\n" % str(REPO / ".build"))
    done = subprocess.run([sys.executable, "-c", code, str(installed), controller_digest()], capture_output=True,
                          text=True, check=True)
    holds_file, cached, no_bytecode = done.stdout.split()
    assert holds_file == str(installed / "entry" / "modules" / "holds.py")
    assert cached.startswith(str(installed / "domain" / "plan" / "__pycache__")) and os.path.exists(cached)
    assert no_bytecode == "True"
    assert tree_listing(installed) == before


@pytest.mark.parametrize("value, wanted", [
    (None, library.DEFAULT_LIBRARY), (True, library.DEFAULT_LIBRARY), ("/opt/lib/bcd-holds", "/opt/lib/bcd-holds"),
    (False, None), ("", None), ("false", None), ("no", None),
])
def test_the_host_variable_names_the_library_or_turns_it_off(value, wanted):
    assert wanted_library(value) == wanted

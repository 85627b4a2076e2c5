# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``ansible-doc`` shows of every plugin and role is whole, and the README's commands work.

Runs the real ``ansible-doc`` (the one beside ``sys.executable``: ansible-core 2.19 in .venv,
2.22 in its tool venv) with the collection found through ``.build/ansible_collections/bcd/devices``,
as the Makefile's tools find it. For every module, filter and role (found in the tree, not listed
here), it checks that:

* the author reads ``Name (@github-handle)``, so ``ansible-doc`` prints no ``(!UNKNOWN)``;
* no requirement ends with a full stop (``ansible-doc`` joins them with ``, ``: ``events.,``);
* every complex return value (a dict, or a list of dicts) lists its fields (``contains``), each
  with a description and a type, down to the last level;
* a return value two modules both return (``holds`` and ``holds_info``, ``holds`` and ``events``)
  has the same fields in both, described alike, but for the listed one-sided ones;
* README.md and docs/README.md give an ``ansible-doc`` command for each, and every
  ``$ ansible-doc ...`` command they give succeeds and prints the plugin's or role's page.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
READMES = ["README.md", "docs/README.md"]
AUTHOR = re.compile(r"^[^()]+ \(@[A-Za-z0-9-]+\)$")

pytestmark = pytest.mark.skipif(not ANSIBLE_DOC.exists(), reason="ansible-doc is not beside %s" % sys.executable)


def modules():
    return sorted("bcd.devices.%s" % path.stem for path in (REPO / "plugins" / "modules").glob("*.py")
                  if path.stem != "__init__")


def filters():
    """The filters each file in plugins/filter returns from ``FilterModule.filters()``, read from the
    source (a filter file documents each filter it defines under the filter's own name)."""
    names = []
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                        names.extend(key.value for key in ret.value.keys if isinstance(key, ast.Constant))
    return sorted("bcd.devices.%s" % name for name in names)


def roles():
    return sorted("bcd.devices.%s" % path.parent.parent.name for path in (REPO / "roles").glob("*/meta/argument_specs.yml"))


def every_page():
    """``(type, fqcn)`` for everything ``ansible-doc`` should document."""
    return ([("module", name) for name in modules()] + [("filter", name) for name in filters()]
            + [("role", name) for name in roles()])


def ansible_doc(args, tmp):
    env = dict(os.environ, ANSIBLE_HOME=str(tmp / "ansible-home"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CONFIG=str(tmp / "ansible.cfg"))
    return subprocess.run([str(ANSIBLE_DOC)] + list(args), cwd=str(tmp), env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """The ``--json`` documentation of every module, filter and role, by type: three calls."""
    tmp = tmp_path_factory.mktemp("ansible-doc")
    found = {}
    for kind in ("module", "filter", "role"):
        names = [name for page_kind, name in every_page() if page_kind == kind]
        done = ansible_doc(["-t", kind, "--json"] + names, tmp)
        assert done.returncode == 0, done.stderr
        found[kind] = json.loads(done.stdout)
    return found


def test_every_plugin_type_is_found():
    assert len(modules()) >= 5
    assert "bcd.devices.verify_report" in filters()
    assert "bcd.devices.bcd_holds" in roles()


def doc_blocks(docs):
    """``(page, block)`` for each plugin's DOCUMENTATION and each role entry point."""
    for kind in ("module", "filter"):
        for name, entry in docs[kind].items():
            yield name, entry["doc"]
    for name, entry in docs["role"].items():
        for entry_point, spec in entry["entry_points"].items():
            yield "%s (entry point %s)" % (name, entry_point), spec


def test_everything_is_documented(docs):
    for kind, name in every_page():
        assert name in docs[kind], "ansible-doc -t %s has no page for %s" % (kind, name)


def test_authors_have_a_github_handle(docs):
    for page, block in doc_blocks(docs):
        authors = block.get("author")
        if page.startswith(tuple(modules() + filters())):
            assert authors, "%s names no author" % page
        for author in [authors] if isinstance(authors, str) else authors or []:
            assert AUTHOR.match(author), "%s: author %r is not 'Name (@github-handle)'" % (page, author)


def test_requirements_do_not_end_with_a_full_stop(docs):
    for page, block in doc_blocks(docs):
        for requirement in block.get("requirements") or []:
            assert not requirement.rstrip().endswith((".", ",")), (
                "%s: requirement %r ends with punctuation; ansible-doc joins them with ', '" % (page, requirement))


# Dicts keyed by data, not by fields: their keys are named in the description instead of contains.
KEYED_BY_DATA = {
    # keyed by huge page size, "2MB" and "1GB": ansible-test 2.21's validate-modules refuses return keys
    # that Jinja cannot reach with a dot (bad-return-value-key), so the description names them
    "plan.slice.hugetlb_max",
}


def undocumented_fields(returns, path=""):
    for key, value in (returns or {}).items():
        where = "%s%s" % (path, key)
        if not value.get("description"):
            yield "%s has no description" % where
        if not value.get("type"):
            yield "%s has no type" % where
        complex_ = value.get("type") == "dict" or (value.get("type") == "list" and value.get("elements") == "dict")
        if complex_ and not value.get("contains") and where not in KEYED_BY_DATA:
            yield "%s is a %s with no contains" % (where, value.get("type"))
        yield from undocumented_fields(value.get("contains"), where + ".")


def test_complex_return_values_list_their_fields(docs):
    problems = []
    for name, entry in docs["module"].items():
        problems.extend("%s: %s" % (name, problem) for problem in undocumented_fields(entry.get("return")))
    for name, entry in docs["filter"].items():
        problems.extend("%s: %s" % (name, problem) for problem in undocumented_fields(entry.get("return")))
    assert not problems, "\n".join(problems)


def readme_commands(rel):
    """Each ``$ ansible-doc ...`` line of ``rel``, as its arguments (a trailing ``# comment`` dropped)."""
    commands = []
    for line in (REPO / rel).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\$ (ansible-doc\s.*)$", line.strip())
        if match:
            commands.append(shlex.split(match.group(1), comments=True)[1:])
    return commands


def page_of(args):
    """``(type, fqcn)`` an ``ansible-doc`` command shows, or None for a listing (``-l``)."""
    if "-l" in args or "--list" in args:
        return None
    kind = "module"
    if "-t" in args:
        kind = args[args.index("-t") + 1]
    names = [arg for arg in args if arg.startswith("bcd.devices.")]
    assert len(names) == 1, args
    return kind, names[0]


@pytest.mark.parametrize("rel", READMES)
def test_readme_has_a_command_for_every_plugin_and_role(rel):
    shown = {page_of(args) for args in readme_commands(rel)}
    missing = [page for page in every_page() if page not in shown]
    assert not missing, "%s gives no ansible-doc command for %s" % (rel, missing)


def readme_command_cases():
    seen = []
    for rel in READMES:
        for args in readme_commands(rel):
            if args not in seen:
                seen.append(args)
    return seen


# ansible-core's own warning about its internal collection, not about this one: ansible-doc -t role
# prints it under 2.21 (ansible/ansible#85689); a line of the stderr that is exactly this is left out.
PROTOMATTER_WARNING = re.compile(r"^\[WARNING\]: Collection at '[^']*/ansible/_internal/ansible_collections/ansible/_protomatter'"
                                 r" does not have a MANIFEST\.json file, nor has it galaxy\.yml: cannot detect version\.$")


@pytest.mark.parametrize("args", readme_command_cases(), ids=" ".join)
def test_readme_command_works(args, tmp_path):
    done = ansible_doc(args, tmp_path)
    assert done.returncode == 0, done.stderr
    stderr = "\n".join(line for line in done.stderr.splitlines() if not PROTOMATTER_WARNING.match(line))
    assert "[ERROR]" not in stderr and "[WARNING]" not in stderr, done.stderr
    page = page_of(args)
    if page is not None:
        # "> MODULE bcd.devices.holds (...)"
        assert re.search(r"^> .*\b%s\b" % re.escape(page[1]), done.stdout, re.M | re.I), done.stdout[:500]
    assert "(!UNKNOWN)" not in done.stdout
    requirements = re.search(r"^REQUIREMENTS:(.*?)(?:\n\n|\Z)", done.stdout, re.M | re.S)
    if requirements:
        assert ".," not in " ".join(requirements.group(1).split()), requirements.group(0)


# Return values that two modules both return, documented in each (a RETURN block is a literal
# that ansible-doc reads without running the module, and doc fragments cannot hold RETURN).
# Their fields must agree (name, description, type, elements, returned, at every level), so
# that a field added to one and not the other, or a changed type, fails here. The fields
# only one side has are listed with why.
SHARED_RETURNS = [
    ("bcd.devices.holds", "bcd.devices.holds_info", "holds"),
    ("bcd.devices.holds", "bcd.devices.holds_info", "conditions"),
    ("bcd.devices.holds", "bcd.devices.holds_info", "pending_releases"),
    ("bcd.devices.holds", "bcd.devices.holds_info", "capabilities"),
    ("bcd.devices.holds", "bcd.devices.events", "events"),
]
ONE_SIDED_FIELDS = {
    # holds_info reads holds back from disk and says what the node lacks now; a pass binds
    # only what the node has, so holds returns neither
    ("bcd.devices.holds_info", "holds.missing_devices"),
    ("bcd.devices.holds_info", "holds.stale_edits"),
    # a pass says a new hold's locality in its plan entry; holds_info says it of every hold, from the ledger
    ("bcd.devices.holds_info", "holds.locality"),
    # who keeps a Kubernetes release waiting is asked of the kubelet during a pass; holds_info
    # does not ask it
    ("bcd.devices.holds", "pending_releases.held_by"),
}


def field_differences(first, second, names, path):
    for key in sorted(set(first) | set(second)):
        where = path + key
        if key not in first or key not in second:
            owner = names[0] if key in first else names[1]
            if (owner, where) not in ONE_SIDED_FIELDS:
                yield "%s is documented only by %s" % (where, owner)
            continue
        for attr in ("description", "type", "elements", "returned"):
            if first[key].get(attr) != second[key].get(attr):
                yield "%s: %s differs: %r (%s) against %r (%s)" % (
                    where, attr, first[key].get(attr), names[0], second[key].get(attr), names[1])
        yield from field_differences(first[key].get("contains") or {}, second[key].get("contains") or {},
                                     names, where + ".")


@pytest.mark.parametrize("first,second,key", SHARED_RETURNS, ids=lambda value: value.rsplit(".", maxsplit=1)[-1])
def test_a_return_value_two_modules_share_is_documented_alike(docs, first, second, key):
    returns = docs["module"]
    one, other = returns[first]["return"][key], returns[second]["return"][key]
    assert (one.get("type"), one.get("elements")) == (other.get("type"), other.get("elements")), key
    problems = list(field_differences(one.get("contains") or {}, other.get("contains") or {}, (first, second),
                                      key + "."))
    assert not problems, "\n".join(problems)


def test_the_one_sided_fields_exist():
    """An entry of ONE_SIDED_FIELDS that names no documented field is stale, and would hide nothing."""
    for module, field in ONE_SIDED_FIELDS:
        source = (REPO / "plugins" / "modules" / (module.rsplit(".", maxsplit=1)[-1] + ".py")).read_text(encoding="utf-8")
        assert "\n    %s:\n" % field.rsplit(".", maxsplit=1)[-1] in source, (module, field)


def listings():
    """``(page, args, quoted lines)`` for each ``$ ansible-doc ... -l`` in a console block of README.md or docs/:
    the lines after it, up to the next command or the end of the block."""
    found = []
    for path in [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"^```console\n(.*?)^```$", text, re.M | re.S):
            current = None
            for line in block.splitlines():
                if line.startswith("$ "):
                    current = None
                    args = shlex.split(line[2:], comments=True) if line.startswith("$ ansible-doc ") else []
                    if "-l" in args or "--list" in args:
                        current = (str(path.relative_to(REPO)), args[1:], [])
                        found.append(current)
                elif current is not None:
                    current[2].append(line)
    return found


def test_the_docs_list_the_plugins_with_ansible_doc():
    listed = [(page, args) for page, args, _lines in listings()]
    assert ("docs/user-guide.md", ["-l", "bcd.devices"]) in listed, listed


@pytest.mark.parametrize("page, args, quoted", listings(), ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_a_listing_in_the_docs_is_what_ansible_doc_lists(page, args, quoted, tmp_path):
    """Every plugin ``ansible-doc -l`` lists, with its short description as it prints it, and no other: a new
    plugin (``node_library``, internal) or a new description must show in the page. Runs of spaces are one
    (the columns follow the longest name)."""
    done = ansible_doc(args, tmp_path)
    assert done.returncode == 0, done.stderr
    printed = [" ".join(line.split()) for line in done.stdout.splitlines() if line.strip()]
    shown = [" ".join(line.split()) for line in quoted if line.strip()]
    assert shown == printed, "%s: $ ansible-doc %s prints\n%s" % (page, " ".join(args), "\n".join(done.stdout.splitlines()))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hack/check_docs.py (make lint): no absolute path of a developer's checkout in the docs, the
plugins' documentation or molecule/; the checkout itself passes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "check_docs.py"

_spec = importlib.util.spec_from_file_location("check_docs", SCRIPT)
check_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_docs)


def make_tree(base, files):
    for rel, text in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return base


CLEAN = {
    "README.md": "Run `.venv/bin/python hack/fakehw_node.py --root /tmp/bcd-nodes/node-a`.\n",
    "docs/user-guide.md": 'ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
                          "ansible_python_interpreter: /usr/bin/python3\n"
                          "$ export ANSIBLE_COLLECTIONS_PATH=$PWD/.build\n"
                          "> MODULE bcd.devices.holds (<checkout>/.build/ansible_collections/bcd/devices)\n",
    "docs/examples/gateway.py": "STORE = '/srv/gateway/events.jsonl'\n",
    "roles/bcd_holds/README.md": "`<prefix>/lib/bcd-holds` under `/usr/local`\n",
    "plugins/modules/holds.py": "EXAMPLES = r'''\n    root: /tmp/node-a\n'''\n",
    "molecule/default/molecule.yml": "bcd_root: \"{{ bcd_molecule_dir }}/node-a\"\n",
}


def test_the_checkout_itself_has_no_absolute_checkout_path():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_clean_tree_passes_and_every_kind_of_file_is_read(tmp_path):
    root = make_tree(tmp_path / "repo", CLEAN)
    assert check_docs.check(str(root)) == []
    assert check_docs.files_to_check(str(root)) == sorted([
        "README.md", "docs/examples/gateway.py", "docs/user-guide.md", "molecule/default/molecule.yml",
        "plugins/modules/holds.py", "roles/bcd_holds/README.md"])
    assert check_docs.main(["--root", str(root)]) == 0


@pytest.mark.parametrize("rel, line", [
    ("docs/user-guide.md", "    ansible_python_interpreter: /work/bcd/.venv/bin/python"),
    ("docs/kubernetes.md", "$ /work/other/.venv/bin/ansible-playbook pass.yml"),
    ("docs/slices-and-admission.md", 'ansible_python_interpreter: "/home/alice/src/bcd/.venv/bin/python"'),
    ("README.md", "PATH=/Users/bob/bcd/.venv/bin:$PATH"),
    ("roles/bcd_holds/README.md", "see /root/bcd-devices/docs/node.md"),
    ("molecule/role/molecule.yml", "bcd_root: /tmp/ci/molecule/node-r"),
    ("molecule/shared/snapshot.py", "ROOT = '/tmp/ci'"),
    ("plugins/filter/verify_report.py", "    PYTHONPATH=/work/bcd/.build python"),
    ("plugins/doc_fragments/node.py", "      - (/home/ci/checkout/hack/fakehw_node.py makes one)"),
    ("docs/examples/README.md", "$ /work/bcd/.venv/bin/python docs/examples/gateway.py"),
])
def test_a_common_checkout_place_fails(tmp_path, rel, line, capsys):
    root = make_tree(tmp_path / "repo", dict(CLEAN, **{rel: "fine\n" + line + "\n"}))
    problems = check_docs.check(str(root))
    assert len(problems) == 1
    assert problems[0].startswith("%s:2: " % rel)
    assert "a path on a developer's or CI machine" in problems[0]
    assert check_docs.main(["--root", str(root)]) == 1
    assert "1 absolute checkout path(s)" in capsys.readouterr().err


def test_the_checkouts_own_path_fails_wherever_it_is(tmp_path):
    root = make_tree(tmp_path / "somewhere" / "bcd", CLEAN)
    own = str(root.resolve())
    (root / "docs" / "node.md").write_text("one\ntwo\n`%s/.venv/bin/python`\n" % own, encoding="utf-8")
    problems = check_docs.check(str(root))
    assert problems == ["docs/node.md:3: %s/.venv/bin/python: this checkout's absolute path; use a path relative "
                        "to the checkout (.venv/bin/python), \"{{ ansible_playbook_python }}\" or the system "
                        "Python" % own]


def test_a_path_that_only_contains_the_checkouts_path_or_a_common_place_is_not_flagged(tmp_path):
    root = make_tree(tmp_path / "repo", CLEAN)
    own = str(root.resolve())
    (root / "docs" / "node.md").write_text(
        "%s-old/x is another directory\n"                   # a sibling, not this checkout
        "<root>/work/run.1 and <checkout>/home/x are relative\n"
        "/tmp/cinder and /tmp/circle are other directories\n"
        "remote_tmp is /root/.ansible/tmp for root\n" % own, encoding="utf-8")
    assert check_docs.check(str(root)) == []


def test_files_outside_the_checked_places_are_not_read(tmp_path):
    root = make_tree(tmp_path / "repo", dict(CLEAN, **{
        "hack/e2e.sh": "cd /work/bcd\n",
        "plugins/module_utils/node/hosts.py": "X = '/home/alice/'\n",
        "tests/unit/test_x.py": "X = '/work/bcd'\n",
    }))
    assert check_docs.check(str(root)) == []

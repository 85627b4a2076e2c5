# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that code which runs on managed nodes suits every target Python.

Modules and module_utils run on the node's own interpreter, which with ansible-core
2.19 may be as old as Python 3.8; the controller and the tests run 3.11, which accepts
syntax 3.8 does not (`match`, parenthesised context managers, `except*`, ...). This
parses each file with the 3.8 grammar. With --no-ansible, it also refuses an import
of `ansible` in the given trees: module_utils must run from a plain command-line tool
without Ansible installed.

Usage: python hack/check_target_python.py [--no-ansible DIR]... DIR_OR_FILE...
Prints one `path:line:col: message` per problem; exit status 1 if any.
"""

import argparse
import ast
import sys
from pathlib import Path

TARGET = (3, 8)


def python_files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
        elif path.exists():
            found.append(path)
    return found


def syntax_problems(path: Path, source: str) -> list[str]:
    try:
        ast.parse(source, filename=str(path), feature_version=TARGET)
    except SyntaxError as err:
        return [f"{path}:{err.lineno}:{err.offset}: does not parse as Python "
                f"{TARGET[0]}.{TARGET[1]}: {err.msg}"]
    return []


def ansible_imports(path: Path, source: str) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name == "ansible" or name.startswith("ansible."):
                problems.append(f"{path}:{node.lineno}:{node.col_offset + 1}: imports {name}; "
                                "module_utils must run without Ansible")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-ansible", action="append", default=[], type=Path, metavar="DIR")
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args(argv)
    no_ansible = set(python_files(args.no_ansible))
    files = list(dict.fromkeys(python_files(args.paths) + sorted(no_ansible)))
    problems = []
    for path in files:
        source = path.read_text(encoding="utf-8")
        found = syntax_problems(path, source)
        if not found and path in no_ansible:
            found = ansible_imports(path, source)
        problems.extend(found)
    for problem in problems:
        print(problem)
    print(f"target-python: {len(files)} files checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

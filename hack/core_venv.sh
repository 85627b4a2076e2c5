#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Prints the bin directory of the virtual environment that runs a given ansible-core release,
# making it first if needed, and checks that it holds that release:
#
#   bash hack/core_venv.sh 2.22      -> .build/venvs/ansible-core-2.22/bin
#
# 2.19 is .venv's (Python 3.11, pins in pyproject.toml); each newer release has its own venv,
# .build/venvs/ansible-core-<release> (hack/tool_venv.sh: pins, and the Python it runs on, in
# requirements/tools/ansible-core-<release>.txt). The releases are those docs/compatibility.md's
# table supports and tests (meta/runtime.yml sets only the floor, 2.19). make units, sanity,
# molecule and demo and the install test find their ansible-core here.
#
# Environment: VENV (default .venv), BUILD (default <repo>/.build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
core=${1:?usage: hack/core_venv.sh 2.19|2.20|2.21|2.22}
case $core in
  2.19)
    bin=$(cd "${VENV:-$repo/.venv}" 2>/dev/null && pwd)/bin || {
      echo "core_venv: ${VENV:-.venv} does not exist: run make venv" >&2
      exit 2
    }
    ;;
  2.20 | 2.21 | 2.22) bin=$(BUILD=${BUILD:-$repo/.build} bash "$repo/hack/tool_venv.sh" "ansible-core-$core") ;;
  *)
    echo "core_venv: ansible-core $core is not a release this collection supports (2.19, 2.20, 2.21, 2.22: docs/compatibility.md)" >&2
    exit 2
    ;;
esac
have=$("$bin/python" -c 'import ansible; print(".".join(ansible.__version__.split(".")[:2]))') || {
  echo "core_venv: $bin/python has no ansible-core" >&2
  exit 2
}
[[ $have == "$core" ]] || {
  echo "core_venv: ${bin%/bin} has ansible-core $have, not $core" >&2
  exit 2
}
echo "$bin"

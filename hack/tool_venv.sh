#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Creates, once, a separate virtual environment for a tool whose pins cannot share
# .venv (another ansible-core, galaxy-importer's own ansible-lint, ...), and prints its
# bin directory.
#
#   bash hack/tool_venv.sh NAME      e.g. BIN=$(bash hack/tool_venv.sh ansible-core-2.22)
#
# The environment is .build/venvs/NAME, built from requirements/tools/NAME.txt (every
# package pinned exactly, transitive ones included) with the Python its "# python: X.Y" line
# names (3.11 without one: ansible-core 2.20 and later need 3.12 or newer on the controller),
# found by hack/find_python.sh (PATH, then pyenv's versions; it fails and says so when the
# machine has none). It is rebuilt only when that file changes: its hash is kept in
# .build/venvs/NAME/.installed. pip reads its index from the machine's own
# configuration (pip.conf, PIP_INDEX_URL), as for .venv.
#
# Environment: BUILD (default <repo>/.build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
name=${1:?usage: hack/tool_venv.sh NAME}
[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "tool_venv: bad name '$name'" >&2; exit 2; }
req=$repo/requirements/tools/$name.txt
[[ -f $req ]] || { echo "tool_venv: $req does not exist" >&2; exit 2; }
dest=${BUILD:-$repo/.build}/venvs/$name
want=$(sha256sum "$req" | cut -c1-16)
# One maker at a time (two make targets, or two checkouts' runs sharing BUILD); the others wait
# and then find it made.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9

if [[ -x $dest/bin/python && -f $dest/.installed && $(<"$dest/.installed") == "$want" ]]; then
  echo "$dest/bin"
  exit 0
fi
version=$(sed -n 's/^# python: *\(3\.[0-9][0-9]*\) *$/\1/p' "$req" | head -n 1)
python=$(bash "$repo/hack/find_python.sh" "${version:-3.11}") || {
  echo "tool_venv: $name needs Python ${version:-3.11} (requirements/tools/$name.txt)" >&2
  exit 1
}
echo "tool_venv: creating $dest from ${req#"$repo"/} with $python" >&2
rm -rf "$dest"
"$python" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2
echo "$want" >"$dest/.installed"
echo "$dest/bin"

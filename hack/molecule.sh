#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Run every Molecule scenario; fail on the first that fails.
#
# Scenarios live in molecule/*/ or (collection layout) extensions/molecule/*/; molecule
# itself looks only in molecule/ whenever that folder exists, even empty, so this
# points MOLECULE_GLOB at the one that holds scenarios. With no scenario at all, it
# says so and succeeds. ANSIBLE_HOME is a fresh private folder under .build (molecule
# installs a copy of the collection there, and a stale copy would shadow the working
# tree), and ANSIBLE_COLLECTIONS_PATH finds bcd.devices through .build/ansible_collections,
# which links to this checkout. Extra arguments go to `molecule test`.
#
# Environment: VENV (default .venv), BUILD (default .build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
venv=$(cd "${VENV:-.venv}" && pwd)
build=${BUILD:-$repo/.build}

shopt -s nullglob
root_scenarios=(molecule/*/molecule.yml)
collection_scenarios=(extensions/molecule/*/molecule.yml)
if ((${#root_scenarios[@]} && ${#collection_scenarios[@]})); then
  echo "molecule: scenarios in both molecule/ and extensions/molecule/; keep them in one" >&2
  exit 2
elif ((${#root_scenarios[@]})); then
  scenarios=("${root_scenarios[@]}") MOLECULE_GLOB='molecule/*/molecule.yml'
elif ((${#collection_scenarios[@]})); then
  scenarios=("${collection_scenarios[@]}") MOLECULE_GLOB='extensions/molecule/*/molecule.yml'
else
  echo "molecule: no scenario (no molecule/*/molecule.yml nor extensions/molecule/*/molecule.yml); nothing to run"
  exit 0
fi
echo "molecule: scenarios: ${scenarios[*]}"

home=$build/molecule-home
rm -rf "$home"
mkdir -p "$home"
export MOLECULE_GLOB ANSIBLE_HOME=$home ANSIBLE_COLLECTIONS_PATH=$build PATH=$venv/bin:$PATH
if [[ " $* " == *" -s "* || " $* " == *" --scenario-name "* ]]; then
  exec molecule test "$@"  # one scenario: MOLECULE_ARGS="-s role"
fi
exec molecule test --all "$@"

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
# MOLECULE_CORE picks the ansible-core release the scenarios run under (2.19, .venv's, by
# default; 2.22 runs molecule from .build/venvs/ansible-core-2.22, Python 3.13: hack/core_venv.sh).
# make molecule runs every scenario under 2.19 and one (MOLECULE_NEWEST) under the newest.
#
# Environment: VENV (default .venv), BUILD (default .build), MOLECULE_CORE (default 2.19). The
# scenarios read BCD_MOLECULE_TMP (set here: run them through this script, not with molecule alone).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${BUILD:-$repo/.build}
core=${MOLECULE_CORE:-2.19}
venv=$(VENV=${VENV:-.venv} BUILD=$build bash hack/core_venv.sh "$core") && venv=${venv%/bin}
[[ -x $venv/bin/molecule ]] || { echo "molecule: ${venv#"$repo"/} has no molecule (ansible-core $core)" >&2; exit 2; }

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
echo "molecule: ansible-core $("$venv/bin/python" -c 'import ansible; print(ansible.__version__)'); scenarios: ${scenarios[*]}"

home=$build/molecule-home-$core
rm -rf "$home"
mkdir -p "$home"

# The scenarios' fakehw nodes (and the delivery gateway's files) go under one fresh directory
# per run, BCD_MOLECULE_TMP/<scenario>/..., removed when this script exits, whether the
# scenarios passed, failed or were interrupted: two runs never share a node and nothing stays
# in /tmp. 0755: the bcd account's passes (role, unprivileged) must reach their node.
# molecule runs as a child this script waits for, so that a TERM or INT sent to the script
# alone is passed on to it and the directory still goes once it has stopped.
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/bcd-molecule.XXXXXX")
chmod 0755 "$run_dir"
child=
# shellcheck disable=SC2317  # run by the INT and TERM traps
stop() {
  if [[ -n $child ]]; then
    kill -"$1" "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  exit "$2"
}
trap 'rm -rf "$run_dir"' EXIT
trap 'stop INT 130' INT
trap 'stop TERM 143' TERM
export BCD_MOLECULE_TMP=$run_dir

export MOLECULE_GLOB ANSIBLE_HOME=$home ANSIBLE_COLLECTIONS_PATH=$build PATH=$venv/bin:$PATH
if [[ " $* " == *" -s "* || " $* " == *" --scenario-name "* ]]; then
  molecule test "$@" <&0 &  # one scenario: MOLECULE_ARGS="-s role"
else
  molecule test --all "$@" <&0 &
fi
child=$!
rc=0
wait "$child" || rc=$?
child=
exit "$rc"

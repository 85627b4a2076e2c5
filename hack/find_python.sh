#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Prints the path of a CPython interpreter of the given minor version, or fails and says where it
# looked. Nothing is downloaded: an interpreter must already be on the machine.
#
#   bash hack/find_python.sh 3.13            -> /usr/bin/python3.13, ~/.pyenv/versions/3.13.0/bin/python3.13, ...
#   bash hack/find_python.sh --links DIR 3.8 3.9 ...
#                                            makes DIR/python3.8 ... links to each (for ansible-test, which
#                                            looks for pythonX.Y in PATH), and prints DIR
#
# Where it looks, in order: every pythonX.Y in PATH (pyenv's shims are in PATH on these machines
# but fail for a version that is not pyenv's global one, so each candidate is run and must report
# that version), then pyenv's own versions ($PYENV_ROOT, default ~/.pyenv: versions/X.Y.*, the
# newest patch release first). The machines this project runs on (CI's included) carry pyenv's
# 3.8 to 3.13; a Debian 13 machine also has python3.13 in /usr/bin.
set -euo pipefail

find_one() {
  local want=$1 candidate seen=() found
  [[ $want =~ ^3\.[0-9]+$ ]] || { echo "find_python: '$want' is not a version like 3.13" >&2; return 2; }
  local roots=("${PYENV_ROOT:-$HOME/.pyenv}")
  if [[ -z ${PYENV_ROOT:-} && -n ${SUDO_USER:-} ]]; then roots+=("$(getent passwd "$SUDO_USER" | cut -d: -f6)/.pyenv"); fi
  mapfile -t candidates < <(
    type -ap "python$want" 2>/dev/null || true
    for root in "${roots[@]}"; do
      # newest patch release first (3.13.10 before 3.13.9)
      find "$root/versions" -maxdepth 3 -path "*/versions/$want.*/bin/python$want" 2>/dev/null | sort -t. -k3,3nr || true
    done
  )
  for candidate in "${candidates[@]}"; do
    [[ -x $candidate ]] || continue
    found=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || { seen+=("$candidate (does not run)"); continue; }
    if [[ $found == "$want" ]]; then
      # The interpreter itself, not a shim that finds it through the environment of the moment.
      "$candidate" -c 'import venv, ensurepip, sys; print(sys.executable)' 2>/dev/null ||
        { seen+=("$candidate (no venv/ensurepip module)"); continue; }
      return 0
    fi
    seen+=("$candidate (is $found)")
  done
  {
    echo "find_python: no Python $want found. Looked for python$want in PATH and in pyenv's versions (${roots[*]}/versions/$want.*)."
    if ((${#seen[@]})); then printf '  tried: %s\n' "${seen[@]}"; fi
    echo "  Install one from the distribution (Debian 13: apt-get install python$want python$want-venv) or with pyenv, or put it in PATH."
  } >&2
  return 1
}

if [[ ${1:-} == --links ]]; then
  dir=${2:?--links needs a directory}
  shift 2
  mkdir -p "$dir"
  for version in "$@"; do
    path=$(find_one "$version")
    ln -sfn "$path" "$dir/python$version"
  done
  echo "$dir"
else
  find_one "${1:?usage: hack/find_python.sh VERSION | --links DIR VERSION...}"
fi

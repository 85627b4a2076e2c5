#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Run `ansible-test sanity` on a real copy of the collection, under one ansible-core.
#
#   bash hack/sanity.sh [--core 2.19|2.20|2.21|2.22] [ANSIBLE-TEST ARGS...]
#   bash hack/sanity.sh [--core ...] --target-pythons
#   bash hack/sanity.sh --venv DIR [ANSIBLE-TEST ARGS...]   (make canary: the ansible-core of DIR)
#
# 2.19 (the default) is .venv's ansible-core (Python 3.11); a newer one comes from its own venv,
# .build/venvs/ansible-core-<version> (hack/core_venv.sh; pins and its Python, 3.12 or 3.13, in
# requirements/tools/). ansible-test runs on that venv's Python (--python 3.11, 3.12 or 3.13).
# `make sanity` runs every release docs/compatibility.md's table supports (the Makefile's CORES),
# two at a time, never two on one Python, then each with --target-pythons (hack/sanity_cores.py).
#
# --target-pythons runs only the compile test, once for each Python the modules and module_utils
# may meet on a node that this ansible-core supports there, from 3.8 to 3.13 (2.19: 3.8 to 3.13;
# 2.20 to 2.22: 3.9 to 3.13; their 3.14, and 2.22's 3.15, are not on these machines and not
# checked). Each interpreter must be on the machine: hack/find_python.sh finds it (PATH, then
# pyenv's versions) and links it as .build/pythons/pythonX.Y, first in PATH, where ansible-test
# looks for it.
#
# ansible-test wants the collection at .../ansible_collections/bcd/devices and refuses a
# symlink, so this copies what git would ship (tracked files plus untracked files that
# are not ignored) to .build/sanity/ansible_collections/bcd/devices. HOME is .build/home,
# so the run needs nothing from the user's home (ansible-test keeps its per-test
# virtual environments there, which makes later runs faster), and the get-pip.py that
# ansible-test would download from an unreachable host is replaced by
# hack/get_pip_stand_in.py; likewise a sanity test's requirement that pip would fetch from a URL
# rather than the package index (2.22's pylint pins dill so) comes from the index
# (hack/sanity_offline_venvs.py). Extra arguments go to ansible-test (e.g. --test pep8).
#
# Environment: VENV (default .venv), BUILD (default .build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${BUILD:-$repo/.build}
core=2.19
venv=
if [[ ${1:-} == --core ]]; then
  core=${2:?--core needs a version}
  shift 2
elif [[ ${1:-} == --venv ]]; then
  # A venv of any ansible-core, made elsewhere (hack/canary.sh); named after its folder here.
  venv=$(cd "${2:?--venv needs a directory}" && pwd) || exit 2
  [[ -x $venv/bin/ansible-test ]] || { echo "sanity: $venv has no ansible-test" >&2; exit 2; }
  core=$(basename "$venv")
  shift 2
fi
targets=
if [[ ${1:-} == --target-pythons ]]; then
  targets=yes
  shift
fi
if [[ -z $venv ]]; then
  venv=$(BUILD=$build bash hack/core_venv.sh "$core") && venv=${venv%/bin}
fi
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# ansible-test's shellcheck test only warns, and passes, without shellcheck: here it is required
# whenever that test is to run (every test, or --test shellcheck).
if [[ -z $targets ]] && [[ " $* " != *" --test "* || " $* " == *" shellcheck "* ]] && ! command -v shellcheck >/dev/null 2>&1; then
  echo "sanity: shellcheck is not installed, so ansible-test would skip its shellcheck test. Install it" \
    "(Debian, Ubuntu: sudo apt-get install shellcheck; .ci/run installs it when run as root)" >&2
  exit 2
fi
dest=$build/sanity/$core/ansible_collections/bcd/devices
home=$build/home

git rev-parse --is-inside-work-tree >/dev/null 2>&1 || {
  echo "sanity: $repo is not a git work tree; cannot tell which files belong to the collection" >&2
  exit 2
}

rm -rf "$dest"
mkdir -p "$dest"
# Listed but deleted files (a removal not yet committed) are skipped.
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' path; do
    if [[ -e $path || -L $path ]]; then printf '%s\0' "$path"; fi
  done |
  tar --null --no-recursion -T - -cf - | tar -xf - -C "$dest"
# The copy lies inside this repository's ignored .build/, where ansible-test would see
# no files at all: a repository of its own makes it list the copy's files instead.
git init -q "$dest"

# The cache file is named after the pip version this ansible-test bootstraps.
pip_version=$("$venv/bin/python" -c '
import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$python_version"'"))["pip"])')
cache=$home/.ansible/test/cache
mkdir -p "$cache"
# Copied under a name of its own and renamed: make sanity runs two releases at once (hack/sanity_cores.py),
# and one's ansible-test must never read the file half written by the other.
cp hack/get_pip_stand_in.py "$cache/.get_pip.$$" && mv -f "$cache/.get_pip.$$" "$cache/get_pip_${pip_version//./_}.py"

if [[ -n $targets ]]; then
  # The target Pythons this ansible-core supports, 3.8 to 3.13 (what the machines have).
  mapfile -t wanted < <("$venv/bin/python" -c '
from ansible_test._internal.constants import SUPPORTED_PYTHON_VERSIONS
for version in SUPPORTED_PYTHON_VERSIONS:
    if (3, 8) <= tuple(int(part) for part in version.split(".")) <= (3, 13):
        print(version)')
  links=$(bash hack/find_python.sh --links "$build/pythons" "${wanted[@]}")
fi

cd "$dest"
export HOME=$home PATH=$venv/bin:$PATH
echo "sanity: ansible-core $("$venv/bin/python" -c 'import ansible; print(ansible.__version__)') on Python $python_version, $(git ls-files --others --exclude-standard | wc -l) files copied to $dest"
if [[ -n $targets ]]; then
  export PATH=$links:$PATH
  for version in "${wanted[@]}"; do
    echo "sanity: compile test on target Python $version ($(readlink "$links/python$version"))"
    ansible-test sanity --test compile --python "$version" --color no "$@" || {
      echo "sanity: the modules or module_utils do not compile on Python $version (ansible-core $core)" >&2
      exit 1
    }
  done
  exit 0
fi
# A sanity test whose requirements name a package by URL (2.22's pylint: dill) gets its venv from
# the package index instead, made ahead of ansible-test (hack/sanity_offline_venvs.py).
"$venv/bin/python" "$repo/hack/sanity_offline_venvs.py" "$python_version"
exec ansible-test sanity --python "$python_version" --color no "$@"

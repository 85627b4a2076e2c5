#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Run `ansible-test sanity` on a real copy of the collection, under one ansible-core.
#
#   bash hack/sanity.sh [--core 2.16|2.17|2.18|2.19] [ANSIBLE-TEST ARGS...]
#
# 2.19 (the default) is .venv's ansible-core; an older one comes from its own venv,
# .build/venvs/ansible-core-<version> (hack/tool_venv.sh, pins in requirements/tools/).
# `make sanity` runs every version meta/runtime.yml allows, one after the other.
#
# ansible-test wants the collection at .../ansible_collections/bcd/devices and refuses a
# symlink, so this copies what git would ship (tracked files plus untracked files that
# are not ignored) to .build/sanity/ansible_collections/bcd/devices. HOME is .build/home,
# so the run needs nothing from the user's home (ansible-test keeps its per-test
# virtual environments there, which makes later runs faster), and the get-pip.py that
# ansible-test would download from an unreachable host is replaced by
# hack/get_pip_stand_in.py. Extra arguments go to ansible-test (e.g. --test pep8).
#
# Environment: VENV (default .venv), BUILD (default .build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${BUILD:-$repo/.build}
core=2.19
if [[ ${1:-} == --core ]]; then
  core=${2:?--core needs a version}
  shift 2
fi
case $core in
  2.19) venv=$(cd "${VENV:-.venv}" && pwd) ;;
  2.16 | 2.17 | 2.18) venv=$(BUILD=$build bash hack/tool_venv.sh "ansible-core-$core") && venv=${venv%/bin} ;;
  *) echo "sanity: ansible-core $core is not one this collection supports (2.16 to 2.19)" >&2; exit 2 ;;
esac
# ansible-test's shellcheck test only warns, and passes, without shellcheck: here it is required
# whenever that test is to run (every test, or --test shellcheck).
if [[ " $* " != *" --test "* || " $* " == *" shellcheck "* ]] && ! command -v shellcheck >/dev/null 2>&1; then
  echo "sanity: shellcheck is not installed, so ansible-test would skip its shellcheck test. Install it" \
    "(Debian, Ubuntu: sudo apt-get install shellcheck; .ci/run installs it when run as root)" >&2
  exit 2
fi
have=$("$venv/bin/python" -c 'import ansible; print(".".join(ansible.__version__.split(".")[:2]))')
[[ $have == "$core" ]] || { echo "sanity: $venv has ansible-core $have, not $core" >&2; exit 2; }
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
print(get_venv_packages(types.SimpleNamespace(version="3.11"))["pip"])')
cache=$home/.ansible/test/cache
mkdir -p "$cache"
cp hack/get_pip_stand_in.py "$cache/get_pip_${pip_version//./_}.py"

cd "$dest"
export HOME=$home PATH=$venv/bin:$PATH
echo "sanity: ansible-core $("$venv/bin/python" -c 'import ansible; print(ansible.__version__)'), $(git ls-files --others --exclude-standard | wc -l) files copied to $dest"
exec ansible-test sanity --python 3.11 --color no "$@"

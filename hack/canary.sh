#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# make canary: the collection under the newest ansible-core the package index serves, pre-releases
# included (a beta or release candidate of the next release as soon as there is one), before it
# has its row in docs/compatibility.md ("The next release").
#
#   bash hack/canary.sh          (no arguments)
#
# It makes a throwaway venv, .build/venvs/canary, on Python 3.13 (hack/find_python.sh), installs
# `pip install --pre --upgrade ansible-core` there (pip picks the newest that runs on 3.13), and
# beside it, at pyproject.toml's pins, what the install test needs (pytest, PyYAML, cryptography,
# ansible-runner). It prints the release it got, then runs two checks under it, each to the end
# whatever the other did:
#
#   the install test   tests/unit/install: the built artifact installed with that release's
#                      ansible-galaxy, a playbook through it that must print no warning (as root),
#                      and a job through ansible-runner
#   ansible-test sanity  every sanity test of that release (noxfile.py's sanity-next session, in a nox venv of
#                      its own with the same ansible-core)
#
# and ends with one line per check, passed or FAILED with what broke; the exit status is 1 when one
# failed. The output of each is kept in .build/canary/.
#
# Not part of make test or CI, on purpose: what it installs changes under it, upstream, with no
# change here (a new beta, a new release candidate), so its result says what the next release
# will ask of the collection, not whether a change to this checkout broke something; CI must
# answer the same for the same commit. pip reads its index from the machine's own configuration
# (pip.conf, PIP_INDEX_URL), as for .venv.
#
# Environment: VENV (default .venv: its nox runs the sanity session), BUILD (default <repo>/.build).
set -euo pipefail

if (($#)); then
  echo "usage: bash hack/canary.sh (make canary); it takes no arguments, got: $*" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${BUILD:-$repo/.build}
venv=${VENV:-$repo/.venv}
dest=$build/venvs/canary
logs=$build/canary
pip=(--quiet --disable-pip-version-check --no-input)

python=$(bash hack/find_python.sh 3.13) || { echo "canary: needs Python 3.13 (hack/find_python.sh)" >&2; exit 1; }
# What the install test imports, at the versions pyproject.toml pins for .venv.
mapfile -t companions < <("$python" hack/test_requirements.py pyproject.toml test |
  grep -iE '^(pytest|pyyaml|cryptography|ansible-runner)==' || true)
((${#companions[@]} == 4)) || { echo "canary: pyproject.toml does not pin pytest, PyYAML, cryptography and ansible-runner" >&2; exit 1; }

echo "canary: making $dest with $python"
rm -rf "$dest" "$logs"
mkdir -p "$logs"
"$python" -m venv "$dest"
# ansible-core alone with --pre: its dependencies and the tools come as releases, not pre-releases.
"$dest/bin/python" -m pip install "${pip[@]}" --pre --upgrade ansible-core || {
  echo "canary: pip could not install ansible-core" >&2
  exit 1
}
"$dest/bin/python" -m pip install "${pip[@]}" "${companions[@]}" || {
  echo "canary: pip could not install ${companions[*]} beside ansible-core" >&2
  exit 1
}
core=$("$dest/bin/python" -c 'import ansible; print(ansible.__version__)')
on=$("$dest/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
echo "canary: ansible-core $core on Python $on"

# .build/ansible_collections/bcd/devices -> this checkout, as make units makes it (pytest's pythonpath).
mkdir -p .build/ansible_collections/bcd
[[ -e .build/ansible_collections/bcd/devices ]] || ln -sfn ../../.. .build/ansible_collections/bcd/devices

summary=()
failed=0
echo "canary: the install test (tests/unit/install)"
rc=0
env -u BCD_INSTALL_CORES "$dest/bin/python" -m pytest -q -p no:cacheprovider -rfE tests/unit/install 2>&1 |
  tee "$logs/install.log" || rc=$?
if ((rc == 0)); then
  summary+=("canary: install test passed ($(grep -Eo '[0-9]+ passed[^=]*' "$logs/install.log" | tail -n 1 | sed 's/ *$//'))")
else
  broke=$(grep -E '^(FAILED|ERROR) ' "$logs/install.log" | sed -E 's/^(FAILED|ERROR) tests\/unit\/install\///' | cut -c1-200 |
    paste -sd ';' -) || true
  broke=${broke:-pytest exited $rc}
  summary+=("canary: install test FAILED: ${broke//;/; } (.build/canary/install.log)")
  failed=1
fi

echo "canary: ansible-test sanity"
rc=0
BCD_NEXT_CORE=$core VENV=$venv BUILD=$build "$venv/bin/nox" -s sanity-next 2>&1 | tee "$logs/sanity.log" || rc=$?
if ((rc == 0)); then
  summary+=("canary: ansible-test sanity passed")
else
  # ansible-test ends a failed run with the names of the tests that failed, one a line, after a FATAL line.
  tests=$(sed -n '/^FATAL: The .* sanity test(s) listed below/,/^$/p' "$logs/sanity.log" | sed '1d;/^$/d' | paste -sd ' ' -) || true
  issues=$(grep -E '^ERROR: Found [0-9]+ ' "$logs/sanity.log" | awk '{n += $3} END {print n + 0}') || true
  first=$(grep -E '^(ERROR|FATAL): ' "$logs/sanity.log" | grep -vE '^(ERROR: (Found|Command) |FATAL: The )' | head -n 3 |
    sed -E 's/^(ERROR|FATAL): //' | cut -c1-160 | paste -sd ';' -) || true
  if [[ -n $tests ]]; then
    summary+=("canary: ansible-test sanity FAILED: ${tests// /, } ($issues issues, first: ${first//;/; }) (.build/canary/sanity.log)")
  else
    summary+=("canary: ansible-test sanity FAILED: ${first:-it exited $rc} (.build/canary/sanity.log)")
  fi
  failed=1
fi

echo
echo "canary: ansible-core $core on Python $on"
printf '%s\n' "${summary[@]}"
exit "$failed"

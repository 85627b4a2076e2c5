#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The checks Galaxy and Automation Platform make, run by make lint:
#   1. ansible-galaxy collection build, into .build/galaxy/bcd-devices.tar.gz;
#   2. galaxy-importer over that artifact (its ansible-lint included, ansible-test off: make
#      sanity runs it): any WARNING or ERROR fails;
#   3. antsibull-docs lint-collection-docs --plugin-docs, and antsibull-changelog lint;
#   4. ansible-builder: introspect finds this collection's meta/execution-environment.yml
#      requirements in the installed artifact, and create makes a build context from
#      tests/ee/execution-environment.yml (no image is built).
# Tools come from their own venvs (hack/tool_venv.sh galaxy-importer, antsibull); nothing is
# read from or written to the user's home.
#
# Environment: VENV (default .venv), BUILD (default .build).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
venv=$(cd "${VENV:-.venv}" && pwd)
build=${BUILD:-$repo/.build}
out=$build/galaxy
fail() {
  echo "galaxy checks: $*" >&2
  exit 1
}

galaxy=$(BUILD=$build bash hack/tool_venv.sh galaxy-importer)
antsibull=$(BUILD=$build bash hack/tool_venv.sh antsibull)
export HOME=$build/home ANSIBLE_HOME=$build/ansible-home ANSIBLE_COLLECTIONS_PATH=$build
mkdir -p "$HOME"

rm -rf "$out"
mkdir -p "$out"
"$venv/bin/ansible-galaxy" collection build --output-path "$out" . >"$out/build.log"
tarball=$(ls "$out"/bcd-devices-*.tar.gz)
cp "$tarball" "$out/bcd-devices.tar.gz"
echo "galaxy checks: built ${tarball#"$repo"/}"

cat >"$out/importer.cfg" <<CFG
[galaxy-importer]
RUN_ANSIBLE_TEST = False
RUN_ANSIBLE_LINT = True
LOG_LEVEL_MAIN = INFO
CFG
(cd "$out" && GALAXY_IMPORTER_CONFIG=$out/importer.cfg PATH=$galaxy:$PATH \
  "$galaxy/python" -m galaxy_importer.main "$tarball") >"$out/importer.log" 2>&1 || {
  cat "$out/importer.log" >&2
  fail "galaxy-importer failed"
}
if grep -E '^(WARNING|ERROR)' "$out/importer.log" >&2; then
  fail "galaxy-importer reported the warnings or errors above (full log: ${out#"$repo"/}/importer.log)"
fi
grep -q '^Importer processing completed successfully' "$out/importer.log" || fail "galaxy-importer did not complete"
echo "galaxy checks: galaxy-importer: no warning, no error"

(cd "$build/ansible_collections/bcd/devices" && PATH=$venv/bin:$PATH \
  "$antsibull/antsibull-docs" lint-collection-docs --plugin-docs .)
echo "galaxy checks: antsibull-docs lint-collection-docs: clean"
"$antsibull/antsibull-changelog" lint
echo "galaxy checks: antsibull-changelog lint: clean"

# The installed artifact, as an execution environment's build installs it, and what
# ansible-builder's introspection (run in every EE build) finds in it.
ANSIBLE_COLLECTIONS_PATH=$out/installed "$venv/bin/ansible-galaxy" collection install --force --no-deps -p "$out/installed" "$tarball" \
  >"$out/install.log"
"$galaxy/ansible-builder" introspect --write-pip "$out/pip.txt" --write-bindep "$out/bindep.txt" "$out/installed" \
  >"$out/introspect.log"
grep -Eq '^cryptography>=3\.4 +# from collection bcd\.devices$' "$out/pip.txt" || {
  cat "$out/introspect.log" "$out/pip.txt" >&2
  fail "ansible-builder introspect does not find this collection's requirements.txt"
}
rm -rf "$out/ee-context"
"$galaxy/ansible-builder" create --file tests/ee/execution-environment.yml --context "$out/ee-context" \
  --output-filename Containerfile >"$out/ee-create.log"
for want in _build/requirements.yml _build/collections/bcd-devices.tar.gz Containerfile; do
  [[ -s $out/ee-context/$want ]] || fail "ansible-builder create made no $want in ${out#"$repo"/}/ee-context"
done
grep -q 'ansible-galaxy collection install' "$out/ee-context/Containerfile" ||
  fail "the EE's Containerfile does not install the collection"
echo "galaxy checks: ansible-builder introspect finds requirements.txt; create made ${out#"$repo"/}/ee-context"

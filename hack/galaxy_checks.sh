#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The checks Galaxy and Automation Platform make, run by make lint:
#   1. ansible-galaxy collection build, into .build/galaxy/bcd-devices-<version>.tar.gz;
#   2. galaxy-importer over that artifact (its ansible-lint included, ansible-test off: make
#      sanity runs it): any WARNING or ERROR fails;
#   3. antsibull-docs lint-collection-docs --plugin-docs, and antsibull-changelog lint;
#   4. ansible-builder create makes a build context, .build/galaxy/ee-context, from
#      tests/ee/execution-environment.yml and that artifact (no image is built). The context
#      must carry the artifact and install it, and its own introspect.py, run over the
#      installed artifact, must find requirements.txt and bindep.txt (what
#      meta/execution-environment.yml names) as they are.
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

# The execution environment's build context (no image is built), then what its build does with
# this collection, run here: the galaxy stage installs the tarball the context carries (through
# _build/requirements.yml), and the builder stage runs the context's own introspect.py over it;
# its output must be this collection's requirements.txt and bindep.txt, line for line.
rm -rf "$out/ee" "$out/ee-context"
cp -r tests/ee "$out/ee"
cp "$tarball" "$out/ee/bcd-devices.tar.gz"
"$galaxy/ansible-builder" create --file "$out/ee/execution-environment.yml" --context "$out/ee-context" \
  --output-filename Containerfile >"$out/ee-create.log"
context=$out/ee-context
for want in _build/requirements.yml _build/collections/bcd-devices.tar.gz _build/scripts/introspect.py Containerfile; do
  [[ -s $context/$want ]] || fail "ansible-builder create made no $want in ${context#"$repo"/}"
done
cmp -s "$tarball" "$context/_build/collections/bcd-devices.tar.gz" ||
  fail "the EE context's tarball is not the artifact just built"
grep -q '^ *- name: /build/collections/bcd-devices\.tar\.gz$' "$context/_build/requirements.yml" ||
  fail "the EE context's _build/requirements.yml does not install the collection's tarball"
grep -q 'ansible-galaxy collection install .*-r requirements.yml' "$context/Containerfile" ||
  fail "the EE's Containerfile does not install _build/requirements.yml"
grep -q 'introspect.py introspect' "$context/Containerfile" ||
  fail "the EE's Containerfile does not introspect the collections' requirements"
tar -tzf "$context/_build/collections/bcd-devices.tar.gz" >"$out/tarball.list"
for want in meta/execution-environment.yml requirements.txt bindep.txt; do
  grep -qx "$want" "$out/tarball.list" || fail "the artifact lacks $want (build_ignore?)"
done

rm -rf "$out/installed"
ANSIBLE_COLLECTIONS_PATH=$out/installed "$venv/bin/ansible-galaxy" collection install --no-deps \
  -p "$out/installed" "$context/_build/collections/bcd-devices.tar.gz" >"$out/install.log"
"$galaxy/python" "$context/_build/scripts/introspect.py" introspect --write-pip "$out/pip.txt" \
  --write-bindep "$out/bindep.txt" "$out/installed" >"$out/introspect.log"
# What introspection should find: each requirement line of the file, marked as this collection's.
expected() { sed -e 's/[[:space:]]*#.*//' -e '/^[[:space:]]*$/d' -e 's/$/  # from collection bcd.devices/' "$1"; }
for kind in pip bindep; do
  case $kind in pip) source_file=requirements.txt ;; bindep) source_file=bindep.txt ;; esac
  found=$out/$kind.txt
  [[ -f $found ]] || : >"$found"
  if ! diff <(expected "$source_file") <(grep -v '^$' "$found") >"$out/$kind.diff"; then
    cat "$out/introspect.log" "$out/$kind.diff" >&2
    fail "the EE build's introspection of the artifact does not find $source_file as it is (< wanted, > found)"
  fi
done
[[ -s $out/pip.txt ]] || fail "introspection found no Python requirement; requirements.txt names cryptography"

# The decision environment (tests/de/decision-environment.yml, docs/event-driven.md): the same artifact, with
# ansible-rulebook and its JDK; its context must install the artifact and ask for both.
rm -rf "$out/de" "$out/de-context"
cp -r tests/de "$out/de"
cp "$tarball" "$out/de/bcd-devices.tar.gz"
"$galaxy/ansible-builder" create --file "$out/de/decision-environment.yml" --context "$out/de-context" \
  --output-filename Containerfile >"$out/de-create.log"
de=$out/de-context
cmp -s "$tarball" "$de/_build/collections/bcd-devices.tar.gz" ||
  fail "the decision environment's context does not carry the artifact just built"
grep -q 'ansible-galaxy collection install .*-r requirements.yml' "$de/Containerfile" ||
  fail "the decision environment's Containerfile does not install the collection"
grep -q '^ansible-rulebook' "$de/_build/requirements.txt" ||
  fail "the decision environment's context does not install ansible-rulebook"
grep -q 'openjdk-17' "$de/_build/bindep.txt" ||
  fail "the decision environment's context does not install a JDK 17 for ansible-rulebook's rule engine"
echo "galaxy checks: ansible-builder create made ${de#"$repo"/}: the artifact, ansible-rulebook and a JDK 17"
echo "galaxy checks: ansible-builder create made ${context#"$repo"/}; its introspection of the artifact finds requirements.txt and bindep.txt"

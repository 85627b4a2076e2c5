#!/usr/bin/env bash
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Regenerate the Python stubs of the kubelet's pod-resources API v1
# (plugins/module_utils/node/podresources_pb2.py and podresources_pb2_grpc.py) from
# hack/podresources/api.proto, with grpcio-tools from .venv. Run it from anywhere; it
# writes only those two files.
#
# The stubs run on the managed node, whose protobuf and grpcio may be far older than
# the grpcio-tools that generates them (Debian 12 ships python3-protobuf 3.21 and
# python3-grpcio 1.51). New generators add code that refuses or breaks on such
# runtimes, so the output is edited (each edit fails loudly if its pattern is gone):
#
#   _podresources_pb2.py
#     - drop `from google.protobuf import runtime_version` and the
#       `_runtime_version.ValidateProtobufRuntimeVersion(...)` call: the module does not
#       exist before protobuf 5.26, and the check refuses any runtime older than the
#       generator. What remains (descriptor_pool.AddSerializedFile plus
#       google.protobuf.internal.builder) works from protobuf 3.20 on.
#     - name the module by its full collection path in
#       BuildTopDescriptorsAndMessages (it becomes the classes' __module__).
#   _podresources_pb2_grpc.py
#     - drop the GRPC_GENERATED_VERSION check, which raises RuntimeError on any grpcio
#       older than the generator, and the then unused `import warnings`;
#     - drop the `_registered_method=True` arguments and the
#       `server.add_registered_method_handlers(...)` call: grpcio before 1.63 has
#       neither (TypeError / AttributeError); the generic handler alone serves.
#     - import the messages module by its full collection path, as `podresources_pb2`:
#       protoc names it `__podresources__pb2`, which Python mangles inside the class
#       bodies that use it (NameError at the first call).
#   both
#     - formatted with black (from .venv, --target-version py38, lines of 160 like
#       ansible-test's pep8), so that `ansible-test sanity --test pep8` accepts them;
#       `# noqa: E501` on the one line black cannot shorten (the serialized descriptor,
#       a few kilobytes of bytes literal); the collection's header first.
#
# The .proto is compiled under the name _podresources.proto, which is the name it is
# registered under in protobuf's default descriptor pool.
#
# Usage: hack/podresources/generate.sh   (environment: VENV, default <repo>/.venv)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${VENV:-$repo/.venv}
proto=$repo/hack/podresources/api.proto
dest=$repo/plugins/module_utils/node
pkg=ansible_collections.bcd.devices.plugins.module_utils.node

"$venv/bin/python" -c 'import grpc_tools' 2>/dev/null || {
  echo "generate: grpcio-tools is not installed in $venv" >&2
  exit 2
}
[[ -x $venv/bin/black ]] || {
  echo "generate: black is not installed in $venv" >&2
  exit 2
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$proto" "$tmp/_podresources.proto"
(cd "$tmp" && "$venv/bin/python" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. _podresources.proto)

pb2=$tmp/_podresources_pb2.py
grpc=$tmp/_podresources_pb2_grpc.py

# Fail when a pattern an edit relies on is not in the generated file.
need() { grep -q -e "$2" "$1" || { echo "generate: '$2' not found in $(basename "$1"); update generate.sh" >&2; exit 1; }; }
# Fail when a pattern that must be gone is still there.
gone() { if grep -q -e "$2" "$1"; then echo "generate: '$2' still in $(basename "$1")" >&2; exit 1; fi; }

header() {
  cat <<HEADER
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Generated from hack/podresources/api.proto (the kubelet's pod-resources API v1,
# Copyright The Kubernetes Authors, Apache License 2.0) by hack/podresources/generate.sh,
# which edits the output to run on protobuf >= 3.20 and grpcio >= 1.51.
# DO NOT EDIT: change api.proto or generate.sh and run it again.
HEADER
}

# podresources_pb2.py
need "$pb2" '^from google.protobuf import runtime_version as _runtime_version$'
need "$pb2" '^_runtime_version.ValidateProtobufRuntimeVersion($'
need "$pb2" "_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, '_podresources_pb2', _globals)"
need "$pb2" '^DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile('
sed -i \
  -e '/^# -\*- coding: utf-8 -\*-$/d' \
  -e '/^# NO CHECKED-IN PROTOBUF GENCODE$/d' \
  -e '/^from google.protobuf import runtime_version as _runtime_version$/d' \
  -e '/^_runtime_version.ValidateProtobufRuntimeVersion($/,/^)$/d' \
  -e "s/_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, '_podresources_pb2', _globals)/_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, '$pkg.podresources_pb2', _globals)/" \
  "$pb2"
gone "$pb2" '_runtime_version'

# podresources_pb2_grpc.py
need "$grpc" '^GRPC_GENERATED_VERSION = '
need "$grpc" '^import warnings$'
need "$grpc" '_registered_method=True)'
need "$grpc" '^    server.add_registered_method_handlers('
need "$grpc" '^import _podresources_pb2 as __podresources__pb2$'
sed -i \
  -e '/^GRPC_GENERATED_VERSION = /,/^    )$/d' \
  -e '/^import warnings$/d' \
  -e '/^    server.add_registered_method_handlers(.*)$/d' \
  -e "s/^import _podresources_pb2 as __podresources__pb2$/from $pkg import podresources_pb2/" \
  -e 's/\b__podresources__pb2\./podresources_pb2./g' \
  "$grpc"
# Joined across lines: `...,\n<spaces>_registered_method=True)` becomes `...)`.
sed -i -z 's/,\n *_registered_method=True)/)/g' "$grpc"
for pattern in GRPC_GENERATED_VERSION _version_not_supported _registered_method add_registered_method_handlers 'import warnings' '^import _podresources_pb2' '__podresources__pb2'; do
  gone "$grpc" "$pattern"
done

"$venv/bin/python" "$(dirname "$0")/guard_imports.py" "$pb2" "$grpc"
"$venv/bin/black" --quiet --target-version py38 --line-length 160 "$pb2" "$grpc"
# pep8 (ansible-test: 160 columns) accepts the lines black could not shorten.
for file in "$pb2" "$grpc"; do
  awk 'length($0) > 160 && $0 !~ /# noqa/ { $0 = $0 "  # noqa: E501" } { print }' "$file" > "$file.tmp"
  mv "$file.tmp" "$file"
done
need "$pb2" '# noqa: E501$'

{ header; cat "$pb2"; } > "$dest/podresources_pb2.py"
{ header; cat "$grpc"; } > "$dest/podresources_pb2_grpc.py"
echo "generate: wrote $dest/podresources_pb2.py and $dest/podresources_pb2_grpc.py"

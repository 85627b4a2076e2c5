#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Guard the generated stubs' third-party imports, so they import cleanly on a node without protobuf or grpcio.

Module code must import on the node's bare Python (ansible-test sanity's import test checks it);
node/kubelet.py imports them on first use (import_grpc), and any failure there (a missing package,
a runtime too old for the stubs) becomes the reason it reports the kubelet unreachable.

    guard_imports.py PB2_FILE GRPC_FILE
"""

import sys


def indent(lines):
    return "\n".join(("    " + line) if line.strip() else "" for line in lines)


def guard_pb2(text):
    """Everything from the first protobuf import on runs only when protobuf imports."""
    start = text.index("from google.protobuf import")
    head, body = text[:start], text[start:]
    imports, rest = [], []
    for line in body.splitlines():
        (imports if not rest and (line.startswith("from google.protobuf") or not line.strip()) else rest).append(line)
    return (head + "try:\n" + indent(imports) + "\n"
            + "except ImportError as exc:  # no protobuf on this node: _kubelet.py says so\n"
            + "    PROTOBUF_IMPORT_ERROR = exc\n"
            + "else:\n    PROTOBUF_IMPORT_ERROR = None\n" + indent(rest) + "\n")


def guard_grpc(text):
    old = "import grpc\n"
    if old not in text:
        raise SystemExit("guard_imports: 'import grpc' not found")
    new = ("try:\n    import grpc\nexcept ImportError as exc:  # no grpcio on this node: _kubelet.py says so\n"
           "    grpc = None\n    GRPC_IMPORT_ERROR = exc\nelse:\n    GRPC_IMPORT_ERROR = None\n")
    return text.replace(old, new, 1)


def main(pb2, grpc_file):
    for path, guard in ((pb2, guard_pb2), (grpc_file, guard_grpc)):
        with open(path) as handle:
            text = handle.read()
        with open(path, "w") as handle:
            handle.write(guard(text))


if __name__ == "__main__":
    main(*sys.argv[1:3])

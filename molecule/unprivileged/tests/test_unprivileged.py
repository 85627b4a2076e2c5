# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""After an unprivileged pass was refused and the same pass bound through the root helper."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "shared"))  # snapshot.py, shared by scenarios
from snapshot import quote, snapshot  # noqa: E402

# This run's directory for the scenario (hack/molecule.sh makes it, and removes it on exit).
BASE = os.path.join(os.environ["BCD_MOLECULE_TMP"], "unprivileged")
ROOT = BASE + "/node-u"
SOCKET = ROOT + "/run/bcd/helper.sock"
GPU = "GPU-5f1c2a90-0008-4000-8000-000000000001"  # the node's first GPU (prepare.yml)

# A peer of the helper: sends each argv line raw, prints the replies (or the connection errors).
# One request per connection, as the helper serves them; the replies in order.
CLIENT = r"""
import json, socket, sys
replies = []
for line in sys.argv[2:]:
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(10)
        connection.connect(sys.argv[1])
        connection.sendall((line + "\n").encode())
        data = b""
        while b"\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        connection.close()
        replies.append(json.loads(data.decode().splitlines()[0]))
    except OSError as exc:
        replies.append({"connect": exc.strerror})
print(json.dumps(replies))
"""


@pytest.fixture(scope="module")
def node(host):
    return snapshot(host, ROOT)


def ask(host, user, *requests):
    lines = " ".join(quote(r if isinstance(r, str) else json.dumps(r)) for r in requests)
    result = host.run("setpriv --reuid=%s --regid=$(id -g %s) --init-groups -- /usr/bin/python3 -c %s %s %s"
                      % (user, user, quote(CLIENT), SOCKET, lines))
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def test_the_holds_were_written_by_the_helper_as_root(node):
    for allocation in ("u_plain", "u_sliced"):
        for path in ("/etc/cdi/bcd-%s.json" % allocation, "/run/bcd/allocations/%s.env" % allocation):
            assert (node[path]["user"], node[path]["mode"]) == ("root", 0o644), path
    record = json.loads(node["/run/bcd/slices/bcd-alloc-u_sliced.slice.json"]["text"])
    assert record["properties"]["AllowedCPUs"] == "0-1"
    assert record["properties"]["MemoryMax"] == "1073741824"
    assert (node["/run/bcd/slices/bcd-alloc-u_sliced.slice.json"]["user"]) == "root"


def test_the_pass_state_is_bcds_and_journals_only_the_binds(node):
    # The pass without root or helper wrote nothing (issue 26): no AllocationFailed for node-unprivileged
    # is journaled, so the journal begins with the binds made beside the helper.
    assert (node["/var/lib/bcd"]["user"], node["/var/lib/bcd"]["mode"]) == ("bcd", 0o700)
    for name in ("events.jsonl", "ledger.json", "node.key", "nodespec.json"):
        item = node["/var/lib/bcd/" + name]
        assert (item["user"], item["mode"]) == ("bcd", 0o600), name
    events = [json.loads(line) for line in node["/var/lib/bcd/events.jsonl"]["text"].splitlines()]
    assert [(e["type"], e["body"]["allocation_id"]) for e in events] == [
        ("AllocationBound", "u_plain"), ("AllocationBound", "u_sliced")]
    assert [e["seq"] for e in events] == [1, 2]


def test_the_helper_socket_is_for_bcd_only(host, node):
    sock = node["/run/bcd/helper.sock"]
    assert (sock["type"], sock["user"], sock["mode"]) == ("socket", "bcd", 0o600)
    assert ask(host, "nobody", {"op": "slice.stop", "allocation_id": "u_sliced"}) == [
        {"connect": "Permission denied"}]


def test_the_helper_refuses_what_it_must_not_do_and_keeps_serving(host):
    before = snapshot(host, BASE)
    hold = {"allocation_id": "u_x", "reservation_id": "r", "generation": 1, "binding": "BINDING_HOLD",
            "devices": [{"id": GPU, "device_class": "gpu"}], "limits": None, "env": []}
    replies = ask(host, "bcd",
                  {"op": "hold.write", "kind": "allocation-env", "hold": dict(hold, allocation_id="../../../../etc/x")},
                  {"op": "hold.write", "kind": "../cdi", "hold": hold},
                  {"op": "hold.write", "kind": "cdi", "hold": hold, "content": "{}"},
                  {"op": "file.write", "kind": "cdi", "allocation_id": "u_x", "content": "{}"},
                  {"op": "hold.write", "kind": "allocation-env", "hold": dict(hold, env=["NVIDIA_VISIBLE_DEVICES=all"])},
                  {"op": "slice.apply", "allocation_id": "../../x", "limits": {"cpus": "0"}},
                  {"op": "slice.apply", "allocation_id": "u_x", "limits": {"cpus": "0," * 600}},
                  "this is not JSON",
                  {"op": "hold.remove", "kind": "allocation-env", "allocation_id": "u_gone"})
    assert [reply["ok"] for reply in replies] == [False] * 8 + [True]
    assert "is not an allocation id" in replies[0]["error"]  # hold.write checks it as the module's input
    assert "unknown kind" in replies[1]["error"]
    assert replies[2]["error"] == "hold.write takes no content"
    assert "unknown op 'file.write'" in replies[3]["error"]
    assert "NVIDIA_VISIBLE_DEVICES is set by bcd" in replies[4]["error"]
    assert "does not match" in replies[5]["error"] and "1024" in replies[6]["error"]
    assert replies[7]["error"].startswith("malformed request")
    after = snapshot(host, BASE)
    changed = sorted(path for path in set(before) | set(after)
                     if before.get(path) != after.get(path) and not path.endswith("/helper.log"))
    assert changed == []


def test_the_helper_is_still_running_and_logged_whom_it_served(host, node):
    pid = node["/helper.pid"]["text"].strip()
    assert host.run("kill -0 %s" % pid).rc == 0
    uid = host.user("bcd").uid
    log = host.file(ROOT + "/helper.log").content_string
    assert "bcd-holds helper listening on %s for root, bcd" % SOCKET in log
    assert "uid %d: hold.write cdi u_plain" % uid in log
    assert "uid %d: slice.apply bcd-alloc-u_sliced.slice" % uid in log

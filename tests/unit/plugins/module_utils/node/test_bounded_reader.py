# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one bounded reader of the state directory (``node/state_files.py``) and the bounded JSON
it parses with (``support/bounded_json.py``), on their own; and, read from the source, that no
other code opens a state file. The attacks through ``bcd-holds`` as root are in
test_state_attacks.py."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import os
import signal
import socket
import stat
import time
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain import kube_release as _kube_release
from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil as _fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node import state_files as _state_files
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import LockTimeout, PassLock
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS, NEVER_READ, StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, StateFileError

MODULE_UTILS = Path(_state_files.__file__).resolve().parent.parent
ROOT = os.geteuid() == 0


@contextlib.contextmanager
def deadline(seconds=5):
    """Fail instead of hanging: what these tests guard against is a read that never returns."""
    def expired(_signum, _frame):
        raise AssertionError("still waiting after %ds: a read or open that blocks" % seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def nested(depth, open_=b"[", close=b"]"):
    return open_ * depth + close * depth


# -- bounded JSON ------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 8, bounded_json.MAX_DEPTH])
def test_json_nested_up_to_the_limit_is_read(depth):
    assert bounded_json.loads(nested(depth), "f") is not None
    mixed = b"".join(b'{"k": ' if level % 2 else b"[" for level in range(depth)) + b"0"
    mixed += b"".join(b"}" if level % 2 else b"]" for level in reversed(range(depth)))
    assert bounded_json.loads(mixed, "f") is not None


@pytest.mark.parametrize("content", [
    nested(bounded_json.MAX_DEPTH + 1),
    nested(100000),
    nested(bounded_json.MAX_DEPTH + 1, b"{\"a\":", b"}"),
    b"[" * 100000,  # never closed: refused before the parser recurses
    b'{"a": ' * 50000 + b"1" + b"}" * 50000,
    b"[" * 40 + b"{\"x\": " * 40 + b"0" + b"}" * 40 + b"]" * 40,
])
def test_json_nested_past_the_limit_is_refused_without_recursion(content):
    with pytest.raises(StateFileError) as caught:
        bounded_json.loads(content, "/var/lib/bcd/ledger.json")
    assert str(caught.value).startswith("/var/lib/bcd/ledger.json: nests deeper than 64 levels")


def test_brackets_inside_strings_do_not_count():
    text = b'{"a": "' + b"[" * 1000 + b'\\"' + b"{" * 1000 + b'", "b": ["]]]]\\\\"]}'
    assert bounded_json.loads(text, "f") == {"a": "[" * 1000 + '"' + "{" * 1000, "b": ["]]]]\\"]}


@pytest.mark.parametrize("text", [
    b'["a\\\\", "[", "\\"]", {"k,": "\\\\\\"{"}]',  # escaped backslashes before a closing quote, escaped quotes
    b'{"a": ["]]]", "\\\\"], "b": "\\\\\\\\", "c": [[], {}]}',
    b'"\\"[[["',
])
def test_the_skeleton_is_the_structure_json_sees(text):
    """Brackets and commas inside strings, after escaped quotes and after runs of backslashes, are the
    string's; the skeleton has exactly the parsed value's structure."""
    def structure(value):
        if isinstance(value, list):
            return b"[" + b",".join(structure(item) for item in value) + b"]"
        if isinstance(value, dict):
            return b"[" + b",".join(structure(item) for item in value.values()) + b"]"
        return b""

    import json
    assert bounded_json._skeleton(text) == structure(json.loads(text))


@pytest.mark.parametrize("seed", range(30))
def test_the_skeleton_is_the_structure_json_sees_on_generated_documents(seed):
    """Both ways of finding the strings (one split where no quote is escaped, the walk where one is) give
    the structure of the parsed value, whatever brackets, commas and backslashes the strings hold."""
    import json
    import random
    rng = random.Random(seed)

    def value(depth):
        roll = rng.random()
        if depth > 4 or roll < 0.3:
            return "".join(rng.choice('[]{},\\ab"' if seed % 2 else "[]{},\\ab") for _count in range(rng.randrange(6)))
        if roll < 0.4:
            return rng.randrange(100)
        if roll < 0.7:
            return [value(depth + 1) for _count in range(rng.randrange(4))]
        return dict((value(5), value(depth + 1)) for _count in range(rng.randrange(4)))

    def structure(parsed):
        if isinstance(parsed, list):
            return b"[" + b",".join(structure(item) for item in parsed) + b"]"
        if isinstance(parsed, dict):
            return b"[" + b",".join(structure(item) for item in parsed.values()) + b"]"
        return b""

    for _document in range(20):
        text = json.dumps(value(0)).encode()
        assert bounded_json._skeleton(text) == structure(json.loads(text)), text


def test_more_quotes_than_the_bound_are_refused_before_the_strings_are_walked():
    """make fuzz found 16 MiB of ``"",`` costing 955 MB in a regular expression's ``sub``."""
    content = b"[" + b'"",' * (bounded_json.MAX_QUOTES // 2 + 1) + b"0]"
    with pytest.raises(StateFileError, match=r"^f: holds %d quote characters; at most %d are read; refused$"
                       % (bounded_json.MAX_QUOTES + 2, bounded_json.MAX_QUOTES)):
        bounded_json.loads(content, "f")
    assert bounded_json.structure_problem(content) == "holds %d quote characters; at most %d are read" % (
        bounded_json.MAX_QUOTES + 2, bounded_json.MAX_QUOTES)


def test_an_unterminated_string_of_escaped_quotes_is_one_walk_not_one_a_quote():
    """make fuzz found a regular expression that retried from every quote of an unterminated string:
    quadratic, a nodespec.json that hung ``converge --spec``. Each quote is looked at once now."""
    content = b'{"a": "' + b'\\"' * (bounded_json.MAX_QUOTES - 4) + b"x"
    with deadline(5):
        with pytest.raises(ValueError):
            bounded_json.loads(content, "f")
        assert bounded_json.structure_problem(content) is None


@pytest.mark.parametrize("content", [b'{"bound": {', b"[1, 2", b'{"a": "unterminated', b"]]", b"[}"])
def test_torn_or_broken_json_is_a_value_error_not_a_refusal(content):
    """What a crash or a hand edit leaves is each file's own damage to handle (ValueError)."""
    with pytest.raises(ValueError):
        bounded_json.loads(content, "f")


@pytest.mark.parametrize("content", [b"NaN", b"[Infinity]", b"[-Infinity]", b"\xff\xfe", b"", b"{} x"])
def test_what_is_not_json_is_a_value_error(content):
    with pytest.raises(ValueError):
        bounded_json.loads(content, "f")


def test_integers_up_to_40_digits_are_read_and_longer_ones_refused():
    assert bounded_json.loads(b"[%s, -%s]" % (b"9" * 40, b"9" * 40), "f") == [int("9" * 40), -int("9" * 40)]
    for text in (b"1" * 41, b"-" + b"1" * 41, b'{"journal_seq": %s}' % (b"7" * 10000)):
        started = time.monotonic()
        with pytest.raises(StateFileError, match=r"^f: holds an integer of (41|10000) digits; at most 40"):
            bounded_json.loads(text, "f")
        assert time.monotonic() - started < 1


def test_long_numbers_are_refused():
    assert bounded_json.loads(b"1.5e3", "f") == 1500.0
    with pytest.raises(StateFileError, match="a number of"):
        bounded_json.loads(b"0." + b"1" * 100, "f")
    with pytest.raises(StateFileError, match="a number of"):
        bounded_json.loads(b"1e" + b"9" * 100, "f")
    for text in (b"1e999", b"-1e999"):
        with pytest.raises(StateFileError, match="out of a float's range"):
            bounded_json.loads(text, "f")


def test_more_items_than_the_bound_are_refused_before_parsing():
    many = b"[" + b"1," * bounded_json.MAX_ITEMS + b"1]"
    chains = (b"[" * 64 + b"]" * 64) * (32 * 1024 * 1024 // 128)  # 32 MiB at the depth limit
    for content in (many, chains, b"[" + b"[]," * bounded_json.MAX_ITEMS + b"[]]"):
        started = time.monotonic()
        with pytest.raises(StateFileError, match="arrays, objects and values; at most %d are read" % bounded_json.MAX_ITEMS):
            bounded_json.loads(content, "f")
        assert time.monotonic() - started < 2
    assert len(bounded_json.loads(b"[" + b"1," * (bounded_json.MAX_ITEMS - 2) + b"1]", "f")) == bounded_json.MAX_ITEMS - 1
    with pytest.raises(StateFileError, match="^journal: holds"):
        bounded_json.check_items(b'{"seq": 1, "a": 2}\n' * (bounded_json.MAX_ITEMS // 2 + 1), "journal")


def test_bounded_json_is_linear_on_a_large_legitimate_file():
    """A ledger of 20 000 bound holds (about 4 MiB) parses in well under a second."""
    record = b'"a%d": {"generation": 1234567890123, "device_ids": ["GPU-5f1c2a90-0000-4000-8000-000000000001/gi1/ci0"], ' \
             b'"limits": {"memory": {"max_bytes": 1073741824}, "cpu": {"quota_percent": 250.5}}}'
    content = b'{"bound": {' + b", ".join(record % n for n in range(20000)) + b"}}"
    started = time.monotonic()
    assert len(bounded_json.loads(content, "f")["bound"]) == 20000
    assert time.monotonic() - started < 2


# -- the reader --------------------------------------------------------------------------

@pytest.fixture
def state(tmp_path):
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


def test_an_absent_file_or_directory_reads_as_none(tmp_path, state):
    assert StateFiles(str(state)).read("ledger.json") is None
    assert StateFiles(str(tmp_path / "missing")).read("ledger.json") is None
    assert StateFiles(str(tmp_path / "missing")).open("lock") is None
    (tmp_path / "file").write_text("x")
    assert StateFiles(str(tmp_path / "file" / "below")).read("ledger.json") is None


def test_a_regular_file_is_read_whole(state):
    (state / "ledger.json").write_bytes(b'{"bound": {}}')
    files = StateFiles(str(state), "/var/lib/bcd")
    assert files.read("ledger.json") == b'{"bound": {}}'
    assert files.read_json("ledger.json") == {"bound": {}}
    assert files.where("ledger.json") == "/var/lib/bcd/ledger.json"


@pytest.mark.parametrize("name", sorted(name for name, cap in FILE_CAPS.items() if cap != NEVER_READ))
def test_a_file_over_its_cap_is_refused_unread(state, name):
    with open(state / name, "wb") as handle:
        handle.truncate(FILE_CAPS[name] + 1)  # sparse: costs nothing, reads as much as its size says
    with pytest.raises(StateFileError) as caught:
        StateFiles(str(state), "/var/lib/bcd").read(name)
    assert str(caught.value).startswith("/var/lib/bcd/%s: is %d bytes, over its cap of " % (name, FILE_CAPS[name] + 1))
    with open(state / name, "wb") as handle:
        handle.truncate(FILE_CAPS[name])
    assert len(StateFiles(str(state)).read(name)) == FILE_CAPS[name]


def test_every_state_file_is_named_once_in_the_table_with_its_cap():
    """node/state_files.py names each state file once (a ``*_NAME`` of its own, a row of ``FILE_CAPS``, a line of
    its docstring's table with the cap); no other module of module_utils gives a state file's name a constant
    of its own, and the state directory's default is the table's."""
    names = dict((key, value) for key, value in vars(_state_files).items() if key.endswith("_NAME"))
    assert sorted(names.values()) == sorted(FILE_CAPS) and len(names) == len(FILE_CAPS) == 12
    for name, cap in FILE_CAPS.items():
        rows = [line.split() for line in _state_files.__doc__.splitlines() if line.startswith("``%s`` " % name)]
        shown = "never" if cap == NEVER_READ else next(
            "%d %s" % (cap // unit, name) for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))
            if cap >= unit and cap % unit == 0)
        assert len(rows) == 1 and " ".join(rows[0][1:3]).startswith(shown), (name, rows)
    elsewhere = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        relative = str(path.relative_to(MODULE_UTILS))
        if relative == READER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and (node.value.value in FILE_CAPS or node.value.value == _state_files.DEFAULT_STATE_DIR):
                elsewhere.append("%s:%d" % (relative, node.lineno))
    assert elsewhere == []  # the planner takes the node path from its caller (Observed.state_dir)
    with pytest.raises(ValueError):
        StateFiles("/nonexistent").open("passwd")


def test_the_unreadable_releases_condition_names_the_table_s_files():
    message = _kube_release.unreadable_condition("/srv/bcd")["message"]
    assert message.startswith("/srv/bcd/%s could not be read; " % _state_files.RELEASES_NAME)
    assert message.endswith("or an operator removes /srv/bcd/%s" % _state_files.MARKER_NAME)


def test_a_fifo_is_refused_at_once(state):
    os.mkfifo(state / "ledger.json")
    with deadline():
        with pytest.raises(StateFileError, match=r"ledger.json: is a FIFO, not a regular file; refused"):
            StateFiles(str(state)).read("ledger.json")
        with pytest.raises(StateFileError, match=r"ledger.json: cannot be opened as a file \(No such device or address\)"):
            StateFiles(str(state)).open("ledger.json", os.O_WRONLY | os.O_CREAT)  # a FIFO no one reads


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "elsewhere", "missing"])
def test_a_link_is_never_followed(state, target):
    (state.parent / "elsewhere").write_text("{}")
    os.symlink(str(state.parent / target) if target in ("elsewhere", "missing") else target, state / "events.jsonl")
    with deadline():
        for call in (lambda f: f.read("events.jsonl"), lambda f: f.open("events.jsonl", os.O_WRONLY | os.O_CREAT)):
            with pytest.raises(StateFileError, match="events.jsonl: is a symbolic link; root does not follow links"):
                call(StateFiles(str(state)))
    assert not (state.parent / "missing").exists()


def test_a_directory_or_a_socket_is_refused(state):
    (state / "nodespec.json").mkdir()
    with pytest.raises(StateFileError, match="nodespec.json: is a directory, not a regular file"):
        StateFiles(str(state)).read("nodespec.json")
    with pytest.raises(StateFileError, match="nodespec.json: cannot be opened as a file"):
        StateFiles(str(state)).open("nodespec.json", os.O_RDWR | os.O_CREAT)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(state / "events.seq"))
        with deadline():
            with pytest.raises(StateFileError, match="events.seq: "):
                StateFiles(str(state)).read("events.seq")
    finally:
        server.close()


def test_a_state_directory_that_is_a_link_or_a_file_is_refused(tmp_path, state):
    os.symlink(str(state), str(tmp_path / "link"))
    with pytest.raises(StateFileError, match="the state directory is a symbolic link"):
        StateFiles(str(tmp_path / "link"), "/var/lib/bcd").read("ledger.json")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StateFileError, match="the state directory is not a directory"):
        StateFiles(str(tmp_path / "plain")).read("ledger.json")


def test_a_refusal_is_a_bcd_error_naming_the_file():
    assert issubclass(StateFileError, BcdError)
    error = StateFileError("/var/lib/bcd/ledger.json", "is a FIFO")
    assert (str(error), error.where, error.problem) == (
        "/var/lib/bcd/ledger.json: is a FIFO", "/var/lib/bcd/ledger.json", "is a FIFO")


def test_created_files_get_the_mode_asked(state):
    umask = os.umask(0o077)
    try:
        fd = StateFiles(str(state)).open("events.jsonl", os.O_WRONLY | os.O_CREAT, 0o640)
    finally:
        os.umask(umask)
    os.close(fd)
    assert stat.S_IMODE(os.stat(state / "events.jsonl").st_mode) == 0o640  # whatever the umask
    fd = StateFiles(str(state)).open("events.jsonl")
    try:
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    finally:
        os.close(fd)


@pytest.mark.skipif(not ROOT, reason="needs root to own files as another uid")
def test_owned_by_neither_the_directory_owner_nor_root_is_refused(state):
    os.chown(state, 4242, 4242)
    (state / "ledger.json").write_text("{}")
    os.chown(state / "ledger.json", 4243, 4243)
    with pytest.raises(StateFileError, match=r"ledger.json: belongs to uid 4243, neither the state directory's owner "
                                             r"\(uid 4242\) nor root"):
        StateFiles(str(state)).read("ledger.json")
    os.chown(state / "ledger.json", 4242, 4242)
    assert StateFiles(str(state)).read("ledger.json") == b"{}"
    os.chown(state / "ledger.json", 0, 0)
    assert StateFiles(str(state)).read("ledger.json") == b"{}"  # a root-mode install's leftover
    os.link(state / "ledger.json", state.parent / "hard")
    with pytest.raises(StateFileError, match="is root's and has 2 links"):
        StateFiles(str(state)).read("ledger.json")


@pytest.mark.skipif(not ROOT, reason="needs root to hand a file over")
def test_a_file_root_creates_takes_the_directory_owner(state):
    os.chown(state, 4242, 4343)
    os.close(StateFiles(str(state)).open("lock", os.O_RDWR | os.O_CREAT, 0o600))
    info = os.stat(state / "lock")
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4242, 4343, 0o600)


@pytest.mark.skipif(not ROOT, reason="needs root to leave root's files")
def test_adoption_looks_only_at_the_state_file_names(state, monkeypatch):
    os.chown(state, 4242, 4242)
    for name in ("ledger.json", "other"):
        (state / name).write_text("{}")

    def no_listing(*_args, **_kwargs):
        raise AssertionError("the state directory must not be listed")

    monkeypatch.setattr(os, "listdir", no_listing)
    monkeypatch.setattr(os, "scandir", no_listing)
    StateFiles(str(state)).adopt()
    assert os.stat(state / "ledger.json").st_uid == 4242
    assert os.stat(state / "other").st_uid == 0


@pytest.mark.skipif(not ROOT, reason="needs root to leave another account's files")
def test_the_accounts_files_go_to_root_when_the_directory_is_roots_again(state):
    """The helper turned off: the role hands the state directory back to root; the account's files follow."""
    (state / "ledger.json").write_text('{"journal_seq": 3}')
    os.chown(state / "ledger.json", 4242, 4242)
    node = NodeState(str(state), "/var/lib/bcd")
    with node.lock(5):
        assert node.load(write=False).ledger.journal_seq == 3
    assert os.stat(state / "ledger.json").st_uid == 0
    os.chown(state / "ledger.json", 4242, 4242)
    os.chmod(state, 0o777)  # others may add files: none is taken over
    with pytest.raises(StateFileError, match="belongs to uid 4242"):
        NodeState(str(state), "/var/lib/bcd").load(write=False)


# -- the lock ----------------------------------------------------------------------------

@pytest.mark.parametrize("create", [True, False])
def test_a_fifo_as_the_lock_is_refused_at_once(state, create):
    os.mkfifo(state / "lock")
    with deadline():
        with pytest.raises(StateFileError, match="lock: is a FIFO, not a regular file"):
            PassLock(str(state), timeout=1, create=create).acquire()


@pytest.mark.parametrize("create", [True, False])
def test_a_link_as_the_lock_is_refused(state, create):
    os.symlink("/dev/zero", state / "lock")
    with deadline():
        with pytest.raises(StateFileError, match="lock: is a symbolic link"):
            PassLock(str(state), timeout=1, create=create).acquire()


def test_the_lock_timeout_holds_against_a_holder_that_never_lets_go(state):
    (state / "lock").write_text("")
    holder = os.open(state / "lock", os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        with deadline(10):
            with pytest.raises(LockTimeout, match="after 0.5s"):
                PassLock(str(state), timeout=0.5, create=False, shared=True).acquire()
        assert time.monotonic() - started < 3
    finally:
        os.close(holder)


def test_node_state_reads_nothing_but_through_the_reader(tmp_path, monkeypatch):
    """A pass's reads with every raw way of opening a file taken away."""
    state_dir = tmp_path / "var" / "lib" / "bcd"
    state = NodeState(str(state_dir), "/var/lib/bcd")
    with state.lock(5):
        state.load()
        state.store_nodespec(1, [], [])
    (state_dir / "maintenance.json").write_text("{}")
    (state_dir / "health.json").write_text("{}")
    (state_dir / "releasing.json").write_text('{"releases": {}}')
    (state_dir / "last-pass.json").write_text('{"state": "CONVERGED", "finished": 1, "duration_seconds": 1}')

    def refused(*_args, **_kwargs):
        raise AssertionError("a state file opened outside node/state_files.py")

    import builtins
    monkeypatch.setattr(builtins, "open", refused)
    monkeypatch.setattr(_fsutil, "read_bytes", refused)
    fresh = NodeState(str(state_dir), "/var/lib/bcd")
    with fresh.lock(5, create=False, shared=True):
        fresh.load(write=False)
        assert fresh.load_nodespec() == (1, [], [], "auto", None)
        assert fresh.last_pass()["state"] == "CONVERGED"
        assert fresh.unacked() == []


# -- nothing else opens a state file (read from the source) -----------------------------

# (module, function) of every raw way to open, read, list or parse a file; None: the bare name
RAW_IO = {(None, "open"), (None, "read_bytes"), ("os", "open"), ("os", "fdopen"), ("os", "listdir"), ("os", "scandir"),
          ("os", "walk"), ("io", "open"), ("json", "load"), ("json", "loads"), ("glob", "glob"), ("glob", "iglob"),
          ("fsutil", "read_bytes"), ("*", "read_bytes"), ("*", "read_text")}
STATE_NAMES = set(FILE_CAPS)
NAME_CONSTANTS = set(key for key in vars(_state_files) if key.endswith("_NAME"))  # the table's
READER = "node/state_files.py"
# The state layer, the parsers of state files and the entry points that read only the state: no raw
# I/O at all (entry/status.py and doctor/node.py also parse hold specs, root's: the test below covers them).
NO_RAW_IO = ["state/%s" % path.name for path in sorted((MODULE_UTILS / "state").glob("*.py"))] + [
    "domain/maintenance.py", "domain/health.py", "entry/busy.py", "entry/metrics.py"]


def _called(node):
    """``(module, function)`` of a call to ``RAW_IO``, else None."""
    func = node.func
    if isinstance(func, ast.Name):
        key = (None, func.id)
    elif isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else "?"
        key = (owner, func.attr) if (owner, func.attr) in RAW_IO else ("*", func.attr)
    else:
        return None
    return key if key in RAW_IO else None


def raw_io_calls(relative):
    tree = ast.parse((MODULE_UTILS / relative).read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _called(node) is not None]


@pytest.mark.parametrize("relative", NO_RAW_IO)
def test_state_code_opens_files_only_through_the_reader(relative):
    calls = raw_io_calls(relative)
    assert not calls, "%s line %s: %s() outside node/state_files.py" % (
        relative, calls[0].lineno, ".".join(filter(None, _called(calls[0]))))


def test_the_pass_lock_opens_its_file_and_directory_only_through_the_reader():
    tree = ast.parse((MODULE_UTILS / "node/fsutil.py").read_text())
    (lock,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "PassLock"]
    calls = [node for node in ast.walk(lock) if isinstance(node, ast.Call) and _called(node) is not None]
    assert not calls, "PassLock line %d" % calls[0].lineno


def test_no_other_module_opens_a_file_by_a_state_file_name():
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        relative = str(path.relative_to(MODULE_UTILS))
        if relative == READER:
            continue
        for call in raw_io_calls(relative):
            arguments = ast.Tuple(elts=list(call.args) + [k.value for k in call.keywords], ctx=ast.Load())
            named = [sub for sub in ast.walk(arguments)
                     if (isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                         and any(name in sub.value for name in STATE_NAMES - {"lock"}))
                     or (isinstance(sub, ast.Name) and sub.id in NAME_CONSTANTS)
                     or (isinstance(sub, ast.Attribute) and sub.attr in NAME_CONSTANTS)]
            assert not named, "%s line %d opens a state file outside %s" % (relative, call.lineno, READER)


def test_the_reader_opens_everything_without_following_or_blocking():
    tree = ast.parse((MODULE_UTILS / READER).read_text())
    opens = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _called(node) == ("os", "open")]
    assert len(opens) >= 4
    for call in opens:
        flags = set(sub.id for sub in ast.walk(call.args[1]) if isinstance(sub, ast.Name))
        assert flags & {"OPEN_FLAGS", "DIR_FLAGS"}, "line %d" % call.lineno
    assert _state_files.OPEN_FLAGS & os.O_NOFOLLOW and _state_files.OPEN_FLAGS & os.O_NONBLOCK
    assert _state_files.OPEN_FLAGS & os.O_CLOEXEC and _state_files.DIR_FLAGS & os.O_NOFOLLOW


def test_a_ledger_render_record_without_its_env_reads_as_none_not_a_traceback():
    """Found by make fuzz (ledger.json, seed 22, input 187): a render record the account wrote without
    ``env`` ended every root command in a KeyError."""
    from ansible_collections.bcd.devices.plugins.module_utils.state.ledger import parse_ledger  # pylint: disable=import-outside-toplevel
    content = b'{"renders": {"a1": {"key": "k", "spec": "s", "notes": []}}}'
    assert parse_ledger(content, "/var/lib/bcd/ledger.json").renders == {
        "a1": {"key": "k", "spec": "s", "env": None, "notes": []}}

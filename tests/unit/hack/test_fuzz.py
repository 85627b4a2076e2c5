# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make fuzz, short (issue 22, item 7): every target of tests/fuzz, a few hundred inputs each, one fixed seed.

One run of the fuzzer (two worker processes) serves the whole file; each target then passes or fails on
its own, with one line per distinct failure and the command that replays it. The run is deterministic:
the same seed makes the same inputs (a worker's memory and time are measured, so a cost failure near
its bound may come and go with the machine's load). The harness itself is tested too: a failure is
found, named, deduplicated and replayed, a hang is stopped at its deadline, and ``--list`` shows every
target.
"""

from __future__ import annotations

import io

import pytest

from ansible_collections.bcd.devices.tests.fuzz import mutate, nodes, runner, verdict

SEED = 22
SHORT_COUNT = 250
TARGETS = list(runner.all_targets())


@pytest.fixture(scope="module")
def short_run():
    return runner.run(count=SHORT_COUNT, seed=SEED, jobs=2)


@pytest.mark.parametrize("target", TARGETS)
def test_a_short_fuzz_run_finds_nothing(short_run, target):
    expected = max(1, int(round(SHORT_COUNT * runner.all_targets()[target].share)))
    assert short_run.counts.get(target) == expected, short_run.lines()
    found = short_run.lines(target)
    assert not found, "\n".join(found)


def test_every_parser_root_runs_on_the_accounts_files_is_a_target():
    """Issue 22's list: each state file, the stored nodespec, the helper's requests (in-process and over a
    socket), fakehw files, vendor specs, the holds read back, the kubelet's answer, the module's input; and
    issue 33's: the helper's bounds on what root keeps and does."""
    assert set(TARGETS) >= {
        "ledger.json", "releasing.json", "releasing.unreadable", "nodespec.json", "last-pass.json",
        "events.jsonl", "events.seq", "node.key", "maintenance.json", "health.json", "lock", "state-dir",
        "module", "helper", "helper-socket", "fakehw", "vendor-spec", "cdi-hold", "kubelet", "helper-bounds"}
    out = io.StringIO()
    assert runner.main(["--list"], out=out) == 0
    assert all(name in out.getvalue() for name in TARGETS)


def test_an_input_is_made_again_from_its_seed_alone(tmp_path, monkeypatch):
    from ansible_collections.bcd.devices.plugins.module_utils.node import kubelet  # pylint: disable=import-outside-toplevel
    # the kubelet target answers for gRPC in its worker process (kubelet._GRPC); here that is this process,
    # and the tests of the real kubelet client that run after in it must find gRPC again
    monkeypatch.setattr(kubelet, "_GRPC", dict(kubelet._GRPC))  # pylint: disable=protected-access
    nodes.preload()  # as root, a pass drops to the state directory's owner: import first (nodes.preload)
    worker = runner.Worker(str(tmp_path), SEED, 1.0, 100.0)
    for name in ("ledger.json", "events.jsonl", "module", "helper", "fakehw", "vendor-spec", "kubelet"):
        target = worker.target(name)
        first = target.generate(runner.input_rng(SEED, name, 7))
        again = target.generate(runner.input_rng(SEED, name, 7))
        assert repr(first) == repr(again), name
        assert repr(target.generate(runner.input_rng(SEED + 1, name, 7))) != repr(first), name


def test_the_helper_bounds_target_finds_a_bound_root_does_not_keep(tmp_path, monkeypatch):
    """The target's checks can fail: with the helper's atom bound or its look bucket taken out, an input that
    passes them finds it, named ``bound``; with them in, the same input is clean."""
    from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import handle, limits  # pylint: disable=import-outside-toplevel
    nodes.preload()
    worker = runner.Worker(str(tmp_path), SEED, 1.0, 100.0)
    target = worker.target("helper-bounds")
    wide = {"op": "hold.write", "kind": "cdi", "hold": {
        "allocation_id": "b1", "reservation_id": "r", "generation": 1, "binding": "BINDING_HOLD",
        "devices": [{"id": "%s/s%d" % (nodes.GPU_F, number), "device_class": "gpu.slot"} for number in range(200)],
        "limits": None, "env": [], "runtimes": []}}
    item = {"uid": 65534, "classes": [(64, 16.0), (64, 16.0), (2, 0.5)], "log": (50, 4.0), "view_seconds": 1.0,
            "planted_atoms": 4000, "planted_env": 0, "requests": [(wide, 0.0)] + [({"op": "kube.look"}, 0.0)] * 5}
    target.prepare(item)
    assert target.run(item) is None
    monkeypatch.setattr(handle, "check_atoms", lambda *args: None)
    target.prepare(item)
    failure = target.run(item)
    assert failure["kind"] == "bound" and "4204 atoms, past the bound 4096" in failure["summary"], failure
    monkeypatch.undo()
    checked = limits.RateLimit.check
    monkeypatch.setattr(limits.RateLimit, "check", lambda limit, uid, request: None if request.get("op") == "kube.look"
                        else checked(limit, uid, request))  # kube.look taken out of its bucket
    target.prepare(item)
    failure = target.run(item)
    assert failure["kind"] == "bound" and "5 of kube.look, mig.look passed in 0s, past a burst of 2" in failure["summary"], failure


def test_the_allowlist_is_the_projects_errors_and_named_os_errors():
    from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, StateFileError
    assert verdict.clean(BcdError("x")) and verdict.clean(StateFileError("/var/lib/bcd/ledger.json", "refused"))
    assert verdict.clean(OSError(5, "Input/output error", "/etc/cdi/bcd-a1.json"))
    assert not verdict.clean(OSError(5, "Input/output error"))  # no file named: the user learns nothing
    for exc in (ValueError("x"), KeyError("env"), RecursionError(), TypeError("x"), MemoryError()):
        assert not verdict.clean(exc)


def test_a_traceback_and_a_hang_are_found_named_deduplicated_and_the_run_goes_on(monkeypatch):
    """The harness's own target: a hang (a FIFO no one writes) is stopped at the deadline and named by where
    it waited, the worker replaced and the next input run; a traceback is named by its innermost frame."""
    monkeypatch.setenv("BCD_FUZZ_SELFTEST", "1")
    report = runner.run(targets=["selftest"], count=6, seed=SEED, jobs=1, deadline=2)
    assert report.counts == {"selftest": 6}
    kinds = sorted((f.index, f.kind) for f in report.failures)
    assert kinds == [(1, "hang"), (4, "hang"), (5, "harness")], report.lines()
    keys = [f.key for f in report.distinct()]
    assert len(keys) == 2, keys  # two hangs at one place: one failure
    assert any(key.startswith("hang at tests/fuzz/base.py:") and key.endswith(" run") for key in keys), keys
    assert any(key.startswith("harness KeyError at tests/fuzz/base.py:") for key in keys), keys
    lines = report.lines()
    assert any('replay: make fuzz FUZZ_ARGS="--target selftest --seed 22 --replay 1"' in line
               and "[selftest; 2 inputs]" in line for line in lines), lines


def test_the_generators_make_what_the_issue_asks_for():
    """Deep nesting, 10 000-digit integers, NaN and Infinity, lone surrogates, control characters, truncation."""
    rng = runner.input_rng(SEED, "generators", 0)
    texts = [mutate.to_text(mutate.nasty_value(rng, True)) for _count in range(3000)]
    joined = "\n".join(texts)
    assert "[" * 1000 in joined and "7" * 10000 in joined and "NaN" in joined and "Infinity" in joined
    assert "\\ud800" in joined or "\\udfff" in joined or "\\udc00" in joined
    assert "\\u001b" in joined and "\\u2028" in joined
    data = b'{"a": [1, 2, 3]}'
    changed = set(mutate.mutate_bytes(runner.input_rng(SEED, "bytes", i), data) for i in range(200))
    assert b"" in changed and any(len(c) < len(data) for c in changed) and any(b"\xff" in c for c in changed)


def test_the_generators_keep_an_input_within_the_workers_memory():
    """An input stays small enough to write: every container to_text writes counts its strings (a
    ``Pairs`` of megabyte strings once counted as one value, was multiplied into 2 GB: make fuzz, seed
    1207853851, events.jsonl #2653), and a string repeated stays within the longest long string."""
    big = "x" * (1 << 20)
    for value in ([big], (big,), {"k": big}, {big: 1}, mutate.Pairs([("k", big), ("k", big)]), mutate.Raw(big)):
        assert mutate.size_of(value) > (1 << 20) // 64, value.__class__
    rng = runner.input_rng(SEED, "strings", 0)
    assert max(len(mutate.nasty_string(rng, big)) for _count in range(300)) <= mutate.LONG_LENGTHS[-1] * 2
    rng = runner.input_rng(SEED, "values", 0)
    row = {"seq": 1, "type": "AllocationBound", "body": mutate.Pairs([("a", big), ("a", big)])}
    assert max(len(mutate.to_text(mutate.mutate_value(rng, row, True))) for _count in range(40)) < 64 << 20


def test_a_replay_names_its_input_and_its_failure(monkeypatch):
    """What make fuzz prints for a failure is a command; that command runs one input and shows it."""
    assert runner.replay_command("ledger.json", 22, 4567) == \
        'make fuzz FUZZ_ARGS="--target ledger.json --seed 22 --replay 4567"'
    out = io.StringIO()
    assert runner.main(["--target", "lock", "--seed", str(SEED), "--replay", "3"], out=out) == 0
    assert out.getvalue().startswith("input: lock: ") and "lock #3 (seed 22): no failure" in out.getvalue()

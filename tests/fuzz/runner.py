# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``make fuzz``: generated inputs thrown at every parser root runs, in worker processes that are watched.

The parent splits each target's inputs into chunks and hands them to ``--jobs`` workers (``hack/fuzz.py
--worker``). A worker makes input ``i`` of target ``t`` from ``random.Random("<seed>:<t>:<i>")``, puts its
node back, plants the input, runs it, and says how it went, one line an input. The parent stops a worker
that says nothing for ``--deadline`` seconds (a hang: the worker's stack is dumped first, with
faulthandler), and starts another one at the next input. The CPU time of an input over ``--max-seconds``
(twice in a row) and a peak resident memory over ``--max-mb`` above the worker's before the input are
failures too (a worker that used too much memory is replaced, so the next input starts low).

Failures are deduplicated by kind, exception type and innermost frame of the collection's code; each is
printed on one line with the command that replays its first input:

    make fuzz FUZZ_ARGS="--target ledger.json --seed 123 --replay 4567"

which prints the input, the whole traceback, and with ``--dump DIR`` writes the input's files.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List

HACK = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "hack", "fuzz.py")
DEFAULT_COUNT = 10000
CHUNK = 250
DEADLINE = 10.0
MAX_SECONDS = 1.0  # issue 22, item 5: the worst input a pass takes costs at most 1 s and 100 MB
MAX_MB = 100.0
ADDRESS_SPACE = 4 << 30  # a worker's limit, so that a runaway input ends in MemoryError, not in the OOM killer
SETUP_DEADLINE = 120.0


def all_targets():
    """Every target, in the order they are reported."""
    from ansible_collections.bcd.devices.tests.fuzz import hardware_targets, input_targets, state_targets  # pylint: disable=import-outside-toplevel
    found = state_targets.targets() + input_targets.targets() + hardware_targets.targets()
    if os.environ.get("BCD_FUZZ_SELFTEST"):
        from ansible_collections.bcd.devices.tests.fuzz.base import SelfTest  # pylint: disable=import-outside-toplevel
        found.append(SelfTest())
    return dict((target.name, target) for target in found)


def input_rng(seed, target, index):
    return random.Random("%d:%s:%d" % (seed, target, index))


def replay_command(target, seed, index):
    return 'make fuzz FUZZ_ARGS="--target %s --seed %d --replay %d"' % (target, seed, index)


# -- the worker ---------------------------------------------------------------------------------------

def _rss():
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def _peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Worker(object):
    """The worker's side: targets set up on first use, inputs run one by one."""

    def __init__(self, workdir, seed, max_seconds, max_mb):
        self.workdir = workdir
        self.seed = seed
        self.max_seconds = max_seconds
        self.max_mb = max_mb
        self.targets = all_targets()
        self.ready = set()
        self.baseline = _peak()  # the peak once set up: what later inputs are measured against

    def target(self, name):
        target = self.targets[name]
        if name not in self.ready:
            target.setup(self.workdir)
            self.ready.add(name)
            self.baseline = max(self.baseline, _peak())
        return target

    def once(self, target, item):
        """``(failure or None, cpu seconds, bytes above the resident memory before)``."""
        target.prepare(item)
        before, peak_before = _rss(), _peak()
        started = time.process_time()
        try:
            failure = target.run(item)
        except (KeyboardInterrupt, SystemExit) as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
            failure = verdict.traceback_failure(exc, "SystemExit from the code under test")
        except Exception as exc:  # pylint: disable=broad-except
            from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
            failure = None if verdict.clean(exc) else verdict.traceback_failure(exc)
        seconds, peak = time.process_time() - started, _peak()
        # the peak is the process's: only an input that raised it used more than the peak left before it
        return failure, seconds, peak - before if peak > peak_before else 0

    def run_input(self, name, index):
        """The result of input ``index`` of target ``name``: ``(failure or None, replace_me)``."""
        from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
        target = self.target(name)
        try:
            item = target.generate(input_rng(self.seed, name, index))
        except Exception as exc:  # pylint: disable=broad-except
            failure = verdict.traceback_failure(exc, "generating the input")
            failure.update(kind="harness", key="harness " + failure["key"].split(" ", 1)[1])
            return failure, False
        try:
            failure, seconds, memory = self.once(target, item)
        except Exception as exc:  # pylint: disable=broad-except
            failure = verdict.traceback_failure(exc, "planting the input")  # once() catches what run() raises
            failure.update(kind="harness", key="harness " + failure["key"].split(" ", 1)[1])
            return failure, True
        # a peak well above where the worker started leaves the next inputs nothing to measure: start anew
        replace = _peak() - self.baseline > self.max_mb * (1 << 20) / 2
        if failure is None and memory > self.max_mb * (1 << 20):
            return verdict.problem("cost-memory", name, "%s: peak resident memory %.0f MB above what the worker had "
                                   "(bound %g MB)" % (name, memory / 1048576.0, self.max_mb)), True
        if failure is None and seconds > self.max_seconds:
            again, seconds_again, _memory = self.once(target, item)
            seconds = min(seconds, seconds_again)
            if again is None and seconds > self.max_seconds:
                failure = verdict.problem("cost-time", name, "%s: %.2f s of CPU time, twice (bound %g s)"
                                          % (name, seconds, self.max_seconds))
        return failure, replace


def _protocol_channel():
    """The worker's replies go to the parent on a descriptor of their own; what the code under test writes
    to stdout goes to stderr (the worker's log) instead."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    return channel


def worker_main(args):
    from ansible_collections.bcd.devices.tests.fuzz import nodes, verdict  # pylint: disable=import-outside-toplevel
    channel = _protocol_channel()
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    except (ValueError, OSError):
        pass
    nodes.preload()
    worker = Worker(args.workdir, args.seed, args.max_seconds, args.max_mb)
    channel.write("ready\n")
    for line in sys.stdin:
        order = json.loads(line)
        name = order["target"]
        try:
            worker.target(name)
        except Exception as exc:  # pylint: disable=broad-except
            failure = verdict.traceback_failure(exc, "setting up %s" % name)
            failure["kind"] = "harness"
            failure["key"] = "harness setup %s" % name
            channel.write(json.dumps({"setup": name, "failure": failure}) + "\n")
            continue
        channel.write("go\n")
        for index in range(order["start"], order["stop"]):
            if order.get("replay"):
                target = worker.targets[name]
                item = target.generate(input_rng(args.seed, name, index))
                channel.write(json.dumps({"describe": target.describe(item)}) + "\n")
                if order.get("dump"):
                    os.makedirs(order["dump"], exist_ok=True)
                    target.dump(item, order["dump"])
            failure, replace = worker.run_input(name, index)
            if failure is None:
                channel.write("%d\n" % index)
            else:
                channel.write(json.dumps({"i": index, "failure": failure}) + "\n")
            if replace:
                channel.write("replace\n")
                return 0
        channel.write("done\n")
    return 0


# -- the parent ------------------------------------------------------------------------------------------

@dataclass
class Failure:
    target: str
    index: int
    kind: str
    key: str
    summary: str
    detail: str = ""


@dataclass
class Report:
    seed: int
    counts: Dict[str, int] = field(default_factory=dict)  # inputs run, by target
    seconds: Dict[str, float] = field(default_factory=dict)  # workers' wall time, by target
    failures: List[Failure] = field(default_factory=list)
    wall: float = 0.0

    def distinct(self, target=None):
        """The first failure of each key (of ``target`` only, when given)."""
        seen = {}  # type: Dict[str, Failure]
        for failure in sorted(self.failures, key=lambda f: (f.target, f.index)):
            if target is None or failure.target == target:
                seen.setdefault(failure.key, failure)
        return list(seen.values())

    def lines(self, target=None):
        """One line per distinct failure (of ``target``, when given): what, where, how often, and the
        command that replays its first input."""
        out = []
        for failure in self.distinct(target):
            same = [f for f in self.failures if f.key == failure.key and (target is None or f.target == target)]
            where = sorted(set(f.target for f in same))
            out.append("FAIL %s: %s [%s; %d input%s] replay: %s" % (
                failure.key, failure.summary, ", ".join(where), len(same), "" if len(same) == 1 else "s",
                replay_command(failure.target, self.seed, failure.index)))
        return out


class _Proc(object):
    """A worker process, and the chunk it is on."""

    def __init__(self, number, args, workdir):
        self.number = number
        self.log_path = os.path.join(workdir, "worker-%d.log" % number)
        self.log = open(self.log_path, "ab")  # pylint: disable=consider-using-with
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        env.pop("JOURNAL_STREAM", None)
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, HACK, "--worker", "--workdir", os.path.join(workdir, "w%d" % number),
             "--seed", str(args.seed), "--max-seconds", str(args.max_seconds), "--max-mb", str(args.max_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, start_new_session=True)
        self.buffer = b""
        self.unit = None  # (target, start, stop)
        self.next = None  # the input it is on
        self.since = time.monotonic()
        self.ready = False
        self.setting_up = False
        self.unit_started = None

    def send(self, unit, replay=False, dump=None):
        self.unit = unit
        self.next = unit[1]
        self.since = time.monotonic()
        self.unit_started = self.since
        self.setting_up = True
        order = {"target": unit[0], "start": unit[1], "stop": unit[2], "replay": replay, "dump": dump}
        self.process.stdin.write((json.dumps(order) + "\n").encode())
        self.process.stdin.flush()

    def lines(self):
        """Whole lines read now (the descriptor is ready), or None at end of file."""
        chunk = os.read(self.process.stdout.fileno(), 65536)
        if not chunk:
            return None
        self.buffer += chunk
        *whole, self.buffer = self.buffer.split(b"\n")
        self.since = time.monotonic()
        return [line.decode("utf-8", "replace") for line in whole]

    def stack(self):
        """The worker's stack, dumped by faulthandler on SIGUSR1, from its log."""
        try:
            size = os.path.getsize(self.log_path)
            os.kill(self.process.pid, signal.SIGUSR1)
            time.sleep(0.5)
            with open(self.log_path, "rb") as handle:
                handle.seek(size)
                return handle.read(20000).decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self):
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(max(0, os.path.getsize(self.log_path) - 4000))
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        self.log.close()


def _hang_key(stack):
    """The innermost frame of the collection in a faulthandler dump (its first thread is the current one)."""
    frames = []
    for line in stack.splitlines():
        line = line.strip()
        if line.startswith('File "'):
            filename, _sep, rest = line[6:].partition('", line ')
            number, _sep, name = rest.partition(" in ")
            frames.append((filename, number, name))
        elif frames and not line:
            break
    from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
    for prefix in ("plugins/", "tests/"):
        for filename, number, name in frames:  # faulthandler lists the innermost frame first
            short = verdict._short(filename)  # pylint: disable=protected-access
            if short.startswith(prefix):
                return "%s:%s %s" % (short, number, name)
    return "?"


class Campaign(object):
    """The parent: chunks of inputs to workers, their answers into a ``Report``."""

    def __init__(self, args, workdir, out=sys.stdout):
        self.args = args
        self.workdir = workdir
        self.out = out
        self.report = Report(seed=args.seed)
        self.procs = []  # type: List[_Proc]
        self.started = {}  # type: Dict[str, float]
        self.describe = None
        self.number = 0

    def _spawn(self):
        self.number += 1
        return _Proc(self.number, self.args, self.workdir)

    def _failure(self, target, index, failure):
        record = Failure(target, index, failure["kind"], failure["key"], failure["summary"], failure.get("detail", ""))
        self.report.failures.append(record)
        if self.args.verbose or self.args.replay is not None:
            self.out.write("  %s #%d: %s\n" % (target, index, failure["summary"]))

    def _count(self, target, proc):
        self.report.counts[target] = self.report.counts.get(target, 0) + 1

    def _clock(self, proc):
        """The wall time ``proc`` spent on its chunk, to its target's account."""
        if proc.unit is not None and proc.unit_started is not None:
            target = proc.unit[0]
            self.report.seconds[target] = self.report.seconds.get(target, 0.0) + time.monotonic() - proc.unit_started
            proc.unit_started = None

    def run(self, units, jobs, replay=False, dump=None):
        pending = list(units)
        started = time.monotonic()
        jobs = max(1, min(jobs, len(pending)))
        try:
            while pending or any(p.unit for p in self.procs):
                while len(self.procs) < jobs and pending:
                    self.procs.append(self._spawn())
                for proc in self.procs:
                    if proc.ready and proc.unit is None and pending:
                        proc.send(pending.pop(0), replay, dump)
                self._wait(pending, replay, dump)
                self.procs = [p for p in self.procs if p.process.poll() is None or p.unit is not None]
                if not pending:
                    for proc in [p for p in self.procs if p.unit is None and p.ready]:
                        proc.stop()
                        self.procs.remove(proc)
        finally:
            for proc in self.procs:
                proc.stop()
            self.procs = []
        self.report.wall = time.monotonic() - started
        return self.report

    def _wait(self, pending, replay, dump):
        by_fd = dict((p.process.stdout.fileno(), p) for p in self.procs)
        readable, _w, _x = select.select(list(by_fd), [], [], 0.5)
        for fd in readable:
            proc = by_fd[fd]
            lines = proc.lines()
            if lines is None:
                self._died(proc, pending, "the worker exited: %s" % proc.tail()[-600:])
                continue
            for line in lines:
                self._line(proc, line, pending)
        now = time.monotonic()
        for proc in list(self.procs):
            limit = SETUP_DEADLINE if proc.setting_up or not proc.ready else self.args.deadline
            if proc.unit is not None and proc.next is not None and now - proc.since > limit:
                if proc.setting_up:
                    self._died(proc, pending, "the worker did not set %s up within %gs: %s"
                               % (proc.unit[0], SETUP_DEADLINE, proc.tail()))
                else:
                    self._hung(proc, pending)
            elif not proc.ready and now - proc.since > SETUP_DEADLINE:
                self._died(proc, pending, "the worker did not start within %gs: %s" % (SETUP_DEADLINE, proc.tail()))

    def _line(self, proc, line, pending):
        if line == "ready":
            proc.ready = True
            return
        if line == "go":
            proc.setting_up = False
            proc.since = time.monotonic()
            return
        if line == "done":
            self._clock(proc)
            proc.unit = None
            proc.next = None
            return
        if line == "replace":  # it used too much memory: the next input gets a fresh worker
            self._restart(proc, pending)
            return
        if line.isdigit():
            index = int(line)
            self._count(proc.unit[0], proc)
            proc.next = index + 1
            return
        message = json.loads(line)
        if "describe" in message:
            self.describe = message["describe"]
            self.out.write("input: %s\n" % message["describe"])
            return
        if "setup" in message:
            self._failure(message["setup"], proc.unit[1], message["failure"])
            proc.setting_up = False
            proc.unit = None
            proc.next = None
            return
        index = message["i"]
        self._count(proc.unit[0], proc)
        self._failure(proc.unit[0], index, message["failure"])
        proc.next = index + 1

    def _restart(self, proc, pending):
        """Replace ``proc``; the rest of its chunk goes first to the next worker."""
        target, _start, stop = proc.unit
        self._clock(proc)
        if proc.next is not None and proc.next < stop:
            pending.insert(0, (target, proc.next, stop))
        proc.unit = None
        proc.stop()
        self.procs.remove(proc)

    def _hung(self, proc, pending):
        from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
        target, index = proc.unit[0], proc.next
        stack = proc.stack()
        where = _hang_key(stack)
        self._count(target, proc)
        self._failure(target, index, verdict.problem(
            "hang", "at %s" % where, "%s: no result within %gs (innermost: %s)" % (target, self.args.deadline, where),
            stack))
        proc.next = index + 1
        self._restart(proc, pending)

    def _died(self, proc, pending, why):
        from ansible_collections.bcd.devices.tests.fuzz import verdict  # pylint: disable=import-outside-toplevel
        if proc.unit is not None and proc.next is not None:
            target, index = proc.unit[0], proc.next
            self._count(target, proc)
            self._failure(target, index, verdict.problem("crash", target, "%s: %s" % (target, why[-300:]), why))
            proc.next = index + 1
            self._restart(proc, pending)
        else:
            proc.stop()
            if proc in self.procs:
                self.procs.remove(proc)
            if not any(p.ready for p in self.procs) and pending:
                raise RuntimeError("fuzz: no worker could start: %s" % why)


# -- what make fuzz runs ---------------------------------------------------------------------------------

def build_parser():
    parser = argparse.ArgumentParser(prog="hack/fuzz.py", description="Throw generated inputs at every parser "
                                     "root runs on the account's files, the helper's requests and the module's input.")
    parser.add_argument("--target", action="append", default=[], metavar="NAME",
                        help="a target (repeat for more; default: all of them, see --list)")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help="inputs per target (default %(default)s)")
    parser.add_argument("--seed", type=int, help="the run's seed (default: drawn, and printed)")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run only this input, and show it and its traceback")
    parser.add_argument("--dump", metavar="DIR", help="with --replay: write the input's files to DIR")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: the CPUs)")
    parser.add_argument("--deadline", type=float, default=DEADLINE, help="seconds an input may take (default %(default)s)")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="CPU seconds an input may cost")
    parser.add_argument("--max-mb", type=float, default=MAX_MB, help="MB of peak memory an input may add")
    parser.add_argument("--list", action="store_true", help="list the targets and what each throws at what")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the workers' directory (nodes, logs)")
    parser.add_argument("--verbose", action="store_true", help="print every failing input as it comes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser


def plan(targets, count):
    """Chunks ``(target, start, stop)`` of every target, interleaved so that the workers share each one."""
    per = []
    for name, target in targets.items():
        total = max(1, int(round(count * target.share)))
        per.append([(name, start, min(total, start + CHUNK)) for start in range(0, total, CHUNK)])
    units = []
    while any(per):
        for chunks in per:
            if chunks:
                units.append(chunks.pop(0))
    return units


def run(targets=None, count=DEFAULT_COUNT, seed=0, jobs=1, deadline=DEADLINE, max_seconds=MAX_SECONDS,
        max_mb=MAX_MB, out=None):
    """A run in this process's control (its workers are processes): the ``Report``. For tests."""
    argv = ["--count", str(count), "--seed", str(seed), "--jobs", str(jobs), "--deadline", str(deadline),
            "--max-seconds", str(max_seconds), "--max-mb", str(max_mb)]
    for name in targets or ():
        argv += ["--target", name]
    args = build_parser().parse_args(argv)
    chosen = _chosen(args)
    workdir = scratch()
    try:
        return Campaign(args, workdir, out or open(os.devnull, "w")).run(plan(chosen, args.count), args.jobs)  # pylint: disable=consider-using-with
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def scratch():
    """Where the workers' nodes go: a tmpfs (``/dev/shm``) when there is one with room, where the fsyncs of
    the code under test cost nothing; else the temporary directory."""
    try:
        info = os.statvfs("/dev/shm")
        if os.access("/dev/shm", os.W_OK | os.X_OK) and info.f_bavail * info.f_frsize > (2 << 30):
            return tempfile.mkdtemp(prefix="bcd-fuzz-", dir="/dev/shm")
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="bcd-fuzz-")


def _chosen(args):
    every = all_targets()
    unknown = [name for name in args.target if name not in every]
    if unknown:
        raise SystemExit("fuzz: no target %s; --list shows them" % ", ".join(unknown))
    return dict((name, every[name]) for name in (args.target or list(every)))


def _table(report, chosen, out):
    out.write("%-22s %8s %9s %9s\n" % ("target", "inputs", "failures", "seconds"))
    for name in chosen:
        out.write("%-22s %8d %9d %9.1f\n" % (name, report.counts.get(name, 0), len(report.distinct(name)),
                                             report.seconds.get(name, 0.0)))


def _replay(args, chosen, workdir, out):
    if len(chosen) != 1:
        raise SystemExit("fuzz: --replay needs exactly one --target")
    name = list(chosen)[0]
    campaign = Campaign(args, workdir, out)
    report = campaign.run([(name, args.replay, args.replay + 1)], 1, replay=True,
                          dump=os.path.abspath(args.dump) if args.dump else None)
    if not report.failures:
        out.write("%s #%d (seed %d): no failure\n" % (name, args.replay, args.seed))
        return 0
    for failure in report.failures:
        out.write("%s #%d (seed %d): %s\n  %s\n%s\n"
                  % (name, args.replay, args.seed, failure.key, failure.summary, failure.detail))
    return 1


def main(argv=None, out=sys.stdout):
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    if args.list:
        for name, target in all_targets().items():
            out.write("%-22s %s\n" % (name, target.doc))
        return 0
    chosen = _chosen(args)
    workdir = scratch()
    try:
        if args.replay is not None:
            return _replay(args, chosen, workdir, out)
        out.write("fuzz: seed %d, %d inputs a target (%s), %d jobs, deadline %gs, bound %gs CPU and %g MB an input\n"
                  % (args.seed, args.count, ", ".join("%s: %d" % (name, max(1, int(round(args.count * t.share))))
                                                      for name, t in chosen.items() if t.share != 1.0) or "each",
                     args.jobs, args.deadline, args.max_seconds, args.max_mb))
        out.flush()
        report = Campaign(args, workdir, out).run(plan(chosen, args.count), args.jobs)
        _table(report, chosen, out)
        for line in report.lines():
            out.write(line + "\n")
        total = sum(report.counts.values())
        out.write("fuzz: %d inputs in %.0fs, %d distinct failure%s (seed %d)\n" % (
            total, report.wall, len(report.distinct()), "" if len(report.distinct()) == 1 else "s", args.seed))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump({"seed": report.seed, "counts": report.counts, "seconds": report.seconds,
                           "wall": report.wall, "failures": [f.__dict__ for f in report.failures],
                           "lines": report.lines()}, handle, indent=2)
        return 1 if report.failures else 0
    finally:
        if args.keep:
            out.write("fuzz: the workers' nodes and logs are in %s\n" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["main", "run", "Report", "Failure", "all_targets", "replay_command"]

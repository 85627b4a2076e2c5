# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a target is, and what targets share: the node, ``bcd-holds`` run in-process, file inputs.

A target makes an input from a ``random.Random`` (``generate``: data only, so an input is made again
from its seed), puts the node back and plants the input (``prepare``, not timed), and throws it at the
code root runs (``run``, timed and watched): ``run`` returns None for a clean answer, or a failure made
by ``verdict.problem``; an exception outside ``verdict.ALLOWED`` escaping it is a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import random

from ansible_collections.bcd.devices.tests.fuzz import mutate, nodes, verdict


class Target(object):
    """One parser root runs, and how inputs reach it."""

    name = ""
    family = ""
    doc = ""
    share = 1.0  # of the run's --count

    def __init__(self):
        self.node = None
        self.snapshot = None
        self.workdir = None

    def setup(self, workdir):
        """Once per worker, before the first input: a node of the target's own under ``workdir``."""
        self.workdir = os.path.join(workdir, self.name)
        self.node = nodes.build_node(os.path.join(self.workdir, "node"))
        self.extend_node()
        self.snapshot = nodes.Snapshot(self.node.base)

    def extend_node(self):
        """What the target adds to the node before it is recorded."""

    def generate(self, rng):
        raise NotImplementedError

    def prepare(self, item):
        """The node as built, then the input planted in it."""
        self.snapshot.restore()
        self.plant(item)

    def plant(self, item):
        """Write the input where root will read it."""

    def run(self, item):
        raise NotImplementedError

    def describe(self, item):
        return verdict.one_line(repr(item), 400)

    def dump(self, item, directory):
        """The input's files in ``directory``, for a person to look at."""
        with open(os.path.join(directory, "input.txt"), "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(repr(item) + "\n")


# -- bcd-holds, in this process -----------------------------------------------------------------

# The command lines root runs, and the exit codes each documents (entry/cli.py's docstring).
COMMANDS = {
    "status": (["status"], (0, 2)),
    "status-json": (["status", "--json"], (0, 2)),
    "busy": (["busy", nodes.GPU_C, nodes.GPU_E, nodes.GPU_D, "--lock-timeout", "2"], (0, 2, 3)),
    "busy-json": (["busy", nodes.GPU_B, "--json", "--lock-timeout", "2"], (0, 2, 3)),
    "metrics": (["metrics"], (0, 2)),
    "doctor": (["doctor"], (0, 1, 2)),
    "events": (["events"], (0, 2)),
    "events-ack": (["events", "--ack-through", "3"], (0, 2)),
    "converge-stored": (["converge", "--stored"], (0, 2, 75)),
    "converge-check": (["converge", "--stored", "--check"], (0, 2, 75)),
    "converge-retry": (["converge", "--stored", "--retry-only"], (0, 2, 75)),
    "converge-spec": (["converge", "--spec", "{spec}"], (0, 2, 75)),
}
EX_ERROR = 2
_PARSER = []  # bcd-holds' argument parser, made once


def run_command(node, name, spec=None, fakehw=None):
    """``bcd-holds <name>`` against ``node`` as ``main`` runs it: ``(failure or None, rc, output)``. An
    exception in ``ALLOWED`` is what ``main`` prints on one line with exit 2; any other propagates."""
    from ansible_collections.bcd.devices.plugins.module_utils.entry import cli  # pylint: disable=import-outside-toplevel

    words, codes = COMMANDS[name]
    argv = [word.replace("{spec}", spec or "") for word in words] + [
        "--root", node.root, "--fakehw", fakehw or node.fakehw, "--state-dir", nodes.STATE_DIR]
    if not _PARSER:
        _PARSER.append(cli.build_parser())
    args = _PARSER[0].parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.COMMANDS[args.command](args)
        except Exception as exc:  # pylint: disable=broad-except
            if not verdict.clean(exc):
                raise
            rc = EX_ERROR
            err.write("ERROR: %s\n" % exc)
    output = out.getvalue() + err.getvalue()
    if rc not in codes:
        return verdict.problem("exit", "%s rc %s" % (name, rc), "bcd-holds %s exited %s, not one of %s: %s" % (
            " ".join(words), rc, ", ".join(str(c) for c in codes), output[-300:]), output), rc, output
    found = verdict.control_characters(output)  # every command's output is data (issue 22, item 6)
    if found:
        return verdict.problem("escape", name, "bcd-holds %s printed %s" % (
            " ".join(words), ", ".join(repr(c) for c in found[:6])), output), rc, output
    return None, rc, output


# -- a file root reads ----------------------------------------------------------------------------

FS_SHARE = 0.04  # of a file target's inputs: something else than a file where it should be
MANY_SHARE = 0.001  # a crowded directory (slow to make and to clear: a few per run)
MANY_FILES = 20000


def file_input(rng, valid, mutate_content, fs_attacks=tuple(mutate.FS_ATTACKS)):
    """An input for a file whose valid content is ``valid``: mostly ``mutate_content(rng, valid)``, at times
    an attack of the file system in its place, or a crowded directory."""
    roll = rng.random()
    if roll < MANY_SHARE:
        return {"mode": "many", "count": MANY_FILES, "data": valid}
    if roll < MANY_SHARE + FS_SHARE:
        return {"mode": "fs", "attack": rng.choice(sorted(fs_attacks)), "fs_seed": rng.getrandbits(32)}
    return {"mode": "content", "data": mutate_content(rng, valid)}


def plant_file(item, path, cap, valid, outside, owner):
    """Put the input ``item`` (``file_input``) at ``path``, owned by ``owner`` (the directory's)."""
    mode = item["mode"]
    if mode == "content":
        nodes._remove(path)  # pylint: disable=protected-access
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, item["data"])
        finally:
            os.close(fd)
        if os.geteuid() == 0 and owner is not None:
            os.chown(path, owner, owner)
    elif mode == "fs":
        mutate.fs_attack(random.Random(item["fs_seed"]), item["attack"], path,
                         mutate.FsContext(cap, valid, outside, owner))
    elif mode == "many":
        mutate.plant_many(os.path.dirname(path), item["count"])
    elif mode == "absent":
        nodes._remove(path)  # pylint: disable=protected-access


def describe_file(item):
    if item["mode"] == "content":
        data = item["data"]
        return "%d bytes: %s%s" % (len(data), verdict.one_line(repr(data[:300]), 320), "..." if len(data) > 300 else "")
    if item["mode"] == "fs":
        return "the file system: %s (fs seed %d)" % (item["attack"], item["fs_seed"])
    if item["mode"] == "many":
        return "%d files planted beside it" % item["count"]
    return item["mode"]


def json_content(rng, valid, keys=(), lines=False):
    """Mutated JSON text from ``valid`` (bytes): structure-aware, then (at times) byte-level."""
    import json  # pylint: disable=import-outside-toplevel

    roll = rng.random()
    if lines:
        rows = [row for row in valid.split(b"\n") if row.strip()]
        if roll < 0.5 and rows:
            at = rng.randrange(len(rows))
            rows[at] = mutate.dumps(rng, mutate.mutate_value(rng, json.loads(rows[at]), True, keys)).replace(b"\n", b"")
            data = b"\n".join(rows) + b"\n"
            return mutate.mutate_bytes(rng, data) if rng.random() < 0.15 else data
        if roll < 0.8:
            return mutate.mutate_lines(rng, valid)
        return mutate.mutate_bytes(rng, valid)
    if roll < 0.7:
        data = mutate.dumps(rng, mutate.mutate_value(rng, json.loads(valid), True, keys))
        return mutate.mutate_bytes(rng, data) if rng.random() < 0.2 else data
    return mutate.mutate_bytes(rng, valid)


class SelfTest(Target):
    """The harness's own target (``BCD_FUZZ_SELFTEST=1``): each input is clean, a documented refusal, a
    traceback, or a hang on a FIFO no one writes, as its seed draws."""

    name = "selftest"
    family = "harness"
    doc = "the harness's own test: a clean input, a refusal, a traceback, a hang"

    def setup(self, workdir):
        self.workdir = os.path.join(workdir, self.name)
        os.makedirs(self.workdir, exist_ok=True)
        self.fifo = os.path.join(self.workdir, "fifo")
        if not os.path.exists(self.fifo):
            os.mkfifo(self.fifo)

    def prepare(self, item):
        pass

    def generate(self, rng):
        return {"what": rng.choice(("clean", "refused", "traceback", "hang"))}

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError  # pylint: disable=import-outside-toplevel
        if item["what"] == "refused":
            raise BcdError("a documented refusal")
        if item["what"] == "traceback":
            return {}["no such key"]
        if item["what"] == "hang":
            with open(self.fifo, "rb") as handle:  # no writer: open() waits forever
                handle.read()
        return None

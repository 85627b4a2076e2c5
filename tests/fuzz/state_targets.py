# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state directory's files (``state/store.py``, ``node/state_files.py``) against root's commands.

Each file is a target: its valid content (what the node's real passes left there) mutated, or the file
system's tricks in its place, then one of the ``bcd-holds`` commands that read it, run in-process as
root runs them (on a node whose state directory another account owns, when the fuzzer is root):
``status``, ``busy``, ``metrics``, ``doctor``, ``events``, ``events --ack-through``, ``converge
--stored`` (the timers' pass: the stored nodespec), ``--check``, ``--retry-only``, and ``converge --spec``
with a spec that binds a new hold (so the journal is appended to and the node key signs).
``nodespec.json``'s inputs also go to ``converge --spec`` as the spec file itself.
"""

from __future__ import annotations

import json
import os

from ansible_collections.bcd.devices.tests.fuzz import base, mutate, nodes

LOADS = ("status", "busy", "metrics", "doctor", "events-ack", "converge-stored", "converge-spec")
KEYS_LEDGER = ("bound", "unfinished_releases", "failures", "vfio", "renders", "observed_generation", "last_state",
               "journal_seq", "generation", "device_ids", "limits", "reason", "message", "unfinished")
KEYS_EVENT = ("seq", "type", "body", "signature", "node_id", "boot_id", "allocation_id", "generation", "device_ids",
              "cdi_devices", "reason", "message", "time")
KEYS_NODESPEC = ("generation", "devices", "instances", "cdi_runtimes", "allocation_id", "binding", "limits", "env",
                 "instance_id", "gpus", "id", "device_class", "reservation_id")
KEYS_MISC = ("reason", "since", "releases", "device_ids", "generation", "taken_back", "state", "started",
             "finished", "duration_seconds")


def _int_text(rng, valid):
    """``events.seq``: a number as text, changed."""
    roll = rng.random()
    if roll < 0.4:
        return rng.choice([b"", b"0", b"-1", b"3", b"99", b" 2", b"2 ", b"+2", b"2.0", b"1e3", b"0x10", b"\xd9\xa3",
                           b"\xef\xbc\x92", b"2\n3\n", b"NaN", b"9" * 19, b"9" * 20, b"9" * 63, b"9" * 64, b"9" * 65,
                           b"7" * mutate.HUGE_DIGITS, b"\x00", b"null", b"[2]", b"2_000", b"\t2\r\n"])
    return mutate.mutate_bytes(rng, valid)


def _pem(rng, valid):
    """``node.key``: a PEM key, changed."""
    roll = rng.random()
    if roll < 0.3:
        body = bytes(rng.randrange(256) for _count in range(rng.choice([0, 16, 32, 48, 300])))
        import base64  # pylint: disable=import-outside-toplevel
        label = rng.choice([b"PRIVATE KEY", b"ENCRYPTED PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY",
                            b"OPENSSH PRIVATE KEY", b"PUBLIC KEY", b"CERTIFICATE", b""])
        return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label, base64.encodebytes(body).strip(), label)
    if roll < 0.4:
        return valid.replace(b"-----END", b"-----BEGIN", 1) if rng.random() < 0.5 else valid * rng.choice([2, 3])
    return mutate.mutate_bytes(rng, valid)


def _anything(rng, valid):
    """A file whose content is never read (the lock, the marker): any bytes."""
    return mutate.mutate_bytes(rng, valid or b"x")


class StateFileTarget(base.Target):
    family = "state files"

    def __init__(self, name, kind, commands, keys=()):
        super().__init__()
        self.name = name
        self.kind = kind
        self.commands = commands
        self.keys = keys
        self.doc = "%s in the state directory, then bcd-holds %s%s" % (
            name, ", ".join(commands), "; and as the spec file of converge --spec" if name == "nodespec.json" else "")
        self.valid = b""
        self.spec = None

    def extend_node(self):
        from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS  # pylint: disable=import-outside-toplevel

        self.cap = FILE_CAPS.get(self.name, 0)
        if self.cap < 0:
            self.cap = 0
        if self.name == "releasing.unreadable":  # the marker a pass leaves when releasing.json could not be read
            self.node.write(nodes.STATE_DIR + "/" + self.name, b"releasing.json.unreadable-20260101T000000Z\n",
                            owner=self.node.owner())
        path = self.node.state(self.name)
        with open(path, "rb") as handle:
            self.valid = handle.read()
        # a spec that binds a new hold: the journal is appended to, the key signs, events.seq is read
        self.spec = os.path.join(self.workdir, "spec.json")
        with open(self.spec, "w", encoding="utf-8") as handle:
            json.dump({"generation": nodes.GENERATION + 1, "devices": nodes.NEXT_DEVICES,
                       "instances": nodes.INSTANCES}, handle)

    def content(self, rng, valid):
        if self.kind == "json":
            return base.json_content(rng, valid, self.keys)
        if self.kind == "jsonl":
            return base.json_content(rng, valid, self.keys, lines=True)
        if self.kind == "int":
            return _int_text(rng, valid)
        if self.kind == "pem":
            return _pem(rng, valid)
        return _anything(rng, valid)

    def generate(self, rng):
        item = base.file_input(rng, self.valid, self.content)
        if self.kind in ("marker", "lock") and rng.random() < 0.1:
            item = {"mode": "absent"}
        item["command"] = rng.choice(self.commands)
        item["as_spec"] = self.name == "nodespec.json" and item["mode"] == "content" and rng.random() < 0.25
        return item

    def plant(self, item):
        if item["as_spec"]:  # the content is the spec file of converge --spec, not the stored one
            with open(self._spec_path(), "wb") as handle:
                handle.write(item["data"])
            return
        base.plant_file(item, self.node.state(self.name), self.cap, self.valid, self.node.outside, self.node.owner())

    def _spec_path(self):
        return os.path.join(self.workdir, "given-spec.json")

    def run(self, item):
        command = "converge-spec" if item["as_spec"] else item["command"]
        spec = self._spec_path() if item["as_spec"] else self.spec
        failure, _rc, _output = base.run_command(self.node, command, spec=spec)
        return failure

    def describe(self, item):
        where = "the spec file of converge --spec" if item["as_spec"] else self.name
        return "%s: %s; then bcd-holds %s" % (where, base.describe_file(item),
                                              "converge --spec" if item["as_spec"] else item["command"])

    def dump(self, item, directory):
        super().dump(item, directory)
        if item.get("data") is not None:
            with open(os.path.join(directory, self.name), "wb") as handle:
                handle.write(item["data"])


class StateDirTarget(base.Target):
    """The state directory itself: a link, a file, a FIFO in its place, no directory, a crowded one."""

    name = "state-dir"
    family = "state files"
    doc = "the state directory replaced (link, file, FIFO, socket, absent, crowded, another owner's), then every command"
    SHAPES = ("link-elsewhere", "link-device", "file", "fifo", "absent", "crowded", "foreign-owner", "mode-000",
              "link-to-copy")

    def generate(self, rng):
        return {"shape": rng.choice(self.SHAPES), "command": rng.choice(sorted(base.COMMANDS)),
                "fs_seed": rng.getrandbits(32)}

    def plant(self, item):
        import random  # pylint: disable=import-outside-toplevel
        import shutil  # pylint: disable=import-outside-toplevel

        path = self.node.state()
        shape = item["shape"]
        rng = random.Random(item["fs_seed"])
        if shape == "crowded":
            mutate.plant_many(path, rng.choice([2000, base.MANY_FILES]))
            return
        if shape == "foreign-owner":
            if os.geteuid() == 0:
                os.chown(path, 12345, 12345)
            return
        if shape == "mode-000":
            os.chmod(path, 0)
            return
        if shape == "link-to-copy":  # the account's directory moved aside, a link to it put in its place
            aside = path + ".real"
            os.rename(path, aside)
            os.symlink(os.path.basename(aside), path)
            return
        shutil.rmtree(path)
        if shape == "file":
            with open(path, "wb") as handle:
                handle.write(b"{}")
        elif shape == "absent":
            pass
        else:
            mutate.FS_ATTACKS[shape](rng, path, mutate.FsContext(0, b"", self.node.outside))

    def run(self, item):
        failure, _rc, _output = base.run_command(self.node, item["command"], spec=os.path.join(self.workdir, "spec.json"))
        return failure

    def extend_node(self):
        with open(os.path.join(self.workdir, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump({"generation": nodes.GENERATION + 1, "devices": nodes.NEXT_DEVICES}, handle)

    def describe(self, item):
        return "the state directory: %s (fs seed %d); then bcd-holds %s" % (
            item["shape"], item["fs_seed"], item["command"])


def targets():
    return [
        StateFileTarget("ledger.json", "json", LOADS, KEYS_LEDGER),
        StateFileTarget("releasing.json", "json", LOADS, KEYS_MISC),
        StateFileTarget("releasing.unreadable", "marker", ("status", "busy", "doctor", "converge-stored",
                                                           "converge-retry", "converge-spec")),
        StateFileTarget("nodespec.json", "json", ("converge-stored", "converge-check", "converge-retry", "status",
                                                  "doctor"), KEYS_NODESPEC),
        StateFileTarget("last-pass.json", "json", ("metrics", "doctor", "converge-retry"), KEYS_MISC),
        StateFileTarget("events.jsonl", "jsonl", LOADS + ("events",), KEYS_EVENT),
        StateFileTarget("events.seq", "int", ("events-ack", "events", "converge-spec")),
        StateFileTarget("node.key", "pem", ("status", "metrics", "doctor", "converge-spec", "events-ack")),
        StateFileTarget("maintenance.json", "json", LOADS, KEYS_MISC),
        StateFileTarget("health.json", "json", LOADS, KEYS_MISC),
        StateFileTarget("lock", "lock", ("busy", "events", "events-ack", "converge-stored", "converge-spec", "status")),
        StateDirTarget(),
    ]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root's output and work are bounded, not only its file count (issue 33, item 2), through the helper as the
tests serve it (``served_helper.ServedHelper``: the real ``listen`` and ``serve`` on a unix socket).

The reproductions, each as an operator would see it:

* Size, not count: one 64 KiB request of 740 slot atoms was a 0.95 MiB spec, and 64 of them left 60 MiB
  and 47 424 atoms in ``/etc/cdi``. Now a hold's atoms and those of all holds stay within a devices
  section's (``MAX_DEVICES``, ``MAX_ATOMS``), a spec within what a pass reads back, and the env files,
  which carry the account's text, within a section's bytes; the largest section the module accepts still
  binds through the helper.
* Work, not only what is kept: ``kube.look`` was never limited and every request read the node again
  (``nvidia-smi`` 609-764 times a second). Now every operation has a bucket per peer, and the node's
  hardware and the kubelet's pods are read once a ``VIEW_SECONDS`` whoever asks.
* Log lines: 304-382 a second. Now a peer's lines stop at a burst and a rate, and what was dropped is
  counted in one line a minute.
* Root's metrics took the account's label values (60 000 reasons, 60 000 series, 12.8 MiB every 30 s):
  now the reasons are the spec's and ``other``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import (
    MAX_ATOMS,
    MAX_SECTION_BYTES,
    parse_assignment,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.atoms import resolve_devices
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import section_size
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import SPEC_FILE_RE, read_hold, render_hold
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.limits import (
    LOG_BURST,
    LOOK_BURST,
    LOOK_PER_SECOND,
    RATE_CLASSES,
    RATED_OPS,
    RELEASE_OPS,
    RateLimits,
)
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.reading import MAX_ENV_BYTES, VIEW_SECONDS
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper.request import MAX_REQUEST
from ansible_collections.bcd.devices.plugins.module_utils.node import inventory as inventory_module
from ansible_collections.bcd.devices.plugins.module_utils.node import kubelet as kubelet_module
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import MAX_HOLD_SPEC_BYTES, FakeHwHost, RealHost
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import HelperWriter
from ansible_collections.bcd.devices.tests.unit.builders import slot
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.served_helper import ServedHelper

REPO = Path(__file__).resolve().parents[6]


@pytest.fixture
def served():
    """``served(host, **ServedHelper kwargs)``: a helper for ``host`` on a socket of its own, closed after."""
    running = []

    def start(host, **kwargs):
        directory = os.path.join(host.root + "-run")
        os.makedirs(directory, mode=0o755, exist_ok=True)
        helper = ServedHelper(host, os.path.join(directory, "helper-%d.sock" % len(running)), **kwargs)
        running.append(helper)
        return helper

    yield start
    for helper in running:
        helper.close()


def ask(helper, message):
    """One request on one connection, as a peer sends it; the reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(20)
        connection.connect(helper.socket)
        connection.sendall((json.dumps(message) + "\n").encode())
        return json.loads(connection.makefile("rb").readline())


def slots(gpu, first, count):
    return [{"id": "%s/s%d" % (gpu, number), "device_class": "gpu.slot"} for number in range(first, first + count)]


def hold(allocation_id, devices, env=(), limits=None):
    return {"allocation_id": allocation_id, "reservation_id": "r-%s" % allocation_id, "generation": 1,
            "binding": "BINDING_HOLD", "devices": devices, "limits": limits, "env": list(env), "runtimes": []}


def on_disk(node, directory="/etc/cdi"):
    """``(files, bytes, atoms)`` of the bcd specs in ``directory`` of ``node``, as root reads them back."""
    path = node.path(directory)
    names = [name for name in os.listdir(path) if SPEC_FILE_RE.fullmatch(name)] if os.path.isdir(path) else []
    size = sum(os.path.getsize(os.path.join(path, name)) for name in names)
    atoms = sum(len(read_hold(SPEC_FILE_RE.fullmatch(name).group(1), name,
                              Path(path, name).read_bytes()).atoms) for name in names)
    return len(names), size, atoms


# -- what root keeps: atoms and bytes -----------------------------------------------------------------

def test_wide_holds_stop_at_the_atoms_a_section_may_hold_and_the_bytes_they_make(make_node, served):
    """The reproduction: 64 requests of 740 slot atoms each (a request line's worth), with NVIDIA's spec of a
    real node (toolkit 1.17.8, its edits on every atom). Five fit in the 4096 atoms a section may hold; the
    59 after them are refused with the numbers, and /etc/cdi keeps 3 700 atoms in 5 specs, not 47 424 in 64."""
    node = make_node(vendor="full")
    helper = served(node.host())
    width = 740
    requests = [{"op": "hold.write", "kind": "cdi", "hold": hold("w%d" % index, slots(GPU_A, index * width, width))}
                for index in range(64)]
    assert all(len(json.dumps(request)) <= MAX_REQUEST for request in requests)
    replies = [ask(helper, request) for request in requests]
    fit = MAX_ATOMS // width
    assert replies[:fit] == [{"ok": True}] * fit
    assert replies[fit:] == [
        {"ok": False, "retryable": True,
         "error": "quota: %d atoms would take the holds on the node to %d, past the %d atoms a pass honours (%d taken "
                  "by the other holds); /etc/cdi/bcd-w%d.json is not written until they name fewer"
                  % (width, (fit + 1) * width, MAX_ATOMS, fit * width, index)}
        for index in range(fit, 64)]
    files, size, atoms = on_disk(node)
    specs = [os.path.getsize(node.path("/etc/cdi/bcd-w%d.json" % index)) for index in range(fit)]
    assert (files, atoms) == (fit, fit * width) and size == sum(specs)
    assert all(0.9 * (1 << 20) < spec < 1 << 20 for spec in specs)  # 0.95 MiB each, as in the issue: 4.8 MiB, not 60
    # the refusal is the node's, not the request's: once a hold is released, the next one fits
    assert ask(helper, {"op": "hold.remove", "kind": "cdi", "allocation_id": "w0"}) == {"ok": True}
    assert ask(helper, requests[fit]) == {"ok": True}
    # an allocation written again replaces what its own spec named
    assert ask(helper, {"op": "hold.write", "kind": "cdi", "hold": hold("w1", slots(GPU_A, width, width))}) == \
        {"ok": True}
    # root counts the same: the bound is the node's (the helper's peer here is root)
    assert ask(helper, {"op": "hold.write", "kind": "cdi", "hold": hold("x", slots(GPU_B, 0, 500))})["error"] \
        .startswith("quota: 500 atoms would take the holds on the node to 4200")
    # env files count their GPUs, and specs in /var/run/cdi count as in /etc/cdi (runtimes load both)
    os.makedirs(node.path("/var/run/cdi"), exist_ok=True)
    os.rename(node.path("/etc/cdi/bcd-w1.json"), node.path("/var/run/cdi/bcd-w1.json"))
    assert ask(helper, {"op": "hold.write", "kind": "allocation-env", "hold": hold("x", slots(GPU_B, 0, 400))}) == \
        {"ok": False, "retryable": True,
         "error": "quota: 400 atoms would take the holds on the node to 4100, past the 4096 atoms a pass honours "
                  "(3700 taken by the other holds); /run/bcd/allocations/x.env is not written until they name fewer"}


def test_env_files_of_the_accounts_text_stop_at_a_sections_bytes(make_node, served):
    """Env lines are the account's text, and an env file carries them: 4 000-character lines, 15 a hold (60 KiB
    a request), one slot each. The env files stop at the 4 MiB a devices section may hold."""
    node = make_node()
    helper = served(node.host())
    env = ["K%d=%s" % (line, "v" * 3990) for line in range(15)]
    replies = [ask(helper, {"op": "hold.write", "kind": "allocation-env",
                            "hold": hold("e%02d" % index, slots(GPU_C, index, 1), env=env)}) for index in range(80)]
    written = [reply for reply in replies if reply == {"ok": True}]
    each = os.path.getsize(node.path("/run/bcd/allocations/e00.env"))  # each the same: ids of one length
    assert len(written) == MAX_ENV_BYTES // each and replies[:len(written)] == written
    taken = len(written) * each
    assert replies[len(written)] == {
        "ok": False, "retryable": True,
        "error": "quota: %d bytes would take the env files in /run/bcd/allocations to %d, past the %d bytes of a "
                 "devices section (%d taken by the other env files); /run/bcd/allocations/e%02d.env is not written "
                 "until they take fewer" % (each, taken + each, MAX_SECTION_BYTES, taken, len(written))}
    sizes = [os.path.getsize(os.path.join(node.path("/run/bcd/allocations"), name))
             for name in os.listdir(node.path("/run/bcd/allocations"))]
    assert len(sizes) == len(written) and sum(sizes) <= MAX_ENV_BYTES == MAX_SECTION_BYTES
    # an allocation's own env file written again is counted once
    assert ask(helper, {"op": "hold.write", "kind": "allocation-env",
                        "hold": hold("e00", slots(GPU_C, 0, 1), env=env)}) == {"ok": True}


def test_a_spec_past_what_a_pass_reads_back_is_not_written(make_node, served):
    """A vendor spec with long per-device edits: 200 slots of its GPU would make a spec over the 2 MiB a pass
    reads back (past them it would set the spec aside as damaged); root refuses it, saying so."""
    links = []
    for number in range(400):
        links += ["--link", "../card1::/dev/dri/by-path/pci-0000:52:00.%d-card-with-a-long-name" % number]
    device_edits = {"deviceNodes": [{"path": "/dev/nvidia0"}],
                    "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                               "args": ["nvidia-cdi-hook", "create-symlinks"] + links}]}
    vendor = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
              "devices": [{"name": GPU_A, "containerEdits": device_edits}],
              "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}}
    node = make_node(vendor=vendor)
    helper = served(node.host())
    reply = ask(helper, {"op": "hold.write", "kind": "cdi", "hold": hold("big", slots(GPU_A, 0, 200))})
    found = re.fullmatch(r"quota: the spec of big would be ([0-9]+) bytes for its 200 atoms, past the %d bytes a "
                         r"pass reads back; /etc/cdi/bcd-big.json is not written" % MAX_HOLD_SPEC_BYTES,
                         reply.get("error", ""))
    assert found and int(found.group(1)) > MAX_HOLD_SPEC_BYTES and reply["retryable"] is True, reply
    assert not os.path.exists(node.path("/etc/cdi/bcd-big.json"))
    assert ask(helper, {"op": "hold.write", "kind": "cdi", "hold": hold("small", slots(GPU_A, 0, 20))}) == {"ok": True}


def test_a_section_with_all_the_atoms_the_module_accepts_binds_through_the_helper(make_node, served, monkeypatch):
    """The bounds are the module's: a pass of 4 096 atoms (the section's most; 8 holds of 512 slots, what a
    request line carries) with NVIDIA's spec of a real node binds through the helper, every atom at once.
    (The most holds, 512, are bound through a helper process in test_quotas.py.)"""
    node = make_node(vendor="full")
    helper = served(node.host())
    each = MAX_ATOMS // 8
    devices = [slot("h%d" % index, *["%s/s%d" % (GPU_A, index * each + number) for number in range(each)],
                    reservation_id="r%d" % index) for index in range(8)]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the pass's side: root's work through the helper
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(helper.socket)))
    result = run_pass(host, 1, devices, state_dir=node.state_dir, lock_timeout=5)
    assert result.section["state"] == "CONVERGED", result.errors[:3]
    files, size, atoms = on_disk(node)
    assert (files, atoms) == (8, MAX_ATOMS)
    assert 5 << 20 < size < 6 << 20  # 1.3 KiB an atom: the vendor's edits on each (its own data, not the account's)
    assert not [line for line in helper.log if "quota" in line or "rate limited" in line]
    # and not one atom more, whoever asks
    assert ask(helper, {"op": "hold.write", "kind": "cdi", "hold": hold("h8", slots(GPU_B, 0, 1))})["error"] \
        .startswith("quota: 1 atoms would take the holds on the node to 4097")


ENV_KEY = st.from_regex(r"\A[A-Z][A-Z0-9_]{0,30}\Z").filter(lambda key: not key.startswith(("BCD_", "NVIDIA_")))


@st.composite
def entries(draw):
    """An entry of a devices section as the module takes it: any allocation and reservation id, whole GPUs, MIG
    instances or slots, limits or none, env lines up to the longest."""
    kind = draw(st.sampled_from(["gpu", "mig", "slot"]))
    if kind == "gpu":
        devices = [{"id": gpu} for gpu in draw(st.lists(st.sampled_from([GPU_A, GPU_B, GPU_C]), min_size=1,
                                                        max_size=3, unique=True))]
    elif kind == "mig":
        devices = [{"id": "%s/gi1/ci0" % GPU_A, "device_class": "gpu.mig"}]
    else:
        devices = [{"id": "%s/s%d" % (GPU_B, number), "device_class": "gpu.slot"}
                   for number in draw(st.lists(st.integers(0, 99999), min_size=1, max_size=40, unique=True))]
    entry = {"allocation_id": draw(st.from_regex(r"\A[A-Za-z0-9_]{1,80}\Z")), "binding": "BINDING_HOLD",
             "devices": devices}
    if draw(st.booleans()):
        entry["reservation_id"] = draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=256))
    if draw(st.booleans()):
        entry["limits"] = {"cpu_millis": draw(st.integers(1, 1 << 20))}
    lines = draw(st.lists(st.tuples(ENV_KEY, st.integers(0, 4000)), max_size=6))
    if lines:
        entry["env"] = ["%s=%s" % (key, "v" * length) for key, length in lines]
    return entry


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=entries())
def test_an_env_file_is_never_larger_than_its_entry_as_the_module_counts_a_section(node, entry):
    """Why ``MAX_ENV_BYTES`` is a section's bytes: an entry's env file, as root renders it (with the MPS line a
    slot may add), is never larger than what ``section_size`` counts for the entry, so the env files of any
    section the module accepts (at most ``MAX_SECTION_BYTES`` as counted) fit, and a pass is never refused."""
    assignment = parse_assignment(entry)
    inventory = node.host().inventory()
    _spec, env = render_hold(assignment, resolve_devices(assignment.devices, inventory), 1, None, mps=True)
    assert len(env) <= section_size([entry]) - section_size([])


# -- what root does: rates, readings of the node, log lines ---------------------------------------------

class Runner:
    """``nvidia-smi`` as a real node's runner sees it: one GPU listed; each call counted."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if list(argv[:2]) == ["nvidia-smi", "-L"]:
            return 0, "GPU 0: NVIDIA H100 (UUID: %s)\n" % GPU_A, ""
        return 127, "", "%s: not found" % argv[0]

    def listings(self):
        return sum(1 for argv in self.calls if argv[:2] == ["nvidia-smi", "-L"])


@pytest.fixture
def real_node(tmp_path, monkeypatch):
    """A real host's root under tmp_path, ``nvidia-smi`` on PATH answering through a counting runner, no NVML,
    no virsh, and a kubelet whose every ask is counted (its pod-resources answer: no pods)."""
    root = tmp_path / "root"
    root.mkdir()
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 1\n")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setattr(inventory_module, "HAS_PYNVML", False)
    asked = []
    monkeypatch.setattr(kubelet_module, "list_pod_devices", lambda *args: asked.append(args) or [])
    runner = Runner()
    return RealHost(str(root), runner=runner), runner, asked


def flood(helper, message, count):
    """``count`` of ``message`` one after another, each on its connection: ``(replies, seconds)``."""
    start = time.monotonic()
    replies = [ask(helper, message) for _count in range(count)]
    return replies, time.monotonic() - start


def test_a_kube_look_flood_costs_root_one_reading_a_second_and_the_account_its_bucket(real_node, served):
    """The reproduction: kube.look in a loop. Root (never limited) is answered every time, yet nvidia-smi lists
    the GPUs and the kubelet is asked once a VIEW_SECONDS, not once a request; the account (the helper's limits
    with root not exempt, as they are for bcd) gets its burst of 32 and then 2 a second, refused with the wait."""
    host, runner, asked = real_node
    helper = served(host)
    replies, seconds = flood(helper, {"op": "kube.look"}, 300)
    assert all(reply["ok"] is True and reply["view"]["held"] == [] for reply in replies)
    readings = 1 + int(seconds / VIEW_SECONDS) + 1
    assert 1 <= runner.listings() <= readings and 1 <= len(asked) <= readings, (seconds, runner.listings(), asked)
    assert len(helper.log) == 300 and set(helper.log) == {"uid 0: kube.look "}

    account = served(host, limiter=RateLimits(exempt=()))
    replies, seconds = flood(account, {"op": "kube.look"}, 200)
    answered = [reply for reply in replies if reply.get("ok")]
    refused = [reply for reply in replies if not reply.get("ok")]
    assert LOOK_BURST <= len(answered) <= LOOK_BURST + seconds * LOOK_PER_SECOND + 1
    assert replies[:LOOK_BURST] == answered[:LOOK_BURST]
    assert all(re.fullmatch(r"rate limited: uid 0 asked for more than 32 of kube\.look, mig\.look at once, or more than 2 a "
                            r"second; try again in 0\.[0-9]{2}s", reply["error"]) and reply["retryable"] is True
               for reply in refused), refused[:2]
    # refused before the node is read: the lines and readings of the answered ones only
    assert account.log.count("uid 0: kube.look ") == len(answered)
    assert len([line for line in account.log if "rate limited" in line]) == 1  # once a minute, not once a refusal
    # the other buckets are the peer's own: a look spent, a release still goes
    assert ask(account, {"op": "slice.stop", "allocation_id": "a1"}) == {"ok": True}


def test_a_flood_of_releases_logs_a_burst_then_one_line_a_minute_with_what_was_dropped(node, served):
    """The reproduction of 304-382 lines a second: the account's answered requests log a line each up to a
    whole pass's worth, then 4 a second; the rest are counted, and said in one line once the minute is over."""
    now = [1000.0]
    helper = served(node.host(), log_clock=lambda: now[0])
    extra = 150
    replies, _seconds = flood(helper, {"op": "hold.remove", "kind": "cdi", "allocation_id": "gone"},
                              LOG_BURST + extra)
    assert replies == [{"ok": True}] * (LOG_BURST + extra)  # root's requests, all carried out
    assert helper.log == ["uid 0: hold.remove cdi gone"] * LOG_BURST
    now[0] += 59.0
    time.sleep(0.8)  # the serve loop flushes twice a second
    assert len(helper.log) == LOG_BURST  # not before the minute is over
    now[0] += 1.0
    deadline = time.monotonic() + 5
    while len(helper.log) == LOG_BURST and time.monotonic() < deadline:
        time.sleep(0.05)
    assert helper.log[LOG_BURST:] == ["uid 0: %d similar lines dropped in the last 60 s" % extra]
    # the minute is over and the bucket refilled: lines again
    assert ask(helper, {"op": "hold.remove", "kind": "cdi", "allocation_id": "gone"}) == {"ok": True}
    assert helper.log[-1] == "uid 0: hold.remove cdi gone"


def test_a_pass_whose_releases_are_rate_limited_retries_and_converges(node, served, monkeypatch):
    """The pass's side: a release refused for the rate is retried like a failed write (retryable, the section
    PROGRESSING naming it), and goes through once the bucket refills."""
    now = [500.0]
    classes = [(ops, 1 if ops == RELEASE_OPS else burst, rate) for ops, burst, rate in RATE_CLASSES]
    helper = served(node.host(), limiter=RateLimits(classes=classes, exempt=(), clock=lambda: now[0]))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    host = FakeHwHost(node.root, node.fakehw, writer=HelperWriter(HelperClient(helper.socket)))
    bound = run_pass(host, 1, [slot("a1", GPU_A + "/s0")], state_dir=node.state_dir, lock_timeout=5)
    assert bound.section["state"] == "CONVERGED"
    cut = run_pass(host, 2, [], state_dir=node.state_dir, lock_timeout=5)
    assert cut.section["state"] == "PROGRESSING" and cut.retry
    assert any(re.search(r"the root helper refused hold\.remove: rate limited: uid %d asked for more than 1 of "
                         r"hold\.remove, slice\.stop at once" % os.getuid(), error) for error in cut.errors), cut.errors
    now[0] += 60  # the bucket refills (32 a second, 1 at most)
    done = None
    for _attempt in range(3):  # one release request a pass gets through this bucket
        done = run_pass(host, 2, [], state_dir=node.state_dir, lock_timeout=5)
        now[0] += 60
        if done.section["state"] == "CONVERGED":
            break
    assert done.section["state"] == "CONVERGED", done.errors
    assert not os.path.exists(node.path("/etc/cdi/bcd-a1.json"))
    assert not os.path.exists(node.path("/run/bcd/allocations/a1.env"))


# -- root's metrics ---------------------------------------------------------------------------------------

def test_sixty_thousand_reasons_in_the_ledger_make_eight_series_not_sixty_thousand(node, tmp_path):
    """The reproduction: the account's ledger with 60 000 distinct reasons. The .prom file root writes every
    30 s has a series for each reason of the spec and one for the rest, and stays a few KiB."""
    failures = dict(("a%d" % index, {"generation": 1, "reason": "made-up-%d" % index}) for index in range(60000))
    failures["r1"] = {"generation": 1, "reason": "overlap"}
    os.makedirs(node.state(), exist_ok=True)
    Path(node.state("ledger.json")).write_text(json.dumps({"failures": failures}))
    target = tmp_path / "bcd.prom"
    assert main(["metrics", "--textfile", str(target), "--root", node.root, "--fakehw", node.fakehw]) == EX_OK
    text = target.read_text()
    series = [(sample.labels["reason"], sample.value) for family in text_string_to_metric_families(text)
              if family.name == "bcd_refusals" for sample in family.samples]
    assert series == [(reason, 1.0 if reason == "overlap" else 0.0) for reason in REASONS] + [("other", 60000.0)]
    assert len(text) < 4096 and "made-up" not in text


# -- the docs say the numbers the code uses ------------------------------------------------------------------

def test_security_md_says_the_bounds_and_rates_the_helper_applies():
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    section = " ".join(text.split("## Quotas on what root creates", 1)[1].split("\n## ", 1)[0].split())
    for ops, burst, rate in RATE_CLASSES:
        assert "%s at once, then %g a second" % (format(burst, ","), rate) in section, ops
        assert all("`%s`" % op in section for op in ops), ops
    for number in (MAX_ATOMS, MAX_HOLD_SPEC_BYTES >> 20, MAX_SECTION_BYTES >> 20, LOG_BURST):
        assert format(number, ",") in section or str(number) in section, number
    assert "`%s`" % RATED_OPS[0] in section and "every %g s" % VIEW_SECONDS in section

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Output is data, not terminal control (issue 22, item 6).

Hostile text is planted in each place bcd reads text another party writes: the state directory
(the ledger, the journal, maintenance.json: the unprivileged account's), the annotations of a hold
spec in /etc/cdi, the fakehw file (pod and VM names, as the kubelet and libvirt would give them)
and the modules' input. Then the real commands run (``bcd-holds status|busy|doctor|events|converge|
metrics`` through ``cli.main``, the modules through their test harness), and no control, format or
separator character may reach stdout, stderr, a module's ``msg``, its warnings or its diff: each is
there in its escaped form (``\\x1b``, ``\\u202e``). ``support.text.printable``, the one function that
does it, is checked over the whole code space.
"""

from __future__ import annotations

import json
import random
import string

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import (
    ANN_ALLOCATION,
    ANN_DEVICE_ID,
    ANN_GENERATION,
    ANN_RESERVATION,
    KIND,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable, printable_lines
from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_BUSY, EX_CHECK, EX_ERROR, EX_OK
from ansible_collections.bcd.devices.plugins.module_utils.entry.status import WIDTH, status_table
from ansible_collections.bcd.devices.plugins.modules import events as events_module
from ansible_collections.bcd.devices.plugins.modules import gpu_busy, holds, holds_info, maintenance
from ansible_collections.bcd.devices.tests.unit.builders import hold, kube
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, GPU_C
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli, write_spec
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds_info import call, warnings

# What an attacker writes: erase the line and return to its start (then draw what they like), a C1
# CSI (ESC [ in one byte), a right-to-left override, an isolate, zero-width characters, a line separator.
REDRAW = "\x1b[2K\r"
C1_CSI = "\x9b2K"
BIDI = "\u202e\u2066"
HIDDEN = "\u200b\ufeff"
LINE_SEP = "\u2028"

# Each character the issue names, with the escaped form it must be shown as.
NAMED = ([chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xa0)]
         + [chr(c) for c in range(0x202a, 0x202f)] + [chr(c) for c in range(0x2066, 0x206a)]
         + [chr(c) for c in range(0x200b, 0x2010)] + ["\u2028", "\u2029", "\ufeff"])


def escaped(text):
    """What ``text`` looks like once escaped (the form the tests look for)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def assert_inert(text, where="output", newlines=True):
    """No character of ``text`` is terminal control or reorders it: all printable, with newlines between lines
    where ``text`` is several (a ``msg`` or a warning is one line)."""
    bad = sorted(set(ch for ch in text if not (newlines and ch == "\n") and not ch.isprintable()))
    assert not bad, "%s carries %s: %r" % (where, [ascii(ch) for ch in bad], text[:2000])


# -- the function -------------------------------------------------------------------------------

@pytest.mark.parametrize("ch", NAMED, ids=lambda ch: "U+%04X" % ord(ch))
def test_each_named_control_and_format_character_is_escaped_visibly(ch):
    shown = printable("a%sb" % ch)
    assert ch not in shown
    assert shown == "a%sb" % ascii(ch)[1:-1]
    assert shown.isascii() and shown.isprintable()


def test_the_escaped_forms_are_the_ones_a_reader_knows():
    assert printable(REDRAW + "x") == "\\x1b[2K\\rx"
    assert printable(C1_CSI) == "\\x9b2K"
    assert printable(BIDI + HIDDEN + LINE_SEP) == "\\u202e\\u2066\\u200b\\ufeff\\u2028"
    assert printable("\t\n\x00\x7f") == "\\t\\n\\x00\\x7f"
    assert printable("\udcff") == "\\udcff"  # an undecodable byte of a file name (surrogateescape)
    assert printable("\U000e0041") == "\\U000e0041"  # a tag character (format)


def test_printable_text_is_unchanged_ascii_and_beyond():
    ascii_printable = "".join(chr(c) for c in range(0x20, 0x7f))
    assert printable(ascii_printable) == ascii_printable
    for text in ("GPU-5f1c2a90…000001", "Grafikkarte für Übungen", "显卡维护", "a\\x1b is text", ""):
        assert printable(text) == text


def test_no_control_or_format_character_of_the_whole_code_space_survives():
    everything = "".join(chr(c) for c in range(0x110000))
    shown = printable(everything)
    assert shown.isprintable()
    # each code point alone: itself when printable, else its ascii() escape, which is printable ASCII
    for code in list(range(0x3000)) + list(range(0x3000, 0x110000, 97)) + [ord(ch) for ch in NAMED]:
        ch = chr(code)
        one = printable(ch)
        if ch.isprintable():
            assert one == ch
        else:
            assert one == ascii(ch)[1:-1] and one.isascii() and one.isprintable() and one.startswith("\\")


def test_escaping_twice_changes_nothing_and_lines_keep_their_newlines():
    rng = random.Random(22)
    alphabet = NAMED + list(string.printable) + ["é", "显", "\U0001f600", "\\"]
    for _round in range(500):
        text = "".join(rng.choice(alphabet) for _round in range(rng.randint(0, 40)))
        once = printable(text)
        assert printable(once) == once and once.isprintable()
        lines = printable_lines(text)
        assert printable_lines(lines) == lines
        assert lines.split("\n") == [printable(line) for line in text.split("\n")]


def test_a_limit_cuts_between_escapes_never_inside_one():
    assert printable("x" * 10, 8) == "xxxxx..."
    assert printable("\x1b" * 10, 10) == "\\x1b..."  # a second \x1b would pass the room left for "..."
    rng = random.Random(6)
    for _round in range(300):
        text = "".join(rng.choice(NAMED + ["a", "b", "é"]) for _round in range(rng.randint(0, 30)))
        limit = rng.randint(4, 60)
        shown, whole = printable(text, limit), printable(text)
        assert len(shown) <= limit
        if shown != whole:
            kept = shown[:-3]
            assert shown.endswith("...") and whole.startswith(kept)
            assert any(printable(text[:n]) == kept for n in range(len(text) + 1))  # whole escapes only


def test_anything_not_a_string_is_shown_as_its_str():
    assert printable(3) == "3"
    assert printable(None) == "None"
    assert printable(b"\x1b") == "b'\\x1b'"
    assert printable(ValueError("bad \x1b[31mred")) == "bad \\x1b[31mred"


# -- bcd-holds: the state directory ---------------------------------------------------------------

def test_busy_cannot_draw_a_busy_gpu_free_with_a_vm_id_from_the_ledger(capsys, node):
    """The reproduction: the account writes a VM id that erases the line and redraws it as free."""
    forged = "vm1" + REDRAW + GPU_B + ": free" + C1_CSI + BIDI
    node.write(node.state_dir + "/ledger.json", json.dumps({"vfio": {GPU_B: forged}}))
    code, out, err = cli(capsys, node, "busy", GPU_B)
    assert code == EX_BUSY
    assert_inert(out + err)
    assert out.splitlines() == ["%s: busy: passed through to VM %s" % (GPU_B, escaped(forged))]
    code, out, _err = cli(capsys, node, "busy", GPU_B, "--json")
    assert_inert(out)
    assert json.loads(out)[0]["claimed_by"][0]["instance_id"] == forged  # the data as it is, JSON-escaped
    code, out, err = cli(capsys, node, "status")
    assert code == EX_OK
    assert_inert(out + err)
    row = [line for line in out.splitlines() if line.startswith("1 ")][0]
    assert row.split()[3] == "wait"


def test_a_maintenance_reason_from_the_state_directory_is_escaped_in_status_and_busy(capsys, node):
    reason = "fw" + C1_CSI + BIDI + HIDDEN + LINE_SEP + "update " * 30  # C0 the parser refuses; these it takes
    node.write(node.state_dir + "/maintenance.json", json.dumps({GPU_B: {"reason": reason, "since": 0}}))
    code, out, err = cli(capsys, node, "status")
    assert code == EX_OK and err == ""
    assert_inert(out)
    lines = out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), lines
    row = [line for line in lines if line.startswith("1 ")][0]
    # cut in its cell (the columns stay where they are), whole escapes only
    assert ("maintenance: " + escaped(reason))[:20] in row and "..." in row
    reset = lines[0].index("RESET")
    rows = [line for line in lines[1:] if line[:1].isdigit()]
    assert [row[reset:].split()[0] for row in rows] == ["ok", "ok", "ok"]  # the columns stay where they are
    code, out, err = cli(capsys, node, "busy", GPU_B, GPU_C)
    assert code == EX_OK
    assert_inert(out + err)
    assert out.splitlines()[0] == "%s: free: in maintenance (%s)" % (GPU_B, escaped(reason))


def test_events_prints_a_hostile_journal_as_ascii_json_and_the_module_returns_it_as_data(capsys, node):
    event = {"seq": 1, "type": "AllocationBound" + REDRAW + "ok",
             "body": {"allocation_id": BIDI + "a1" + C1_CSI, "note": LINE_SEP + HIDDEN + "\x7f"}}
    node.write(node.state_dir + "/events.jsonl", json.dumps(event, ensure_ascii=False) + "\n{not json\x1b[2J}\n")
    code, out, err = cli(capsys, node, "events")
    assert code == EX_OK
    assert_inert(out + err)
    assert out.isascii() and "\\u001b[2K\\rok" in out and "\\u202e\\u2066a1\\u009b2K" in out
    assert json.loads(out.splitlines()[0]) == event
    assert "line 2 is not a readable event" in err
    result = call(capsys, events_module.main, {"root": node.root, "fakehw": node.fakehw})
    assert result["events"] == [event]
    for text in warnings(result):
        assert_inert(text, "a warning", newlines=False)


def test_metrics_never_print_a_refusal_reason_from_the_ledger_that_the_spec_does_not_name(capsys, node):
    reason = "x" + REDRAW + "y\"\\" + BIDI
    node.write(node.state_dir + "/ledger.json",
               json.dumps({"failures": {"a1": {"generation": 1, "reason": reason}}}))
    code, out, err = cli(capsys, node, "metrics")
    assert code == EX_OK
    assert_inert(out + err)
    assert "x" + REDRAW not in out and escaped(reason) not in out
    # Prometheus's own parser reads the labels back: the spec's reasons, and the account's counted as other
    samples = [sample for family in text_string_to_metric_families(out) if family.name == "bcd_refusals"
               for sample in family.samples]
    assert [(sample.labels["reason"], sample.value) for sample in samples] == \
        [(known, 0.0) for known in REASONS] + [("other", 1.0)]


# -- bcd-holds: a hold spec's annotations -------------------------------------------------------------

def hostile_spec(allocation_id, device_id, allocation=None, reservation="rsv"):
    return json.dumps({
        "cdiVersion": "0.6.0", "kind": KIND,
        "annotations": {ANN_ALLOCATION: allocation or allocation_id, ANN_RESERVATION: reservation,
                        ANN_GENERATION: "1"},
        "devices": [{"name": "d0", "annotations": {ANN_DEVICE_ID: device_id},
                     "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}],
    }, ensure_ascii=False)


def test_hold_spec_annotations_reach_status_doctor_busy_and_holds_info_escaped(capsys, node):
    forged_gpu = "GPU-" + REDRAW + "0  " + GPU_A + "  free" + C1_CSI
    node.write("/etc/cdi/bcd-a9.json", hostile_spec("a9", forged_gpu, reservation=BIDI + "rsv" + REDRAW))
    node.write("/etc/cdi/bcd-a8.json", hostile_spec("a8", GPU_C, allocation="\x1b]0;owned\x07" + BIDI))
    code, out, err = cli(capsys, node, "status")
    assert code == EX_OK
    assert_inert(out + err)
    missing = [line for line in out.splitlines() if "(missing)" in line]
    assert len(missing) == 1 and missing[0].split()[2] == escaped(forged_gpu)[:12] + "…" + escaped(forged_gpu)[-6:]
    code, out, _err = cli(capsys, node, "status", "--json")
    assert_inert(out)
    assert dict((h["allocation_id"], h["reservation_id"]) for h in json.loads(out)["holds"])["a9"] \
        == BIDI + "rsv" + REDRAW
    code, out, err = cli(capsys, node, "doctor")
    assert code == EX_CHECK
    assert_inert(out + err)
    assert "a9 holds %s, which the inventory does not list" % escaped(forged_gpu) in out
    assert escaped("\x1b]0;owned\x07") in out
    code, out, err = cli(capsys, node, "busy", GPU_C)
    assert code == EX_BUSY
    assert_inert(out + err)
    code, out, err = cli(capsys, node, "busy", forged_gpu)  # not a GPU UUID: refused, named escaped
    assert code == EX_ERROR and out == ""
    assert_inert(err)
    assert len(err.splitlines()) == 1 and "\\x1b[2K\\r" in err
    result = call(capsys, holds_info.main, {"root": node.root, "fakehw": node.fakehw})
    for text in warnings(result) + result["table"]:
        assert_inert(text)
    assert result["table"] == status_table(dict(result, warnings=[])).splitlines()
    assert any(escaped("\x1b]0;owned\x07") in text for text in warnings(result))


# -- bcd-holds: the fakehw file (the kubelet's pods, libvirt's VMs) ---------------------------------

def test_pod_and_vm_names_are_escaped_in_converge_status_and_busy(capsys, node):
    pod = {"namespace": "default", "name": "train" + C1_CSI + BIDI + LINE_SEP + "0", "container": "main",
           "device_ids": [GPU_B]}
    vm = "vm" + BIDI + C1_CSI + LINE_SEP + "1"
    node.set_hardware(kubelet={"reachable": True, "pods": [pod]},
                      domains=[{"instance_id": vm, "state": "running", "gpus": [GPU_C]}])
    code, out, err = cli(capsys, node, "converge", "--spec",
                         write_spec(node, 1, [kube("k1", GPU_B)]))
    assert code == EX_OK
    assert_inert(out + err)
    code, out, err = cli(capsys, node, "converge", "--spec", write_spec(node, 2, [], "g2.json"))
    assert_inert(out + err)
    assert escaped(pod["name"]) in out
    code, out, err = cli(capsys, node, "status")
    assert_inert(out + err)
    row = [line for line in out.splitlines() if line.startswith("2 ")][0]
    assert row.split()[2:4] == ["VM", escaped(vm)]
    code, out, err = cli(capsys, node, "busy", GPU_C)
    assert code == EX_BUSY
    assert_inert(out + err)
    assert out.splitlines() == ["%s: busy: passed through to VM %s" % (GPU_C, escaped(vm))]


# -- the modules: their input ---------------------------------------------------------------------

def test_a_hostile_assignment_is_escaped_in_the_warnings_msg_and_diff_of_holds(capsys, node):
    bad_id = "a" + REDRAW + "ok"
    devices = [dict(hold("a1", GPU_A), allocation_id=bad_id),
               hold("a2", "GPU-" + BIDI + "x" + C1_CSI),
               dict(hold("a3", GPU_B), reservation_id=BIDI + "rsv" + LINE_SEP)]
    result = call(capsys, holds.main, {"root": node.root, "fakehw": node.fakehw, "generation": 1,
                                       "devices": devices, "on_refusal": "report", "_ansible_diff": True})
    failed = call(capsys, holds.main, {"root": node.root, "fakehw": node.fakehw, "generation": 1,
                                       "devices": devices, "on_refusal": "fail", "_ansible_diff": True})
    assert failed["failed"] is True
    assert_inert(failed["msg"], "msg", newlines=False)
    assert escaped(bad_id) in failed["msg"] and escaped("GPU-" + BIDI + "x" + C1_CSI) in failed["msg"]
    texts = warnings(result)
    assert len(texts) >= 2
    for text in texts:
        assert_inert(text, "a warning", newlines=False)
    # an id that is not one is refused under the entry's position, and the message quotes it escaped
    assert any(text.startswith("devices[0]") and escaped(bad_id) in text for text in texts)
    assert any(escaped("GPU-" + BIDI + "x" + C1_CSI) in text for text in texts)
    for entry in result["diff"]:
        for key, value in entry.items():
            assert_inert(value, "diff %s" % key)
    # data is data, but an event a gateway takes holds no control character: the refusal is keyed by the entry's
    # position, its message names the id sent (escaped); the hold keeps its reservation id as it was sent
    assert [failure["allocation_id"] for failure in result["failures"]][0] == "devices[0]"
    assert escaped(bad_id) in result["failures"][0]["message"]
    info = call(capsys, holds_info.main, {"root": node.root, "fakehw": node.fakehw})
    assert [h["reservation_id"] for h in info["holds"]] == [BIDI + "rsv" + LINE_SEP]


def test_gpu_busy_and_maintenance_escape_their_input_in_msg_and_diff(capsys, node):
    # a trailing newline passes a `$` match: the message must still be one line
    result = call(capsys, gpu_busy.main, {"root": node.root, "fakehw": node.fakehw, "gpus": [GPU_A + "\n"]})
    assert result["failed"] is True
    assert_inert(result["msg"], "msg", newlines=False)
    assert result["msg"].startswith(escaped(GPU_A + "\n"))
    code, _out, err = cli(capsys, node, "busy", GPU_A + "\n")
    assert code == EX_ERROR and len(err.splitlines()) == 1
    assert_inert(err)
    reason = "firmware" + BIDI + C1_CSI + HIDDEN
    result = call(capsys, maintenance.main, {"root": node.root, "fakehw": node.fakehw, "gpus": [GPU_A],
                                             "reason": reason, "_ansible_diff": True})
    assert result["changed"] is True
    assert result["maintenance"][0]["reason"] == reason
    assert result["diff"]["after"] == "%s: %s\n" % (GPU_A, escaped(reason))
    assert_inert(result["diff"]["after"] + result["diff"]["before"])
    result = call(capsys, gpu_busy.main, {"root": node.root, "fakehw": node.fakehw, "gpus": [GPU_A]})
    assert result["gpus"][0]["claimed_by"][0]["reason"] == reason
    table = call(capsys, holds_info.main, {"root": node.root, "fakehw": node.fakehw})["table"]
    for line in table:
        assert_inert(line)

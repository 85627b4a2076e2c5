# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tables of docs/ and of the roles' READMEs say what the code does (issue 32, item 6), as the console
sessions already do (test_console.py, test_playbook_pages.py).

**Option tables**: a Markdown table whose first column is ``Option`` or ``Variable`` lists a module's options, a
role's variables or a script's options (``OPTION_TABLES`` says whose, by page and heading; an option table it
does not know fails). Every option a row names must be in that argument spec (the module's, read from its
``main`` as Ansible would get it; the role's ``meta/argument_specs.yml``; the script's parser), with the default
its ``Default`` column gives: ``required``, nothing (no default), a literal (the spec's default, or what the
module does without one: ``EFFECTIVE_DEFAULTS``, each checked), or words saying what happens when it is left out
(no default in the spec). Every option of the spec must have its row.

**Refusal tables**: a table whose first column is ``Input`` or ``Message``, under a heading that is a refusal
reason or a text saying which reason its rows get, lists refusals: each row is run on a fakehw node in this
process (the module ``bcd.devices.holds``, as a task runs it) and must be refused with that reason and message.
An ``Input`` cell is read as YAML (an assignment's fields, or its limits'), with a node the words after it
describe (``on a node of 64 CPUs``); the few inputs described in words are built by ``INPUTS``. A ``Message``
row's situation is built by ``SITUATIONS`` (``…`` in a message stands for any text).

**Refusal claims**: a table row anywhere that says something is refused with a reason (``refused with
`overlap```, ``refused (`invalid-assignment`)``) must have its situation in ``CLAIMS``, which is run: each reason
the row names must come out, and no other.

A table that names an option the module lacks, a default it does not have, or a refusal that does not happen
fails here; so does a new table or row of these kinds with no case.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import types
from pathlib import Path

import pytest
import yaml

from ansible_collections.bcd.devices.plugins.module_utils.domain.input.assignment import ASSIGNMENT_FIELDS
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.refusals import REASONS
from ansible_collections.bcd.devices.plugins.module_utils.entry.busy import set_maintenance
from ansible_collections.bcd.devices.plugins.module_utils.entry.modules import holds as holds_entry
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import FakeHwHost, RealHost
from ansible_collections.bcd.devices.tests.unit.docs.quoted import REPO
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run

GPU = "GPU-5f1c2a90-0000-4000-8000-%012x"
GPUS = [{"uuid": GPU % (index + 1), "index": index, "minor": index} for index in range(4)]
GPUS[1]["mig"] = [{"gi": 1, "ci": 0, "uuid": "MIG-7089d0f3-0000-58c9-8f8c-000000010001"}]


# -- the pages' tables ---------------------------------------------------------------------------------------

def pages():
    return sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "roles").glob("*/README.md"))


def cells(line):
    """A table row's cells, stripped; ``\\|`` is a ``|`` in a cell."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


class Table(types.SimpleNamespace):
    """``page`` (relative to the checkout), ``heading`` (the nearest above it), ``context`` (the text from that
    heading to the table), ``header`` and ``rows`` (lists of cells)."""


def tables():
    found = []
    for path in pages():
        lines = path.read_text(encoding="utf-8").splitlines()
        heading, context, fenced, i = "", [], False, 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"#+ ", line):
                heading, context = line.lstrip("#").strip(), []
                i += 1
                continue
            elif (not fenced and line.startswith("|") and i + 1 < len(lines)
                  and re.match(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$", lines[i + 1])):
                rows, j = [], i + 2
                while j < len(lines) and lines[j].startswith("|"):
                    rows.append(cells(lines[j]))
                    j += 1
                found.append(Table(page=str(path.relative_to(REPO)), heading=heading, context="\n".join(context),
                                   header=cells(line), rows=rows))
                i = j
                continue
            context.append(line)
            i += 1
    return found


def spans(cell):
    """The text of each ``code`` span of a cell."""
    return re.findall(r"`([^`]*)`", cell)


def column(table, name):
    """The index of the column headed ``name`` (any case), or None."""
    names = [cell.strip("`").lower() for cell in table.header]
    return names.index(name) if name in names else None


# -- option tables -------------------------------------------------------------------------------------------

# Whose options each option table lists: (page, heading) -> (kind, name).
OPTION_TABLES = {
    ("docs/user-guide.md", "Module options"): ("module", "holds"),
    ("docs/fakehw.md", "Making a node: hack/fakehw_node.py"): ("script", "hack/fakehw_node.py"),
    ("roles/bcd_holds/README.md", "Variables"): ("role", "bcd_holds"),
}


def option_tables():
    return [table for table in tables() if table.header[0].strip("`").lower() in ("option", "variable")]


class _Built(Exception):
    """Raised where the code under test has built its argument spec or parser: nothing more runs."""


def module_spec(name):
    """The argument spec the module ``name`` gives ``AnsibleModule``, from its ``main`` (each module's main takes
    ``ansible.module_utils.basic`` as an argument: it gets one whose ``AnsibleModule`` keeps the spec)."""
    built = {}

    class AnsibleModule:
        def __init__(self, argument_spec, **_kwargs):
            built.update(argument_spec)
            raise _Built()

    entry = importlib.import_module("ansible_collections.bcd.devices.plugins.module_utils.entry.modules." + name)
    with pytest.raises(_Built):
        entry.main(types.SimpleNamespace(AnsibleModule=AnsibleModule))
    return dict((option, {"type": spec.get("type", "str"), "default": spec.get("default"),
                          "required": bool(spec.get("required"))}) for option, spec in built.items())


def role_spec(name):
    """Every variable of every entry point of the role's ``meta/argument_specs.yml``; required where every entry
    point that takes it requires it (``bcd_holds_gateway_url`` is ``deliver``'s, and optional to ``main``)."""
    specs = yaml.safe_load((REPO / "roles" / name / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    found = {}
    for entry_point in specs["argument_specs"].values():
        for option, spec in entry_point.get("options", {}).items():
            seen = found.setdefault(option, {"type": spec.get("type", "str"), "default": spec.get("default"),
                                             "required": True})
            assert (seen["type"], seen["default"]) == (spec.get("type", "str"), spec.get("default")), option
            seen["required"] = seen["required"] and bool(spec.get("required"))
    return found


def load_script(rel):
    spec = importlib.util.spec_from_file_location("docs_table_" + Path(rel).stem, REPO / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_spec(rel):
    """The options of a script's parser, as ``main`` builds it (its ``parse_args`` is where it stops)."""
    script, built = load_script(rel), []

    class Parser(argparse.ArgumentParser):
        def parse_args(self, *_args, **_kwargs):
            built.append(self)
            raise _Built()

    script.argparse = types.SimpleNamespace(ArgumentParser=Parser)
    with pytest.raises(_Built):
        script.main([])
    found = {}
    for action in built[0]._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                found[option] = {"type": None, "default": action.default, "required": action.required}
    return found


def spec_of(kind, name):
    return {"module": module_spec, "role": role_spec, "script": script_spec}[kind](name)


def fakehw_node_makes_gpu_1_mig(tmp_path):
    root = tmp_path / "node"
    assert load_script("hack/fakehw_node.py").main(["--root", str(root)]) == 0
    gpus = yaml.safe_load((root / "fakehw.yml").read_text(encoding="utf-8"))["gpus"]
    return [gpu["index"] for gpu in gpus if gpu.get("mig")] == [1]


# Options whose spec has no default, where the page gives what the code does without one; each is checked.
EFFECTIVE_DEFAULTS = {
    ("holds", "on_refusal"): ("fail", lambda _tmp: holds_entry.on_refusal({"on_refusal": None, "fail_on_refusal": None})
                              == "fail"),
    ("hack/fakehw_node.py", "--mig-gpu"): (1, fakehw_node_makes_gpu_1_mig),
}
NO_DEFAULT = ("", "undefined", "unset")


def expanded(text):
    """``/etc/cdi/nvidia.{yaml,json}`` as the shell expands it: a list."""
    found = re.match(r"^(.*)\{([^{}]*)\}(.*)$", text)
    if not found:
        return [text]
    return [item for part in found.group(2).split(",") for item in expanded(found.group(1) + part + found.group(3))]


def read_default(cell):
    """``("required",)``, ``("none",)``, ``("value", value)`` or ``("words", cell)``: what a Default cell says."""
    text = cell.strip()
    if text.lower() == "required":
        return ("required",)
    if text.lower() in NO_DEFAULT:
        return ("none",)
    if text.lower() == "off":  # a flag
        return ("value", False)
    if re.fullmatch(r"-?[0-9]+", text):
        return ("value", int(text))
    quoted = spans(text)
    if quoted and not re.sub(r"`[^`]*`", "", text).strip(" ,"):
        if len(quoted) == 1 and not re.search(r"\{[^{}]*,[^{}]*\}", quoted[0]):
            return ("value", yaml.safe_load(quoted[0]))
        return ("value", [item for value in quoted for item in expanded(value)])  # a list, in the shell's braces
    return ("words", text)


def option_rows():
    found = []
    for table in option_tables():
        owner = OPTION_TABLES.get((table.page, table.heading))
        for row in table.rows:
            found.append(pytest.param(table, owner, row, id="%s:%s" % (table.page, row[0])))
    return found


def test_every_option_table_is_known():
    found = sorted((table.page, table.heading) for table in option_tables())
    assert found == sorted(OPTION_TABLES), "an option table this test does not know (add it to OPTION_TABLES): %s" % (
        sorted(set(found) - set(OPTION_TABLES)) or "none; a table OPTION_TABLES names is gone: %s" % sorted(
            set(OPTION_TABLES) - set(found)))


@pytest.mark.parametrize("table, owner, row", option_rows())
def test_an_option_row_is_the_spec_s(table, owner, row, tmp_path):
    assert owner is not None, "%s, %s: whose options is this table?" % (table.page, table.heading)
    spec = spec_of(*owner)
    names = [name.split()[0] for name in spans(row[0])]
    assert names, "%s: a row names no option: %r" % (table.page, row[0])
    for name in names:
        assert name in spec, "%s lists %s, which %s %s does not have (it has %s)" % (
            table.page, name, owner[0], owner[1], ", ".join(sorted(spec)))
        option = spec[name]
        kind = column(table, "type")
        if kind is not None and row[kind]:
            assert row[kind].strip("`") == option["type"], (table.page, name, row[kind], option["type"])
        where = column(table, "default")
        if where is None:
            continue
        said = read_default(row[where])
        if said[0] == "required":
            assert option["required"], "%s: %s is not required" % (table.page, name)
            continue
        assert not option["required"], "%s: %s is required, the page gives it a default" % (table.page, name)
        if said[0] == "none":
            assert option["default"] in (None, []), "%s: %s defaults to %r, the page gives none" % (
                table.page, name, option["default"])
        elif said[0] == "words":  # what happens when it is left out, in words: no default in the spec
            assert option["default"] is None, "%s: %s defaults to %r, the page says %r" % (
                table.page, name, option["default"], said[1])
        elif option["default"] is None and (owner[1], name) in EFFECTIVE_DEFAULTS:
            value, check = EFFECTIVE_DEFAULTS[(owner[1], name)]
            assert said[1] == value and check(tmp_path), "%s: %s left out is not %r" % (table.page, name, said[1])
        else:
            assert option["default"] == said[1], "%s: %s defaults to %r, the page says %r" % (
                table.page, name, option["default"], said[1])


@pytest.mark.parametrize("page, heading", sorted(OPTION_TABLES))
def test_an_option_table_lists_every_option(page, heading):
    [table] = [table for table in option_tables() if (table.page, table.heading) == (page, heading)]
    listed = set(name.split()[0] for row in table.rows for name in spans(row[0]))
    missing = sorted(set(spec_of(*OPTION_TABLES[(page, heading)])) - listed)
    assert missing == [], "%s, %s: no row for %s" % (page, heading, ", ".join(missing))


def test_the_option_check_reads_defaults_as_the_pages_write_them():
    assert read_default("`/var/lib/bcd`") == ("value", "/var/lib/bcd")
    assert read_default("`120`") == ("value", 120) and read_default("4") == ("value", 4)
    assert read_default("`[]`") == ("value", []) and read_default("`{}`") == ("value", {})
    assert read_default("`/etc/cdi/nvidia.{yaml,json}`, `/var/run/cdi/nvidia.{yaml,json}`") == ("value", [
        "/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json", "/var/run/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json"])
    assert read_default("numbered by the node") == ("words", "numbered by the node")
    assert read_default("") == ("none",) and read_default("required") == ("required",)


# -- refusals: running what the pages say is refused ---------------------------------------------------------

class Node:
    """A fakehw node of four GPUs (GPU 1 with a MIG instance gi1/ci0), run through the module as a task runs it."""

    def __init__(self, capsys, make_node, monkeypatch):
        self.capsys, self.monkeypatch = capsys, monkeypatch
        self.node = make_node(gpus=[dict(gpu) for gpu in GPUS])
        self.generation = 0

    def run(self, devices, **args):
        """One pass of ``devices`` (a new generation); the result's ``failures``."""
        self.generation += 1
        args.setdefault("on_refusal", "report")  # the task succeeds; failures are the same either way
        result = run(self.capsys, self.node, generation=self.generation, devices=devices, **args)
        return result["failures"]

    def hardware(self, **fields):
        self.node.set_hardware(**fields)

    def without_systemd(self, cgroup=False):
        """Slices as a real host without systemd would say: the real host's check, under this node's root (with
        a cgroup v2 hierarchy when ``cgroup``); a fakehw host always makes slices."""
        if cgroup:
            self.node.write("/sys/fs/cgroup/cgroup.controllers", "cpu memory hugetlb\n")
        self.monkeypatch.setattr(FakeHwHost, "slices_unavailable", lambda host: RealHost(host.root).slices_unavailable())

    def unprivileged(self):
        self.monkeypatch.setattr(os, "geteuid", lambda: 1000)


def assignment(allocation_id="alloc_doc", *device_ids, **fields):
    data = {"allocation_id": allocation_id, "reservation_id": "rsv_doc", "binding": "BINDING_HOLD",
            "devices": [{"id": device_id} for device_id in device_ids or [GPU % 1]]}
    data.update(fields)
    return data


def cpulist_of(length):
    """A cpulist of ``length`` characters (odd): ``0,0,...``."""
    return "0" + ",0" * ((length - 1) // 2)


def input_assignment(text):
    """The assignment an Input cell's YAML gives: its keys that are assignment fields replace the base one's,
    the others are limits."""
    base = assignment()
    for key, value in yaml.safe_load(text).items():
        if key in ASSIGNMENT_FIELDS:
            base[key] = value
        else:
            base.setdefault("limits", {})[key] = value
    return base


def without(field, data):
    return dict((key, value) for key, value in data.items() if key != field)


def fifth_without_id(node):
    """Four assignments on slots of GPU 0, then one without an allocation id."""
    return [node.run([assignment("alloc_%d" % n, devices=[{"id": GPU % 1 + "/s%d" % n, "device_class": "gpu.slot"}])
                      for n in range(4)] + [without("allocation_id", assignment())])]


def limits_without_systemd(node):
    """Without a cgroup v2 hierarchy, then with one but without systemd."""
    node.without_systemd()
    first = node.run([assignment(limits={"cpus": "0"})])
    node.without_systemd(cgroup=True)
    return [first, node.run([assignment(limits={"cpus": "0"})])]


# Inputs a page describes in words: cell -> what runs them (a list of failures per variant).
INPUTS = {
    "No `allocation_id` (5th entry)": fifth_without_id,
    "The same `allocation_id` twice": lambda node: [node.run([assignment("alloc_mig", GPU % 1),
                                                              assignment("alloc_mig", GPU % 2)])],
    "`limits` on a node without systemd and cgroup v2": limits_without_systemd,
}


def run_input(node, cell):
    """Each variant's failures for an Input cell: YAML, optionally ``on a node of ...``, or one of ``INPUTS``."""
    if cell in INPUTS:
        return INPUTS[cell](node)
    words = re.fullmatch(r"`([^`]*)`(?: (.*))?", cell)
    assert words, "an Input this test cannot read (add it to INPUTS): %r" % cell
    text, setting = words.group(1), words.group(2)
    long_list = re.fullmatch(r"(\w+) of ([0-9]+) characters", " ".join(filter(None, [text, setting])))
    if long_list:
        return [node.run([assignment(limits={long_list.group(1): cpulist_of(int(long_list.group(2)))})])]
    if setting is not None:
        cpus = re.fullmatch(r"on a node of ([0-9]+) CPUs", setting)
        if cpus:
            node.hardware(cpus="0-%d" % (int(cpus.group(1)) - 1))
        elif setting == "on a node of one NUMA node":
            node.hardware(cpus="0-63")  # cpus alone: one NUMA node, 0, with the memory (docs/fakehw.md)
        else:
            raise AssertionError("a node this test cannot make (add the Input to INPUTS): %r" % cell)
    return [node.run([input_assignment(text)])]


def kubernetes_release_pending(node):
    """alloc_kube (Kubernetes) on GPU 3, released at generation 2 while a pod holds it, and a new hold on it."""
    node.hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU % 3]}]})
    assert node.run([assignment("alloc_kube", GPU % 3, binding="BINDING_KUBERNETES")]) == []
    return node.run([assignment("alloc_next", GPU % 3)])


def held_first(first, then):
    """``first`` bound at one generation, kept at the next, which adds ``then``."""
    def situation(node):
        assert node.run([first]) == []
        return node.run([first, then])
    return situation


def in_maintenance(node):
    set_maintenance(node.node.host(), [GPU % 1], True, "firmware update", state_dir=node.node.state_dir, lock_timeout=5)
    return node.run([assignment()])


def releases_unreadable(node):
    """A damaged releasing.json, while a pod holds a GPU of an allocation the node does not know (else the kube
    side says at once that nothing is pending, and the marker goes)."""
    node.hardware(kubelet={"reachable": True, "pods": [
        {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU % 2]}]})
    assert node.run([]) == []
    node.node.write(node.node.state_dir + "/releasing.json", "{not json")
    return node.run([assignment("alloc_new", GPU % 4)])


# Situations of the rows of Message tables: (page, first cell) -> what runs them (the failures).
SITUATIONS = {
    ("docs/troubleshooting.md", "`a device is listed twice`"): lambda node: node.run([assignment("alloc_doc", GPU % 1, GPU % 1)]),
    ("docs/troubleshooting.md", "`GPU-…-000000000003 is passed through to instance inst_9`"): lambda node: node.run(
        [assignment("alloc_doc", GPU % 3)], instances=[{"instance_id": "inst_9", "gpus": [GPU % 3]}]),
    ("docs/troubleshooting.md", "`GPU-…-000000000001 is in maintenance (firmware update)`"): in_maintenance,
    ("docs/troubleshooting.md", "`GPU-…-000000000001 is assigned to alloc_whole`"): held_first(
        assignment("alloc_whole", GPU % 1), assignment("alloc_doc", GPU % 1)),
    ("docs/troubleshooting.md", "`GPU-…-000000000002 has GPU-…-000000000002/gi1/ci0 assigned to alloc_mig`"): held_first(
        assignment("alloc_mig", devices=[{"id": GPU % 2 + "/gi1/ci0", "device_class": "gpu.mig"}]),
        assignment("alloc_doc", GPU % 2)),
    ("docs/troubleshooting.md", "`GPU-…-000000000001 is assigned to alloc_whole` (for a MIG or slot atom)"): held_first(
        assignment("alloc_whole", GPU % 1), assignment("alloc_doc", devices=[{"id": GPU % 1 + "/s0", "device_class": "gpu.slot"}])),
    ("docs/troubleshooting.md", "`GPU-…-000000000003 is assigned to alloc_kube`"): kubernetes_release_pending,
    ("docs/troubleshooting.md", "`GPU-…-000000000004 is assigned to (pending Kubernetes releases that could not be read)`"):
        releases_unreadable,
}


def claimed_reason(table):
    """The reason a table's rows are refused with: its heading's, or the one its text above names."""
    if table.heading in REASONS:
        return table.heading
    named = set(re.findall(r"`(%s)`" % "|".join(map(re.escape, REASONS)), table.context))
    return named.pop() if len(named) == 1 else None


def refusal_rows():
    found = []
    for table in tables():
        reason = claimed_reason(table)
        if table.header[0] in ("Input", "Message") and reason is not None:
            found.extend(pytest.param(table, reason, row, id="%s:%s:%s" % (table.page, reason, row[0])) for row in table.rows)
    return found


def matches(quoted, message):
    """Whether ``message`` is the page's ``quoted`` one, ``…`` standing for any text."""
    return re.fullmatch(".*?".join(re.escape(part) for part in quoted.split("…")), message) is not None


def test_the_refusal_tables_are_found():
    found = set((param.values[0].page, param.values[1]) for param in refusal_rows())
    assert {("docs/slices-and-admission.md", "invalid-assignment"), ("docs/troubleshooting.md", "invalid-assignment"),
            ("docs/troubleshooting.md", "overlap")} <= found, found


@pytest.mark.parametrize("table, reason, row", refusal_rows())
def test_a_refusal_row_is_refused_as_it_says(table, reason, row, capsys, make_node, monkeypatch):
    node = Node(capsys, make_node, monkeypatch)
    said = row[1] if table.header[0] == "Input" else row[0]
    quoted = spans(said)
    assert quoted, "%s: a row quotes no message: %r" % (table.page, row)
    wanted = [quoted[0]]
    alternative = re.search(r"` or `(\([^`]*\))`$", said)  # "`…(one cause)` or `(another)`"
    if alternative:
        wanted.append(re.sub(r"\([^()]*\)$", alternative.group(1), quoted[0]))
    if table.header[0] == "Input":
        runs = run_input(node, row[0])
    else:
        situation = SITUATIONS.get((table.page, row[0]))
        assert situation is not None, "%s: no situation for %r (add it to SITUATIONS)" % (table.page, row[0])
        runs = [situation(node)]
    assert len(runs) == len(wanted), (row, runs)
    for failures, message in zip(runs, wanted):
        refused = [(f["reason"], f["message"]) for f in failures]
        assert len(refused) == 1 and refused[0][0] == reason and matches(message, refused[0][1]), (
            "%s: %r is not refused with %s: %s as the page says; refused: %s"
            % (table.page, row[0], reason, message, refused))
        reported = re.search(r"reported under `([^`]+)`", said)
        if reported:
            assert failures[0]["allocation_id"] == reported.group(1), failures


def test_the_input_reader_reads_the_pages_forms(capsys, make_node, monkeypatch):
    assert input_assignment('cpus: "0-3;8"')["limits"] == {"cpus": "0-3;8"}
    assert input_assignment("allocation_id: alloc-1")["allocation_id"] == "alloc-1"
    assert input_assignment('env: ["A=b\\nc"]')["env"] == ["A=b\nc"]
    assert len(cpulist_of(2289)) == 2289


# -- refusal claims in any table -----------------------------------------------------------------------------

CLAIM_RE = re.compile(r"refused(?: with)? \(?`?(%s)`?" % "|".join(map(re.escape, REASONS)))


def unprivileged(node):
    node.unprivileged()
    return node.run([assignment("alloc_a", GPU % 1), assignment("alloc_b", GPU % 2)])


def without_slices(node):
    """Only the plain hold with limits is refused: the Kubernetes one gets no slice, the other books no limits."""
    node.without_systemd()
    failures = node.run([assignment("alloc_limits", GPU % 1, limits={"memory_bytes": 1 << 30}),
                         assignment("alloc_kube", GPU % 2, binding="BINDING_KUBERNETES", limits={"memory_bytes": 1 << 30}),
                         assignment("alloc_plain", GPU % 3)])
    assert [f["allocation_id"] for f in failures] == ["alloc_limits"], failures
    return failures


def bindings(node):
    failures = node.run([assignment("alloc_vm", binding="BINDING_INSTANCE"),
                         without("binding", assignment("alloc_none", GPU % 2))])
    assert [(f["allocation_id"], f["message"]) for f in failures] == [
        ("alloc_vm", "binding BINDING_INSTANCE is not supported"), ("alloc_none", "binding is missing")], failures
    return failures


def spellings(node):
    failures = node.run([assignment("alloc_mig", devices=[{"id": GPU % 2 + "/gi01/ci0", "device_class": "gpu.mig"}]),
                         assignment("alloc_slot", devices=[{"id": GPU % 3 + "/s01", "device_class": "gpu.slot"}])])
    assert [f["allocation_id"] for f in failures] == ["alloc_mig", "alloc_slot"], failures
    return failures


# Rows that say something is refused, with a reason: (page, first cell) -> what runs it (the failures).
CLAIMS = {
    ("docs/kubernetes.md", "4. Claimed meanwhile"): kubernetes_release_pending,
    ("docs/node.md", "`gpu-binding`"): unprivileged,
    ("docs/troubleshooting.md", "Task failed, `add become: true to the task or play, …`"): unprivileged,
    ("docs/troubleshooting.md", "`passes`: `… runs as bcd without --helper-socket: … every new hold is refused with "
                                "node-unprivileged`"): unprivileged,
    ("docs/user-guide.md", "root (`become: true`)"): unprivileged,
    ("docs/user-guide.md", "systemd with cgroup v2"): without_slices,
    ("docs/user-guide.md", "`instances`"): lambda node: node.run(
        [assignment("alloc_doc", GPU % 4)], instances=[{"instance_id": "inst_1", "gpus": [GPU % 4]}]),
    ("docs/user-guide.md", "`binding`"): bindings,
    ("docs/user-guide.md", "`devices`"): spellings,
    ("docs/user-guide.md", "`env_allow`"): lambda node: node.run(
        [assignment("alloc_doc", GPU % 1, env=["TEAM=vision", "NCCL_DEBUG=INFO"])], env_allow=["TEAM"]),
}


def claims():
    found = {}
    for table in tables():
        for row in table.rows:
            reasons = set(CLAIM_RE.findall(" | ".join(row)))
            if reasons:
                found[(table.page, row[0])] = reasons
    return found


def test_every_refusal_claim_has_a_situation():
    found = claims()
    assert sorted(set(found) - set(CLAIMS)) == [], "rows that say what is refused with no situation here (add to CLAIMS)"
    assert sorted(set(CLAIMS) - set(found)) == [], "CLAIMS names rows no page has (or that no longer say refused)"


@pytest.mark.parametrize("page, first", sorted(CLAIMS), ids=lambda value: value)
def test_a_refusal_claim_is_what_happens(page, first, capsys, make_node, monkeypatch):
    reasons = claims().get((page, first))
    assert reasons, "%s: no row %r says what is refused" % (page, first)
    failures = CLAIMS[(page, first)](Node(capsys, make_node, monkeypatch))
    assert failures, "%s: %r: nothing was refused" % (page, first)
    assert set(f["reason"] for f in failures) == reasons, "%s: %r says refused with %s; refused: %s" % (
        page, first, ", ".join(sorted(reasons)), json.dumps(failures))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""support/json_bytes.py: the one serializer of the files the collection writes. A state file is the compact,
sorted text of ``json.dumps`` and reads back as what was written; a CDI spec is, byte for byte, the indented
text it always was (a changed byte would rewrite every hold's spec on upgrade, which is what
``RENDER_REVISION`` is for, not this)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import spec_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.tests.unit.conftest import NVIDIA_CDI

MODULE_UTILS = Path(__file__).resolve().parents[5] / "plugins" / "module_utils"
LEAVES = st.none() | st.booleans() | st.integers(-(10 ** 30), 10 ** 30) | st.floats(allow_nan=False,
                                                                                    allow_infinity=False) | st.text()
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(VALUES)
def test_a_state_file_is_compact_sorted_json_that_reads_back(value):
    content = json_bytes(value)
    assert content == (json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")
    assert content.endswith(b"\n") and content.count(b"\n") == 1 and content.isascii()
    assert bounded_json.loads(content, "a state file") == value


def test_the_keys_are_sorted_so_the_same_value_makes_the_same_bytes():
    assert json_bytes({"b": 1, "a": [2, {"d": None, "c": True}]}) == b'{"a":[2,{"c":true,"d":null}],"b":1}\n'
    assert json_bytes({"b": 1, "a": 2}) == json_bytes({"a": 2, "b": 1})


def test_real_nvidia_specs_and_a_hold_spec_come_out_as_they_always_did():
    # NVIDIA's CDI specs (tests/data/nvidia-cdi, real ones from ../shared/fixtures) are the largest a
    # node's spec directory holds: every shape CDI has (mounts, hooks with args, device nodes)
    paths = sorted(NVIDIA_CDI.glob("*.*"))
    assert len(paths) >= 5
    for path in paths:
        spec = yaml.safe_load(path.read_text())
        assert spec_bytes(spec) == (json.dumps(spec, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), path
    hold = {"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "annotations": {"bcd.dev/allocation-id": "a\u00e9\u2028"},
            "devices": [{"name": "GPU-1", "containerEdits": {"env": ["X=\u0000\"\\"]}}], "containerEdits": {}}
    assert spec_bytes(hold).decode("utf-8") == json.dumps(hold, indent=2, ensure_ascii=False) + "\n"
    assert spec_bytes(hold).startswith(b'{\n  "cdiVersion": "0.6.0",\n  "kind"')  # the spec's order, indented


def test_nothing_in_module_utils_writes_a_file_with_json_dumps_of_its_own():
    """Every ``json.dumps`` left in module_utils writes no file: the journal's own format and the bytes a signature
    covers (state/events.py, state/node_key.py), what a command prints, a message on a socket, a digest, a comparison."""
    allowed = {"state/events.py", "entry/cli.py", "entry/helper/server.py", "node/helper_client.py",
               "entry/modules/holds.py", "domain/plan/diffs.py", "domain/input/section.py", "state/node_key.py",
               "domain/input/generations.py", "domain/delivery.py", "support/json_bytes.py",
               "domain/event_grammar.py",  # a refused value quoted in a reason
               "entry/deliver.py"}  # a setting quoted in a message, the request's body, an event's size
    found = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        relative = str(path.relative_to(MODULE_UTILS))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("dumps", "dump") \
                    and isinstance(node.value, ast.Name) and node.value.id in ("json", "pretty_json"):
                if relative not in allowed or node.value.id == "pretty_json":
                    found.append("%s:%d" % (relative, node.lineno))
    assert not found
    assert not (MODULE_UTILS / "support" / "pretty_json.py").exists()

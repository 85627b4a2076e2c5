# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files a pass writes are the bytes ``json.dumps(indent=2)`` would write (``support/pretty_json.py``
only writes them faster): a changed byte would rewrite every hold's spec on upgrade, which is what
``RENDER_REVISION`` is for, not this."""

from __future__ import annotations

import json

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.support import pretty_json
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import spec_bytes
from ansible_collections.bcd.devices.tests.unit.conftest import NVIDIA_CDI

LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner) | st.tuples(inner, inner), max_leaves=40)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(VALUES, st.booleans(), st.booleans())
def test_the_text_is_json_dumps_indented_by_two(value, sort_keys, ensure_ascii):
    assert pretty_json.dumps(value, sort_keys=sort_keys, ensure_ascii=ensure_ascii) == \
        json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def test_what_only_json_writes_goes_to_json_whole():
    # a key that is not a string (json writes it as one), a value json cannot write, nesting past MAX_DEPTH
    assert pretty_json.dumps({1: [True, None], "a": {}}) == json.dumps({1: [True, None], "a": {}}, indent=2)
    deep = [[]]  # type: list
    for _level in range(pretty_json.MAX_DEPTH + 2):
        deep = [deep]
    assert pretty_json.dumps(deep) == json.dumps(deep, indent=2)
    try:
        pretty_json.dumps({"a": {1, 2}})
    except TypeError as exc:
        assert "not JSON serializable" in str(exc)
    else:
        raise AssertionError("a set was written")


def test_real_nvidia_specs_and_a_hold_spec_come_out_as_json_writes_them():
    # NVIDIA's CDI specs (tests/data/nvidia-cdi, real ones from ../shared/fixtures) are the largest a
    # node's spec directory holds: every shape CDI has (mounts, hooks with args, device nodes) is walked
    paths = sorted(NVIDIA_CDI.glob("*.*"))
    assert len(paths) >= 5
    for path in paths:
        spec = yaml.safe_load(path.read_text())
        assert spec_bytes(spec) == (json.dumps(spec, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), path
    hold = {"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "annotations": {"bcd.dev/allocation-id": "a\u00e9\u2028"},
            "devices": [{"name": "GPU-1", "containerEdits": {"env": ["X=\u0000\"\\"]}}], "containerEdits": {}}
    assert spec_bytes(hold).decode("utf-8") == json.dumps(hold, indent=2, ensure_ascii=False) + "\n"

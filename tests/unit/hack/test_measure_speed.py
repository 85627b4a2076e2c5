# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""hack/measure_speed.py (docs/performance.md, "Speed tricks, measured (issue 47)") still measures the tricks of
support/speed.py as the code has them: one round of each part on this Python runs, switches each trick off by
the name the code gives it, and the no-op it times is a real pass. Its predecessor measured a module deleted
long before, unnoticed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ansible_collections.bcd.devices.plugins.module_utils.support import records, speed

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "measure_speed.py"


def test_each_trick_it_switches_off_is_a_name_of_the_code():
    source = SCRIPT.read_text(encoding="utf-8")
    for name in ("compile_once", "fewer_collections", "lazy_pattern", "on_first_call"):
        assert callable(getattr(speed, name)) and "speed.%s" % name in source, name
    for name in ("record", "field", "fields", "replace", "asdict", "is_record"):
        assert callable(getattr(records, name)) and "records.%s" % name in source, name


def test_one_round_of_the_node_parts_runs_on_this_python(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1", "--python", sys.executable,
                           "--only", "noop", "--only", "zip", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text(encoding="utf-8"))["node"][0]
    assert set(figures["noop"]) == {"on", "records", "first_call", "lazy"}
    declared, compiled = figures["classes"]
    assert 0 < compiled < declared, figures["classes"]  # the no-op compiled the __init__ of some classes, not all
    assert set(figures["zip"]) == {"on", "zip"}
    assert "16-hold no-op" in done.stdout and "import from the zip" in done.stdout

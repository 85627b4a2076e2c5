# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make sanity runs the releases two at a time (hack/sanity_cores.py): never two on one Python (they would
share ansible-test's virtual environments), every release run once, each one's output printed whole in the
order given, a failure named and the exit status 1, the target-Python compile test only after all passed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

import sanity_cores  # noqa: E402  pylint: disable=wrong-import-position

PYTHONS = {"2.19": "3.11", "2.20": "3.12", "2.21": "3.13", "2.22": "3.13"}


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("took", [(3, 3, 3, 3), (1, 5, 2, 2), (5, 1, 1, 4)])
def test_never_two_on_one_python_nor_more_than_jobs(jobs, took, monkeypatch):
    monkeypatch.setattr(sanity_cores.time, "sleep", lambda seconds: None)
    clock, ends, spans = [0.0], {}, {}
    cores = list(PYTHONS)

    def start(core):
        ends[core] = clock[0] + took[cores.index(core)]
        spans[core] = (clock[0], ends[core])
        return core

    def poll(core):
        clock[0] += 0.125
        return (7 if core == "2.20" else 0) if clock[0] >= ends[core] else None

    done = sanity_cores.schedule(cores, PYTHONS, jobs, start, poll)
    assert done == {"2.19": 0, "2.20": 7, "2.21": 0, "2.22": 0}
    for moment in sorted(set(t for span in spans.values() for t in span)):
        at = [core for core, (begin, end) in spans.items() if begin <= moment < end]
        assert len(at) <= jobs
        assert len(set(PYTHONS[core] for core in at)) == len(at), (moment, at)
    if jobs >= 2 and took == (3, 3, 3, 3):  # two places kept busy: the time of two runs, not three
        assert max(end for begin, end in spans.values()) <= 6.5


def fake_tree(tmp_path, fails=()):
    """A hack/ directory whose core_venv.sh names this Python and whose sanity.sh records its arguments and
    prints a line of its own, failing for the releases in ``fails``."""
    hack = tmp_path / "hack"
    hack.mkdir()
    (hack / "sanity_cores.py").write_bytes((REPO / "hack" / "sanity_cores.py").read_bytes())
    (hack / "core_venv.sh").write_text("echo %s\n" % os.path.dirname(sys.executable))
    (hack / "sanity.sh").write_text(
        'echo "$*" >> %s\n'
        'echo "output of $2 $3"\n'
        'case " %s " in *" $2 "*) [[ $3 == --target-pythons ]] || exit 3;; esac\n'
        % (tmp_path / "calls", " ".join(fails)))
    for name in ("core_venv.sh", "sanity.sh"):
        (hack / name).chmod((hack / name).stat().st_mode | stat.S_IXUSR)
    return hack


def test_each_release_once_its_output_whole_then_the_compile_test(tmp_path):
    hack = fake_tree(tmp_path)
    done = subprocess.run([sys.executable, str(hack / "sanity_cores.py"), "2.19", "2.20", "--", ],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(calls[:2]) == ["--core 2.19", "--core 2.20"]
    assert calls[2:] == ["--core 2.19 --target-pythons", "--core 2.20 --target-pythons"]
    out = done.stdout
    assert out.index("sanity: ansible-core 2.19\n") < out.index("output of 2.19 ") < \
        out.index("sanity: ansible-core 2.20\n") < out.index("output of 2.20 ")


def test_a_failure_is_named_and_stops_before_the_compile_test(tmp_path):
    hack = fake_tree(tmp_path, fails=("2.20",))
    done = subprocess.run([sys.executable, str(hack / "sanity_cores.py"), "2.19", "2.20", "2.21"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "sanity: failed under ansible-core 2.20" in done.stderr
    assert "sanity: ansible-core 2.20: failed" in done.stdout
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(calls) == ["--core 2.19", "--core 2.20", "--core 2.21"]


def test_ansible_test_arguments_go_to_each_release_and_skip_the_compile_test(tmp_path):
    hack = fake_tree(tmp_path)
    done = subprocess.run([sys.executable, str(hack / "sanity_cores.py"), "--jobs", "1", "2.19", "2.22", "--",
                           "--test", "pep8"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == ["--core 2.19 --test pep8", "--core 2.22 --test pep8"]

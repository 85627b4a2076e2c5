# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the end-to-end suite (the library is bcd_e2e.py, next to this file).

Outside hack/e2e.sh, which prepares the rootfs and the private mount namespace, every
test of tests/e2e is skipped with a message saying how to run it.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bcd_e2e  # noqa: E402  pylint: disable=wrong-import-position

ENV_KEY = pytest.StashKey()  # the session's bcd_e2e.E2E, for the terminal summary


def pytest_collection_modifyitems(config, items):
    """Skip the suite unless hack/e2e.sh prepared the rootfs and the namespace."""
    del config
    if bcd_e2e.ROOTFS and os.path.isfile(bcd_e2e.E2E.cdicheck_path(bcd_e2e.ROOTFS)):
        return
    skip = pytest.mark.skip(reason="end-to-end suite: run it with `bash hack/e2e.sh` (or `make e2e`)")
    for item in items:
        if os.path.dirname(str(item.fspath)) == HERE:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def e2e(pytestconfig):
    """The prepared rootfs with every fakehw node built (not yet converged)."""
    env = bcd_e2e.E2E(bcd_e2e.ROOTFS, bcd_e2e.WORK)
    pytestconfig.stash[ENV_KEY] = env
    env.build_nodes()
    env.prepare_rootfs()
    env.collect_versions()
    yield env
    env.unmount_cdi()


@pytest.fixture(scope="session")
def generation_1(e2e):  # pylint: disable=redefined-outer-name
    """Every node converged at generation 1: {node: the module's result}."""
    return e2e.converge(1, bcd_e2e.holds_generation_1(e2e.nodes))


@pytest.fixture(scope="session")
def generation_2(e2e, generation_1):  # pylint: disable=redefined-outer-name
    """node-a converged again at generation 2, after generation 1 (and its checks)."""
    del generation_1
    return e2e.converge(2, bcd_e2e.holds_generation_2(e2e.nodes), limit="node-a")


# One line per consumer in the summary: which test files prove it, and what is not run (and why).
CONSUMERS = (
    ("Podman + the CDI library", ("test_cdi_consumers.py",), ""),
    ("Docker", ("test_docker_cdi.py",), ""),
    ("containerd", (), "not run: trixie's containerd 1.7.24 resolves CDI names only in its CRI plugin, for a CRI "
                       "client (a kubelet); its ctr run --device takes device paths only (checked by "
                       "test_docker_cdi.py; docs/verified-consumers.md)"),
    ("systemd (hold slices)", ("test_systemd_slices.py",), ""),
    ("systemd (MIG layout at boot)", ("test_systemd_mig_layout.py",), ""),
    ("Slurm", ("test_slurm.py",), ""),
    ("Event-Driven Ansible", ("test_eda.py",), ""),
)


def consumer_lines(stats):
    """``consumer <name>: N passed, N failed, N skipped`` for each consumer, from pytest's reports."""
    lines = []
    for name, files, why in CONSUMERS:
        if why:
            lines.append("consumer %-26s %s" % (name + ":", why))
            continue
        counts = {}
        for outcome in ("passed", "failed", "error", "skipped"):
            # a passed test has three passed reports (setup, call, teardown): count its call
            counts[outcome] = sum(1 for report in stats.get(outcome, ())
                                  if (outcome != "passed" or getattr(report, "when", "") == "call")
                                  and os.path.basename(getattr(report, "nodeid", "").split("::")[0]) in files)
        if not any(counts.values()):
            lines.append("consumer %-26s not run (deselected or absent)" % (name + ":"))
            continue
        lines.append("consumer %-26s %s" % (name + ":", ", ".join(
            "%d %s" % (count, outcome) for outcome, count in counts.items() if count)))
    return lines


def pytest_terminal_summary(terminalreporter, config):
    env = config.stash.get(ENV_KEY, None)
    ran = [report for outcome in ("passed", "failed", "error") for report in terminalreporter.stats.get(outcome, ())
           if getattr(report, "nodeid", "").startswith("tests/e2e/")]
    if env is None and not ran:
        return  # skipped outside hack/e2e.sh, or none of the suite ran
    terminalreporter.section("bcd.devices e2e: what ran")
    for line in consumer_lines(terminalreporter.stats):
        terminalreporter.write_line(line)
    if env is None:  # no test that needed the nodes ran (-k eda): no versions of theirs
        return
    for name, version in env.versions.items():
        terminalreporter.write_line("%-34s %s" % (name, version))
    for note in env.notes:
        terminalreporter.write_line("note: " + note)

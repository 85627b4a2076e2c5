# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugins have ansible-core build a module's payload with Python's cyclic collector walking less
(``support/speed.py``'s ``fewer_collections`` with the heap frozen, docs/performance.md "The payload
build"); a pass uses it without freezing, and put the collector back as it was, even
when the build fails: the worker goes on to run the module and read its result with the collector as Ansible
left it."""

from __future__ import annotations

import gc

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.bcd.devices.plugins.action.holds import ActionModule
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import fewer_collections


@pytest.fixture(autouse=True)
def collector_unfrozen():
    """Each test starts with nothing frozen (a module's ``main`` run earlier in this process froze its heap, as
    it does on the node) and the process's threshold, and leaves the collector as it found it."""
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.unfreeze()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()
    if frozen:
        gc.freeze()


def test_the_build_runs_frozen_and_collects_less_often_then_all_is_put_back():
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    made = []
    with fewer_collections(young=before[0] + 12345, freeze=True):
        made.append(object())
        assert gc.isenabled(), "the build's own garbage is still collected"
        assert gc.get_freeze_count() > 0, "what existed before the build is frozen"
        assert gc.get_threshold() == (before[0] + 12345,) + before[1:]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_failed_build_puts_the_collector_back():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="build failed"):
        with fewer_collections(freeze=True):
            raise RuntimeError("build failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_heap_another_caller_froze_stays_frozen():
    gc.freeze()
    frozen = gc.get_freeze_count()
    with fewer_collections(freeze=True):
        pass
    assert gc.get_freeze_count() == frozen


def test_a_higher_threshold_a_caller_set_is_kept():
    before = gc.get_threshold()
    gc.set_threshold(50000, *before[1:])
    with fewer_collections(young=20000):
        assert gc.get_threshold()[0] == 50000
    assert gc.get_threshold() == (50000,) + before[1:]


def test_a_pass_collects_less_often_and_freezes_nothing():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], 20000)
        assert gc.get_freeze_count() == 0, "the root helper's process lives on: a pass freezes nothing"
    assert gc.get_threshold() == before


def test_the_action_builds_through_ansible_core_under_fewer_collections(monkeypatch):
    """The override wraps ansible-core's own ``ActionBase._configure_module`` (if a release renamed it, this
    test fails and says the override no longer runs), passing its arguments and its answer through."""
    assert callable(getattr(ActionBase, "_configure_module", None)), \
        "ansible-core renamed ActionBase._configure_module: the action plugins' build override no longer runs"
    seen = []

    def core_build(self, module_name, module_args, task_vars):
        seen.append((module_name, module_args, task_vars, gc.get_threshold()[0], gc.get_freeze_count()))
        return "payload", "/usr/bin/python3"

    monkeypatch.setattr(ActionBase, "_configure_module", core_build)
    action = object.__new__(ActionModule)  # the build needs nothing the constructor sets
    young = gc.get_threshold()
    answer = action._configure_module(module_name="bcd.devices.holds", module_args={"generation": 1},
                                      task_vars={"x": 1})
    assert answer == ("payload", "/usr/bin/python3")
    (name, args, task_vars, threshold, frozen), = seen
    assert (name, args, task_vars) == ("bcd.devices.holds", {"generation": 1}, {"x": 1})
    assert threshold >= 20000 and frozen > 0
    assert gc.get_threshold() == young and gc.get_freeze_count() == 0

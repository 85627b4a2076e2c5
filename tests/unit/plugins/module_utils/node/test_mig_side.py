# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real host's MIG side (``node/mig_side.py``): each read lists the GPUs anew, so the UUIDs a change gave its MIG
devices are what a run records and journals; an op finds its GPU in the inventory read once."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigOp
from ansible_collections.bcd.devices.plugins.module_utils.node import nvidia_smi
from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import RealHost
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.node.test_mig_smi import Runner, enabled_table


def test_each_read_of_a_real_hosts_mig_side_lists_the_gpus_anew(tmp_path, monkeypatch):
    runner = Runner(enabled_table())
    host = RealHost(str(tmp_path), runner=runner)
    monkeypatch.setattr(nvidia_smi.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(RealHost, "fresh", lambda self: RealHost(self.root, runner=self.runner))
    side = host.direct_mig_side()
    first = side.read()
    assert first.gpus and first.error is None
    listings = [call for call in runner.calls if call == ["nvidia-smi", "-L"]]
    side.read()
    assert len([call for call in runner.calls if call == ["nvidia-smi", "-L"]]) == len(listings) + 1
    host.inventory()  # the host's own inventory is read once, and an op looks its GPU's index up there
    before = len(runner.calls)
    side.apply(MigOp(kind="destroy", gpu=first.gpus[0].uuid, gi=1, ci=0))
    assert ["nvidia-smi", "-L"] not in runner.calls[before:before + 1]
    assert runner.calls[before][:4] == ["nvidia-smi", "mig", "-i", str(first.gpus[0].index)]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's MIG side: read the GPUs' MIG layout, and carry out one ``MigOp``.

Reading and changing MIG instances is root's (the driver's MIG capabilities under
``/proc/driver/nvidia/capabilities/mig`` are root's), so, like the kubelet, the MIG side is reached by whoever
does root's work (``node/writers.py``): root reads ``nvidia-smi`` itself (``RealMigSide``, ``node/mig_smi.py``) or
the fakehw file (``FakeMigSide``, ``node/fakehw_mig.py``); any other account asks the root helper
(``HelperMigSide``, ``node/helper_client.py``), which checks each op against the claims it reads itself
(``domain/mig/guard.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.mig.model import MigDone, MigNode, MigOp
    from ansible_collections.bcd.devices.plugins.module_utils.node.commands import TextRunCommand


class MigSide(Protocol):
    """Who reads and changes the node's MIG layout."""

    def read(self) -> MigNode:
        """Every GPU of the inventory with its MIG mode, capability, instances, and the processes using GPUs."""

    def apply(self, op: MigOp) -> MigDone:
        """Carry out ``op``; what the tool (or the helper) refused is ``MigDone.error``, never raised."""


class RealMigSide:
    """``nvidia-smi`` run by this process (root). Each ``read`` lists the GPUs anew (``fresh_inventory``): a change
    gives its MIG devices fresh UUIDs, which a run reads back to record and journal them. An op finds its GPU's
    index in the ``inventory`` read once (an index does not change with the layout)."""

    def __init__(self, runner: TextRunCommand, inventory: Callable[[], Inventory],
                 fresh_inventory: Callable[[], Inventory]) -> None:
        self.runner = runner
        self.inventory = inventory
        self.fresh_inventory = fresh_inventory

    def read(self) -> MigNode:
        from ansible_collections.bcd.devices.plugins.module_utils.node.mig_smi import read_mig  # pylint: disable=import-outside-toplevel
        return read_mig(self.runner, self.fresh_inventory())

    def apply(self, op: MigOp) -> MigDone:
        from ansible_collections.bcd.devices.plugins.module_utils.node.mig_smi import apply_mig  # pylint: disable=import-outside-toplevel
        return apply_mig(self.runner, self.inventory(), op)


class FakeMigSide:
    """The fakehw file's GPUs: read from it, changed in it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> MigNode:
        from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import read_mig_file  # pylint: disable=import-outside-toplevel
        return read_mig_file(self.path)

    def apply(self, op: MigOp) -> MigDone:
        from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw_mig import apply_mig  # pylint: disable=import-outside-toplevel
        return apply_mig(self.path, op)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vendor spec's MIG devices against the node's (``domain/cdi/staleness.mig_differences``, issue 48)."""

from __future__ import annotations

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import (
    MAX_PATHS,
    check_vendor,
    mig_differences,
    stale_condition,
)
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Gpu, Inventory, MigInstance
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.cdi.test_runtimes import Probe

GPU = "GPU-5f1c2a90-0000-4000-8000-000000000001"
OLD = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"
KEPT = "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"
NEW = "MIG-0b1e7c3a-4d5f-5a6b-8c7d-9e0f1a2b3c4d"
EDITS = {"deviceNodes": [{"path": "/dev/nvidia0"}]}


def spec(*names):
    return VendorSpec(path="/var/run/cdi/nvidia.yaml", cdi_version="0.5.0",
                      devices=dict((name, dict(EDITS)) for name in names))


def node(*instances, **fields):
    return Inventory(gpus=[Gpu(uuid=GPU, index=0, mig=tuple(MigInstance(gi, ci, uuid) for gi, ci, uuid in instances))],
                     **dict({"source": "nvml"}, **fields))


def test_a_gone_mig_device_and_a_new_one_are_each_a_difference_and_the_new_one_is_unnamed():
    lines, unnamed = mig_differences(spec("0", GPU, OLD, KEPT), node((1, 0, KEPT), (2, 0, NEW)))
    assert lines == ["it names %s but the node has no such MIG device" % OLD, "%s gi2/ci0 (%s) is not in it" % (GPU, NEW)]
    assert unnamed == {NEW.lower(): "%s gi2/ci0" % GPU}  # by lower-case UUID


def test_names_are_compared_without_case():
    lines, unnamed = mig_differences(spec(GPU, KEPT.upper()), node((1, 0, KEPT)))
    assert (lines, unnamed) == ([], {})


def test_nothing_is_compared_without_an_inventory_a_wsl_spec_or_uuid_names():
    assert mig_differences(spec(GPU, OLD), None) == ([], {})
    assert mig_differences(spec(GPU, OLD), node((1, 0, NEW), source="none")) == ([], {})
    assert mig_differences(spec(GPU, OLD), node((1, 0, NEW), error="NVML could not list the GPUs: x")) == ([], {})
    assert mig_differences(spec("all"), node((1, 0, NEW))) == ([], {})
    assert mig_differences(spec("0", "0:0"), node((1, 0, NEW))) == ([], {})  # index names: its own warning says so


def test_check_vendor_puts_the_mig_differences_after_the_driver_and_before_the_device_nodes():
    checked = check_vendor(spec(GPU, OLD), {}, Probe(nodes={}), node((1, 0, NEW)))
    assert checked.stale == ["it names %s but the node has no such MIG device" % OLD,
                             "%s gi1/ci0 (%s) is not in it" % (GPU, NEW), "device node /dev/nvidia0 is missing"]
    assert checked.unnamed_mig_device(NEW.upper()) == "%s gi1/ci0" % GPU
    assert checked.unnamed_mig_device(OLD) is None and checked.unnamed_mig_device(None) is None
    assert stale_condition(checked)["message"].endswith(
        "; new holds get only its true edits, and one on a MIG device it does not name is refused (regenerate it: "
        "nvidia-ctk cdi generate, or restart nvidia-cdi-refresh)")
    # without the inventory, as before
    assert check_vendor(spec(GPU, OLD), {}, Probe(nodes={"/dev/nvidia0": (195, 0)})).stale == []


def test_each_side_is_compared_on_its_first_max_paths_entries():
    names = [GPU] + ["MIG-%08d-0000-5000-8000-000000000000" % i for i in range(MAX_PATHS + 5)]
    lines, unnamed = mig_differences(spec(*names), node())
    assert len(lines) == MAX_PATHS - 1 and unnamed == {}

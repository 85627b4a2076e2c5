# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI versions (``domain/cdi/versions.py``): the lowest version a spec's content allows, and how versions
compare."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import (
    KNOWN_VERSIONS,
    CdiVersionError,
    minimum_version,
    version_key,
)
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.domain.cdi.cdi_specs import (
    DEV,
    EDITS,
    EVERYTHING,
    GOOD_SPECS,
    HOLD,
    KUBE_HOLD,
    MOUNT,
    NETDEV,
    NODE,
    on_minimal,
    setting,
    with_base,
)


# --- minimum_version and version_key ----------------------------------------


@pytest.mark.parametrize("build, expected", [
    (on_minimal(), "0.3.0"),
    (on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, type="bind")])), "0.4.0"),
    (on_minimal(setting(EDITS + ("mounts",), [dict(MOUNT, type="")])), "0.3.0"),
    (on_minimal(setting(("containerEdits",), {"mounts": [dict(MOUNT, type="bind")]})), "0.4.0"),
    (on_minimal(setting(DEV + ("name",), "0")), "0.5.0"),
    (on_minimal(setting(DEV + ("name",), "a0")), "0.3.0"),
    (on_minimal(setting(NODE + ("hostPath",), "/h")), "0.5.0"),
    (on_minimal(setting(("annotations",), {"a": "b"})), "0.6.0"),
    (on_minimal(setting(("annotations",), {})), "0.3.0"),
    (on_minimal(setting(DEV + ("annotations",), {"a": "b"})), "0.6.0"),
    (on_minimal(setting(("kind",), "vendor.com/dev.ice")), "0.6.0"),
    (on_minimal(setting(("kind",), "vendor.com/device")), "0.3.0"),
    (on_minimal(setting(EDITS + ("additionalGids",), [1])), "0.7.0"),
    (on_minimal(setting(EDITS + ("additionalGids",), [])), "0.3.0"),
    (on_minimal(setting(("containerEdits",), {"intelRdt": {}})), "0.7.0"),
    (on_minimal(setting(EDITS + ("netDevices",), [NETDEV])), "1.1.0"),
    (on_minimal(setting(EDITS + ("intelRdt",), {"schemata": []})), "1.1.0"),
    (on_minimal(setting(EDITS + ("intelRdt",), {"enableMonitoring": True})), "1.1.0"),
    (with_base(HOLD), "0.7.0"),
    (with_base(KUBE_HOLD), "0.6.0"),
    (with_base(EVERYTHING), "1.1.0"),
    (lambda: GOOD_SPECS["nvidia/salilkadam_nvidia.yaml"], "0.5.0"),
    (lambda: GOOD_SPECS["nvidia/crazymax-buildx_wsl_nvidia-gpu.yaml"], "0.3.0"),
    (lambda: "garbage", "0.3.0"),
    (lambda: {"devices": "garbage", "containerEdits": 5}, "0.3.0"),
])
def test_minimum_version(build, expected):
    assert minimum_version(build()) == expected


def test_the_highest_requirement_wins():
    spec = on_minimal(
        setting(DEV + ("name",), "0"),
        setting(("annotations",), {"a": "b"}),
        setting(EDITS + ("mounts",), [dict(MOUNT, type="bind")]),
    )()
    assert minimum_version(spec) == "0.6.0"


@pytest.mark.parametrize("text, key", [
    ("0.3.0", (0, 3, 0)), ("0.10.0", (0, 10, 0)), ("1.1.0", (1, 1, 0)), ("v0.6.0", (0, 6, 0)),
])
def test_version_key(text, key):
    assert version_key(text) == key


def test_version_key_orders_numerically_not_as_text():
    assert sorted(["0.10.0", "0.9.0", "1.0.0", "0.6.0"], key=version_key) == [
        "0.6.0", "0.9.0", "0.10.0", "1.0.0",
    ]
    assert max(["0.6.0", "0.5.0", "0.7.0"], key=version_key) == "0.7.0"


@pytest.mark.parametrize("bad", ["", "0.6", "0.6.0.1", "x.y.z", "0.6.0-rc1", " 0.6.0", "01.0.0", None, 6, "0.6.0\n"])
def test_version_key_refuses_what_is_not_a_version(bad):
    with pytest.raises(CdiVersionError):
        version_key(bad)
    assert issubclass(CdiVersionError, ValueError)


def test_known_versions_are_ascending():
    assert list(KNOWN_VERSIONS) == sorted(KNOWN_VERSIONS, key=version_key)

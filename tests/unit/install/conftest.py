# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built artifact, once a session, for the tests that install it (artifact.py)."""

from __future__ import annotations

import pytest

from ansible_collections.bcd.devices.tests.unit.install.artifact import build


@pytest.fixture(scope="session")
def artifact(tmp_path_factory):
    """bcd-devices-<version>.tar.gz, built from this checkout as a release is built."""
    return build(tmp_path_factory.mktemp("dist"))

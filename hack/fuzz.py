#!/usr/bin/env python
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make fuzz: generated inputs thrown at every parser root runs (tests/fuzz/runner.py says how).

    hack/fuzz.py [--target NAME ...] [--count 10000] [--seed N] [--jobs N] [--list]
    hack/fuzz.py --target NAME --seed N --replay INDEX [--dump DIR]

It runs from .venv with the collection importable through .build (make creates the link).
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".build"))

from ansible_collections.bcd.devices.tests.fuzz.runner import main  # noqa: E402  pylint: disable=wrong-import-position

if __name__ == "__main__":
    sys.exit(main())

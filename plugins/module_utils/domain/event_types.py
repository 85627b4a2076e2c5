# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The types of the events a node journals and reports (``state/events.py`` signs them).

A bind and a release are attested (signed, so the control plane can trust which devices an
allocation has); a refusal is reported but says nothing about devices. The planner builds the
events (``domain/reports.py``), the actions journal them, the ledger settles on them.
"""

from __future__ import annotations

from typing import Tuple

ALLOCATION_BOUND = "AllocationBound"
ALLOCATION_RELEASED = "AllocationReleased"
ALLOCATION_FAILED = "AllocationFailed"

ATTESTED_TYPES = (ALLOCATION_BOUND, ALLOCATION_RELEASED)  # type: Tuple[str, ...]
EVENT_TYPES = (ALLOCATION_BOUND, ALLOCATION_RELEASED, ALLOCATION_FAILED)  # type: Tuple[str, ...]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a hold is refused: the failure reasons of the spec (devices-and-holds, "Failure reasons"), and
the one shape a refusal has from the input to the result (``Refusal``).

Each reason is the exact string the control plane and the user see in ``AllocationFailed``, in the module's
``failures`` and in ``bcd-holds``; every refusal in the code base names one of these constants, and
the checks of a new hold run in the order ``ORDER`` lists them (the first that fails decides).

Plain string constants, not ``enum.Enum`` members: a reason is journaled, signed, compared with what
the ledger read back and formatted into messages, and ``str()`` of a ``str`` enum member differs
between the Pythons the node code runs on (3.8 to 3.13).
"""

from __future__ import annotations

from typing import Dict, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.support.records import record


class Reason:
    """The failure reasons, by name."""

    UNSUPPORTED_BINDING = "unsupported-binding"
    NODE_UNPRIVILEGED = "node-unprivileged"
    UNSUPPORTED_DEVICE = "unsupported-device"
    DEVICE_MISSING = "device-missing"
    OVERLAP = "overlap"
    RESOURCES_EXHAUSTED = "resources-exhausted"
    # the request itself is malformed (a field, limits the node cannot apply, a CDI name); checked
    # while parsing, before the others
    INVALID_ASSIGNMENT = "invalid-assignment"


# The checks of a new hold, in the spec's order.
ORDER: Tuple[str, ...] = (Reason.UNSUPPORTED_BINDING, Reason.NODE_UNPRIVILEGED, Reason.UNSUPPORTED_DEVICE,
                          Reason.DEVICE_MISSING, Reason.OVERLAP, Reason.RESOURCES_EXHAUSTED)

REASONS: Tuple[str, ...] = ORDER + (Reason.INVALID_ASSIGNMENT,)


@record(frozen=True)
class Refusal:
    """An allocation refused, and why: one shape from the input (``ParsedInput.refusals``) through the phases
    (``Outcome.refusals``) and the ledger (``JournaledRefusal``: the refusal a pass journaled, with its
    generation) to the pass's result (``Plan.failures``, the module's ``failures``)."""

    allocation_id: str
    reason: str  # one of ``Reason``'s (the ledger may hold another a newer node wrote)
    message: str

    def to_dict(self, generation: int) -> Dict[str, Union[str, int]]:
        """The refusal as a pass returns it (``failures``), at the pass's ``generation``."""
        return {"allocation_id": self.allocation_id, "generation": generation, "reason": self.reason,
                "message": self.message}


def reason_shown(reason: str, message: str) -> str:
    """How a line for a person names the reason before ``message``: `` (<reason>)``, or nothing when the
    message already starts with it in CamelCase (``ResourcesExhausted: …``, the spec's wording for
    ``resources-exhausted``), so that the line says it once: ``refuse a1: ResourcesExhausted: …``."""
    camel = "".join(word.capitalize() for word in str(reason).split("-"))
    return "" if str(message).startswith(camel + ":") else " (%s)" % reason

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a node tool (``nvidia-smi``, ``virsh``) without a shell and read what it printed.

Every GPU and libvirt source shares these: a runner that never raises and always gives text, the
one-line reason a failed command shows, and an XML reader with a size bound. A tool's output that
cannot be understood is an ``InventoryError`` whose message is fit to show to a user.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from typing import Callable, Optional, Sequence, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError

# An injected runner may return bytes (AnsibleModule.run_command with encoding=None): run_tool decodes them.
RunCommand = Callable[[Sequence[str]], Tuple[int, Union[str, bytes], Union[str, bytes]]]
Which = Callable[[str], Optional[str]]
# A runner that gives text, as ``default_run_command`` does: what a host runs its tools with (its slices read the text).
TextRunCommand = Callable[[Sequence[str]], Tuple[int, str, str]]

COMMAND_TIMEOUT_S = 60
# Output larger than this is not a GPU listing; refuse it rather than parse it.
MAX_OUTPUT_CHARS = 16 * 1024 * 1024


class InventoryError(BcdError):
    """Output of a GPU or libvirt tool that cannot be understood. The message
    says what and is fit to show to a user."""


def default_run_command(argv: Sequence[str]) -> Tuple[int, str, str]:
    """Run ``argv`` without a shell; return ``(rc, stdout, stderr)``.

    Never raises: a missing program is rc 127, a timeout rc 124, any other
    start failure rc 126, each with the reason in stderr.
    """
    try:
        # bcd-holds runs this code too, with no AnsibleModule and so no run_command (ansible-test 2.21's pylint).
        proc = subprocess.run(  # pylint: disable=ansible-bad-function
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
            env=dict(os.environ, LC_ALL="C"),  # messages are matched in English
        )
    except FileNotFoundError as exc:
        return 127, "", "%s: not found (%s)" % (argv[0], exc)
    except subprocess.TimeoutExpired:
        return 124, "", "%s: timed out after %d s" % (argv[0], COMMAND_TIMEOUT_S)
    except (OSError, ValueError) as exc:
        return 126, "", "%s: cannot run (%s)" % (argv[0], exc)
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    return proc.returncode, out, err


def run_tool(run_command: RunCommand, argv: Sequence[str]) -> Tuple[int, str, str]:
    """``run_command`` that cannot raise and always returns text."""
    try:
        rc, out, err = run_command(list(argv))
    except Exception as exc:  # an injected runner that raised
        return 126, "", "%s: cannot run (%s)" % (argv[0], exc)
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    return rc, out or "", err or ""


def first_line(text: str, limit: int = 300) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line[:limit]
    return ""


def failure_text(argv: Sequence[str], rc: int, out: str, err: str) -> str:
    reason = first_line(err) or first_line(out) or "no output"
    return "`%s` failed (rc %s): %s" % (" ".join(argv), rc, reason)


def xml_int(element: ET.Element, path: str) -> Optional[int]:
    found = element.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    if not text.isdigit():  # "N/A", "Not Supported", hostile text
        return None
    return int(text)


def xml_text(element: ET.Element, path: str) -> Optional[str]:
    found = element.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip() or None


def parse_xml(text: str, what: str) -> ET.Element:
    if len(text or "") > MAX_OUTPUT_CHARS:
        raise InventoryError("%s: output too large" % what)
    # nvidia-smi names a DTD in a DOCTYPE; ElementTree never fetches it.
    try:
        return ET.fromstring(text or "")
    except ET.ParseError as exc:
        raise InventoryError("%s: not well-formed XML (%s)" % (what, exc))
    except (ValueError, RecursionError) as exc:
        raise InventoryError("%s: unreadable XML (%s)" % (what, exc))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is this root Python isolated from other accounts? The modules' check under ``become``.

``bcd-holds`` starts its Python with ``-I`` (the role's launcher): no user site, no
``PYTHON*`` variables, no current directory on ``sys.path``. A module runs in the Python
AnsiballZ starts, with flags this collection does not choose, so each module's ``main`` asks
``isolation_problems()`` first when it runs as root and refuses to go on (``fail_json``)
when any of these holds:

* a variable that makes the interpreter load or run other files is set (not empty):
  ``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP``, ``PYTHONUSERBASE``, ``PYTHONINSPECT``,
  ``PYTHONEXECUTABLE``, ``PYTHONPLATLIBDIR``, ``PYTHONPYCACHEPREFIX`` (bytecode is read from
  there instead of beside the source). (``PYTHONWARNINGS`` and ``PYTHONBREAKPOINT`` may name a
  module to import, but only through ``sys.path``, which is checked below; Molecule and CI set
  the first.)
* an entry of ``sys.path`` (the stdlib, the site-packages, AnsiballZ's payload zip, and the
  user site ``~/.local/lib/pythonX.Y/site-packages``, which ``site`` puts there when it
  exists) is, or lies under, a file or directory another account owns or may write: owned by
  a uid other than 0, or group- or other-writable. A world-writable directory with the sticky
  bit, such as ``/tmp``, counts as root's when what lies in it on the way is root's (not
  when it is the entry itself, or the nearest parent of a missing entry: anyone could add a
  file there). Both the path as written and the path with its links resolved are walked up
  to ``/``. The empty entry (the current directory) is refused outright.

What a normal run looks like and passes: ``sudo`` (or ``su``) resets the environment and sets
``HOME`` to root's; AnsiballZ removes the current and the script's directory from
``sys.path`` and puts first its payload zip, written by root in a 0700 directory of its own
under ``$TMPDIR`` (``/tmp``); every other entry is the system Python's, root's.

What it cannot do: code that ran while the interpreter started (a ``.pth`` file in a user
site, a ``PYTHONSTARTUP``) ran before this check. The check makes such a run stop before
root writes anything, and names the cause; it does not undo what that code did. Keeping the
account's home from being a directory it owns (the role sets ``/nonexistent``) is what keeps
its files out of root's interpreter in the first place.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any, List, Mapping, Optional, Protocol, Sequence, Set

# Variables that make the interpreter load or run something other than its own files.
STEERING_VARIABLES = (
    "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX",
)


def _others_may_change(path: str, child_is_roots: bool = True) -> Optional[str]:
    """Why an account other than root could change what lies at ``path``; None if none can."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid != 0:
        return "%s is owned by uid %d" % (path, st.st_uid)
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if not (sticky and child_is_roots):
            return "%s is writable by its group or by others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _walk_problem(path: str) -> Optional[str]:
    """The first reason another account could change ``path`` or one of its parents, walking up."""
    while not os.path.lexists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    # The entry itself (or the nearest parent of a missing one) is where a file would be added:
    # a sticky world-writable directory lets anyone add one, so it is root's only on the way up.
    child_is_roots = False
    while True:
        problem = _others_may_change(path, child_is_roots)
        if problem:
            return problem
        try:
            child_is_roots = os.stat(path).st_uid == 0
        except OSError:
            child_is_roots = False
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def path_problem(entry: str) -> Optional[str]:
    """Why another account could change what is imported through ``entry``; None if none can.

    ``entry`` and each of its parents up to ``/`` are checked (a missing part from the nearest
    one that exists), as written and with its links resolved: owned by root and not writable by
    group or others, except a sticky world-writable directory (``/tmp``) whose child on the way
    is root's."""
    if entry in ("", "."):
        return "the current directory is on sys.path"
    written = os.path.abspath(entry)
    resolved = os.path.realpath(entry)
    for path in (written, resolved) if resolved != written else (written,):
        problem = _walk_problem(path)
        if problem:
            return problem
    return None


def _user_site() -> Optional[str]:
    """The user site directory, when ``site`` would put it on ``sys.path`` (None otherwise)."""
    try:
        import site
        if not site.ENABLE_USER_SITE:
            return None
        return site.getusersitepackages()
    except Exception:  # pylint: disable=broad-except
        return None


def isolation_problems(environ: Optional[Mapping[str, str]] = None, path: Optional[Sequence[str]] = None,
                       user_site: Optional[str] = None) -> List[str]:
    """Every reason this interpreter is not isolated from other accounts (empty: it is).

    The arguments replace ``os.environ``, ``sys.path`` and the user site (``site``) for tests."""
    environ = os.environ if environ is None else environ
    path = sys.path if path is None else path
    user_site = _user_site() if user_site is None else user_site
    problems: List[str] = []
    for name in STEERING_VARIABLES:
        if environ.get(name):
            problems.append("%s is set" % name)
    seen: Set[str] = set()
    for entry in path:
        if entry in seen:
            continue
        seen.add(entry)
        problem = path_problem(entry)
        if problem and user_site and entry == user_site:
            problems.append("the user site %s (under $HOME) is on sys.path and can be changed by another account: %s"
                            % (entry, problem))
        elif problem:
            problems.append("sys.path entry %r can be changed by another account: %s" % (entry, problem))
    return problems


class FailsJson(Protocol):
    """What ``refuse_unless_isolated`` asks of a module: Ansible's ``AnsibleModule.fail_json``."""

    def fail_json(self, msg: str, **kwargs: Any) -> Any:
        """End the module run with ``msg`` as its failure."""


def refuse_unless_isolated(module: FailsJson) -> None:
    """Fail ``module`` (``fail_json``) when it runs as root in a Python other accounts can steer."""
    if os.geteuid() != 0:
        return
    problems = isolation_problems()
    if problems:
        module.fail_json(msg="refusing to run as root in a Python another account can steer: %s "
                             "(run it with become's clean environment, from root's Python; docs/security.md, "
                             "'Root processes are isolated from the account')" % "; ".join(problems))

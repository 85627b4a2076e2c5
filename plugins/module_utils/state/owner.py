# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root acts as the state directory's owner: ``NodeState.as_owner`` (``state/store.py``).

Root never acts through a path the state directory's owner controls: when this process is root and the
directory belongs to another account (the ``bcd`` account of the role's deployment), every state operation
runs with that account's uid, gid and group list, so a link it planted there leads nowhere root can reach.
Regular single-link files root left there (from a root-mode install) are first handed to the owner by file
descriptor; links never are. When the directory is root's again (the helper turned off), the account's files
are handed to root the same way (``StateFiles.adopt``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Iterator

from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import StateFiles
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import StateFileError


class StateOwner:
    """The owner of the state directory at ``path`` (``node_path`` in messages), whose rights root takes."""

    def __init__(self, path: str, node_path: str, files: StateFiles) -> None:
        self.path = path
        self.node_path = node_path
        self.files = files
        self._adopted = False
        self._dropped = False

    @contextlib.contextmanager
    def acting(self) -> Iterator[None]:
        """Within this block, a root process has the state directory owner's uid, gid and groups."""
        if self._dropped or os.geteuid() != 0:
            yield
            return
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            yield  # a pass that creates the directory creates it as root's
            return
        if stat.S_ISLNK(info.st_mode):
            raise StateFileError(self.node_path, "the state directory is a symbolic link; refusing to follow it")
        if not stat.S_ISDIR(info.st_mode):
            raise StateFileError(self.node_path, "the state directory is not a directory")
        if not self._adopted:
            self.files.adopt()
            self._adopted = True
        if info.st_uid == 0:
            yield
            return
        groups, egid = os.getgroups(), os.getegid()
        os.setgroups([info.st_gid])
        os.setegid(info.st_gid)
        os.seteuid(info.st_uid)
        self._dropped = True
        try:
            yield
        finally:
            self._dropped = False
            os.seteuid(0)
            os.setegid(egid)
            os.setgroups(groups)

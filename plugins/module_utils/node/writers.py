# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who does root's work for a host: this process, or the root helper.

A pass needs root for four things: writing and removing a hold's node files,
making and stopping hold slices, and asking the kubelet (its socket is root's).
A host is handed one writer that does them: ``DirectWriter`` does them here
(privileged only when this process is root), ``HelperWriter`` sends them to the
root helper over its socket. The host, and everything above it, never asks which.

No bytes cross the helper's socket: ``HelperWriter`` sends what a file is
rendered from (the hold's checked assignment and generation) and what a slice
is built from (its limits), and root renders and builds them itself
(docs/security.md).
"""

from __future__ import annotations

import os

from ansible_collections.bcd.devices.plugins.module_utils.domain.assignment import ALLOCATION_ID_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import cdi_spec_path, damaged_spec_path, env_file_path
from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import allocation_of
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import remove_file, rename_aside, write_atomic

# The node files a pass writes, by kind: the root helper accepts exactly these.
NODE_FILE_KINDS = {
    "cdi": cdi_spec_path,
    "allocation-env": env_file_path,
}
NODE_FILE_MODE = 0o644


def node_file_path(kind, allocation_id):
    """The node path of a file of ``kind`` for a checked allocation id."""
    if kind not in NODE_FILE_KINDS:
        raise ValueError("unknown node file kind %r" % (kind,))
    if not isinstance(allocation_id, str) or not ALLOCATION_ID_RE.fullmatch(allocation_id):
        raise ValueError("allocation id %r is not valid" % (allocation_id,))
    return NODE_FILE_KINDS[kind](allocation_id)


class DirectWriter:
    """Root's work done by this process, on ``host``'s own files and slice backend."""

    def __init__(self, host):
        self.host = host

    @property
    def privileged(self):
        return os.geteuid() == 0

    def write_node_file(self, kind, allocation_id, content, hold=None):
        """Write a hold's file atomically (0644); ``hold`` (what it was rendered from) is the helper's."""
        write_atomic(self.host.path(node_file_path(kind, allocation_id)), content, NODE_FILE_MODE)

    def remove_node_file(self, kind, allocation_id):
        remove_file(self.host.path(node_file_path(kind, allocation_id)))

    def set_aside_spec(self, allocation_id, now):
        """A damaged spec renamed aside in /etc/cdi, never deleted."""
        rename_aside(self.host.path(node_file_path("cdi", allocation_id)),
                     self.host.path(damaged_spec_path(allocation_id, now)))

    def apply_slice(self, op):
        """Create a slice or set its limits (an ``actions.SliceApply``)."""
        self.host.slices.apply(op.name, op.properties, op.hugetlb_max)

    def stop_slice(self, name):
        self.host.slices.remove(name)

    def kube_side(self, host):
        return host.direct_kube_side()


class HelperWriter:
    """Root's work sent to the root helper (``node.helper_client.HelperClient``)."""

    privileged = True

    def __init__(self, client):
        self.client = client

    def write_node_file(self, kind, allocation_id, content, hold=None):
        """The helper renders the file itself from ``hold``; ``content`` never leaves this process."""
        self.client.request({"op": "hold.write", "kind": kind, "hold": hold})

    def remove_node_file(self, kind, allocation_id):
        self.client.request({"op": "hold.remove", "kind": kind, "allocation_id": allocation_id})

    def set_aside_spec(self, allocation_id, now):
        """Root names the file it sets aside by its own clock."""
        self.client.request({"op": "hold.set_aside", "allocation_id": allocation_id})

    def apply_slice(self, op):
        self.client.request({"op": "slice.apply", "allocation_id": allocation_of(op.name), "limits": op.limits})

    def stop_slice(self, name):
        self.client.request({"op": "slice.stop", "allocation_id": allocation_of(name)})

    def kube_side(self, host):
        """Root asks the kubelet itself; anyone else asks through the helper."""
        if os.geteuid() == 0:
            return host.direct_kube_side()
        from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import HelperKubeSide  # pylint: disable=import-outside-toplevel
        return HelperKubeSide(self.client)

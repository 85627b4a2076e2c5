# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every bcd.devices module shares: which node, and how root's work is done."""

from __future__ import annotations


class ModuleDocFragment:
    """``bcd.devices.node`` (root, fakehw, state_dir), ``bcd.devices.node.helper`` (helper_socket),
    ``bcd.devices.node.runtimes`` (cdi_runtimes), ``bcd.devices.node.lock`` (lock_timeout) and
    ``bcd.devices.node.read_only`` (the attributes of a module that writes nothing)."""

    DOCUMENTATION = r"""
options:
  root:
    description:
      - Prefix of every node path (C(/etc/cdi), C(/run/bcd), the state directory, the fakehw meminfo). A
        test host is a directory.
    type: path
    default: /
  fakehw:
    description:
      - A fakehw hardware file (YAML or JSON) describing GPUs, MIG instances, VMs and pods; makes the
        host fakehw, so no GPU is needed. Its format is in C(docs/fakehw.md); C(hack/fakehw_node.py)
        makes one.
    type: path
  state_dir:
    description:
      - The node's state directory under O(root) (journal, ledger, node key, stored input, pass lock).
    type: path
    default: /var/lib/bcd
attributes:
  action_group:
    description: Use C(group/bcd.devices.all) in C(module_defaults) to set the options every module of the group
      takes (O(root), O(fakehw), O(state_dir), O(lock_timeout)) once for a play.
    support: full
    membership:
      - bcd.devices.all
"""

    HELPER = r"""
options:
  helper_socket:
    description:
      - The root helper's socket (C(bcd-holds helper), installed by the role C(bcd.devices.bcd_holds)).
      - When set, root's work (CDI specs, env files, slices, asking the kubelet) goes through it, so the
        module can run as an unprivileged user; a write the helper refuses is retried like any failed write.
    type: path
"""

    RUNTIMES = r"""
options:
  cdi_runtimes:
    description:
      - The container runtimes on the node that load CDI specs, so every hold's spec is written at a
        C(cdiVersion) all of them load. A hold whose content needs a newer version than the oldest of them
        loads is refused with C(invalid-assignment), naming the runtime, its version and the field.
      - V(auto) finds them on the node (C(containerd), C(dockerd), C(podman), C(crio) in the usual
        C(bin)/C(sbin) directories, asked C(--version); nothing is started). A fakehw host lists them in its
        file (C(runtimes)).
      - 'Or a list of C({name, version}), C(name) one of V(containerd), V(docker), V(podman), V(cri-o); for
        example C([{name: podman, version: "5.4.2"}]). Which CDI version each release loads is the
        collection''s own table (C(docs/runtimes-and-upgrades.md)).'
      - The timers' passes on the node use what the last run was given.
    type: raw
    default: auto
"""

    LOCK = r"""
options:
  lock_timeout:
    description: Seconds to wait for another pass on the same node (the pass lock under O(state_dir)) to finish.
    type: float
    default: 120
"""

    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
    description: Writes nothing, so there is nothing to show.
  idempotent:
    support: full
    description: Reads only.
"""

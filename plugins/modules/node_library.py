#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd.devices.node_library: run one of the collection's modules from the node's installed
library, when it is the controller's code.

The action plugins of ``holds``, ``holds_info``, ``events``, ``gpu_busy``, ``gpu_reset``, ``maintenance`` and ``mig_layout`` run this
first (plugins/plugin_utils/node_library.py). AnsiballZ ships every ``module_utils`` a module's source imports,
wherever the import stands, so this file imports only ``node/library.py`` (standard library alone) and
reaches the module's code through the verified directory by name: its payload is ansible-core's own
(what ``ping`` ships) and about 10 KB.

Handing the task's options to that module takes ansible-core's private names; ``core_module_args`` is the one
place that touches them, and tests/unit/plugins/modules/test_ansible_core_privates.py checks them under every
ansible-core release the collection supports."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_library
short_description: "Internal: run a bcd.devices module from the node's installed library (for the collection's action plugins)"
version_added: 0.3.0
description:
  - Internal to the collection - the action plugins of M(bcd.devices.holds), M(bcd.devices.holds_info),
    M(bcd.devices.events), M(bcd.devices.gpu_busy), M(bcd.devices.gpu_reset), M(bcd.devices.maintenance) and M(bcd.devices.mig_layout) run it
    so that a node with the role's library runs that code instead of the copy Ansible would ship and compile on
    every task. A task names those modules, not this one.
  - It runs O(module) with O(module_args) from the library at O(path) only when every C(*.py) under it has
    the content whose digest is O(digest), and every file and directory of it and above it is root's and not
    writable by others, without links. Otherwise it returns C(node_library_refused) and runs nothing; the action plugin
    then runs the module as Ansible ships it.
  - It writes nothing; Python reads the library's root-owned byte code where it matches the source.
author:
  - bcd.devices developers (@bcd-devices)
options:
  module:
    description: The collection's module to run.
    type: str
    required: true
    choices: [holds, holds_info, events, gpu_busy, gpu_reset, maintenance, mig_layout]
  module_args:
    description: Its options, as the task gave them.
    type: dict
    default: {}
  path:
    description: The library's C(module_utils) directory on the node (C(<prefix>/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils)).
    type: path
    required: true
  digest:
    description: The SHA-256 the controller computed over its collection's C(module_utils) (each C(*.py) file's path and content).
    type: str
    required: true
  install:
    description:
      - The role P(bcd.devices.bcd_holds#role)'s check of its own install, on its own tasks only (the task variable
        C(bcd_devices_node_install)) - C(manifest), the node path of the record the role wrote after its last full
        install, and C(digest), what the controller computed over everything that install reads.
      - Where the record is missing, is not of that digest, or a file, directory, link or account it lists is no longer
        as recorded, it returns C(node_install_stale) and runs nothing, the library's refusal included.
    type: dict
    suboptions:
      manifest:
        description: The record's path on the node.
        type: path
        required: true
      digest:
        description: The digest the record must carry.
        type: str
        required: true
attributes:
  check_mode:
    support: full
    description: The module it runs does what its own check mode does.
  diff_mode:
    support: full
    description: The module it runs returns what its own diff mode returns.
notes:
  - docs/performance.md ("The node library") and docs/security.md say when the library runs and why that trusts nothing new.
"""

EXAMPLES = r"""
# Not for tasks: name bcd.devices.holds and its action plugin runs this where the node has the library.
- name: Converge the node's holds (runs the node library when the role installed the controller's code)
  bcd.devices.holds:
    generation: 42
    devices: "{{ devices }}"
  become: true
  register: converged   # converged.ran_from says which code ran: node-library or bundled
"""

RETURN = r"""
node_library_refused:
  description:
    - Why the library may not run (missing, another version, a link, a file another account owns or may
      write), when it did not run. Otherwise the result is the module's own.
  returned: when the library may not run
  type: str
  sample: /usr/local/lib/bcd-holds/ansible_collections/bcd/devices/plugins/module_utils is not installed
node_install_stale:
  description:
    - With O(install), why the node's install is not the one the role would make now; nothing ran.
  returned: with O(install), when the install is not as recorded
  type: str
  sample: /etc/systemd/system/bcd-holds-retry.timer is missing
"""

import gc
import importlib
import json
from typing import Any, Callable, Dict, Optional, Tuple

from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common import json as module_json

from ansible_collections.bcd.devices.plugins.module_utils.node import library

MODULES = ("holds", "holds_info", "events", "gpu_busy", "gpu_reset", "maintenance", "mig_layout")


def core_module_args() -> Tuple[Dict[str, Any], Callable[[Dict[str, Any]], None]]:
    """``(raw, hand_over)``: the task's options as ansible-core handed them to this process (``_ansible_*``
    settings included), and ``hand_over(params)``, which makes ``params`` the options the next ``AnsibleModule``
    of this process reads, as if the controller had sent them.

    The one place this collection uses ansible-core's private names (a porting guide's one stop). What each is
    for, and what breaks if a release changes it (the test per release fails first):

    * ``basic._load_params()``: decodes the task's options once, the way ``AnsibleModule`` does, so that
      ``sent_by_the_action`` can take the action plugin's options without an ``AnsibleModule`` of its own (one
      would decode, copy, scan and log every option of the task a second time) and the ``_ansible_*`` settings
      can be passed on. Renamed or gone: every task run through the node library fails at its start; returning
      anything but the task's options: the options go to ``AnsibleModule``, which refuses them.
    * ``basic._ANSIBLE_PROFILE``: the serialization profile the controller encoded the options with
      (``legacy`` or ``modern``); the options handed over are encoded with the same profile, so that what it
      carries beyond plain JSON (dates and times, which ``modern`` tags) decodes in the library's module as it
      did here. Gone or of another meaning: ``hand_over`` fails, or the library's module decodes its options
      otherwise than Ansible sent them.
    * ``basic._ANSIBLE_ARGS``: the encoded options ``_load_params`` (and so ``AnsibleModule``) decodes;
      replacing it is how the module run from the library gets its own options. If ``AnsibleModule`` stopped
      reading it (kept a decoded copy instead), the library's module would see this module's options and
      refuse them as unsupported parameters.
    * ``common.json.get_module_encoder`` and ``Direction``: public names (no underscore) but documented for
      no module; the JSON encoder of a profile for the controller-to-module direction, the one the controller
      used. A new signature: ``hand_over`` fails with a ``TypeError``."""
    raw = basic._load_params()
    profile = str(basic._ANSIBLE_PROFILE)

    def hand_over(params: Dict[str, Any]) -> None:
        encoder = module_json.get_module_encoder(profile, module_json.Direction.CONTROLLER_TO_MODULE)
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": params}, cls=encoder).encode()

    return raw, hand_over


def run_from_library(module_name: str, module_args: Dict[str, Any], raw: Dict[str, Any],
                     hand_over: Callable[[Dict[str, Any]], None]) -> None:
    """Run the module's ``main`` (from the library, now the collection's ``module_utils``) with the task's
    options and Ansible's own ``_ansible_*`` settings (``raw``'s), handed over by ``hand_over``
    (``core_module_args``): it exits the process with its own result."""
    params = dict((key, value) for key, value in raw.items() if key.startswith("_ansible_"))
    params.update(module_args)
    params["_ansible_module_name"] = "bcd.devices." + module_name
    hand_over(params)
    # What the import makes (modules, classes, functions) lives as long as the process: the cyclic collector
    # has nothing to find in it, so it does not run while the library is imported, and what it made is frozen
    # with Ansible's before the pass (docs/performance.md, "Speed tricks, measured (issue 47)"; a trick
    # support/speed.py names, written here: this module's payload is node/library.py alone)
    gc.disable()
    try:
        entry = importlib.import_module("%s.entry.modules.%s" % (library.PACKAGE, module_name))
    finally:
        gc.freeze()
        gc.enable()
    entry.main(basic)


SPEC = dict(
    module=dict(type="str", required=True, choices=list(MODULES)),
    module_args=dict(type="dict", default={}),
    path=dict(type="path", required=True),
    digest=dict(type="str", required=True, no_log=False),
    install=dict(type="dict", options=dict(
        manifest=dict(type="path", required=True),
        digest=dict(type="str", required=True, no_log=False),
    )),
)


def sent_by_the_action(raw: object) -> Optional[Dict[str, Any]]:
    """The options when they are exactly what the action plugin sends (one of ``MODULES``, a dict of
    options, an absolute path, a digest), else None. The module run from the library validates its own
    options, so these need no ``AnsibleModule`` of their own: one would decode, copy, scan and log every
    option of the task a second time (docs/performance.md, "Round six")."""
    if not isinstance(raw, dict):
        return None
    options = dict((key, value) for key, value in raw.items() if not key.startswith("_ansible_"))
    if set(options) - set(SPEC) or not set(options) >= {"module", "path", "digest"}:
        return None
    options.setdefault("module_args", {})
    install = options.get("install")
    if options["module"] not in MODULES or not isinstance(options["module_args"], dict) \
            or not isinstance(options["path"], str) or not options["path"].startswith("/") \
            or not isinstance(options["digest"], str):
        return None
    if install is not None and not (isinstance(install, dict) and set(install) == {"manifest", "digest"}
                                    and isinstance(install["manifest"], str) and install["manifest"].startswith("/")
                                    and isinstance(install["digest"], str)):
        return None
    return options


def main() -> None:
    # What Ansible has imported by now lives as long as the process: frozen, the cyclic collector no longer
    # walks it at every collection the converger's imports and pass trigger (docs/performance.md, "Round six").
    gc.freeze()
    raw, hand_over = core_module_args()
    options = sent_by_the_action(raw)
    if options is None:  # not from the action plugin: AnsibleModule says what is wrong, or normalizes it
        options = AnsibleModule(argument_spec=SPEC, supports_check_mode=True).params
    why = library.refusal(options["path"], options["digest"])
    install = options.get("install")
    if install:  # the role's own tasks: its install as recorded, the library included, or nothing runs
        why = why or library.install_refusal(install["manifest"], install["digest"])
        if why is not None:
            AnsibleModule(argument_spec=SPEC, supports_check_mode=True).exit_json(changed=False, node_install_stale=why)
    if why is not None:
        AnsibleModule(argument_spec=SPEC, supports_check_mode=True).exit_json(changed=False, node_library_refused=why)
    library.use_library(options["path"])
    run_from_library(options["module"], options["module_args"] or {}, raw, hand_over)


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's half of running a module from the node's installed library (docs/performance.md,
"The node library"): the action plugins of the modules that can.

Whether a node has the library is known on the controller, from what the task already has, before anything
runs there (``library_wanted``): the host variable ``bcd_devices_node_library`` (a node path under the module's
``root`` option, or true for ``/usr/local/lib/bcd-holds``; false skips the library), which the role sets for
the rest of its run, else the local fact ``ansible_local.bcd_holds`` the role writes on the node (fact gathering
reads it). A node with neither runs the module as Ansible ships it, once, and says so at ``-v`` only.

Where a library is named, the task's module runs as ``bcd.devices.node_library``, a payload of ansible-core's
own files and one small verifier, with the digest of this controller's ``module_utils``; where the node's
library is that code and root's alone, the module's result is that run's. Otherwise the node answers why not
(missing, another version, altered, unsafe), the module runs as Ansible ships it, and the task warns with the
reason. The result says which ran in ``ran_from``. An async task runs the shipped module.

Either way ansible-core builds the module's payload here, and ``fewer_collections`` (``support/speed.py``,
with the heap frozen) has Python's cyclic collector walk less while it does: the build parses every file the
module can reach, some million objects for ``bcd.devices.holds`` as shipped (measured in docs/performance.md,
"The payload build" and "Speed tricks, measured (issue 47)")."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.bcd.devices.plugins.module_utils.node import library
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import fewer_collections

display = Display()
VARIABLE = "bcd_devices_node_library"
# The role's own tasks set it (a task variable): {"manifest": node path, "digest": ...}. The task then runs only
# where the node's install is the one the role would make now, and is skipped, saying why, elsewhere.
INSTALL_VARIABLE = "bcd_devices_node_install"
# The fact such a task sets where the install stood and its module ran from the library: the later tasks of the
# run take the library from it (read from ansible_facts, never as an injected top-level variable).
INSTALLED_FACT = "bcd_devices_installed_library"
FACT = "bcd_holds"
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
_DIGEST: list[str] = []


def controller_digest() -> str:
    """The digest of this controller's collection ``module_utils``, once per process."""
    if not _DIGEST:
        _DIGEST.append(library.library_digest(MODULE_UTILS))
    return _DIGEST[0]


# Once, when the strategy imports the action plugins in ansible-playbook's own process: every worker it forks
# for a host inherits the digest instead of reading and hashing module_utils again (docs/performance.md, "Round six").
controller_digest()


def wanted_library(value: object) -> Optional[str]:
    """The library's node path from the variable's value, or None when the node library is not wanted."""
    if value is None or value is True:
        return library.DEFAULT_LIBRARY
    if value is False or str(value).strip().lower() in ("", "false", "no", "off", "0"):
        return None
    return str(value)


def local_facts(task_vars: Dict[str, Any]) -> Dict[str, Any]:
    """The host's local facts (``ansible_local``: ``facts.d`` on the node, read by fact gathering), from the
    injected variable or from ``ansible_facts`` (where injecting facts as variables is off); {} when none."""
    for found in (task_vars.get("ansible_local"), (task_vars.get("ansible_facts") or {}).get("ansible_local"),
                  (task_vars.get("ansible_facts") or {}).get("local")):
        if isinstance(found, dict):
            return found
    return {}


def library_wanted(task_vars: Dict[str, Any],
                   template: Callable[[Any], Any] = lambda value: value) -> Tuple[Optional[str], str]:
    """``(path, why)``: the library's node path to run from, or None for the module as shipped, and what said
    so. Nothing here runs on the node: the variable when set, else the fact the role's run set (``INSTALLED_FACT``),
    else the role's local fact, else no library.
    ``template`` renders a variable's value (a task's ``vars`` reach the action plugin as they were written)."""
    value = template(task_vars.get(VARIABLE))
    if value is not None:
        return wanted_library(value), "the variable %s" % VARIABLE
    installed = (task_vars.get("ansible_facts") or {}).get(INSTALLED_FACT)
    if isinstance(installed, str) and installed.startswith("/"):
        return installed, "the fact %s (the role's run found its install)" % INSTALLED_FACT
    fact = local_facts(task_vars).get(FACT)
    if fact is not None:
        where = fact.get("node_library") if isinstance(fact, dict) else None
        if isinstance(where, str) and where.startswith("/"):
            return where, "the local fact ansible_local.%s" % FACT
        return library.DEFAULT_LIBRARY, "the local fact ansible_local.%s (without a node_library path)" % FACT
    return None, "neither the variable %s nor the local fact ansible_local.%s names one" % (VARIABLE, FACT)


class NodeLibraryAction(ActionBase):
    """Runs ``MODULE`` from the node library when it may, else as shipped."""

    MODULE = ""
    _supports_check_mode = True
    _supports_async = True

    def _configure_module(self, *args: Any, **kwargs: Any) -> Any:
        """ansible-core's payload build (``ActionBase._configure_module``, its arguments passed on as given),
        under ``fewer_collections``. A release that renamed the method would build as before, only slower."""
        with fewer_collections(freeze=True):
            return super()._configure_module(*args, **kwargs)

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        name = "bcd.devices." + self.MODULE
        args = dict(self._task.args)
        wrap_async = self._task.async_val and not self._connection.has_native_async
        where, why = library_wanted(task_vars, self._templar.template)
        if wrap_async:
            where, why = None, "an async task runs the module as shipped"
        if where is None:
            display.v("%s ran as Ansible ships it: no node library (%s)" % (name, why), host=self._task.delegate_to
                      or task_vars.get("inventory_hostname"))
        ran = None
        install = self._templar.template(task_vars.get(INSTALL_VARIABLE))
        if install and where is None:
            raise AnsibleActionFail("%s names the install to check, and no node library is named (%s)" % (INSTALL_VARIABLE, why))
        if where is not None:
            path = library.library_path(args.get("root") or "/", where)
            options = dict(module=self.MODULE, module_args=args, path=path, digest=controller_digest())
            if install:
                if not (isinstance(install, dict) and set(install) == {"manifest", "digest"}):
                    raise AnsibleActionFail("%s must be a dict of manifest and digest" % INSTALL_VARIABLE)
                options["install"] = dict(manifest=str(install["manifest"]), digest=str(install["digest"]))
            ran = self._execute_module(module_name="bcd.devices.node_library", task_vars=task_vars, module_args=options)
            if "node_install_stale" in ran:  # the role's check of its install: nothing ran, the role installs first
                result.update(skipped=True, changed=False, install_stale=ran["node_install_stale"], ran_from="none",
                              skip_reason="the node's install is not this role's: %s" % ran["node_install_stale"])
                self._remove_tmp()
                return result
            if "node_library_refused" in ran:
                display.warning("%s ran as Ansible ships it, not from the node's library: %s" % (name, ran["node_library_refused"]))
                ran = None
            else:
                ran["ran_from"] = "node-library"
                if install:  # the role's own task: the rest of the run takes the library from the fact
                    ran.setdefault("ansible_facts", {})[INSTALLED_FACT] = where
        if ran is None:
            ran = self._execute_module(module_name=name, module_args=args, task_vars=task_vars, wrap_async=wrap_async)
            ran["ran_from"] = "bundled"
        result.update(ran)
        if not wrap_async:
            self._remove_tmp()
        return result

    def _remove_tmp(self) -> None:
        """ansible-core's removal of the task's temporary directory on the node."""
        # untyped in ansible-core; mypy exempts ansible's untyped calls by the receiver's class, here this one
        self._remove_tmp_path(self._connection._shell.tmpdir)  # type: ignore[no-untyped-call]

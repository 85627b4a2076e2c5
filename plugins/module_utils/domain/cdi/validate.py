# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a CDI spec before it is written, the way container runtimes will read it.

A runtime that finds one bad file in ``/etc/cdi`` rejects that whole file, so a
hold whose spec breaks a rule silently grants nothing. ``validate_spec`` lists
every problem a runtime (or the official JSON schema) would find in a spec
given as a plain dict, so the converger can refuse instead of writing it.

It checks, with the standard library only (the node has no ``jsonschema``):

* what the official schema (``schema/schema.json`` + ``defs.json`` of
  cncf-tags/container-device-interface, spec 1.1.0) checks: required fields and
  the JSON types of every field; ``null`` is refused wherever the schema wants a
  string, array or object;
* unknown fields, which the schema lets through but runtimes do not (the
  reference library parses with ``UnmarshalStrict``);
* the reference library's rules: ``kind`` as ``vendor/class``, device names,
  at least one device, at least one edit per device, env entries ``KEY=VALUE``,
  hook names, device node types and permissions, annotation keys as Kubernetes
  qualified names, duplicate device names and net devices, and the version
  rule (``cdiVersion`` must be a known version, not below what the content
  needs: see ``minimum_version``).

Runtimes carry different releases of the library, and an old one refuses a
version it does not know (CDI library 0.8.0, as in Podman 5.4, refuses
``1.0.0``); writing the lowest version the content allows is the caller's job.

This module is the walk: which part of a spec is required, and which rule each
part is held to. The rules themselves are ``domain/cdi/rules.py``'s, the
versions and the minimum a content needs ``domain/cdi/versions.py``'s.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import rules
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.rules import DEVICE_FIELDS, SPEC_FIELDS, Checker, join
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.versions import (
    KNOWN_VERSIONS,
    highest,
    is_known_version,
    requirements,
    version_key,
)
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import type_name


def validate_spec(spec: Any) -> List[str]:
    """Every problem that would make a runtime (or the official CDI schema)
    refuse ``spec``, one message each, naming the JSON path; an empty list
    means the spec is valid."""
    if not isinstance(spec, dict):
        return ["the spec must be an object, not %s" % type_name(spec)]
    version = spec.get("cdiVersion")
    known = isinstance(version, str) and is_known_version(version)
    checker = Checker(version_key(version) if known else None)
    checker.obj("", spec, SPEC_FIELDS)
    _check_version(checker, spec, known)
    _check_kind(checker, spec)
    if "annotations" in spec:
        rules.annotation_map(checker, "annotations", spec["annotations"])
    if "containerEdits" in spec:
        rules.edits(checker, "containerEdits", spec["containerEdits"], device=False)
    _check_devices(checker, spec)
    return checker.problems


def _check_version(checker: Checker, spec: Dict[str, Any], known: bool) -> None:
    """``cdiVersion``: there, a version the library knows, and not below what the content needs."""
    if "cdiVersion" not in spec:
        checker.add("", "missing required field 'cdiVersion'")
        return
    version = spec["cdiVersion"]
    if not checker.string("cdiVersion", version):
        return
    if not known:
        checker.add(
            "cdiVersion",
            "%r is not a known CDI version (%s)" % (version, ", ".join(KNOWN_VERSIONS[2:])),
        )
        return
    found = requirements(spec)
    need = highest(found)
    if version_key(need) > version_key(version):
        why = [reason for ver, reason in found if ver == need]
        checker.add(
            "cdiVersion",
            "%s is below %s, the minimum this content requires (%s)"
            % (version, need, "; ".join(why) or "the floor"),
        )


def _check_kind(checker: Checker, spec: Dict[str, Any]) -> None:
    if "kind" not in spec:
        checker.add("", "missing required field 'kind'")
    elif checker.string("kind", spec["kind"]):
        rules.kind(checker, spec["kind"])


def _check_devices(checker: Checker, spec: Dict[str, Any]) -> None:
    """``devices``: one at least, each with its own name."""
    if "devices" not in spec:
        checker.add("", "missing required field 'devices'")
        return
    devices = spec["devices"]
    if not checker.array("devices", devices):
        return
    if not devices:
        checker.add("devices", "a spec needs at least one device")
    seen: Dict[str, int] = {}
    for index, device in enumerate(devices):
        _check_device(checker, "devices[%d]" % index, device, index, seen)


def _check_device(checker: Checker, path: str, device: Any, index: int, seen: Dict[str, int]) -> None:
    if not checker.obj(path, device, DEVICE_FIELDS):
        return
    if "name" not in device:
        checker.add(path, "missing required field 'name'")
    elif checker.string(join(path, "name"), device["name"]):
        rules.device_name(checker, join(path, "name"), device["name"], index, seen)
    if "annotations" in device:
        rules.annotation_map(checker, join(path, "annotations"), device["annotations"])
    if "containerEdits" not in device:
        checker.add(path, "missing required field 'containerEdits'")
    else:
        rules.edits(checker, join(path, "containerEdits"), device["containerEdits"], device=True)

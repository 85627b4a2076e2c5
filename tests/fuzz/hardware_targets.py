# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What describes the node: the fakehw file, NVIDIA's vendor spec, the holds' own specs read back, the
kubelet's answer.

* ``fakehw``: the hardware file (JSON, block YAML, YAML's own tricks) through ``make_host``'s
  ``load_fakehw``, then, when it loads, a pass, ``status`` or the kube side on that hardware;
* ``vendor-spec``: NVIDIA's spec (the four real ones of ``tests/data/nvidia-cdi`` as seeds, parsed by the
  collection's own ``parse_spec_text``, mutated, written back as JSON or YAML, in ``/var/run/cdi`` or
  ``/etc/cdi``, or two of them) through ``host.vendor_spec()`` (``load_vendor_spec`` and, with a fakehw
  ``driver``, the stale-edit checks), then a pass that renders holds from it, or ``status``. Not ``doctor``:
  its lint reads every spec of root's CDI directories to 4 MiB by design, a diagnostic, not a pass;
* ``cdi-hold``: a hold's spec in ``/etc/cdi`` (those the node's passes wrote, mutated) through ``read_hold``,
  then a pass that keeps, rewrites or sets aside the hold, or ``status``;
* ``kubelet``: the kubelet's pod-resources answer (a ``ListPodResourcesResponse``, built from mutated data
  or its bytes changed) through ``list_pod_devices`` (gRPC replaced by a stub that returns those bytes),
  ``RealKubeSide.look``, the helper's ``kube.look`` JSON both ways, and a pass that settles a pending
  Kubernetes release with that answer.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import socket

from ansible_collections.bcd.devices.tests.fuzz import base, mutate, nodes, verdict

FAKEHW_KEYS = ("node_id", "boot_id", "gpus", "domains", "kubelet", "runtimes", "driver", "uuid", "index", "minor",
               "numa_node", "pci_bus_id", "name", "mig", "health", "gi", "ci", "instance_id", "state", "memory_bytes",
               "hugepages", "reachable", "pods", "namespace", "container", "device_ids", "dynamic_resources",
               "version", "device_nodes", "files", "xids", "retired_pages_pending", "row_remap_failure")
CDI_KEYS = ("cdiVersion", "kind", "devices", "containerEdits", "name", "env", "deviceNodes", "mounts", "hooks",
            "path", "hostPath", "containerPath", "options", "hookName", "args", "type", "major", "minor",
            "permissions", "uid", "gid", "fileMode", "annotations", "additionalGIDs", "intelRdt")


def block_yaml(value, indent=0):
    """``value`` as block YAML, scalars written as JSON (which YAML reads the same)."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        lines = []
        for key, child in value.items():
            head = "%s%s:" % (pad, mutate.to_text(str(key)))
            if isinstance(child, (dict, list)) and child:
                lines.append(head + "\n" + block_yaml(child, indent + 2))
            else:
                lines.append("%s %s\n" % (head, _scalar(child)))
        return "".join(lines)
    if isinstance(value, list) and value:
        lines = []
        for child in value:
            if isinstance(child, (dict, list)) and child:
                nested = block_yaml(child, indent + 2)
                lines.append("%s- %s" % (pad, nested.lstrip(" ")))
            else:
                lines.append("%s- %s\n" % (pad, _scalar(child)))
        return "".join(lines)
    return "%s%s\n" % (pad, _scalar(value))


def _scalar(value):
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    return mutate.to_text(value)


def structured_text(rng, data, keys, yaml_ok=True):
    """Mutated ``data`` as JSON or block YAML text, or YAML's own tricks, or bytes changed: bytes."""
    roll = rng.random()
    if roll < 0.5 or not yaml_ok:
        text = mutate.dumps(rng, mutate.mutate_value(rng, data, True, keys))
        return mutate.mutate_bytes(rng, text) if rng.random() < 0.15 else text
    if roll < 0.7:
        value = mutate.mutate_value(rng, data, True, keys)
        if isinstance(value, (mutate.Raw, mutate.Pairs)):
            return mutate.dumps(rng, value)
        try:
            return mutate.encode(block_yaml(value), rng)
        except (TypeError, AttributeError):
            return mutate.dumps(rng, value)
    if roll < 0.85:
        return mutate.encode(mutate.yaml_text(rng, block_yaml(data)), rng)
    return mutate.mutate_bytes(rng, json.dumps(data).encode() if rng.random() < 0.5 else block_yaml(data).encode())


def _pass(node, host, generation=nodes.GENERATION + 1, devices=None):
    from ansible_collections.bcd.devices.plugins.module_utils.entry.converge import run_pass  # pylint: disable=import-outside-toplevel
    result = run_pass(host, generation, nodes.NEXT_DEVICES if devices is None else devices, nodes.INSTANCES,
                      state_dir=nodes.STATE_DIR, lock_timeout=5)
    result.to_dict()
    result.refusal_texts()
    result.plan.diffs()


FOLLOW_UPS = ("pass", "status", "doctor")


class FakeHwTarget(base.Target):
    name = "fakehw"
    family = "hardware"
    doc = "the fakehw hardware file (JSON, YAML) through load_fakehw, then a pass, status or doctor on it"

    def extend_node(self):
        with open(self.node.fakehw, "rb") as handle:
            self.valid = handle.read()
        self.data = json.loads(self.valid)
        self.path = os.path.join(self.workdir, "hardware.yaml")

    def generate(self, rng):
        item = base.file_input(rng, self.valid, lambda r, v: structured_text(r, self.data, FAKEHW_KEYS),
                               fs_attacks=("fifo", "link-device", "directory", "sparse-huge", "socket", "link-elsewhere"))
        item["then"] = rng.choice(FOLLOW_UPS)
        return item

    def plant(self, item):
        base.plant_file(item, self.path, 16 << 20, self.valid, self.node.outside, None)

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import make_host  # pylint: disable=import-outside-toplevel
        host = make_host(self.node.root, self.path)
        host.inventory()
        host.domains()
        host.kube_side().look(host.inventory())
        if item["then"] == "pass":
            _pass(self.node, host)
            return None
        failure, _rc, _output = base.run_command(self.node, item["then"], fakehw=self.path)
        return failure

    def describe(self, item):
        return "fakehw file: %s; then %s" % (base.describe_file(item), item["then"])

    def dump(self, item, directory):
        super().dump(item, directory)
        if item.get("data") is not None:
            with open(os.path.join(directory, "fakehw.yaml"), "wb") as handle:
                handle.write(item["data"])


def _driver_of(data, text):
    """A fakehw ``driver`` that makes the spec's edits true: its device nodes, its files, its version."""
    device_nodes, files = {}, []
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "deviceNodes" and isinstance(value, list):
                    for number, entry in enumerate(value):
                        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                            device_nodes.setdefault(entry["path"], "195:%d" % entry.get("minor", number)
                                                    if isinstance(entry.get("minor"), int) else "195:%d" % number)
                elif key in ("hostPath", "path") and isinstance(value, str) and value.startswith("/"):
                    files.append(value)
                else:
                    pending.append(value)
        elif isinstance(item, list):
            pending.extend(item)
    version = re.search(r"\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return {"version": version.group(1) if version else "550.54.15", "device_nodes": device_nodes,
            "files": sorted(set(files) - set(device_nodes))}


class VendorSpecTarget(base.Target):
    name = "vendor-spec"
    family = "hardware"
    doc = ("NVIDIA's CDI spec (the real ones, mutated; JSON or YAML; /var/run/cdi, /etc/cdi, or two) through "
           "host.vendor_spec() with and without the stale-edit checks, then a pass or status")
    PLACES = ("/var/run/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json", "/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json",
              "/var/run/cdi/.nvidia.yml")

    def extend_node(self):
        from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import parse_spec_text  # pylint: disable=import-outside-toplevel
        self.seeds = []
        for fixture in ("mig", "full", "json", "wsl"):
            text = nodes.CONFTEST.vendor_text(fixture)
            self.seeds.append((fixture, text, parse_spec_text(text, "seed")))
        os.unlink(self.node.path("/var/run/cdi/nvidia.json"))
        hardware = json.loads(open(self.node.fakehw, "rb").read())  # pylint: disable=consider-using-with
        hardware["driver"] = _driver_of(self.seeds[0][2], self.seeds[0][1])
        self.driver_fakehw = os.path.join(self.workdir, "fakehw-driver.json")
        with open(self.driver_fakehw, "w", encoding="utf-8") as handle:
            json.dump(hardware, handle)

    def generate(self, rng):
        fixture, text, data = rng.choice(self.seeds)
        roll = rng.random()
        if roll < 0.15:
            content = mutate.mutate_bytes(rng, text.encode("utf-8"))
        elif roll < 0.25:
            content = mutate.encode(mutate.yaml_text(rng, text), rng)
        else:
            content = structured_text(rng, data, CDI_KEYS)
        files = [(rng.choice(self.PLACES), {"mode": "content", "data": content})]
        if rng.random() < 0.15:  # another spec beside it: a second one of the directory, or of the other one
            files.append((rng.choice(self.PLACES), {"mode": "content", "data": rng.choice(self.seeds)[1].encode()}))
        if rng.random() < 0.04:
            files[0] = (files[0][0], {"mode": "fs", "fs_seed": rng.getrandbits(32), "attack": rng.choice(
                ["fifo", "link-device", "directory", "sparse-huge", "socket", "link-elsewhere"])})
        # not doctor: its lint reads every spec file to 4 MiB by design (docs/runtimes-and-upgrades.md), an
        # operator's diagnostic of root's own directories; the vendor spec's reader is what a pass runs
        return {"fixture": fixture, "files": files, "driver": rng.random() < 0.4, "then": rng.choice(("pass", "status"))}

    def plant(self, item):
        for node_path, planted in item["files"]:
            path = self.node.path(node_path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            base.plant_file(planted, path, 16 << 20, b"{}", self.node.outside, None)

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.node.hosts import make_host  # pylint: disable=import-outside-toplevel
        fakehw = self.driver_fakehw if item["driver"] else self.node.fakehw
        host = make_host(self.node.root, fakehw)
        vendor = host.vendor_spec()
        for name in list(vendor.devices)[:8]:
            vendor.edits_for_gpu(name)
            vendor.edits_for_mig(name)
            vendor.unusable_reason(name)
        if item["then"] == "pass":
            _pass(self.node, host)
            return None
        failure, _rc, _output = base.run_command(self.node, item["then"], fakehw=fakehw)
        return failure

    def describe(self, item):
        files = "; ".join("%s: %s" % (where, base.describe_file(planted)) for where, planted in item["files"])
        checks = " (driver checks)" if item["driver"] else ""
        return "vendor spec from %s%s: %s; then %s" % (item["fixture"], checks, files, item["then"])

    def dump(self, item, directory):
        super().dump(item, directory)
        for number, (node_path, planted) in enumerate(item["files"]):
            if planted.get("data") is not None:
                with open(os.path.join(directory, "%d-%s" % (number, os.path.basename(node_path))), "wb") as handle:
                    handle.write(planted["data"])


class CdiHoldTarget(base.Target):
    name = "cdi-hold"
    family = "hardware"
    doc = "a hold's spec in /etc/cdi, mutated, through read_hold, then a pass (keep, rewrite, set aside) or status"

    def extend_node(self):
        self.seeds = []
        for allocation_id in ("a1", "m1", "s1"):
            with open(self.node.path("/etc/cdi/bcd-%s.json" % allocation_id), "rb") as handle:
                self.seeds.append((allocation_id, handle.read()))

    def generate(self, rng):
        allocation_id, valid = rng.choice(self.seeds)
        item = base.file_input(rng, valid, lambda r, v: base.json_content(r, v, CDI_KEYS + ("bcd.dev/",)),
                               fs_attacks=("fifo", "link-device", "directory", "sparse-huge", "socket", "link-elsewhere"))
        item["allocation_id"] = allocation_id if rng.random() < 0.9 else rng.choice(["zz", "a1_", "A1", "x" * 80])
        item["then"] = rng.choice(("pass", "status"))  # not doctor: its lint of root's own /etc/cdi has its bounds
        return item

    def _path(self, item):
        return self.node.path("/etc/cdi/bcd-%s.json" % item["allocation_id"])

    def plant(self, item):
        base.plant_file(item, self._path(item), 1 << 20, b"{}", self.node.outside, None)

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import read_hold  # pylint: disable=import-outside-toplevel
        if item["mode"] == "content":
            hold = read_hold(item["allocation_id"], "/etc/cdi/bcd-%s.json" % item["allocation_id"], item["data"])
            if hold.problem is not None and not isinstance(hold.problem, str):
                return verdict.problem("traceback", "read_hold problem type", "read_hold's problem is %r" % hold.problem)
        if item["then"] == "pass":
            _pass(self.node, self.node.host(), devices=nodes.DEVICES)
            return None
        failure, _rc, _output = base.run_command(self.node, item["then"])
        return failure

    def describe(self, item):
        return "/etc/cdi/bcd-%s.json: %s; then %s" % (item["allocation_id"], base.describe_file(item), item["then"])

    def dump(self, item, directory):
        super().dump(item, directory)
        if item.get("data") is not None:
            with open(os.path.join(directory, "bcd-%s.json" % item["allocation_id"]), "wb") as handle:
                handle.write(item["data"])


# -- the kubelet --------------------------------------------------------------------------------------

KUBELET_ANSWER = {"pod_resources": [
    {"name": "trainer-0", "namespace": "ml", "containers": [
        {"name": "main", "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [nodes.GPU_C, nodes.GPU_C + "::3"]}],
         "dynamic_resources": []}]},
    {"name": "dra-0", "namespace": "ml", "containers": [
        {"name": "main", "devices": [], "dynamic_resources": [
            {"claim_name": "gpu", "claim_namespace": "ml", "claim_resources": [
                {"driver_name": "gpu.bcd.dev", "pool_name": "node-fuzz", "device_name": "gpu-1",
                 "cdi_devices": [{"name": "bcd.dev/gpu=%s_gi1_ci0" % nodes.GPU_A},
                                 {"name": "nvidia.com/gpu=%s" % nodes.MIG_A1}]}]}]}]},
]}
KUBELET_KEYS = ("pod_resources", "name", "namespace", "containers", "devices", "resource_name", "device_ids",
                "dynamic_resources", "claim_name", "claim_namespace", "claim_resources", "driver_name", "pool_name",
                "device_name", "cdi_devices")


def _text(value):
    text = value if isinstance(value, str) else mutate.to_text(value)[:4096]
    return text.encode("utf-8", "replace").decode("utf-8")


def _items(value):
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _message(data):
    """A ``ListPodResourcesResponse`` from mutated data: what a protobuf message can hold of it (text is
    text, lists are lists; a kubelet cannot send anything else)."""
    from ansible_collections.bcd.devices.plugins.module_utils.node import podresources_pb2 as pb  # pylint: disable=import-outside-toplevel
    response = pb.ListPodResourcesResponse()
    for pod in _items(data.get("pod_resources") if isinstance(data, dict) else data):
        pod = pod if isinstance(pod, dict) else {"name": pod}
        message = response.pod_resources.add(name=_text(pod.get("name", "")), namespace=_text(pod.get("namespace", "")))
        for container in _items(pod.get("containers")):
            container = container if isinstance(container, dict) else {"name": container}
            inner = message.containers.add(name=_text(container.get("name", "")))
            for devices in _items(container.get("devices")):
                devices = devices if isinstance(devices, dict) else {"device_ids": devices}
                inner.devices.add(resource_name=_text(devices.get("resource_name", "")),
                                  device_ids=[_text(d) for d in _items(devices.get("device_ids"))])
            for dynamic in _items(container.get("dynamic_resources")):
                dynamic = dynamic if isinstance(dynamic, dict) else {"claim_name": dynamic}
                claim = inner.dynamic_resources.add(claim_name=_text(dynamic.get("claim_name", "")),
                                                    claim_namespace=_text(dynamic.get("claim_namespace", "")))
                for resource in _items(dynamic.get("claim_resources")):
                    resource = resource if isinstance(resource, dict) else {"device_name": resource}
                    added = claim.claim_resources.add(driver_name=_text(resource.get("driver_name", "")),
                                                      pool_name=_text(resource.get("pool_name", "")),
                                                      device_name=_text(resource.get("device_name", "")))
                    for cdi in _items(resource.get("cdi_devices")):
                        added.cdi_devices.add(name=_text(cdi.get("name", "") if isinstance(cdi, dict) else cdi))
    return response.SerializeToString()


class _Answer(object):
    data = b""


class _Channel(object):
    def close(self):
        pass


class _Grpc(object):
    """What ``list_pod_devices`` uses of gRPC: a channel, ``RpcError``, ``StatusCode``."""

    class RpcError(Exception):
        pass

    class StatusCode(object):
        DEADLINE_EXCEEDED, UNAVAILABLE, UNIMPLEMENTED = "deadline", "unavailable", "unimplemented"

    @staticmethod
    def insecure_channel(target, options=None):
        return _Channel()


class _Stub(object):
    """The pod-resources stub: ``List`` answers with ``_Answer.data``, parsed as the real stub parses it."""

    def __init__(self, channel):
        self.channel = channel

    def List(self, request, timeout=None):  # pylint: disable=invalid-name
        from ansible_collections.bcd.devices.plugins.module_utils.node import podresources_pb2 as pb  # pylint: disable=import-outside-toplevel
        return pb.ListPodResourcesResponse.FromString(_Answer.data)


class KubeletTarget(base.Target):
    name = "kubelet"
    family = "hardware"
    doc = ("the kubelet's pod-resources answer (protobuf, from mutated data or bytes) through list_pod_devices, "
           "RealKubeSide.look, the helper's kube.look JSON both ways, and a pass settling a Kubernetes release")

    def extend_node(self):
        from ansible_collections.bcd.devices.plugins.module_utils.node import kubelet, podresources_pb2  # pylint: disable=import-outside-toplevel
        self.socket_path = os.path.join(self.workdir, "kubelet.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        kubelet.import_grpc()
        self.saved = kubelet._GRPC.get("modules")  # pylint: disable=protected-access
        kubelet._GRPC["modules"] = (_Grpc, podresources_pb2.ListPodResourcesRequest, _Stub)  # pylint: disable=protected-access
        self.valid = _message(KUBELET_ANSWER)

    def generate(self, rng):
        roll = rng.random()
        if roll < 0.7:
            data = _message(mutate.mutate_value(rng, KUBELET_ANSWER, False, KUBELET_KEYS))
        elif roll < 0.75:
            many = copy.deepcopy(KUBELET_ANSWER)
            many["pod_resources"] = many["pod_resources"] * rng.choice([1000, 10000])
            data = _message(many)
        else:
            data = mutate.mutate_bytes(rng, self.valid)
        return {"data": data, "then": rng.choice(("look", "pass"))}

    def run(self, item):
        from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import pods_holding  # pylint: disable=import-outside-toplevel
        from ansible_collections.bcd.devices.plugins.module_utils.node import kubelet  # pylint: disable=import-outside-toplevel
        _Answer.data = item["data"]
        host = self.node.host()
        side = kubelet.RealKubeSide(self.node.root, socket_path=self.socket_path)
        if item["then"] == "look":
            view = side.look(host.inventory())
            for device in (nodes.GPU_C, nodes.GPU_A, nodes.MIG_A1):
                view.holders(device)
            pods_holding(view, [nodes.GPU_C, "%s/gi1/ci0" % nodes.GPU_A], host.inventory())
            again = kubelet.view_from_json(json.loads(json.dumps(kubelet.view_to_json(view))))
            if view.error is None and again.error is not None:
                return verdict.problem("roundtrip", "kube.look", "the helper's kube.look answer does not read back: %s"
                                       % again.error)
            return None
        host._kube_side = lambda: side  # pylint: disable=protected-access
        _pass(self.node, host, devices=nodes.DEVICES)
        return None

    def describe(self, item):
        return "kubelet answer of %d bytes: %s...; then %s" % (len(item["data"]), verdict.one_line(
            repr(item["data"][:300]), 320), item["then"])

    def dump(self, item, directory):
        super().dump(item, directory)
        with open(os.path.join(directory, "list-pod-resources.bin"), "wb") as handle:
            handle.write(item["data"])


def targets():
    return [FakeHwTarget(), VendorSpecTarget(), CdiHoldTarget(), KubeletTarget()]

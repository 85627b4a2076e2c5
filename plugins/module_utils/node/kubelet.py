# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kube side: which devices do pods on this node still hold?

A Kubernetes hold's release is reported only once no pod holds any of its
devices (docs/kubernetes.md, step 3 of a release). Two sources answer:

* the kubelet's pod-resources API v1 (``List`` over
  ``/var/lib/kubelet/pod-resources/kubelet.sock``, gRPC): the devices each
  pod container was allocated, through a device plugin (``devices``) or a DRA
  claim (``dynamic_resources``, on by default since Kubernetes 1.34);
* the host's processes in pod cgroups (``/proc/<pid>/cgroup`` mentions
  ``kubepods``) that have ``/dev/nvidia<minor>`` open: whole GPUs still in use.

An unreachable kubelet is an error, never an empty answer: callers treat an
error as "every device is held". gRPC and protobuf are optional on the node;
without them the real kube side is unreachable with a message that says so.
A fakehw host answers from its hardware file's ``kubelet`` section instead.
"""

from __future__ import annotations

import abc
import errno
import os
import stat
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import PodDevices
from ansible_collections.bcd.devices.plugins.module_utils.domain.kube_release import device_names, dra_device_ids
from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperError, HelperRefused
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import RetryableError
from ansible_collections.bcd.devices.plugins.module_utils.support.records import field, record
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeHw
    from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient


def import_grpc() -> Tuple[Any, ...]:
    """``(grpc, ListPodResourcesRequest, PodResourcesListerStub)``, or ``(None, why)`` when they cannot be
    imported. Imported on first use, not with this file: a pass that asks no kubelet (most of them) never
    pays for gRPC. A protobuf runtime too old for the stubs fails with other errors than ImportError,
    which mean the same to us. Neither gRPC nor the generated stubs are typed: what they give is ``Any``."""
    if "modules" not in _GRPC:
        try:
            import grpc  # pylint: disable=import-outside-toplevel

            from ansible_collections.bcd.devices.plugins.module_utils.node.podresources_pb2 import (  # pylint: disable=import-outside-toplevel
                ListPodResourcesRequest,
            )
            from ansible_collections.bcd.devices.plugins.module_utils.node.podresources_pb2_grpc import (  # pylint: disable=import-outside-toplevel
                PodResourcesListerStub,
            )
            _GRPC["modules"] = (grpc, ListPodResourcesRequest, PodResourcesListerStub)
        except Exception as exc:  # pylint: disable=broad-except
            _GRPC["modules"] = (None, "%s: %s" % (type(exc).__name__, exc))
    return _GRPC["modules"]


_GRPC: Dict[str, Tuple[Any, ...]] = {}


# The kubelet's socket, as a node path (under ``root``).
SOCKET_PATH = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT = 5.0
# The kubelet's own clients accept answers up to 16 MiB; gRPC's default is 4 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# sun_path holds 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107
# Major number of the NVIDIA character devices (/dev/nvidia<minor>, nvidiactl, ...).
NVIDIA_MAJOR = 195

# A time-sliced replica of a device: "<device id>::<replica>".
_REPLICA_RE = lazy_pattern(r"^(?P<id>.+)::[0-9]+$")
# An open file that is a GPU's device node, by name (used when stat cannot tell).
_NVIDIA_NODE_RE = lazy_pattern(r"^(?:.*/)?dev/nvidia(?P<minor>[0-9]+)(?: \(deleted\))?$")


class KubeletUnreachable(RetryableError):
    """The kubelet's pod-resources API could not be asked. The message says
    why (no socket, refused, no answer in time, no gRPC on the node) and is
    fit to show to a user."""


def normalize_device_id(device_id: str) -> str:
    """The device a kubelet device id names: ``GPU-…::2`` (a time-sliced
    replica) is ``GPU-…``; anything else (``GPU-…``, ``MIG-…``) is itself."""
    match = _REPLICA_RE.match(device_id)
    return match.group("id") if match else device_id


def _claim_resources(container: Any) -> List[Tuple[str, List[str]]]:
    """``(device_name, cdi names)`` of each DRA claim resource of a pod-resources container (a message of the
    generated stubs)."""
    return [(resource.device_name, [cdi.name for cdi in resource.cdi_devices])
            for dynamic in container.dynamic_resources for resource in dynamic.claim_resources]


# --------------------------------------------------------------------------
# The kubelet's pod-resources API


def list_pod_devices(socket_path: str, timeout: float = DEFAULT_TIMEOUT) -> List[PodDevices]:
    """Ask the kubelet at ``socket_path`` (a host path) which pod containers
    have devices: one ``PodDevices`` per container with at least one device,
    in the kubelet's order, its device ids normalized and without repeats.

    Every failure raises ``KubeletUnreachable``; the call never waits longer
    than ``timeout`` seconds for an answer.
    """
    imported = import_grpc()
    if imported[0] is None:
        raise KubeletUnreachable(
            "cannot ask the kubelet which pods hold devices: the Python packages "
            "grpcio and protobuf (>= 3.20) are needed on the node (%s)" % imported[1]
        )
    grpc, ListPodResourcesRequest, PodResourcesListerStub = imported  # pylint: disable=invalid-name
    path = os.path.abspath(socket_path)
    _check_socket(path)

    channel = grpc.insecure_channel(
        "unix://" + path,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
        ],
    )
    try:
        stub = PodResourcesListerStub(channel)
        response = stub.List(ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as err:
        raise KubeletUnreachable(_rpc_error_message(grpc, path, err, timeout))
    except Exception as err:  # pylint: disable=broad-except
        raise KubeletUnreachable(
            "the kubelet's pod-resources API at %s could not be asked: %s: %s"
            % (path, type(err).__name__, err)
        )
    finally:
        channel.close()

    result = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ids: List[str] = []
            listed = [device_id for devices in container.devices for device_id in devices.device_ids]
            for device_id in listed + dra_device_ids(_claim_resources(container)):
                device_id = normalize_device_id(device_id)
                if device_id and device_id not in ids:
                    ids.append(device_id)
            if ids:
                result.append(
                    PodDevices(
                        namespace=pod.namespace,
                        name=pod.name,
                        container=container.name,
                        device_ids=tuple(ids),
                    )
                )
    return result


def _check_socket(path: str) -> None:
    if len(path.encode("utf-8", "surrogateescape")) > MAX_SOCKET_PATH_BYTES:
        raise KubeletUnreachable(
            "the kubelet socket path %s is longer than a unix socket path may be (%d bytes)"
            % (path, MAX_SOCKET_PATH_BYTES)
        )
    try:
        info = os.stat(path)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise KubeletUnreachable(
                "no kubelet pod-resources socket at %s (is the kubelet running on this node?)" % path
            )
        raise KubeletUnreachable("cannot use the kubelet socket %s: %s" % (path, err.strerror))
    if not stat.S_ISSOCK(info.st_mode):
        raise KubeletUnreachable("%s is not a socket, so no kubelet listens there" % path)


def _rpc_error_message(grpc: Any, path: str, err: Any, timeout: float) -> str:
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else None
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "the kubelet at %s did not answer pod-resources List within %g seconds" % (path, timeout)
    if code == grpc.StatusCode.UNAVAILABLE:
        return "cannot connect to the kubelet at %s: %s" % (path, details or "unavailable")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return (
            "the kubelet at %s does not serve the pod-resources API v1 List "
            "(Kubernetes 1.20 or later is needed): %s" % (path, details or "unimplemented")
        )
    name = code.name if code is not None and hasattr(code, "name") else "error"
    return "the kubelet at %s refused pod-resources List: %s: %s" % (path, name, details or "")


# --------------------------------------------------------------------------
# The host's pod processes


def pod_processes_holding(root: str, gpu_minors: Iterable[int]) -> Dict[int, List[int]]:
    """Processes in pod cgroups that have a GPU's device node open, read from
    ``<root>/proc``: ``{minor: [pid, ...]}`` (pids ascending), only for the
    minors in ``gpu_minors`` that some such process holds.

    A process that exits meanwhile, or whose files this user may not read,
    is skipped. A missing ``<root>/proc`` gives an empty answer.
    """
    wanted = set(int(m) for m in gpu_minors)
    held: Dict[int, List[int]] = {}
    if not wanted:
        return held
    proc = os.path.join(os.path.abspath(root), "proc")
    try:
        entries = os.listdir(proc)
    except OSError:
        return held
    for entry in entries:
        if not entry.isdigit():
            continue
        pid_dir = os.path.join(proc, entry)
        if not _in_pod_cgroup(pid_dir):
            continue
        fd_dir = os.path.join(pid_dir, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        minors = set()
        for fd in fds:
            minor = _open_gpu_minor(os.path.join(fd_dir, fd))
            if minor is not None and minor in wanted:
                minors.add(minor)
        for minor in minors:
            held.setdefault(minor, []).append(int(entry))
    for pids in held.values():
        pids.sort()
    return held


def _in_pod_cgroup(pid_dir: str) -> bool:
    try:
        with open(os.path.join(pid_dir, "cgroup"), "rb") as handle:
            content = handle.read(65536)
    except OSError:
        return False
    return b"kubepods" in content


def _open_gpu_minor(fd_path: str) -> Optional[int]:
    """The GPU minor an open file descriptor refers to, or None.

    The device itself decides when it can be looked at (major 195; minors
    from 254 up are nvidiactl and friends, not GPUs). Otherwise the link's
    target names it: ``/dev/nvidia<minor>``.
    """
    try:
        info = os.stat(fd_path)
    except OSError:
        info = None
    if info is not None and stat.S_ISCHR(info.st_mode):
        if os.major(info.st_rdev) == NVIDIA_MAJOR and os.minor(info.st_rdev) < 254:
            return os.minor(info.st_rdev)
        return None
    try:
        target = os.readlink(fd_path)
    except OSError:
        return None
    match = _NVIDIA_NODE_RE.match(target)
    return int(match.group("minor")) if match else None


# --------------------------------------------------------------------------
# What is held


def held_devices(pods: Iterable[PodDevices], processes: Mapping[int, List[int]],
                 gpu_uuid_by_minor: Mapping[int, str]) -> Set[str]:
    """The device ids some pod still holds: every (normalized) id the
    kubelet lists for a pod container, and the UUID of every GPU whose device
    node a pod process has open (a minor the map does not know adds nothing)."""
    held: Set[str] = set()
    for pod in pods:
        for device_id in pod.device_ids:
            held.add(normalize_device_id(device_id))
    for minor, pids in processes.items():
        uuid = gpu_uuid_by_minor.get(minor)
        if pids and uuid:
            held.add(uuid)
    return held


def _as_kube_names(pods: Iterable[PodDevices], inventory: Inventory) -> List[PodDevices]:
    """The pods with each device named as the kube side names it: a bcd atom
    id from a DRA claim (``GPU-…/gi1/ci0``, ``GPU-…/s3``) becomes the MIG
    device's or the GPU's UUID, as the holds' devices are looked up."""
    named = []
    for pod in pods:
        ids: List[str] = []
        for device_id in pod.device_ids:
            for name in sorted(device_names([device_id], inventory)) if "/" in device_id else [device_id]:
                if name not in ids:
                    ids.append(name)
        named.append(PodDevices(pod.namespace, pod.name, pod.container, tuple(ids)))
    return named


def _mig_parents(inventory: Inventory) -> Dict[str, str]:
    """``{MIG UUID: parent GPU UUID}`` for the MIG devices the inventory lists."""
    parents: Dict[str, str] = {}
    for gpu in inventory.gpus:
        for inst in gpu.mig:
            parents[inst.uuid] = gpu.uuid
    return parents


def _with_parent_gpus(held: Set[str], mig_parent: Mapping[str, str]) -> Set[str]:
    """``held`` plus the parent GPU of every held MIG device: a pod that uses
    part of a GPU uses the GPU."""
    return set(held) | set(mig_parent[d] for d in held if d in mig_parent)


@record
class KubeView:
    """One look at the kube side. ``error`` set: the kubelet could not be
    asked, and every device counts as held (``held`` is then empty and
    means nothing)."""

    held: Set[str] = field(default_factory=set)
    pods: List[PodDevices] = field(default_factory=list)
    processes: Dict[int, List[int]] = field(default_factory=dict)
    gpu_uuid_by_minor: Dict[int, str] = field(default_factory=dict)
    mig_parent: Dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None

    def holders(self, device_id: str) -> List[str]:
        """Who holds ``device_id``, for messages: ``namespace/pod (container)``
        for each pod container the kubelet lists with it (or, for a GPU, with
        one of its MIG devices), ``pid N`` for each pod process that has its
        GPU open."""
        names = []
        for pod in self.pods:
            ids = set(normalize_device_id(d) for d in pod.device_ids)
            if device_id in ids or any(self.mig_parent.get(d) == device_id for d in ids):
                names.append("%s/%s (%s)" % (pod.namespace, pod.name, pod.container))
        for minor in sorted(self.processes):
            if self.gpu_uuid_by_minor.get(minor) == device_id:
                names.extend("pid %d" % pid for pid in self.processes[minor])
        return names


class KubeSide(abc.ABC):
    """What the converger asks: ``held(inventory)`` gives the device ids (GPU
    and MIG UUIDs) that pods still hold, and an error (None when the answer
    can be trusted). With an error, callers count every device as held."""

    @abc.abstractmethod
    def look(self, inventory: Inventory) -> KubeView:
        """One look at the kube side."""

    def held(self, inventory: Inventory) -> Tuple[Set[str], Optional[str]]:
        view = self.look(inventory)
        if view.error is not None:
            return set(), view.error
        return set(view.held), None


class RealKubeSide(KubeSide):
    """The kubelet's pod-resources API and ``<root>/proc`` of a real host."""

    def __init__(self, root: str = "/", socket_path: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.root = root
        if socket_path is None:
            socket_path = os.path.join(os.path.abspath(root), SOCKET_PATH.lstrip("/"))
        self.socket_path = socket_path
        self.timeout = timeout

    def look(self, inventory: Inventory) -> KubeView:
        try:
            pods = _as_kube_names(list_pod_devices(self.socket_path, self.timeout), inventory)
        except KubeletUnreachable as err:
            return KubeView(error=str(err))
        by_minor: Dict[int, str] = {}
        for gpu in inventory.gpus:
            if gpu.minor is not None:
                by_minor[gpu.minor] = gpu.uuid
        processes = pod_processes_holding(self.root, by_minor.keys())
        parents = _mig_parents(inventory)
        held = _with_parent_gpus(held_devices(pods, processes, by_minor), parents)
        return KubeView(held=held, pods=pods, processes=processes, gpu_uuid_by_minor=by_minor, mig_parent=parents)


class FakeKubeSide(KubeSide):
    """A fakehw host's kubelet: reachable or not, and the pods it lists."""

    def __init__(self, reachable: bool = True, pods: Iterable[PodDevices] = ()) -> None:
        self.reachable = bool(reachable)
        self.pods = list(pods)

    @classmethod
    def from_fakehw(cls, fakehw: FakeHw) -> FakeKubeSide:
        """From a loaded ``fakehw.FakeHw``."""
        return cls(reachable=fakehw.kubelet_reachable, pods=fakehw.pods)

    def look(self, inventory: Inventory) -> KubeView:
        if not self.reachable:
            return KubeView(error="the kubelet is unreachable (fakehw: kubelet.reachable is false)")
        pods = _as_kube_names(self.pods, inventory)
        parents = _mig_parents(inventory)
        held = _with_parent_gpus(held_devices(pods, {}, {}), parents)
        return KubeView(held=held, pods=pods, mig_parent=parents)


def view_to_json(view: KubeView) -> Dict[str, Any]:
    """A ``KubeView`` as JSON data, for the root helper to answer ``kube.look``."""
    return {
        "held": sorted(view.held),
        "pods": [{"namespace": p.namespace, "name": p.name, "container": p.container,
                  "device_ids": list(p.device_ids)} for p in view.pods],
        "processes": dict((str(minor), list(pids)) for minor, pids in view.processes.items()),
        "gpu_uuid_by_minor": dict((str(minor), uuid) for minor, uuid in view.gpu_uuid_by_minor.items()),
        "mig_parent": dict(view.mig_parent),
        "error": view.error,
    }


def view_from_json(data: Any) -> KubeView:
    """The other way; anything malformed is an error view (every device counts as held)."""
    try:
        return KubeView(
            held=set(str(d) for d in data["held"]),
            pods=[PodDevices(str(p["namespace"]), str(p["name"]), str(p["container"]),
                             tuple(str(d) for d in p["device_ids"])) for p in data["pods"]],
            processes=dict((int(minor), [int(pid) for pid in pids]) for minor, pids in data["processes"].items()),
            gpu_uuid_by_minor=dict((int(minor), str(uuid)) for minor, uuid in data["gpu_uuid_by_minor"].items()),
            mig_parent=dict((str(k), str(v)) for k, v in data["mig_parent"].items()),
            error=data.get("error") if isinstance(data.get("error"), str) else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return KubeView(error="the root helper's answer about the kubelet is malformed: %s" % exc)


class HelperKubeSide(KubeSide):
    """An unprivileged node's kube side: the root helper asks the kubelet (its socket is root's)."""

    def __init__(self, client: HelperClient) -> None:
        self.client = client

    def look(self, inventory: Inventory) -> KubeView:
        try:
            return view_from_json(self.client.kube_look())
        except (HelperError, HelperRefused) as exc:  # either way nothing is known: every release counts as held
            return KubeView(error=str(exc))

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the kube side: the pod-resources client against a real gRPC
server of this suite's own on a unix socket, the scan of a fake /proc tree,
and what the real and fakehw kube sides report as held."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.node import kubelet
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import parse_fakehw_text
from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import (
    Gpu,
    Inventory,
    MigInstance,
    PodDevices,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import (
    FakeKubeSide,
    KubeletUnreachable,
    RealKubeSide,
    held_devices,
    list_pod_devices,
    normalize_device_id,
    pod_processes_holding,
)

grpc = pytest.importorskip("grpc")
pb = pytest.importorskip("ansible_collections.bcd.devices.plugins.module_utils.node.podresources_pb2")
pb_grpc = pytest.importorskip("ansible_collections.bcd.devices.plugins.module_utils.node.podresources_pb2_grpc")

NODE_DIR = Path(kubelet.__file__).resolve().parent

GPU_A = "GPU-5f1c2a90-0000-4000-8000-000000000001"
GPU_B = "GPU-5f1c2a90-0000-4000-8000-000000000002"
GPU_C = "GPU-5f1c2a90-0000-4000-8000-000000000003"
MIG_A1 = "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"

INVENTORY = Inventory(
    gpus=[
        Gpu(uuid=GPU_A, index=0, minor=0, mig=(MigInstance(gi=1, ci=0, uuid=MIG_A1),)),
        Gpu(uuid=GPU_B, index=1, minor=1),
        Gpu(uuid=GPU_C, index=2, minor=2),
    ],
    source="test",
)

PODS_SOCKET = "var/lib/kubelet/pod-resources/kubelet.sock"


def _devices(resource, *ids):
    return pb.ContainerDevices(resource_name=resource, device_ids=list(ids))


def canned_response():
    """Two pods, three containers, as a kubelet with time-slicing and MIG would answer."""
    return pb.ListPodResourcesResponse(
        pod_resources=[
            pb.PodResources(
                name="train-0",
                namespace="ml",
                containers=[
                    pb.ContainerResources(
                        name="main",
                        devices=[
                            _devices("bcd.dev/gpu", GPU_B + "::0", GPU_B + "::3"),
                            _devices("example.com/nic", "0000:17:00.2"),
                        ],
                        cpu_ids=[2, 3],
                    ),
                    pb.ContainerResources(name="sidecar", cpu_ids=[4]),
                ],
            ),
            pb.PodResources(
                name="infer-1",
                namespace="default",
                containers=[
                    pb.ContainerResources(name="server", devices=[_devices("bcd.dev/mig", MIG_A1)]),
                ],
            ),
            pb.PodResources(name="idle", namespace="default"),
        ]
    )


class Lister(pb_grpc.PodResourcesListerServicer):
    """Answers List with a canned response, after waiting on ``release`` when slow."""

    def __init__(self, response, slow=False):
        self.response = response
        self.slow = slow
        self.release = threading.Event()
        self.calls = 0

    def List(self, request, context):
        self.calls += 1
        if self.slow:
            self.release.wait(10)
        return self.response


@pytest.fixture
def short_root():
    """A node root with a short path: a unix socket path holds at most 107 bytes."""
    root = tempfile.mkdtemp(prefix="bcdk-")
    try:
        yield Path(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def serve():
    """``serve(servicer, socket_path)`` starts a gRPC server on a unix socket."""
    started = []

    def start(servicer, path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if servicer is not None:
            pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
        assert server.add_insecure_port("unix://" + str(path)) != 0
        server.start()
        started.append((server, servicer))
        return server

    yield start
    for server, servicer in started:
        if isinstance(servicer, Lister):
            servicer.release.set()
        server.stop(0)


# --------------------------------------------------------------------------
# list_pod_devices against a real server


def test_lists_each_container_with_devices_and_strips_replicas(short_root, serve):
    path = short_root / "kubelet.sock"
    lister = Lister(canned_response())
    serve(lister, path)

    pods = list_pod_devices(str(path), timeout=5)

    assert lister.calls == 1
    assert pods == [
        PodDevices(namespace="ml", name="train-0", container="main",
                   device_ids=(GPU_B, "0000:17:00.2")),
        PodDevices(namespace="default", name="infer-1", container="server", device_ids=(MIG_A1,)),
    ]


def _claim(name, *resources):
    """A DRA claim as the kubelet lists it: ``resources`` are (driver, device name, CDI device names)."""
    return pb.DynamicResource(claim_name=name, claim_namespace="ml", claim_resources=[
        pb.ClaimResource(driver_name=driver, pool_name="node-a", device_name=device,
                         cdi_devices=[pb.CDIDevice(name=cdi) for cdi in cdis])
        for driver, device, cdis in resources])


def dra_response():
    """Pods whose devices come through DRA claims (Kubernetes 1.34+), next to a device plugin's."""
    return pb.ListPodResourcesResponse(pod_resources=[
        pb.PodResources(name="train-0", namespace="ml", containers=[
            pb.ContainerResources(name="main", dynamic_resources=[
                # bcd's own CDI device for a MIG instance: the atom id with "/" as "_"
                _claim("mig", ("gpu.bcd.dev", "mig-a", ["bcd.dev/gpu=%s_gi1_ci0" % GPU_A])),
                # a driver that names NVIDIA's CDI device by UUID, and one whose device name is the UUID
                _claim("gpu", ("gpu.nvidia.com", "gpu-1", ["nvidia.com/gpu=%s" % GPU_B]),
                       ("gpu.example.com", GPU_B, [])),
            ]),
        ]),
        pb.PodResources(name="infer-1", namespace="default", containers=[
            # a slot of GPU_C through bcd's CDI name, and a NIC: not a GPU
            pb.ContainerResources(name="server", devices=[_devices("bcd.dev/gpu", GPU_C + "::1")], dynamic_resources=[
                _claim("slot", ("gpu.bcd.dev", "s3", ["bcd.dev/gpu=%s_s3" % GPU_C])),
                _claim("nic", ("nic.example.com", "eth1", ["example.com/nic=eth1"])),
            ]),
        ]),
        # a driver's own names say nothing bcd can check: this container holds no device it knows
        pb.PodResources(name="opaque", namespace="default", containers=[
            pb.ContainerResources(name="main", dynamic_resources=[
                _claim("other", ("gpu.nvidia.com", "gpu-0", ["k8s.gpu.nvidia.com/claim=0f3c-gpu-0"]))]),
        ]),
    ])


def test_devices_a_pod_holds_through_dra_claims_are_listed_like_a_device_plugins(short_root, serve):
    path = short_root / "kubelet.sock"
    serve(Lister(dra_response()), path)

    pods = list_pod_devices(str(path), timeout=5)

    assert pods == [
        PodDevices(namespace="ml", name="train-0", container="main", device_ids=(GPU_A + "/gi1/ci0", GPU_B)),
        PodDevices(namespace="default", name="infer-1", container="server", device_ids=(GPU_C, GPU_C + "/s3")),
    ]


def test_a_real_kube_side_counts_a_dra_claims_mig_instance_and_its_gpu_as_held(short_root, serve):
    serve(Lister(dra_response()), short_root / PODS_SOCKET)

    side = RealKubeSide(str(short_root))
    held, error = side.held(INVENTORY)

    assert error is None
    # the bcd atom id of the MIG instance is its MIG UUID to the kube side, and it holds its GPU; a slot
    # stays that slot (issue 23: a pod on one slot does not hold the GPU's other slots)
    assert held == {MIG_A1, GPU_A, GPU_B, GPU_C, GPU_C + "/s3"}
    view = side.look(INVENTORY)
    assert view.holders(MIG_A1) == view.holders(GPU_A) == ["ml/train-0 (main)"]
    assert view.holders(GPU_C) == ["default/infer-1 (server)"]


def test_an_empty_node_lists_no_pods(short_root, serve):
    path = short_root / "kubelet.sock"
    serve(Lister(pb.ListPodResourcesResponse()), path)
    assert list_pod_devices(str(path)) == []


def test_a_kubelet_that_does_not_answer_in_time_is_unreachable(short_root, serve):
    path = short_root / "kubelet.sock"
    serve(Lister(canned_response(), slow=True), path)

    started = time.monotonic()
    with pytest.raises(KubeletUnreachable, match="did not answer pod-resources List within 0.5 seconds"):
        list_pod_devices(str(path), timeout=0.5)
    assert time.monotonic() - started < 5


def test_a_missing_socket_is_unreachable(short_root):
    with pytest.raises(KubeletUnreachable, match="no kubelet pod-resources socket at .*kubelet.sock"):
        list_pod_devices(str(short_root / "kubelet.sock"))


def test_a_regular_file_at_the_socket_path_is_unreachable(short_root):
    path = short_root / "kubelet.sock"
    path.write_text("not a socket")
    with pytest.raises(KubeletUnreachable, match="is not a socket"):
        list_pod_devices(str(path))


def test_a_stale_socket_without_a_listener_is_unreachable(short_root):
    path = short_root / "kubelet.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: what a crashed kubelet leaves

    started = time.monotonic()
    with pytest.raises(KubeletUnreachable, match="cannot connect to the kubelet at"):
        list_pod_devices(str(path), timeout=3)
    assert time.monotonic() - started < 5


def test_a_kubelet_without_the_v1_service_is_unreachable(short_root, serve):
    path = short_root / "kubelet.sock"
    serve(pb_grpc.PodResourcesListerServicer(), path)  # every method UNIMPLEMENTED
    with pytest.raises(KubeletUnreachable, match="does not serve the pod-resources API v1 List"):
        list_pod_devices(str(path))


def test_a_socket_path_too_long_for_unix_sockets_is_refused_clearly(short_root):
    path = short_root / ("d" * 120) / "kubelet.sock"
    with pytest.raises(KubeletUnreachable, match="longer than a unix socket path may be"):
        list_pod_devices(str(path))


def test_without_grpc_the_kubelet_is_unreachable_and_says_what_is_missing(monkeypatch, short_root, serve):
    path = short_root / "kubelet.sock"
    serve(Lister(canned_response()), path)
    monkeypatch.setattr(kubelet, "import_grpc", lambda: (None, "ImportError: No module named 'grpc'"))
    with pytest.raises(KubeletUnreachable, match="grpcio and protobuf .* No module named 'grpc'"):
        list_pod_devices(str(path))


@pytest.mark.parametrize(
    "device_id, expected",
    [
        (GPU_A + "::0", GPU_A),
        (GPU_A + "::12", GPU_A),
        (GPU_A, GPU_A),
        (MIG_A1, MIG_A1),
        (MIG_A1 + "::1", MIG_A1),
        ("GPU-x::", "GPU-x::"),
        ("0000:17:00.2", "0000:17:00.2"),
    ],
)
def test_normalize_device_id(device_id, expected):
    assert normalize_device_id(device_id) == expected


# --------------------------------------------------------------------------
# pod processes on a fake /proc


def make_process(root, pid, cgroup, fds=()):
    """``<root>/proc/<pid>`` with a cgroup file and fd links to ``fds``."""
    pid_dir = Path(root) / "proc" / str(pid)
    (pid_dir / "fd").mkdir(parents=True)
    if cgroup is not None:
        (pid_dir / "cgroup").write_text(cgroup)
    for n, target in enumerate(fds):
        os.symlink(target, str(pid_dir / "fd" / str(n)))
    return pid_dir


KUBE_SYSTEMD = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/cri-containerd-9f.scope\n"
KUBE_CGROUPFS = "0::/kubepods/besteffort/pod1a2b/9f\n"
HOST = "0::/system.slice/nvidia-persistenced.service\n"


def test_finds_pod_processes_holding_gpu_device_nodes(tmp_path):
    make_process(tmp_path, 100, KUBE_SYSTEMD, ["/dev/null", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"])
    make_process(tmp_path, 7, KUBE_CGROUPFS, ["/dev/nvidia1", "/dev/nvidia2 (deleted)", "socket:[4242]"])
    make_process(tmp_path, 300, KUBE_SYSTEMD, ["/dev/nvidia0", "/dev/nvidia1"])  # 0 is not asked for
    make_process(tmp_path, 55, HOST, ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"])  # not in a pod
    make_process(tmp_path, 56, KUBE_SYSTEMD, ["/dev/nvidia-caps/nvidia-cap21", "/srv/nvidia1"])
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 1 kB\n")

    assert pod_processes_holding(str(tmp_path), [1, 2]) == {1: [7, 100, 300], 2: [7]}


def test_unreadable_processes_are_skipped(tmp_path):
    make_process(tmp_path, 10, KUBE_SYSTEMD, ["/dev/nvidia0"])
    # Exited between listing and reading: no cgroup file.
    make_process(tmp_path, 11, None, ["/dev/nvidia0"])
    # A cgroup that cannot be read as a file.
    broken = make_process(tmp_path, 12, None, ["/dev/nvidia0"])
    (broken / "cgroup").mkdir()
    # A fd directory that cannot be listed.
    odd = tmp_path / "proc" / "13"
    odd.mkdir(parents=True)
    (odd / "cgroup").write_text(KUBE_SYSTEMD)
    (odd / "fd").write_text("")
    # Another user's process, when not running as root.
    other = make_process(tmp_path, 14, KUBE_SYSTEMD, ["/dev/nvidia0"])
    if os.geteuid() != 0:
        os.chmod(str(other / "fd"), 0)
    try:
        held = pod_processes_holding(str(tmp_path), [0])
    finally:
        os.chmod(str(other / "fd"), 0o755)
    expected = [10] if os.geteuid() != 0 else [10, 14]
    assert held == {0: expected}


def test_no_proc_or_no_minors_means_no_processes(tmp_path):
    assert pod_processes_holding(str(tmp_path), [0, 1]) == {}
    make_process(tmp_path, 10, KUBE_SYSTEMD, ["/dev/nvidia0"])
    assert pod_processes_holding(str(tmp_path), []) == {}


# --------------------------------------------------------------------------
# what is held


def test_held_devices_joins_pods_and_processes():
    pods = [
        PodDevices("ml", "train-0", "main", (GPU_B + "::1",)),
        PodDevices("default", "infer-1", "server", (MIG_A1,)),
    ]
    held = held_devices(pods, {2: [7], 9: [8], 0: []}, {0: GPU_A, 1: GPU_B, 2: GPU_C})
    assert held == {GPU_B, MIG_A1, GPU_C}


def test_real_kube_side_reports_pods_processes_and_mig_parents(short_root, serve):
    lister = Lister(canned_response())
    serve(lister, short_root / PODS_SOCKET)
    make_process(short_root, 4242, KUBE_SYSTEMD, ["/dev/nvidia2"])

    side = RealKubeSide(str(short_root))
    held, error = side.held(INVENTORY)

    assert error is None
    # GPU_B from its time-sliced replicas, MIG_A1 and its GPU from a pod, GPU_C from a process.
    assert held == {GPU_B, MIG_A1, GPU_A, GPU_C, "0000:17:00.2"}
    view = side.look(INVENTORY)
    assert view.holders(GPU_B) == ["ml/train-0 (main)"]
    assert view.holders(GPU_C) == ["pid 4242"]
    assert view.holders(MIG_A1) == view.holders(GPU_A) == ["default/infer-1 (server)"]
    assert view.holders(GPU_B + "::0") == []


def test_real_kube_side_with_no_kubelet_reports_an_error(short_root):
    make_process(short_root, 4242, KUBE_SYSTEMD, ["/dev/nvidia2"])
    held, error = RealKubeSide(str(short_root)).held(INVENTORY)
    assert held == set()
    assert "no kubelet pod-resources socket at %s" % (short_root / PODS_SOCKET) in error


def test_real_kube_side_with_a_hung_kubelet_reports_an_error_in_time(short_root, serve):
    serve(Lister(canned_response(), slow=True), short_root / PODS_SOCKET)
    started = time.monotonic()
    held, error = RealKubeSide(str(short_root), timeout=0.5).held(INVENTORY)
    assert time.monotonic() - started < 5
    assert held == set()
    assert "did not answer" in error


def test_fake_kube_side_reads_the_fakehw_kubelet_section():
    hw = parse_fakehw_text(json.dumps({
        "gpus": [
            {"uuid": GPU_A, "index": 0, "minor": 0, "mig": [{"gi": 1, "ci": 0, "uuid": MIG_A1}]},
            {"uuid": GPU_B, "index": 1, "minor": 1},
        ],
        "kubelet": {"pods": [
            {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_B + "::2"]},
            {"namespace": "default", "name": "infer-0", "container": "main", "device_ids": [MIG_A1]},
        ]},
    }))
    side = FakeKubeSide.from_fakehw(hw)
    held, error = side.held(hw.inventory)
    assert error is None
    assert held == {GPU_B, MIG_A1, GPU_A}
    assert side.look(hw.inventory).holders(GPU_B) == ["default/train-0 (main)"]


def test_fake_kube_side_reads_dra_claims_from_the_fakehw_kubelet_section():
    hw = parse_fakehw_text(json.dumps({
        "gpus": [
            {"uuid": GPU_A, "index": 0, "minor": 0, "mig": [{"gi": 1, "ci": 0, "uuid": MIG_A1}]},
            {"uuid": GPU_B, "index": 1, "minor": 1},
        ],
        "kubelet": {"pods": [
            {"namespace": "ml", "name": "train-0", "container": "main", "dynamic_resources": [
                {"claim_name": "mig", "claim_namespace": "ml", "claim_resources": [
                    {"driver_name": "gpu.bcd.dev", "pool_name": "node-a", "device_name": "mig-a",
                     "cdi_devices": ["bcd.dev/gpu=%s_gi1_ci0" % GPU_A]}]}]},
            {"namespace": "default", "name": "other", "container": "main", "dynamic_resources": [
                {"claim_name": "gpu", "claim_resources": [{"driver_name": "gpu.nvidia.com", "device_name": "gpu-1"}]}]},
        ]},
    }))
    side = FakeKubeSide.from_fakehw(hw)
    held, error = side.held(hw.inventory)
    assert error is None
    assert held == {MIG_A1, GPU_A}
    assert side.look(hw.inventory).holders(GPU_A) == ["ml/train-0 (main)"]


def test_fake_kube_side_unreachable_reports_an_error():
    hw = parse_fakehw_text(json.dumps({"kubelet": {"reachable": False, "pods": [
        {"namespace": "default", "name": "train-0", "container": "main", "device_ids": [GPU_B]},
    ]}}))
    held, error = FakeKubeSide.from_fakehw(hw).held(hw.inventory)
    assert held == set()
    assert "unreachable" in error


def test_fake_kube_side_with_no_pods_holds_nothing():
    held, error = FakeKubeSide(reachable=True, pods=[]).held(INVENTORY)
    assert (held, error) == (set(), None)


# --------------------------------------------------------------------------
# the committed stubs


def test_committed_stubs_carry_no_runtime_version_checks():
    """Regenerated without hack/podresources/generate.sh, the stubs would refuse
    the node's older protobuf and grpcio (Debian 12: 3.21 and 1.51)."""
    pb2 = (NODE_DIR / "podresources_pb2.py").read_text()
    stubs = (NODE_DIR / "podresources_pb2_grpc.py").read_text()
    assert "_runtime_version" not in pb2
    assert "GRPC_GENERATED_VERSION" not in stubs
    assert "_registered_method" not in stubs
    assert "add_registered_method_handlers" not in stubs
    assert "from ansible_collections.bcd.devices.plugins.module_utils.node import podresources_pb2\n" in stubs


def test_stubs_keep_upstream_field_numbers():
    fields = {f.name: f.number for f in pb.ContainerDevices.DESCRIPTOR.fields}
    assert fields == {"resource_name": 1, "device_ids": 2, "topology": 3}
    fields = {f.name: f.number for f in pb.ContainerResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}
    fields = {f.name: f.number for f in pb.PodResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "namespace": 2, "containers": 3}
    assert pb.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hosts: the one small interface the converger sees, and its implementations.

The planner never knows which host it runs against. ``RealHost`` reads NVML or
``nvidia-smi`` and libvirt; ``FakeHwHost`` reads a fakehw file (a GPU node made
of a directory and a YAML file, for tests and demos). Both keep every node file
under ``root``. Root's work (node files, slices, the kubelet) is done by the
host's writer (``node.writers``): this process, or the root helper.
"""

from __future__ import annotations

import abc
import errno
import itertools
import os
import shutil
import socket
import stat
import threading
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import DAMAGED_FILE_RE, SPEC_DIR, SPEC_FILE_RE
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.staleness import (
    NOT_A_DEVICE,
    UNKNOWN_DEVICE,
    driver_version_from_proc,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.cpus import CPU_ONLINE, read_host_cpus
from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import ACTIVE_DOMAIN_STATES, load_fakehw
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import FsError, NotRegularFile, RootJoin, read_bytes, read_regular
from ansible_collections.bcd.devices.plugins.module_utils.node.memory import read_host_memory
from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import FakeMigSide, RealMigSide
from ansible_collections.bcd.devices.plugins.module_utils.node.slices import RecordSlices, SystemdSlices
from ansible_collections.bcd.devices.plugins.module_utils.node.vendor_spec import load_vendor_spec
from ansible_collections.bcd.devices.plugins.module_utils.node.writers import NODE_FILE_NAMES, SCAN_LIMIT, DirectWriter, HelperWriter

if TYPE_CHECKING:
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.runtimes import Runtime
    from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.vendor import VendorSpec
    from ansible_collections.bcd.devices.plugins.module_utils.domain.inventory_model import Domain, Inventory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.plan.admission import HostCpus, HostMemory
    from ansible_collections.bcd.devices.plugins.module_utils.domain.slices import SliceState
    from ansible_collections.bcd.devices.plugins.module_utils.node.commands import TextRunCommand
    from ansible_collections.bcd.devices.plugins.module_utils.node.fakehw import FakeDriver
    from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import KubeSide
    from ansible_collections.bcd.devices.plugins.module_utils.node.mig_side import MigSide
    from ansible_collections.bcd.devices.plugins.module_utils.node.vendor_spec import ParsedSpecCache
    from ansible_collections.bcd.devices.plugins.module_utils.node.writers import NodeWriter

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# The largest hold a pass writes (1024 atoms, NVIDIA's edits on each) is some 300 KiB; parsing 2 MiB of
# JSON costs some 40 MB.
MAX_HOLD_SPEC_BYTES = 2 * 1024 * 1024
DRIVER_VERSION_PATH = "/proc/driver/nvidia/version"


class Host(abc.ABC):
    """What a pass may ask of a node. Subclasses provide the hardware side."""

    slices: Union[SystemdSlices, RecordSlices]  # each subclass sets its own in __init__

    def __init__(self, root: str = "/", writer: Optional[NodeWriter] = None) -> None:
        self.root = os.path.abspath(root or "/")
        self._join = RootJoin(self.root)
        self.writer: NodeWriter = writer or DirectWriter(self)
        self._inventory: Optional[Inventory] = None
        self._domains: Optional[Tuple[List[Domain], Optional[str]]] = None
        self._reading = threading.RLock()  # the root helper's requests share a host for a while (entry/helper/reading.py)

    # -- paths and plain files -------------------------------------------------
    def path(self, node_path: str) -> str:
        """The real path of a node path under ``root``."""
        return self._join(node_path)

    def read(self, node_path: str) -> Optional[bytes]:
        return read_bytes(self.path(node_path))

    def exists(self, node_path: str) -> bool:
        return os.path.exists(self.path(node_path))

    # -- privilege -------------------------------------------------------------
    @property
    def privileged(self) -> bool:
        """Whether root's work can be done: this process is root, or a root helper does it."""
        return self.writer.privileged

    # -- holds -----------------------------------------------------------------
    def hold_files(self, spec_dir: str = SPEC_DIR) -> Dict[str, Tuple[str, bytes]]:
        """``{allocation_id: (node_path, bytes)}`` of every ``/etc/cdi/bcd-*.json`` (of ``spec_dir``'s)."""
        found: Dict[str, Tuple[str, bytes]] = {}
        directory = self.path(spec_dir)
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return found  # no /etc/cdi: no holds (an unreadable one is an error: holds must not be given away)
        for name in names:
            match = SPEC_FILE_RE.fullmatch(name)
            if not match:
                continue
            node_path = "%s/%s" % (spec_dir, name)
            try:
                content = read_spec(self.path(node_path))
            except OSError:  # a directory of that name is no hold; writing the hold there fails on its own
                continue
            if content is not None:
                found[match.group(1)] = (node_path, content)
        return found

    def env_file_ids(self, limit: int = SCAN_LIMIT) -> List[str]:
        """The allocation ids of the env files in /run/bcd/allocations, sorted (at most ``limit`` entries of
        the directory looked at: a node's own env files are far fewer). A pass reads those of allocations it
        knows nothing of: an env file a bind that never finished left (``reading.stale_env_files``)."""
        directory, pattern = NODE_FILE_NAMES["allocation-env"]
        found: List[str] = []
        try:
            with os.scandir(self.path(directory)) as entries:
                for entry in itertools.islice(entries, limit):
                    match = pattern.fullmatch(entry.name)
                    if match:
                        found.append(match.group(1))
        except OSError:  # none there, or not readable: nothing found is removed
            pass
        return sorted(found)

    def damaged_specs(self) -> List[str]:
        """Node paths of the damaged specs set aside in /etc/cdi, oldest name first."""
        try:
            names = os.listdir(self.path(SPEC_DIR))
        except OSError:
            return []
        return ["%s/%s" % (SPEC_DIR, name) for name in sorted(names) if DAMAGED_FILE_RE.fullmatch(name)]

    # -- slices ----------------------------------------------------------------
    def slice_states(self) -> Dict[str, SliceState]:
        """``{name: SliceState}`` of every ``bcd-alloc-*.slice`` on the host."""
        states: Dict[str, SliceState] = {}
        for name in self.slices.names():
            state = self.slices.state(name)
            if state is not None:
                states[name] = state
        return states

    def slices_unavailable(self) -> Optional[str]:
        """Why this host cannot make hold slices, or None."""
        return None

    # -- the kube side ---------------------------------------------------------
    def kube_side(self) -> KubeSide:
        """Who asks the kubelet: whoever does root's work (the kubelet's socket is root's)."""
        return self.writer.kube_side(self)

    def direct_kube_side(self) -> KubeSide:
        """The kube side as this process reaches it."""
        return self._kube_side()

    # -- the MIG side ----------------------------------------------------------
    def mig_side(self) -> MigSide:
        """Who reads and changes the GPUs' MIG layout: whoever does root's work."""
        return self.writer.mig_side(self)

    def direct_mig_side(self) -> MigSide:
        """The MIG side as this process reaches it."""
        return self._mig_side()

    # -- memory ----------------------------------------------------------------
    def memory(self) -> Optional[HostMemory]:
        """``HostMemory`` from the meminfo and huge page files under ``root``, or None when unreadable."""
        return read_host_memory(self)

    # -- CPUs and NUMA nodes ---------------------------------------------------
    def cpus(self) -> Tuple[Optional[HostCpus], Optional[str]]:
        """``(HostCpus, None)``: the online CPUs, the NUMA nodes with memory and each node's CPUs, from sysfs
        under ``root``; ``(None, why)`` when they cannot be read, and ``cpus`` and ``mems`` go unchecked."""
        cpus, problem = read_host_cpus(self)
        if cpus is None and problem is None:
            problem = "%s is not there" % CPU_ONLINE
        return cpus, problem

    # -- the hardware side -----------------------------------------------------
    def inventory(self) -> Inventory:
        """The node's GPUs, read once per host (by one thread, where several share it)."""
        if self._inventory is None:
            with self._reading:
                if self._inventory is None:
                    self._inventory = self._read_inventory()
        return self._inventory

    def domains(self) -> Tuple[List[Domain], Optional[str]]:
        """``(domains, error)``: running or paused VMs and the GPUs they have."""
        if self._domains is None:
            with self._reading:
                if self._domains is None:
                    self._domains = self._read_domains()
        return self._domains

    def view_key(self) -> Optional[Tuple[int, ...]]:
        """Something cheap to read that changes whenever what ``fresh`` would read of the hardware does, or
        None when nothing cheap tells (a real node: the root helper reads it anew after a time instead)."""
        return None

    # The root helper's hosts share its ParsedSpecCache (NodeView sets it): a spec file unchanged since it
    # was parsed is not parsed again. A pass's host has none and parses the spec it reads.
    vendor_cache: Optional[ParsedSpecCache] = None

    def vendor_spec(self) -> VendorSpec:
        """NVIDIA's CDI spec, checked against the node when the host can tell what the node has (its MIG
        devices against the inventory's too)."""
        probe = self.driver_probe()
        return load_vendor_spec(self.root, probe, self.vendor_cache, self.inventory() if probe is not None else None)

    def driver_probe(self) -> Optional[Host]:
        """What answers the stale-edit checks (``domain/cdi/staleness.py``): ``device_number``,
        ``file_exists``, ``driver_version``; None when this host cannot tell."""
        return self

    def device_number(self, node_path: str) -> Optional[Tuple[int, int]]:
        """``(major, minor)`` of the device node at ``node_path`` under root, ``NOT_A_DEVICE`` for
        another kind of file, None when there is none. A path that cannot be looked at counts as there."""
        try:
            info = os.stat(self.path(node_path))
        except (FsError, ValueError):  # ValueError: a NUL or a lone surrogate, which no path on the node has
            return None
        except OSError as exc:
            return None if exc.errno in (errno.ENOENT, errno.ENOTDIR) else UNKNOWN_DEVICE
        if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            return (os.major(info.st_rdev), os.minor(info.st_rdev))
        return NOT_A_DEVICE

    def file_exists(self, node_path: str) -> bool:
        """Whether ``node_path`` exists under root (a path that cannot be looked at counts as there)."""
        try:
            os.stat(self.path(node_path))
        except (FsError, ValueError):  # ValueError: a NUL or a lone surrogate, which no path on the node has
            return False
        except OSError as exc:
            return exc.errno not in (errno.ENOENT, errno.ENOTDIR)
        return True

    def driver_version(self) -> Optional[str]:
        """The running NVIDIA driver's version, from /proc/driver/nvidia/version; None without one."""
        try:
            content = self.read(DRIVER_VERSION_PATH)
        except OSError:
            return None
        return driver_version_from_proc(content[:4096].decode("utf-8", "replace")) if content else None

    def cdi_runtimes(self) -> Tuple[List[Runtime], List[str]]:
        """``(runtimes, warnings)``: the container runtimes found on the node, with their versions."""
        return [], []

    def boot_id(self) -> str:
        content = self.read(BOOT_ID_PATH)
        return content.decode("ascii", "replace").strip() if content else ""

    def node_id(self) -> str:
        return socket.gethostname()

    @abc.abstractmethod
    def fresh(self) -> Host:
        """The same node, read anew (the root helper's per-request host; its own root work done here)."""

    @abc.abstractmethod
    def _read_inventory(self) -> Inventory:
        """The node's GPUs, as an ``Inventory``."""

    @abc.abstractmethod
    def _read_domains(self) -> Tuple[List[Domain], Optional[str]]:
        """``(domains, error)``."""

    @abc.abstractmethod
    def _kube_side(self) -> KubeSide:
        """A ``KubeSide`` asked directly (this process can reach the kubelet)."""

    @abc.abstractmethod
    def _mig_side(self) -> MigSide:
        """A ``MigSide`` this process reads and changes directly."""


# The readers of a real node and the kubelet are imported where a pass first needs them: a module run
# compiles its module_utils afresh each time (AnsiballZ ships sources), and most passes need neither.

class RealHost(Host):
    """A real GPU node: NVML or ``nvidia-smi``, and libvirt when ``virsh`` exists."""

    slices: SystemdSlices

    def __init__(self, root: str = "/", writer: Optional[NodeWriter] = None,
                 runner: Optional[TextRunCommand] = None) -> None:
        super().__init__(root, writer)
        if runner is None:
            from ansible_collections.bcd.devices.plugins.module_utils.node.commands import default_run_command  # pylint: disable=import-outside-toplevel
            runner = default_run_command
        self.runner: TextRunCommand = runner
        self.slices = SystemdSlices(self, runner)

    def slices_unavailable(self) -> Optional[str]:
        return self.slices.available()

    def fresh(self) -> RealHost:
        return RealHost(self.root, runner=self.runner)

    def _kube_side(self) -> KubeSide:
        from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import RealKubeSide  # pylint: disable=import-outside-toplevel
        return RealKubeSide(self.root)

    def _mig_side(self) -> MigSide:
        return RealMigSide(self.runner, self.inventory, lambda: self.fresh().inventory())

    def _read_inventory(self) -> Inventory:
        from ansible_collections.bcd.devices.plugins.module_utils.node.inventory import (  # pylint: disable=import-outside-toplevel
            read_kernel_xids,
            read_real_inventory,
            with_kernel_health,
        )
        return with_kernel_health(read_real_inventory(run_command=self.runner), read_kernel_xids(self.root))

    def cdi_runtimes(self) -> Tuple[List[Runtime], List[str]]:
        from ansible_collections.bcd.devices.plugins.module_utils.node.runtimes import detect_runtimes  # pylint: disable=import-outside-toplevel
        return detect_runtimes(self.root)

    def _read_domains(self) -> Tuple[List[Domain], Optional[str]]:
        if shutil.which("virsh") is None:
            return [], None
        from ansible_collections.bcd.devices.plugins.module_utils.node.inventory import read_libvirt_domains  # pylint: disable=import-outside-toplevel
        return read_libvirt_domains(self.runner, self.inventory())


class FakeHwHost(Host):
    """A node described by a fakehw file; every node file lives under ``root``."""

    def __init__(self, root: str, fakehw_path: str, writer: Optional[NodeWriter] = None) -> None:
        super().__init__(root, writer)
        self.fakehw_path = fakehw_path
        self.hw = load_fakehw(fakehw_path)
        self.slices = RecordSlices(self)

    def fresh(self) -> FakeHwHost:
        return FakeHwHost(self.root, self.fakehw_path)

    def view_key(self) -> Optional[Tuple[int, ...]]:
        """The fakehw file's identity and times: all of this host's hardware is in it."""
        try:
            info = os.stat(self.fakehw_path)
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _read_inventory(self) -> Inventory:
        return self.hw.inventory

    def _kube_side(self) -> KubeSide:
        from ansible_collections.bcd.devices.plugins.module_utils.node.kubelet import FakeKubeSide  # pylint: disable=import-outside-toplevel
        return FakeKubeSide.from_fakehw(self.hw)

    def _mig_side(self) -> MigSide:
        return FakeMigSide(self.fakehw_path)

    def driver_probe(self) -> Optional[Host]:
        """The fakehw file's ``driver`` entry stands for the node's /dev and driver; without one,
        nothing is checked (a test tree has no /dev)."""
        return self if self.hw.driver is not None else None

    def _driver(self) -> FakeDriver:
        """The fakehw file's ``driver``: the checks below run only when ``driver_probe`` found one."""
        driver = self.hw.driver
        if driver is None:
            raise AssertionError("the fakehw driver is read before it is used")
        return driver

    def device_number(self, node_path: str) -> Optional[Tuple[int, int]]:
        return self._driver().device_nodes.get(node_path)

    def file_exists(self, node_path: str) -> bool:
        return node_path in self._driver().files or super().file_exists(node_path)

    def driver_version(self) -> Optional[str]:
        return self._driver().version

    def cdi_runtimes(self) -> Tuple[List[Runtime], List[str]]:
        return list(self.hw.runtimes), []

    def cpus(self) -> Tuple[Optional[HostCpus], Optional[str]]:
        """The CPUs and NUMA nodes the fakehw file describes (``cpus``, ``numa_nodes``); without them, the
        sysfs files under ``root`` as on a real host; without those either, none: a test tree that describes
        no CPUs has ``cpus`` and ``mems`` go unchecked, and says nothing of it (docs/fakehw.md)."""
        if self.hw.cpus is not None:
            return self.hw.cpus, None
        return read_host_cpus(self)

    def _read_domains(self) -> Tuple[List[Domain], Optional[str]]:
        """The running and paused domains, as a real host lists them; a shut-off VM holds nothing."""
        return [domain for domain in self.hw.domains if domain.state in ACTIVE_DOMAIN_STATES], None

    def boot_id(self) -> str:
        return super().boot_id() or self.hw.boot_id or ""

    def node_id(self) -> str:
        return self.hw.node_id or super().node_id()


def read_spec(path: str) -> Optional[bytes]:
    """A hold's spec: None when it is gone or not a regular file (a FIFO there is opened without waiting,
    and is no hold), its first ``MAX_HOLD_SPEC_BYTES`` + 1 bytes when larger (a damaged spec: the pass sets
    it aside), else its bytes."""
    try:
        return read_regular(path, MAX_HOLD_SPEC_BYTES)
    except (FileNotFoundError, NotADirectoryError, NotRegularFile):
        return None


def make_host(root: str = "/", fakehw: Optional[str] = None, helper_socket: Optional[str] = None) -> Host:
    """The host a pass runs against: fakehw when a hardware file is named; root's work done through
    the root helper at ``helper_socket`` when one is named, else by this process."""
    writer: Optional[NodeWriter] = None
    if helper_socket:
        from ansible_collections.bcd.devices.plugins.module_utils.node.helper_client import HelperClient  # pylint: disable=import-outside-toplevel
        writer = HelperWriter(HelperClient(helper_socket))
    if fakehw:
        return FakeHwHost(root, fakehw, writer=writer)
    return RealHost(root, writer=writer)

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Docker's CDI support in the end-to-end suite: ``dockerd`` (Debian trixie's ``docker.io``)
chrooted in the same rootfs as podman, in the same private mount namespace.

The daemon is configured as Docker's documentation says for CDI, in
``/etc/docker/daemon.json``: ``{"features": {"cdi": true}, "cdi-spec-dirs": [...]}``.
Its spec directories are the docker node's own ``etc/cdi`` and ``var/run/cdi`` (under
``/srv/nodes``, where the converger writes them) plus one scratch directory: Docker keeps
one CDI cache for its lifetime and refreshes it from inotify events, so it must watch
the very directories the converger writes (a bind mount swapped over ``/etc/cdi``, as the
podman part does, would go unseen).

Everything else is the least a daemon needs here: vfs storage, no network (``--bridge=none
--iptables=false --ip6tables=false``), the cgroupfs driver (PID 1 is not systemd), the
containerd it starts itself. The containers' image is built locally from the busybox-static
root with ``docker import``: nothing is pulled. The daemon's log is kept in the scratch
directory; each run's Observation carries the lines the daemon logged during that run,
because Docker's client never says why a spec was dropped, only the daemon does.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time

from bcd_e2e import CONTAINER_ROOTFS, HOOK_LOG, Observation, parse_probe, probe_script

IMAGE = "bcd-e2e/busybox:local"
DAEMON_JSON = "/etc/docker/daemon.json"
SCRATCH_SPECS = "/srv/docker-cdi"  # inside the rootfs: specs a test puts in front of dockerd
REGISTRY_ERRORS = "Refreshing the CDI registry generated errors"  # dockerd's warning, on a failed injection
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def daemon_config(spec_dirs):
    """daemon.json as Docker's CDI documentation writes it, with the suite's spec directories."""
    return {"features": {"cdi": True}, "cdi-spec-dirs": list(spec_dirs)}


class Docker:
    """One dockerd for the session; ``run`` starts a container and returns what it saw."""

    def __init__(self, e2e, spec_dirs):
        self.e2e = e2e
        self.spec_dirs = list(spec_dirs) + [SCRATCH_SPECS]
        self.log_path = os.path.join(e2e.work, "dockerd.log")
        self.proc = None
        self.version = ""

    def chroot(self, *args, **kwargs):
        return self.e2e.chroot(*args, **kwargs)

    def start(self, timeout=90):
        os.makedirs(self.e2e.inside(SCRATCH_SPECS), exist_ok=True)
        os.makedirs(self.e2e.inside("/etc/docker"), exist_ok=True)
        with open(self.e2e.inside(DAEMON_JSON), "w") as handle:
            json.dump(daemon_config(self.spec_dirs), handle, indent=1)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        cmd = ["chroot", self.e2e.rootfs, "dockerd", "--config-file", DAEMON_JSON, "--storage-driver=vfs",
               "--bridge=none", "--iptables=false", "--ip6tables=false", "--exec-opt", "native.cgroupdriver=cgroupfs",
               "--host", "unix:///run/docker.sock"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("dockerd exited %s:\n%s" % (self.proc.returncode, self.log_tail()))
            probe = self.chroot("docker", "version", "--format", "{{.Server.Version}}", check=False, timeout=30)
            if probe.returncode == 0:
                self.version = probe.stdout.strip()
                break
            if time.monotonic() > deadline:
                raise AssertionError("dockerd did not answer within %d s:\n%s" % (timeout, self.log_tail()))
            time.sleep(0.3)
        # The image: the busybox-static root, imported (nothing is pulled).
        tar = subprocess.Popen(["tar", "-C", self.e2e.inside(CONTAINER_ROOTFS), "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        imported = subprocess.run(["chroot", self.e2e.rootfs, "docker", "import", "-", IMAGE], stdin=tar.stdout,
                                  env=env, capture_output=True, text=True, timeout=120, check=False)
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise AssertionError("docker import failed (%d): %s" % (imported.returncode, imported.stderr))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_size(self):
        return os.path.getsize(self.log_path)

    def log_since(self, offset):
        with open(self.log_path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", "replace")

    def log_tail(self, size=6000):
        with open(self.log_path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(self.log_path) - size))
            return handle.read().decode("utf-8", "replace")

    def wait_for_log(self, text, offset, timeout=10):
        """Wait until the daemon logged ``text`` after ``offset``; the lines logged, or AssertionError."""
        deadline = time.monotonic() + timeout
        while text not in self.log_since(offset):
            if time.monotonic() > deadline:
                raise AssertionError("dockerd did not log %r within %d s:\n%s" % (text, timeout, self.log_since(offset)))
            time.sleep(0.2)
        return self.log_since(offset)

    def run(self, devices, node_paths=(), numbers=(), mount_paths=()):
        """``docker run --device <CDI name>...`` on the imported image; the Observation's stderr is the
        client's, then the daemon's log lines of that run."""
        with open(self.e2e.inside(HOOK_LOG), "w"):
            pass
        cmd = ["docker", "run", "--rm", "--network=none"]
        for device in devices:
            cmd += ["--device", device]
        cmd += [IMAGE, "/bin/sh", "-c", probe_script(node_paths, numbers, mount_paths)]
        offset = self.log_size()
        proc = self.chroot(*cmd, check=False)
        time.sleep(0.2)  # the daemon's lines of a failed start may follow the client's exit
        daemon = self.log_since(offset)
        stderr = proc.stderr + "\n--- dockerd's log during this run\n" + daemon
        obs = parse_probe(Observation(cmd=cmd, rc=proc.returncode, stdout=proc.stdout, stderr=stderr))
        with open(self.e2e.inside(HOOK_LOG)) as handle:
            obs.hooks = [line.rstrip("\n") for line in handle]
        self.e2e.containers += 1
        self.e2e.save(obs)
        return obs

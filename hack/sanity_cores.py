# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make sanity: ``hack/sanity.sh`` under every ansible-core release given, two at a time, then the compile test
on every target Python under each, one at a time.

    python hack/sanity_cores.py [--jobs N] CORE... [-- ANSIBLE-TEST ARGS...]

ansible-test sanity runs its tests one after the other on one CPU (pylint, the longest, 80 s of a core's two
minutes), so on a machine with two CPUs two releases side by side take the time of one: this was the largest
stage of make test (9 to 10 minutes for four releases). Two releases share nothing ansible-test writes
except the virtual environments it keeps per Python version and requirements in ``.build/home``, so two on the
same Python (2.21 and 2.22 both run on 3.13) never run at once; each has its own copy of the collection
(``.build/sanity/<core>``). Each release's output is kept and printed whole when it ends, in the order the
releases were given; the first that fails is named, and the rest are still waited for (nothing is left
running). The compile test on the target Pythons (``--target-pythons``) runs afterwards, one release at a
time, and only when no ansible-test arguments were given, as before.

Environment: VENV and BUILD, passed on to hack/sanity.sh; SANITY_JOBS (default: 2, or 1 on one CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

HACK = os.path.dirname(os.path.abspath(__file__))


def python_of(core):
    """The ``X.Y`` of the Python the release's venv runs on (making the venv first if need be)."""
    bindir = subprocess.run(["bash", os.path.join(HACK, "core_venv.sh"), core], check=True, capture_output=True,
                            text=True).stdout.strip()
    return subprocess.run([os.path.join(bindir, "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def schedule(cores, pythons, jobs, start, poll):
    """Runs ``start(core)`` for every core, at most ``jobs`` at once and never two on the same Python;
    ``poll(handle)`` is None while it runs, else its exit status. Returns ``{core: status}``."""
    # The releases of the most shared Python first: the others fill the second place meanwhile, where the
    # other way round two on one Python would be left to run one after the other at the end.
    shared = dict((python, list(pythons.values()).count(python)) for python in pythons.values())
    waiting, running, done = sorted(cores, key=lambda core: -shared[pythons[core]]), {}, {}
    while waiting or running:
        for core in list(waiting):
            if len(running) >= jobs:
                break
            if pythons[core] not in {pythons[other] for other in running}:
                waiting.remove(core)
                running[core] = start(core)
        for core, handle in list(running.items()):
            status = poll(handle)
            if status is not None:
                done[core] = status
                del running[core]
        if running:
            time.sleep(0.5)
    return done


def main(argv):
    jobs = int(os.environ.get("SANITY_JOBS") or (2 if (os.cpu_count() or 1) > 1 else 1))
    if argv[:1] == ["--jobs"]:
        jobs, argv = int(argv[1]), argv[2:]
    cores, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    if not cores:
        print(__doc__, file=sys.stderr)
        return 2
    pythons = dict((core, python_of(core)) for core in cores)
    logs = {}

    def start(core):
        logs[core] = tempfile.TemporaryFile(mode="w+")
        print("sanity: ansible-core %s (Python %s) started" % (core, pythons[core]), flush=True)
        return subprocess.Popen(["bash", os.path.join(HACK, "sanity.sh"), "--core", core] + extra,
                                stdout=logs[core], stderr=subprocess.STDOUT)

    done = schedule(cores, pythons, max(1, jobs), start, lambda proc: proc.poll())
    failed = [core for core in cores if done[core]]
    for core in cores:
        logs[core].seek(0)
        print("sanity: ansible-core %s%s" % (core, ": failed" if done[core] else ""), flush=True)
        sys.stdout.write(logs[core].read())
        sys.stdout.flush()
    if failed:
        print("sanity: failed under ansible-core %s" % ", ".join(failed), file=sys.stderr)
        return 1
    if not extra:
        for core in cores:
            if subprocess.run(["bash", os.path.join(HACK, "sanity.sh"), "--core", core, "--target-pythons"],
                              check=False).returncode:
                print("sanity: the compile test failed on a target Python under ansible-core %s" % core,
                      file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

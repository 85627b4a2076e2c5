# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node delivers its events by itself (issue 45): with ``bcd_holds_gateway_url`` the role writes
``bcd-holds-deliver.service`` (``bcd-holds deliver`` as the pass account, the token as a systemd credential,
the root units' sandbox with the network), ``bcd-holds-deliver.timer`` and ``bcd-holds-deliver.path``, the
settings ``bcd-holds deliver`` reads and the token's file; without it, none of them.

The units are rendered with the role's defaults and vars as test_root_isolation renders them, checked by its
checker, by ``systemd-analyze verify`` and ``security --offline`` where the tool is, and the settings the role
writes are parsed by ``bcd-holds deliver``'s own parser. Then the role's ``units`` tasks run for real on a
directory (ansible-playbook, as root): the files, owners and modes, a delivery from that node to the
collection's gateway with the token handed over as systemd hands it, and everything removed once the gateway
is unset."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.entry.cli import EX_OK, main
from ansible_collections.bcd.devices.plugins.module_utils.entry.deliver import parse_config
from ansible_collections.bcd.devices.plugins.module_utils.state.events import Journal, NodeKey
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_deliver import Source
from ansible_collections.bcd.devices.tests.unit.roles.test_root_isolation import RoleVars, parse_unit, unit_problems, written_units
from ansible_collections.bcd.devices.tests.unit.roles.test_units_sandbox import MAX_EXPOSURE, _analyze_offline, settings, words

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
URL = "https://gateway.example:5050/v1/events"
TOKEN = "tok-9d1c0e7f3b2a4c58"
DELIVERY = ("bcd-holds-deliver.service", "bcd-holds-deliver.timer", "bcd-holds-deliver.path")
# What the root units (helper, metrics) both set, and the delivery keeps as they set it.
SHARED = ("ProtectSystem", "ProtectHome", "PrivateTmp", "AmbientCapabilities", "NoNewPrivileges", "SystemCallFilter",
          "SystemCallErrorNumber", "SystemCallArchitectures", "ProtectKernelTunables", "ProtectKernelModules",
          "ProtectClock", "ProtectHostname", "RestrictNamespaces", "LockPersonality", "RestrictRealtime",
          "RestrictSUIDSGID", "KeyringMode", "PrivateMounts", "WorkingDirectory")


def units(**overrides):
    return written_units(RoleVars(overrides))


@pytest.mark.parametrize("helper", (True, False))
@pytest.mark.parametrize("root, fakehw", (("/", None), ("/srv/node", "/srv/node/fakehw.yml")))
@pytest.mark.parametrize("token", (TOKEN, None))
def test_with_a_gateway_the_delivery_units_are_written_as_the_pass_account(helper, root, fakehw, token):
    role_vars = RoleVars(dict(bcd_holds_gateway_url=URL, bcd_holds_gateway_token=token, bcd_holds_helper=helper,
                              bcd_holds_root=root, bcd_holds_fakehw=fakehw))
    written = written_units(role_vars)
    assert set(DELIVERY) <= set(written)
    for name, text in written.items():
        assert unit_problems(name, text, role_vars) == []
        for _section, key, value in parse_unit(text):
            if key in ("Unit", "Wants", "After", "Before"):
                assert all(other in written for other in value.split() if other.startswith("bcd-holds-")), (name, value)
    service = parse_unit(written["bcd-holds-deliver.service"])
    assert ("Service", "User", "bcd" if helper else "root") in service
    assert ("Service", "Type", "oneshot") in service
    [start] = [value for _s, key, value in service if key == "ExecStart"]
    assert start == "/usr/local/bin/bcd-holds deliver --config /etc/bcd-holds/deliver.json --state-dir /var/lib/bcd" + (
        " --fakehw /fakehw.yml" if fakehw else "")
    credentials = [value for _s, key, value in service if key == "LoadCredential"]
    assert credentials == (["gateway-token:/etc/bcd-holds/gateway-token"] if token else [])
    assert not any(key.startswith("Environment") or key == "PassEnvironment" for _s, key, _v in service)
    assert ("Unit", "StartLimitIntervalSec", "0") in service   # the path unit may start it often
    assert not any(key == "WantedBy" for _s, key, _v in service)  # started by the timer and the path unit only


def test_without_a_gateway_there_is_no_delivery_unit():
    assert not set(DELIVERY) & set(units())
    assert not set(DELIVERY) & set(units(bcd_holds_gateway_url=""))


def test_the_timer_runs_every_interval_and_the_path_unit_watches_the_journal():
    written = units(bcd_holds_gateway_url=URL, bcd_holds_deliver_interval=45, bcd_holds_state_dir="/srv/bcd")
    timer = parse_unit(written["bcd-holds-deliver.timer"])
    for key in ("OnActiveSec", "OnUnitInactiveSec"):
        assert ("Timer", key, "45s") in timer
    assert ("Timer", "Unit", "bcd-holds-deliver.service") in timer and ("Install", "WantedBy", "timers.target") in timer
    path = parse_unit(written["bcd-holds-deliver.path"])
    assert [(key, value) for section, key, value in path if section == "Path"] == [
        ("PathChanged", "/srv/bcd/events.jsonl"), ("Unit", "bcd-holds-deliver.service")]
    assert "ReadWritePaths=-/srv/bcd\n" in written["bcd-holds-deliver.service"]
    default = parse_unit(units(bcd_holds_gateway_url=URL)["bcd-holds-deliver.timer"])
    assert [value for _s, key, value in default if key in ("OnActiveSec", "OnUnitInactiveSec")] == ["30s", "30s"]


@pytest.mark.parametrize("helper", (True, False))
def test_the_delivery_is_sandboxed_as_the_root_units_are_but_for_the_network(helper):
    written = units(bcd_holds_gateway_url=URL, bcd_holds_gateway_token=TOKEN, bcd_holds_helper=helper,
                    bcd_holds_metrics_textfile="/var/lib/node-exporter/bcd.prom")
    deliver = settings(written["bcd-holds-deliver.service"])
    for name in ("bcd-holds-metrics.service",) + (("bcd-holds-helper.service",) if helper else ()):
        root_unit = settings(written[name])
        for key in SHARED:
            assert deliver.get(key) == root_unit.get(key), (name, key)
    assert words(deliver["RestrictAddressFamilies"]) == ["AF_UNIX", "AF_INET", "AF_INET6"]
    assert "IPAddressDeny" not in deliver                      # the gateway is anywhere
    assert deliver["CapabilityBoundingSet"] == [""]            # none at all, even run as root (no helper)
    assert words(deliver["ReadWritePaths"]) == ["-/var/lib/bcd"]  # the journal and the backoff, nothing else
    for key in ("PrivateDevices", "ProtectKernelLogs", "ProtectControlGroups"):
        assert deliver[key] == ["yes"], key                    # no GPU, no kernel log, no slice: what the root units keep
    assert deliver["MemoryMax"] and deliver["TasksMax"] and deliver["UMask"] == ["0077"]


def _rendered_files(tmp_path, **overrides):
    """The delivery units as files, their bcd-holds an executable that is there (verify checks it)."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    program = prefix / "bin" / "bcd-holds"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    written = units(bcd_holds_gateway_url=URL, bcd_holds_gateway_token=TOKEN, bcd_holds_prefix=str(prefix), **overrides)
    paths = []
    for name in DELIVERY:
        (tmp_path / name).write_text(written[name], encoding="utf-8")
        paths.append(str(tmp_path / name))
    return paths


@pytest.mark.parametrize("helper", (True, False))
def test_systemd_analyze_verify_finds_nothing_wrong(tmp_path, helper):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here (apt-get install systemd gives it; nothing is started)")
    paths = _rendered_files(tmp_path, bcd_holds_helper=helper)
    result = subprocess.run([tool, "verify"] + paths, capture_output=True, text=True, check=False, timeout=120)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_delivery_unit_rates_at_most_5_0(tmp_path):
    tool, why = _analyze_offline()
    if tool is None:
        pytest.skip(why)
    [service] = [path for path in _rendered_files(tmp_path) if path.endswith(".service")]
    result = subprocess.run([tool, "security", "--offline=true", "--no-pager", service],
                            capture_output=True, text=True, check=False, timeout=120)
    found = [line for line in (result.stdout + result.stderr).splitlines() if "Overall exposure level" in line]
    assert found, result.stdout + result.stderr
    assert float(found[0].split(": ")[1].split()[0]) <= MAX_EXPOSURE, result.stdout


def test_the_settings_the_role_writes_are_what_bcd_holds_deliver_reads():
    role_vars = RoleVars(dict(bcd_holds_gateway_url=URL, bcd_holds_gateway_token=TOKEN, bcd_holds_gateway_timeout=12,
                              bcd_holds_gateway_ca_file="/etc/ssl/bcd-ca.pem", bcd_holds_gateway_max_events=500,
                              bcd_holds_gateway_max_bytes=1048576, bcd_holds_gateway_token_header="X-Bcd-Token"))
    settings_ = json.loads(json.dumps(role_vars["__bcd_holds_deliver_settings"]))
    config = parse_config(settings_, "/etc/bcd-holds/deliver.json")
    assert (config.url, config.timeout, config.token_file, config.token_header, config.ca_file, config.max_events,
            config.max_bytes) == (URL, 12.0, "/etc/bcd-holds/gateway-token", "X-Bcd-Token", "/etc/ssl/bcd-ca.pem", 500,
                                  1048576)
    defaults = parse_config(json.loads(json.dumps(RoleVars({"bcd_holds_gateway_url": URL})["__bcd_holds_deliver_settings"])),
                            "/etc/bcd-holds/deliver.json")
    assert (defaults.token_file, defaults.ca_file, defaults.timeout, defaults.max_events, defaults.max_bytes) == (
        None, None, 30.0, 10000, 16777216)


# -- the role's tasks, for real ------------------------------------------------------------------

PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Write the units
      ansible.builtin.include_role:
        name: bcd.devices.bcd_holds
        tasks_from: units
"""


def run_role(tmp_path, root, **role_vars):
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    extra = dict(bcd_holds_root=str(root), bcd_holds_systemd=False, **role_vars)
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


def owner_and_mode(path):
    info = os.stat(path)
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_the_role_installs_the_delivery_the_node_runs_and_removes_it_without_a_gateway(tmp_path, monkeypatch):
    root = tmp_path / "node-a"
    state = root / "var" / "lib" / "bcd"
    state.mkdir(parents=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)  # install.yml's, which this run leaves out
    key = NodeKey.load_or_create(str(state / "node.key"))
    bound = Journal(str(state)).append("AllocationBound", {
        "node_id": "node-a", "boot_id": "6f0c1e9e-1c7a-4a43-9a9e-000000000001", "allocation_id": "alloc_train",
        "generation": 1, "device_ids": ["GPU-5f1c2a90-0001-4000-8000-000000000001"],
        "cdi_devices": ["bcd.dev/gpu=GPU-5f1c2a90-0001-4000-8000-000000000001"],
        "cdi_spec_path": "/etc/cdi/bcd-alloc_train.json", "env_file": "/run/bcd/allocations/alloc_train.env"}, key)
    source = Source(node_keys={"node-a": key.public_key_b64()}, token=TOKEN)
    try:
        output = run_role(tmp_path, root, bcd_holds_gateway_url=source.url, bcd_holds_gateway_token=TOKEN)
        assert TOKEN not in output
        units_dir = root / "etc" / "systemd" / "system"
        for name in DELIVERY:
            assert owner_and_mode(units_dir / name) == (0, 0, 0o644), name
        config = root / "etc" / "bcd-holds" / "deliver.json"
        token = root / "etc" / "bcd-holds" / "gateway-token"
        assert owner_and_mode(root / "etc" / "bcd-holds") == (0, 0, 0o755)
        assert owner_and_mode(config) == (0, 0, 0o644) and owner_and_mode(token) == (0, 0, 0o600)
        assert token.read_text() == TOKEN + "\n"
        assert json.loads(config.read_text()) == {
            "url": source.url, "timeout": 30, "token_file": "/etc/bcd-holds/gateway-token",
            "token_header": "Authorization", "ca_file": None, "max_events": 10000, "max_bytes": 16777216}

        # the unit's run: bcd-holds deliver with the settings the role wrote, the token as systemd hands it over
        credentials = tmp_path / "credentials"
        credentials.mkdir(mode=0o500)
        shutil.copy(str(token), str(credentials / "gateway-token"))
        monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
        assert main(["deliver", "--root", str(root)]) == EX_OK
        assert source.queued() == [("node-a", bound["seq"], "AllocationBound")]
        assert Journal(str(state)).unacked() == []

        # a token no longer given is removed; then no gateway: no unit, no settings
        run_role(tmp_path, root, bcd_holds_gateway_url=source.url)
        assert not token.exists() and json.loads(config.read_text())["token_file"] is None
        assert "LoadCredential" not in (units_dir / "bcd-holds-deliver.service").read_text()
        run_role(tmp_path, root)
        assert not any((units_dir / name).exists() for name in DELIVERY)
        assert not config.exists() and not token.exists()
        assert (units_dir / "bcd-holds-retry.timer").exists()  # the rest stays
    finally:
        source.stop()


def test_node_md_quotes_the_unit_a_real_node_gets():
    """docs/node.md, "The node delivers by itself": the unit as rendered with a token and the defaults, its
    ``# Ansible managed`` header and comments left out."""
    text = (REPO / "docs" / "node.md").read_text(encoding="utf-8")
    quoted = text.split("```ini\n# bcd-holds-deliver.service\n", 1)[1].split("```", 1)[0]
    rendered = units(bcd_holds_gateway_url=URL, bcd_holds_gateway_token=TOKEN)["bcd-holds-deliver.service"]
    assert [line for line in quoted.splitlines() if line] == [
        line for line in rendered.splitlines() if line and not line.startswith("#")]

# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's credentials stay secret: the role's delivery (``tasks_from: deliver``) posts the events with an
``Authorization`` header from ``bcd_holds_gateway_headers``, the gateway gets it, and no output of
``ansible-playbook -vvv`` shows it, whatever ansible-core masks by itself (2.22 masks registered secrets; older
releases echo a module's options at ``-vvv``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
TOKEN = "Bearer tok-7c1f0b2e9d4a4e55b3a1"
PLAY = """
- hosts: nodes
  gather_facts: false
  tasks:
    - name: Bind a hold (its event is what the gateway gets)
      bcd.devices.holds:
        root: "{{ node_root }}"
        fakehw: "{{ node_root }}/fakehw.yml"
        generation: 1
        devices:
          - allocation_id: a1
            reservation_id: rsv_1
            binding: BINDING_HOLD
            devices: [{id: GPU-5f1c2a90-0001-4000-8000-000000000001}]
    - name: Deliver the events
      ansible.builtin.include_role:
        name: bcd.devices.bcd_holds
        tasks_from: deliver
      vars:
        bcd_holds_root: "{{ node_root }}"
        bcd_holds_gateway_url: "{{ gateway_url }}"
        bcd_holds_gateway_headers:
          Authorization: "{{ gateway_token }}"
        bcd_holds_gateway_required: true
    - name: Read the events left
      bcd.devices.events:
        root: "{{ node_root }}"
      register: left
    - name: Every event was acknowledged
      ansible.builtin.assert:
        that: left.events | length == 0
"""


class Gateway(BaseHTTPRequestHandler):
    """Accepts every event posted and keeps what each request carried."""
    seen = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Gateway.seen.append((self.headers.get("Authorization"), [event["seq"] for event in body["events"]]))
        answer = json.dumps({"accepted": [event["seq"] for event in body["events"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        del args


@pytest.fixture(name="gateway_url")
def fixture_gateway_url():
    server = HTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Gateway.seen = []
    try:
        yield "http://127.0.0.1:%d/events" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(os.geteuid() != 0 or not ANSIBLE_PLAYBOOK.exists(), reason="needs root and ansible-playbook")
def test_the_gateways_authorization_header_is_sent_and_never_shown(tmp_path, gateway_url):
    root = tmp_path / "node-a"
    subprocess.run([sys.executable, str(REPO / "hack" / "fakehw_node.py"), "--root", str(root), "--compact"],
                   check=True, capture_output=True)
    (tmp_path / "hosts.yml").write_text(json.dumps({"nodes": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "node_root": str(root)}}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build"), ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-home" / "tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-vvv", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps({"gateway_url": gateway_url, "gateway_token": TOKEN})],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert Gateway.seen == [(TOKEN, [1])]
    assert "tok-7c1f0b2e9d4a4e55b3a1" not in output
    assert "Every event was acknowledged" in output

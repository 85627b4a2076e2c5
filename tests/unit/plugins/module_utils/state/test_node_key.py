# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node key (``state/node_key.py``): created private on first use, read and written in the one PEM form
cryptography writes, read in any other by cryptography itself, never replaced automatically."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ansible_collections.bcd.devices.plugins.module_utils.state import node_key as _node_key
from ansible_collections.bcd.devices.plugins.module_utils.state.node_key import EventsError, NodeKey, NodeKeyMissing


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def state(tmp_path):
    return str(tmp_path / "var" / "lib" / "bcd")


# -- the node key ---------------------------------------------------------------

def test_key_is_created_private_and_reloads_as_the_same_identity(state):
    path = os.path.join(state, "node.key")
    old = os.umask(0o022)
    try:
        key = NodeKey.load_or_create(path)
    finally:
        os.umask(old)
    assert mode_of(path) == 0o600
    assert mode_of(state) == 0o700
    with open(path, "rb") as f:
        pem = f.read()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8, unencrypted
    assert os.listdir(state) == ["node.key"]  # no temporary left behind
    assert NodeKey.load(path).public_key_b64() == key.public_key_b64()
    assert NodeKey.load_or_create(path).public_key_b64() == key.public_key_b64()
    assert len(base64.b64decode(key.public_key_b64())) == 32


@settings(max_examples=50, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32))
def test_the_node_key_is_written_and_read_as_cryptography_writes_and_reads_it(seed):
    """The key file's one form (RFC 8410 PKCS #8), read and written without cryptography's serialization
    module (its import is 17 ms of a bind): byte for byte what cryptography writes, the same key read back."""
    private = Ed25519PrivateKey.from_private_bytes(seed)
    theirs = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    assert _node_key._pkcs8_pem(_node_key._private_raw(private)) == theirs  # pylint: disable=protected-access
    assert _node_key._pkcs8_seed(theirs) == seed  # pylint: disable=protected-access
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert NodeKey(private).public_key_raw() == public


def test_a_node_key_in_another_pem_layout_still_loads(tmp_path):
    """A key some other tool wrote (the same PKCS #8 wrapped at 32 columns, CRLF line ends) is read by
    cryptography itself: the same identity, not a refusal."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    body = pem.split(b"\n")[1]
    path = tmp_path / "node.key"
    path.write_bytes(b"\r\n".join([b"-----BEGIN PRIVATE KEY-----", body[:32], body[32:], b"-----END PRIVATE KEY-----", b""]))
    assert _node_key._pkcs8_seed(path.read_bytes()) is None  # pylint: disable=protected-access
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert NodeKey.load(str(path)).public_key_raw() == public


def test_a_bind_imports_no_more_of_cryptography_than_ed25519(tmp_path):
    """Creating, loading and signing with the node key, in a fresh interpreter, never imports cryptography's
    serialization (nor through it SSH, RSA, DSA, EC and the ciphers)."""
    program = (
        "import sys\n"
        "from ansible_collections.bcd.devices.plugins.module_utils.state.node_key import NodeKey\n"
        "key = NodeKey.load_or_create(sys.argv[1])\n"
        "key.sign({'a': 1}); key.seal(1, 'AllocationBound', {'a': 1}); key.public_key_b64()\n"
        "NodeKey.load(sys.argv[1]).sign({'a': 1})\n"
        "print(sorted(name for name in sys.modules if name.startswith('cryptography.hazmat.primitives')))\n")
    out = subprocess.run([sys.executable, "-c", program, str(tmp_path / "node.key")], check=True,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))).stdout
    assert "primitives.serialization'" not in out and "asymmetric.rsa" not in out and "asymmetric.ed25519" in out, out


def test_load_or_create_tightens_a_loose_key_file(state):
    path = os.path.join(state, "node.key")
    NodeKey.load_or_create(path)
    os.chmod(path, 0o644)
    NodeKey.load_or_create(path)
    assert mode_of(path) == 0o600


def test_missing_key_is_not_created_by_load(state):
    with pytest.raises(NodeKeyMissing):
        NodeKey.load(os.path.join(state, "node.key"))
    assert not os.path.exists(state)


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"])
def test_corrupt_key_is_an_error_and_never_replaced(tmp_path, content):
    path = tmp_path / "node.key"
    path.write_bytes(content)
    for loader in (NodeKey.load, NodeKey.load_or_create):
        with pytest.raises(EventsError, match="never replaced"):
            loader(str(path))
    assert path.read_bytes() == content


def test_key_of_another_algorithm_is_refused(tmp_path):
    path = tmp_path / "node.key"
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    with pytest.raises(EventsError, match="not an Ed25519 key"):
        NodeKey.load_or_create(str(path))
    assert path.read_bytes() == pem


def test_missing_cryptography_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(_node_key, "HAS_CRYPTOGRAPHY", False)
    monkeypatch.setattr(_node_key, "CRYPTOGRAPHY_IMPORT_ERROR", "No module named 'cryptography'")
    with pytest.raises(EventsError, match="cryptography"):
        NodeKey.load_or_create(str(tmp_path / "node.key"))
    assert not (tmp_path / "node.key").exists()

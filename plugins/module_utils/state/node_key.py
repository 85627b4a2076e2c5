# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's identity: its Ed25519 key, the file that holds it, and the two payloads it signs.

``node.key`` (0600, the state directory 0700) is the private key, PEM (PKCS #8, unencrypted), created
on first use and never replaced automatically: it is the identity the control plane and the gateways
know the node by. The key signs two payloads, byte for byte what docs/events.md says:

- an attested report (binds, releases, conditions): ``b"attested-report\\n" + canonical(body)``;
- a seal (event format 2, every event the journal writes): ``b"bcd-event/2\\n" + canonical({"seq", "type",
  "body"})``.

``cryptography`` is imported on first use, so a pass that signs nothing (a no-op) never pays for it; of
it, only the Ed25519 classes, unless a key file is in another form than the one this module reads and
writes itself (``_pkcs8_seed``): its ``serialization`` pulls in SSH, RSA, DSA, EC and the ciphers
(docs/performance.md, "A lighter bind"). The journal that carries the signed events, and the checks of a
signature and a seal, are ``events.py``'s; the errors of both live here, below both.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import os
from typing import TYPE_CHECKING, Any, Dict, Optional, Type

from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import create_exclusive, ensure_dir
from ansible_collections.bcd.devices.plugins.module_utils.node.state_files import FILE_CAPS, KEY_NAME, StateFiles, read_file
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, RetryableError, type_name

if TYPE_CHECKING:  # pragma: no cover - type checkers only; cryptography is imported on first use
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

# Whether 'cryptography' is there, known without importing it (see the module's docstring).
HAS_CRYPTOGRAPHY = importlib.util.find_spec("cryptography") is not None
CRYPTOGRAPHY_IMPORT_ERROR: Optional[str] = None if HAS_CRYPTOGRAPHY else "No module named 'cryptography'"

FILE_MODE = 0o600
STATE_DIR_MODE = 0o700


class EventsError(BcdError):
    """The journal or the node key cannot be used as it is (a damaged key or sequence file, no
    ``cryptography``, a malformed event or acknowledgement): permanent, an operator acts on the message."""


class JournalUnwritable(EventsError, RetryableError):
    """A write to the journal, its state directory or the node key that failed now (a full disk, a
    permission): retryable, the reports are made again next pass."""


class NodeKeyMissing(EventsError):
    """``NodeKey.load`` found no key file (the node has not signed anything yet)."""


def _require_cryptography() -> None:
    if not HAS_CRYPTOGRAPHY:
        raise EventsError(
            "signing and checking node events needs the Python library 'cryptography' "
            "(python3-cryptography), which cannot be imported here: %s" % CRYPTOGRAPHY_IMPORT_ERROR)


def private_key_class() -> Type[Ed25519PrivateKey]:
    """cryptography's Ed25519 private key class, imported on first use; ``EventsError`` when it cannot be."""
    _require_cryptography()
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise EventsError("signing and checking node events needs the Python library 'cryptography' "
                          "(python3-cryptography), which cannot be imported here: %s" % exc)
    return ed25519.Ed25519PrivateKey


def public_key(raw: bytes) -> Ed25519PublicKey:
    """The Ed25519 public key of the raw 32 bytes ``raw`` (``decode_public_key``), to verify with."""
    private_key_class()  # cryptography there and importable, or EventsError saying so
    from cryptography.hazmat.primitives.asymmetric import ed25519  # pylint: disable=import-outside-toplevel
    return ed25519.Ed25519PublicKey.from_public_bytes(raw)


def import_cryptography() -> None:
    """Import what signing needs now (``EventsError`` when it cannot be): a root pass does so before it acts
    as the state directory's owner (state/store.py)."""
    private_key_class()


# -- what the key signs ------------------------------------------------------------------------------------

PURPOSE = "attested-report"
# The seal (event format 2, docs/events.md "Seals"): every event the journal writes is sealed by the node key over
# its seq, type and body together, so that a gateway knows which node sent it and at which seq, and the same event
# cannot be posted again under another seq. The attested signature stays what the contract asks of binds,
# releases and conditions; the seal is the delivery's proof, for every event, AllocationFailed included.
SEAL_FORMAT = 2
SEAL_PURPOSE = b"bcd-event/2\n"


def canonical(body: Dict[str, Any]) -> bytes:
    """The bytes a body is signed as (the contract's canonical JSON)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signed_payload(body: Dict[str, Any]) -> bytes:
    """``b"attested-report\\n" + canonical(body)``: exactly what the signature covers."""
    return PURPOSE.encode() + b"\n" + canonical(body)


def seal_payload(seq: int, event_type: str, body: Dict[str, Any]) -> bytes:
    """``b"bcd-event/2\\n" + canonical({"seq", "type", "body"})``: exactly what the seal covers."""
    return SEAL_PURPOSE + canonical({"seq": seq, "type": event_type, "body": body})


# -- the key's forms ----------------------------------------------------------------------------------------

def b64decode_strict(value: object) -> Optional[bytes]:
    """The bytes of base64 text ``value`` (no character outside the alphabet), or None when it is not that."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def decode_public_key(public_key_b64: object) -> bytes:
    """The raw 32 bytes of a base64 node public key; ``EventsError`` when it is not one."""
    raw = b64decode_strict(public_key_b64.strip() if isinstance(public_key_b64, str) else None)
    if raw is None or len(raw) != 32:
        shown = repr(public_key_b64[:60]) if isinstance(public_key_b64, str) else type_name(public_key_b64)
        raise EventsError("a node public key is the base64 of 32 raw Ed25519 bytes (44 characters), got %s"
                          % shown)
    return raw


# RFC 8410, section 7: an unencrypted Ed25519 private key in PKCS #8 (version 1, no attributes, no public key) is
# these 16 DER bytes and the 32-byte seed, 48 bytes, one 64-character line of PEM: the form cryptography writes.
_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")
_PEM_BEGIN = b"-----BEGIN PRIVATE KEY-----"
_PEM_END = b"-----END PRIVATE KEY-----"


def _pkcs8_seed(pem: bytes) -> Optional[bytes]:
    """The seed of ``pem`` when it is exactly that form, else None (``serialization`` reads it, or says why not)."""
    lines = pem.split(b"\n")
    if len(lines) != 4 or lines[0] != _PEM_BEGIN or lines[2] != _PEM_END or lines[3] != b"":
        return None
    try:
        der = b64decode_strict(lines[1].decode("ascii"))
    except UnicodeDecodeError:
        return None
    if der is None or len(der) != 48 or not der.startswith(_PKCS8_ED25519):
        return None
    return der[len(_PKCS8_ED25519):]


def _pkcs8_pem(seed: bytes) -> bytes:
    """``seed`` as an unencrypted PKCS #8 PEM: the bytes ``serialization`` writes for it (tests/unit check so)."""
    return b"\n".join((_PEM_BEGIN, base64.b64encode(_PKCS8_ED25519 + seed), _PEM_END, b""))


def _private_raw(key: Ed25519PrivateKey) -> bytes:
    """The 32-byte seed of an Ed25519 private key."""
    if hasattr(key, "private_bytes_raw"):  # cryptography 40 and later
        return key.private_bytes_raw()
    from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    return key.private_bytes(encoding=serialization.Encoding.Raw, format=serialization.PrivateFormat.Raw,
                             encryption_algorithm=serialization.NoEncryption())


class NodeKey:
    """The node's Ed25519 identity, stored PEM (PKCS8) at ``<state_dir>/node.key``."""

    def __init__(self, private_key: Ed25519PrivateKey, path: Optional[str] = None) -> None:
        self._key = private_key
        self.path = path

    @classmethod
    def load(cls, path: str) -> NodeKey:
        """Read an existing key; ``NodeKeyMissing`` when absent, ``EventsError`` when unusable."""
        _require_cryptography()
        data = read_file(path, FILE_CAPS[KEY_NAME])
        if data is None:
            raise NodeKeyMissing("the node key %s does not exist yet" % path)
        seed = _pkcs8_seed(data)
        key: object
        try:
            if seed is not None:
                key = private_key_class().from_private_bytes(seed)
            else:  # another PEM form, or not a key at all: cryptography reads it, or says what is wrong
                private_key_class()
                from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
                key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise EventsError(
                "the node key %s is not a readable unencrypted PEM private key (%s); it is the node's "
                "identity and is never replaced automatically: restore it, or remove it to give the "
                "node a new identity that the control plane must learn" % (path, exc))
        except Exception as exc:  # e.g. an unsupported algorithm
            raise EventsError("the node key %s cannot be loaded: %s" % (path, exc))
        if not isinstance(key, private_key_class()):
            raise EventsError("the node key %s is not an Ed25519 key; it is never replaced automatically"
                              % path)
        return cls(key, path)

    @classmethod
    def load_or_create(cls, path: str) -> NodeKey:
        """Load the key, creating it (atomically, 0600) on first use; a corrupt file is an error."""
        _require_cryptography()
        if not os.path.lexists(path):
            key = private_key_class().generate()
            pem = _pkcs8_pem(_private_raw(key))
            try:
                ensure_dir(os.path.dirname(os.path.abspath(path)), STATE_DIR_MODE)
                created = create_exclusive(path, pem, FILE_MODE, STATE_DIR_MODE, owner_from_dir=True)
            except OSError as exc:
                raise JournalUnwritable("cannot create the node key %s: %s" % (path, exc.strerror or exc))
            if created:
                return cls(key, path)
            # someone else created it in the meantime: theirs is the identity
        node_key = cls.load(path)
        directory, name = os.path.split(os.path.abspath(path))
        fd = StateFiles(directory).open(name)
        if fd is not None:
            try:
                if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
                    os.fchmod(fd, FILE_MODE)
            except OSError:
                pass
            finally:
                os.close(fd)
        return node_key

    def public_key_raw(self) -> bytes:
        """The raw 32 bytes of the public key."""
        public = self._key.public_key()
        if hasattr(public, "public_bytes_raw"):  # cryptography 40 and later
            return public.public_bytes_raw()
        from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
        return public.public_bytes(encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw)

    def public_key_b64(self) -> str:
        """Base64 of the raw 32-byte public key (what ``holds_info`` returns)."""
        return base64.b64encode(self.public_key_raw()).decode("ascii")

    def sign(self, body: Dict[str, Any]) -> str:
        """Base64 Ed25519 signature over ``b"attested-report\\n" + canonical(body)``."""
        return base64.b64encode(self._key.sign(signed_payload(body))).decode("ascii")

    def seal(self, seq: int, event_type: str, body: Dict[str, Any]) -> str:
        """Base64 Ed25519 signature over ``seal_payload(seq, event_type, body)``."""
        return base64.b64encode(self._key.sign(seal_payload(seq, event_type, body))).decode("ascii")

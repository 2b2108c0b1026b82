"""The audit checkpoints' Ed25519 key, read from the environment at each use and never kept:
`AUDIT_SIGNING_KEY` holds the private key (64 hex digits, its raw 32 bytes), a secret that
reaches no database row, log line, error message or admin page. `AUDIT_PUBLIC_KEY` (64 hex
digits) lets a machine without the private key verify."""

import hashlib
import os

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

SIGNING_KEY_ENV = "AUDIT_SIGNING_KEY"
PUBLIC_KEY_ENV = "AUDIT_PUBLIC_KEY"


class SigningKeyError(Exception):
    """The key in the environment is missing or unreadable (the message never quotes it)."""


def _private_key() -> Ed25519PrivateKey:
    raw = os.environ.get(SIGNING_KEY_ENV, "").strip()
    if not raw:
        raise SigningKeyError(f"{SIGNING_KEY_ENV} is not set: checkpoints cannot be signed.")
    try:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(raw))
    except ValueError:
        raise SigningKeyError(f"{SIGNING_KEY_ENV} is not 64 hex digits.") from None


def signing_configured() -> bool:
    return bool(os.environ.get(SIGNING_KEY_ENV, "").strip())


def public_key_bytes() -> bytes:
    """The raw public key: `AUDIT_PUBLIC_KEY`, else derived from the signing key."""
    raw = os.environ.get(PUBLIC_KEY_ENV, "").strip()
    if raw:
        try:
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(raw)).public_bytes_raw()
        except ValueError:
            raise SigningKeyError(f"{PUBLIC_KEY_ENV} is not 64 hex digits.") from None
    return _private_key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(public_key: bytes) -> str:
    """A short name for a public key, recorded with each checkpoint (keys can be rotated)."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def signing_key_id() -> str:
    """The id of the signing key's public key, which a statement names before it is signed."""
    return key_id(_private_key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def sign(message: bytes) -> str:
    """The message's Ed25519 signature, in hex."""
    return _private_key().sign(message).hex()


def signature_valid(public_key: bytes, message: bytes, signature_hex: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(bytes.fromhex(signature_hex), message)
    except (InvalidSignature, ValueError):
        return False
    return True

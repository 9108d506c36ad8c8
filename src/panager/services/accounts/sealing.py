"""Encryption and signing keyed from PANAGER_SECRET_KEY.

One secret feeds two independent keys (HKDF-SHA256 with different `info`
labels): a Fernet key that encrypts values at rest (AES-128-CBC + HMAC, so a
tampered ciphertext fails to open) and an HMAC-SHA256 key that signs short
values such as OAuth `state`. Deriving instead of using the secret directly
means any string the admin picks works, and a leaked signature says nothing
about the encryption key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["InvalidToken", "Sealer"]

_SALT = b"panager-secret-key-v1"


def _derive(secret: str, label: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=label).derive(
        secret.encode("utf-8")
    )


class Sealer:
    """Seals (encrypts) and signs values with keys derived from one secret."""

    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("an empty secret cannot protect anything")
        self._fernet = Fernet(base64.urlsafe_b64encode(_derive(secret, b"encrypt at rest")))
        self._mac_key = _derive(secret, b"sign values")

    def seal(self, plaintext: str) -> str:
        """Encrypt `plaintext`; the result is ASCII and safe to store."""
        return self._fernet.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> str:
        """Decrypt a sealed value; raises InvalidToken when tampered or sealed with another key."""
        return self._fernet.decrypt(sealed.encode("ascii")).decode("utf-8")

    def sign(self, message: str) -> str:
        """A URL-safe HMAC-SHA256 signature of `message`."""
        data = message.encode("utf-8", "surrogatepass")
        digest = hmac.new(self._mac_key, data, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def verify(self, message: str, signature: str) -> bool:
        """True when `signature` is ours for `message` (constant-time comparison).

        Any string is accepted: a non-ASCII or malformed signature is simply not ours."""
        given = signature.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(self.sign(message).encode("ascii"), given)

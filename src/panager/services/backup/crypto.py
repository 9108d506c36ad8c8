"""The backup file's encryption: AES-256-GCM over 1 MiB chunks, streamed both ways.

Layout::

    b"PANAGER-BACKUP\\n"            magic (15 bytes)
    u32 big-endian                 length of the header
    header                         JSON: format, kdf ("secret-key" | "passphrase"), salt,
                                   scrypt parameters, the key fingerprint, a nonce prefix
    chunks                         each: u8 final flag, u32 length, ciphertext + 16-byte tag

Chunk *i* is sealed with the nonce `prefix (7 bytes) | i (u32) | final (u8)` and the
associated data `SHA-256(header) | i | final`. So a chunk moved elsewhere (another index),
a header edited (another salt, kdf or fingerprint), a flipped bit anywhere or a file cut
after any chunk but the last fails to open: reading stops at the first chunk that does
not authenticate and at an end without the final chunk. Memory is one chunk each way.

The key comes from PANAGER_SECRET_KEY (HKDF-SHA256 with the header's salt) or from a
passphrase (scrypt, n=2^15, r=8, p=1, salt in the header).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

MAGIC = b"PANAGER-BACKUP\n"
FORMAT = 1
CHUNK = 1 << 20
MAX_HEADER = 64 * 1024
TAG = 16
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
MIN_PASSPHRASE = 8

Kdf = Literal["secret-key", "passphrase"]


class BackupRefused(Exception):
    """A backup that cannot be made or read, phrased as one line for the operator."""


def key_fingerprint(secret: str) -> str:
    """A short public name for a PANAGER_SECRET_KEY (HKDF, not the key): 16 hex digits."""
    derived = HKDF(
        algorithm=hashes.SHA256(), length=8, salt=b"panager-key-fingerprint", info=b"v1"
    ).derive(secret.encode("utf-8"))
    return derived.hex()


@dataclass(frozen=True)
class KeySource:
    """Where the file key comes from: the secret key or a passphrase (exactly one)."""

    secret_key: str | None = None
    passphrase: str | None = None

    @property
    def kdf(self) -> Kdf:
        """Which derivation this source uses."""
        return "passphrase" if self.passphrase is not None else "secret-key"

    def derive(self, header: dict[str, Any]) -> bytes:
        """The 32-byte AES key for a file with this header."""
        salt = base64.b64decode(header["salt"])
        if header["kdf"] == "passphrase":
            if self.passphrase is None:
                raise BackupRefused(
                    "this backup is protected by a passphrase; give it with --passphrase-file FILE"
                )
            params = header.get("scrypt") or {}
            n, r, p = int(params.get("n", 0)), int(params.get("r", 0)), int(params.get("p", 0))
            if not (1 << 10 <= n <= 1 << 20 and 1 <= r <= 32 and 1 <= p <= 16):
                raise BackupRefused("the backup's header is damaged (key parameters out of range)")
            return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(
                self.passphrase.encode("utf-8")
            )
        if header["kdf"] != "secret-key":
            raise BackupRefused("the backup's header is damaged (unknown key derivation)")
        if self.secret_key is None:
            raise BackupRefused(
                "this backup was encrypted with a PANAGER_SECRET_KEY; set it (or give the "
                "old key with --reseal OLD_KEY_FILE)"
            )
        return HKDF(
            algorithm=hashes.SHA256(), length=32, salt=salt, info=b"panager backup v1"
        ).derive(self.secret_key.encode("utf-8"))


def _nonce(prefix: bytes, index: int, final: bool) -> bytes:
    return prefix + struct.pack(">IB", index, int(final))


def _aad(digest: bytes, index: int, final: bool) -> bytes:
    return digest + struct.pack(">IB", index, int(final))


class EncryptingWriter:
    """A binary file-like sink: what is written is sealed chunk by chunk into `out`."""

    def __init__(self, out: IO[bytes], source: KeySource, fingerprint: str | None) -> None:
        salt = os.urandom(16)
        self._prefix = os.urandom(7)
        header: dict[str, Any] = {
            "format": FORMAT, "kdf": source.kdf, "salt": base64.b64encode(salt).decode(),
            "nonce_prefix": base64.b64encode(self._prefix).decode(), "chunk": CHUNK,
            "key_fingerprint": fingerprint,
        }
        if source.kdf == "passphrase":
            header["scrypt"] = {"n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}
        raw = json.dumps(header, sort_keys=True).encode()
        self._aes = AESGCM(source.derive(header))
        self._digest = hashlib.sha256(raw).digest()
        self._out = out
        self._buffer = bytearray()
        self._index = 0
        self._closed = False
        out.write(MAGIC + struct.pack(">I", len(raw)) + raw)

    def write(self, data: bytes) -> int:
        """Buffer `data`, sealing every full chunk (the last one waits for `close`)."""
        self._buffer += data
        while len(self._buffer) > CHUNK:
            self._seal(bytes(self._buffer[:CHUNK]), final=False)
            del self._buffer[:CHUNK]
        return len(data)

    def _seal(self, plain: bytes, *, final: bool) -> None:
        nonce = _nonce(self._prefix, self._index, final)
        sealed = self._aes.encrypt(nonce, plain, _aad(self._digest, self._index, final))
        self._out.write(struct.pack(">BI", int(final), len(sealed)) + sealed)
        self._index += 1

    def flush(self) -> None:
        """Nothing to do: chunks are written as they fill (tarfile calls this)."""

    def close(self) -> None:
        """Seal what is left as the final chunk (possibly empty)."""
        if not self._closed:
            self._closed = True
            self._seal(bytes(self._buffer), final=True)
            self._buffer.clear()


def read_header(stream: IO[bytes]) -> dict[str, Any]:
    """The header of a backup file (not authenticated until the first chunk opens)."""
    magic = stream.read(len(MAGIC))
    if magic != MAGIC:
        raise BackupRefused("this is not a Panager backup file (its first bytes are wrong)")
    size_bytes = stream.read(4)
    if len(size_bytes) < 4:
        raise BackupRefused("the backup file is truncated (its header is cut off)")
    (size,) = struct.unpack(">I", size_bytes)
    raw = stream.read(size) if size <= MAX_HEADER else b""
    try:
        header = json.loads(raw)
        if header["format"] != FORMAT:
            raise BackupRefused(
                f"this backup is in format {header['format']}; this Panager reads format {FORMAT}"
            )
        base64.b64decode(header["salt"])
        header["_raw"] = raw
        return header
    except (ValueError, KeyError, TypeError):
        raise BackupRefused("the backup's header is damaged (not readable)") from None


def decrypted_chunks(
    stream: IO[bytes], source: KeySource, header: dict[str, Any]
) -> Iterator[bytes]:
    """The plaintext, chunk by chunk, each authenticated before it is yielded."""
    aes = AESGCM(source.derive(header))
    digest = hashlib.sha256(header["_raw"]).digest()
    prefix = base64.b64decode(header["nonce_prefix"])
    index = 0
    while True:
        frame = stream.read(5)
        if len(frame) < 5:
            raise BackupRefused(
                f"the backup file is truncated (it ends after {index} chunk(s), before the last)"
            )
        final, size = struct.unpack(">BI", frame)
        if final not in (0, 1) or size > CHUNK + TAG:
            raise BackupRefused(f"the backup file is damaged at chunk {index}")
        sealed = stream.read(size)
        if len(sealed) < size:
            raise BackupRefused(f"the backup file is truncated (inside chunk {index})")
        try:
            plain = aes.decrypt(
                _nonce(prefix, index, bool(final)), sealed, _aad(digest, index, bool(final))
            )
        except InvalidTag:
            if index == 0:
                raise BackupRefused(
                    "the backup cannot be opened: wrong key or passphrase, or the file is "
                    "damaged at its start"
                ) from None
            raise BackupRefused(
                f"the backup file is damaged or reordered at chunk {index} (it does not "
                "authenticate)"
            ) from None
        index += 1
        yield plain
        if final:
            if stream.read(1):
                raise BackupRefused("the backup file has data after its last chunk (damaged)")
            return


class DecryptingReader:
    """A binary file-like source over `decrypted_chunks` (for tarfile's stream mode)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""
        self._done = False

    def read(self, size: int = -1) -> bytes:
        """Up to `size` plaintext bytes (all that is left for -1)."""
        while not self._done and (size < 0 or len(self._buffer) < size):
            try:
                self._buffer += next(self._chunks)
            except StopIteration:
                self._done = True
        if size < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def drain(self) -> None:
        """Read to the end, so the final chunk and anything after it are checked."""
        while self.read(CHUNK):
            pass

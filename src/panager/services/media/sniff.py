"""What a file is, from its bytes: the name and the declared type are only hints.

A handful of signatures covers what Panager reads (images, audio, documents);
anything else is refused by the intake. A ZIP is a DOCX only when it holds
`word/document.xml`; plain text is UTF-8 (or UTF-16 with a BOM) that decodes.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from typing import Literal

Kind = Literal["image", "audio", "document", "unknown"]
_NAME_UNSAFE = re.compile(r"[^\w.\- ()]+", re.UNICODE)
MAX_NAME_CHARS = 80
TEXT_TYPES = {
    "csv": "text/csv",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "html": "text/html",
    "htm": "text/html",
}


@dataclass(frozen=True)
class Sniffed:
    """The type found in the bytes."""

    kind: Kind
    mime: str  # e.g. image/png, audio/ogg, application/pdf
    ext: str  # the extension that type has ("png", "ogg", "pdf", "txt" …)


UNKNOWN = Sniffed("unknown", "application/octet-stream", "bin")
_SIGNATURES: tuple[tuple[bytes, int, Sniffed], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, Sniffed("image", "image/png", "png")),
    (b"\xff\xd8\xff", 0, Sniffed("image", "image/jpeg", "jpg")),
    (b"GIF87a", 0, Sniffed("image", "image/gif", "gif")),
    (b"GIF89a", 0, Sniffed("image", "image/gif", "gif")),
    (b"%PDF-", 0, Sniffed("document", "application/pdf", "pdf")),
    (b"OggS", 0, Sniffed("audio", "audio/ogg", "ogg")),
    (b"ID3", 0, Sniffed("audio", "audio/mpeg", "mp3")),
    (b"fLaC", 0, Sniffed("audio", "audio/flac", "flac")),
    (b"\x1a\x45\xdf\xa3", 0, Sniffed("audio", "audio/webm", "webm")),
)


def sniff(data: bytes, name: str = "") -> Sniffed:
    """The type of `data` by its signature; UNKNOWN when nothing Panager reads matches."""
    for magic, offset, found in _SIGNATURES:
        if data[offset : offset + len(magic)] == magic:
            return found
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return Sniffed("audio", "audio/wav", "wav")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Sniffed("image", "image/webp", "webp")
    if data[4:8] == b"ftyp":
        return _ftyp(data[8:12])
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0:
        return Sniffed("audio", "audio/mpeg", "mp3")  # an MPEG audio frame without ID3
    if data[:4] == b"PK\x03\x04":
        return _zip(data)
    return _text(data, name)


def _ftyp(brand: bytes) -> Sniffed:
    if brand in (b"M4A ", b"M4B ", b"mp42", b"isom", b"mp41", b"dash"):
        return Sniffed("audio", "audio/mp4", "m4a")
    return UNKNOWN  # HEIC photos, videos: not read


def _zip(data: bytes) -> Sniffed:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError):
        return UNKNOWN
    if "word/document.xml" in names:
        mime = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        return Sniffed("document", mime, "docx")
    return UNKNOWN


def _text(data: bytes, name: str) -> Sniffed:
    if not data or (b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff"))):
        return UNKNOWN
    if decode_text(data[:65536], partial=True) is None:
        return UNKNOWN
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or b"<svg" in head:
        return Sniffed("document", "text/html", "html")
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext in TEXT_TYPES:
        return Sniffed("document", TEXT_TYPES[ext], ext)
    return Sniffed("document", "text/plain", "txt")


def decode_text(data: bytes, *, partial: bool = False) -> str | None:
    """UTF-8 (or UTF-16 with a BOM) text; None when it is not text. `partial`: a cut
    prefix may end inside a character."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if partial and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8-sig")
        return None


def clean_name(name: str, fallback: str = "file") -> str:
    """A file name safe to show and store: no path, no control or markup characters."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip().strip(".")
    base = _NAME_UNSAFE.sub("_", base)[:MAX_NAME_CHARS].strip("_ ")
    return base or fallback

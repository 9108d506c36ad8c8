"""The parsing subprocess: decoders run here, under resource limits, never in the app.

`python -m panager.services.media.decode` reads one job from stdin — a JSON line
(`{"job": "image" | "audio" | "document", "mime": …, limits…}`) followed by the
file's bytes — and writes one JSON line back (plus, for a re-encoded image, its
bytes). Before touching the input it limits its own address space
(RLIMIT_AS) and CPU time (RLIMIT_CPU), so a decompression bomb or a parser
stuck in a loop ends this process, not Panager; the parent (sandbox.py) also
kills it after a wall-clock timeout, which an asyncio timeout alone could not
do to a CPU-bound decoder.

An input the decoders refuse gives `{"error": "<one line for the person>"}`.
This module imports only the standard library and the decoders themselves.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import zipfile
from html.parser import HTMLParser
from typing import Any

MAX_SIDE = 2048  # images larger than this on a side are scaled down before storing
DOCX_MAX_XML = 30_000_000  # bytes of word/document.xml read at most (zip bombs)
DOCX_MAX_RATIO = 200  # a compression ratio above this is a bomb, not a document


class Refused(Exception):
    """The file cannot be read; the message is the line the person sees."""


def limit_self(memory_bytes: int, cpu_seconds: int) -> None:
    """Cap this process's memory and CPU time (the kernel enforces both)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))


# -- images ------------------------------------------------------------------------------


def image(data: bytes, job: dict) -> tuple[dict, bytes]:
    """Check an image's size before decoding it, decode it fully, scale it down if large."""
    from PIL import Image

    max_pixels = int(job["max_pixels"])
    Image.MAX_IMAGE_PIXELS = None  # the size is checked below, before anything is decoded
    try:
        img = Image.open(io.BytesIO(data))  # reads the header only
        width, height = img.size
        if width * height > max_pixels:
            raise Refused(f"it is {width:,}×{height:,} pixels; the limit is {max_pixels:,}")
        Image.MAX_IMAGE_PIXELS = max_pixels
        img.load()
    except Image.DecompressionBombError as exc:
        raise Refused("it has too many pixels to decode safely") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise Refused("it is not a readable image") from exc
    out = b""  # unchanged: the parent keeps its own copy
    if max(width, height) > MAX_SIDE:
        img.thumbnail((MAX_SIDE, MAX_SIDE))
        buffer = io.BytesIO()
        alpha = img.mode in ("RGBA", "LA", "P")
        img.save(buffer, format="PNG" if alpha else "JPEG", quality=85)
        out, job["mime"] = buffer.getvalue(), "image/png" if alpha else "image/jpeg"
    return {"width": width, "height": height, "mime": job["mime"]}, out


# -- audio -------------------------------------------------------------------------------


def audio(data: bytes, job: dict) -> tuple[dict, bytes]:
    """The duration of an audio file (None when the format does not say, e.g. WebM)."""
    import mutagen

    try:
        found = mutagen.File(io.BytesIO(data))
    except Exception as exc:  # mutagen raises many types for a broken file
        raise Refused("it is not a readable audio file") from exc
    if found is None:
        if job.get("mime") == "audio/webm":
            return {"seconds": None}, b""
        raise Refused("it is not a readable audio file")
    length = getattr(found.info, "length", None)
    return {"seconds": float(length) if length else None}, b""


# -- documents ---------------------------------------------------------------------------


def document(data: bytes, job: dict) -> tuple[dict, bytes]:
    """Text of a PDF, DOCX, HTML or text file, with its page count and outline."""
    mime = job["mime"]
    if mime == "application/pdf":
        return pdf(data, int(job["max_pages"])), b""
    if mime.endswith("wordprocessingml.document"):
        return docx(data), b""
    text = _text(data)
    if mime == "text/html":
        text = html_text(text)
    return {"text": text, "pages": None, "outline": _md_outline(text, mime)}, b""


def pdf(data: bytes, max_pages: int) -> dict:
    """Page texts of a PDF up to `max_pages`; encrypted or broken files are refused."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Refused("it is encrypted (password-protected); send an unprotected copy")
        total = len(reader.pages)
        texts = [reader.pages[i].extract_text() or "" for i in range(min(total, max_pages))]
        outline = [str(item.title) for item in reader.outline if hasattr(item, "title")][:50]
    except Refused:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Refused("it is not a readable PDF (damaged or not really a PDF)") from exc
    text = "\n\n".join(f"[page {n}]\n{t.strip()}" for n, t in enumerate(texts, 1))
    return {"text": text, "pages": total, "read_pages": len(texts), "outline": outline}


def docx(data: bytes) -> dict:
    """Paragraph text of a DOCX read with defusedxml (no DTDs, so no entity bombs) from a
    bounded read of the archive (so no zip bombs)."""
    from defusedxml import ElementTree
    from defusedxml.common import DefusedXmlException

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("word/document.xml")
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > DOCX_MAX_XML or ratio > DOCX_MAX_RATIO:
                raise Refused("it expands to far more than its size (a zip bomb)")
            with archive.open(info) as member:
                xml = member.read(DOCX_MAX_XML + 1)
        if len(xml) > DOCX_MAX_XML:
            raise Refused("it expands to far more than its size (a zip bomb)")
        root = ElementTree.fromstring(xml, forbid_dtd=True)
    except Refused:
        raise
    except DefusedXmlException as exc:
        raise Refused("it declares XML entities (a billion-laughs file), so it is refused") from exc
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, ValueError) as exc:
        raise Refused("it is not a readable DOCX (damaged)") from exc
    return _docx_text(root)


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx_text(root: Any) -> dict:
    paragraphs, outline = [], []
    for para in root.iter(f"{_W}p"):
        text = "".join(node.text or "" for node in para.iter(f"{_W}t"))
        style = para.find(f"{_W}pPr/{_W}pStyle")
        if style is not None and str(style.get(f"{_W}val", "")).lower().startswith("heading"):
            outline.append(text)
        paragraphs.append(text)
    pages = sum(1 for _ in root.iter(f"{_W}br") if _.get(f"{_W}type") == "page") + 1
    return {"text": "\n".join(paragraphs), "pages": pages, "outline": outline[:50]}


def _text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    return data.decode("utf-8-sig", "replace")


class _HTMLText(HTMLParser):
    """Visible text of an HTML page (scripts and styles dropped)."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    BLOCK = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.skipping += tag in self.SKIP
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        self.skipping -= tag in self.SKIP and self.skipping > 0

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """The readable text of an HTML document."""
    parser = _HTMLText()
    parser.feed(markup)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def _md_outline(text: str, mime: str) -> list[str]:
    if mime != "text/markdown":
        return []
    return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")][:50]


JOBS = {"image": image, "audio": audio, "document": document}


def main() -> None:
    """Read one job from stdin, run it under limits, write the result to stdout."""
    header = json.loads(sys.stdin.buffer.readline())
    limit_self(int(header["memory_bytes"]), int(header["cpu_seconds"]))
    data = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    try:
        result, payload = JOBS[header["job"]](data, header)
    except Refused as exc:
        result, payload = {"error": str(exc)}, b""
    except MemoryError:
        result, payload = {"error": "it needs more memory to read than is allowed"}, b""
    result["payload_bytes"] = len(payload)
    out.write(json.dumps(result).encode() + b"\n" + payload)
    with contextlib.suppress(BrokenPipeError):
        out.flush()


if __name__ == "__main__":
    main()

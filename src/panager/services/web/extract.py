"""Readable text from fetched bytes: HTML with trafilatura, PDF with pypdf, plain text as is.

The extractors get bytes only: they never fetch anything (no images, no
stylesheets, no linked documents) — everything that goes over the network goes
through `fetch.py` and the address guard.

Why trafilatura: in published comparisons of main-content extraction
(ScrapingHub's article-extraction benchmark; Bevendorff et al., "An Empirical
Comparison of Web Content Extraction Algorithms", SIGIR 2023) it is among the
best open-source extractors, ahead of boilerpy3, goose3, newspaper and plain
HTML-to-text converters (html2text, inscriptis), which keep navigation and
boilerplate. It returns text directly from bytes (charset detection included),
is pure Python over lxml, is maintained, and falls back to jusText and
readability heuristics where its own rules find little. readability-lxml
scores as well on article pages but returns cleaned HTML that would need a
second converter; resiliparse is faster but less accurate on articles.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["html", "pdf", "text"]
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
SNIFFED = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_BLANK_RUNS = re.compile(r"\n{3,}")

log = logging.getLogger(__name__)


class ExtractionError(Exception):
    """The bytes could not be turned into text; the message says why."""


@dataclass(frozen=True)
class Extracted:
    """Readable text and, where the document names one, its title."""

    text: str
    title: str | None = None


def kind_of(content_type: str) -> Kind | None:
    """Which extractor a Content-Type calls for; None for types web_fetch refuses."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in HTML_TYPES:
        return "html"
    if media in PDF_TYPES:
        return "pdf"
    if media in TEXT_TYPES:
        return "text"
    return None


def needs_sniffing(content_type: str) -> bool:
    """No useful Content-Type: decide from the first bytes instead."""
    return content_type.split(";", 1)[0].strip().lower() in SNIFFED


def sniff(body: bytes) -> Kind | None:
    """The kind of an untyped body from its first bytes."""
    head = body[:1024].lstrip().lower()
    if head.startswith(b"%pdf-"):
        return "pdf"
    if head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return "html"
    return None


def charset_of(content_type: str) -> str | None:
    """The charset parameter of a Content-Type, if any."""
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else None


def extract(body: bytes, kind: Kind, charset: str | None = None) -> Extracted:
    """Readable text of `body`; raise ExtractionError when there is none."""
    if kind == "html":
        return html_text(body)
    if kind == "pdf":
        return pdf_text(body)
    return Extracted(_decode(body, charset))


def html_text(body: bytes) -> Extracted:
    """The main text of an HTML page (navigation, ads and boilerplate left out)."""
    import trafilatura

    document = trafilatura.bare_extraction(
        body, with_metadata=True, include_tables=True, include_comments=False, favor_recall=True
    )
    title = getattr(document, "title", None) if document is not None else None
    text = getattr(document, "text", None) if document is not None else None
    if not text:
        text = trafilatura.html2txt(body)  # short pages: all visible text
    return Extracted(_tidy(text or ""), title or None)


def pdf_text(body: bytes) -> Extracted:
    """The text of every page of a PDF, pages separated by blank lines."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractionError("The PDF is password-protected; its text cannot be read.")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        log.info("unreadable PDF: %s", type(exc).__name__)
        raise ExtractionError("The PDF could not be read (damaged or cut off).") from None
    return Extracted(_tidy("\n\n".join(p.strip() for p in pages)), str(title) if title else None)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return body.decode("utf-8", errors="replace")


def _tidy(text: str) -> str:
    return _BLANK_RUNS.sub("\n\n", text.replace("\r\n", "\n")).strip()

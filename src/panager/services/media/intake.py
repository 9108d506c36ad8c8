"""Taking in an attachment, the same way for every front end.

API (Discord, the web chat, the terminal and Telegram all use exactly this)::

    intake = app.deps.media            # a MediaIntake
    att = await intake.take(person_id, filename, data,
                            declared_type="audio/ogg", forwarded=False, voice=True)
    notes = assistant.attachment_notes(user, [att])   # lines to show first
    result = await assistant.run_turn(user, text, attachments=[att])

`take` never raises for bad input: it returns an `Attachment` whose `kind` is
"rejected" and whose `notice` is the one line the person sees (empty file,
too large, a type that lies about itself, an image with too many pixels,
audio too long, a transcriber that refuses or times out …); the turn still
answers the words of the message. The front end downloads the bytes (Discord:
only from its CDN hosts; it may stop at `max_bytes + 1`).

The file's type comes from its bytes (sniff.py); `declared_type` and the
name are only hints, and a file whose bytes contradict its declared kind is
refused. Decoding (images, audio durations, document text) runs in a
subprocess with memory/CPU limits and a kill timeout (sandbox.py, decode.py).

What each kind becomes:

- image: stored per person (store.py), `media_id` set; the model sees it in
  the turn it arrives if it can see images, a placeholder afterwards;
- voice (a platform voice message, not forwarded): transcribed; the text is
  the person's own words (`own_words`);
- audio file or forwarded voice: transcribed; outside content (framed);
- document: text extracted (`text`), outside content.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from panager.clock import Clock
from panager.services.media.documents import DocumentQuotaExceeded, DocumentService
from panager.services.media.sandbox import DecodeFailed, Limits, run_job
from panager.services.media.sniff import Sniffed, clean_name, sniff
from panager.services.media.store import MediaStore, QuotaExceeded
from panager.services.media.transcribe import Transcriber, TranscriptionFailed
from panager.services.memory.service import MemoryUnavailable

log = logging.getLogger(__name__)
AttachmentKind = Literal["image", "voice", "audio", "document", "rejected"]
QUOTE_CHARS = 300  # of a transcript shown back to the person


@dataclass(frozen=True)
class MediaLimits:
    """Caps on what is taken in (runtime config: attachment_max_bytes …)."""

    max_bytes: int = 10_000_000
    audio_max_seconds: float = 600.0
    image_max_pixels: int = 40_000_000
    document_max_pages: int = 300
    decode: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class Attachment:
    """One attachment as the turn uses it."""

    kind: AttachmentKind
    name: str  # sanitised file name
    mime: str = "application/octet-stream"
    size: int = 0
    received_at: datetime | None = None
    own_words: bool = False  # the person's own (unforwarded) voice message
    text: str = ""  # transcript, or a document's extracted text
    media_id: str | None = None  # the stored image
    notice: str = ""  # one line the person sees before the answer
    details: dict = field(default_factory=dict)  # pages, outline, duration …


class MediaIntake:
    """Checks, decodes, transcribes and stores attachments (see the module doc)."""

    def __init__(
        self,
        store: MediaStore,
        transcriber: Transcriber,
        limits: MediaLimits,
        clock: Clock,
        documents: DocumentService | None = None,
    ) -> None:
        self.store = store
        self.transcriber = transcriber
        self.limits = limits
        self.clock = clock
        self.documents = documents  # None: documents are read for the turn but not kept

    async def take(
        self,
        person_id: int,
        filename: str,
        data: bytes,
        *,
        declared_type: str | None = None,
        forwarded: bool = False,
        voice: bool = False,
    ) -> Attachment:
        """One attachment checked and read; bad input gives kind "rejected" with a notice."""
        name = clean_name(filename, "voice-message.ogg" if voice else "file")
        base = Attachment("rejected", name, size=len(data), received_at=self.clock.now())
        problem = self._size_problem(len(data))
        if problem:
            return refused(base, problem)
        found = sniff(data, name)
        problem = _type_problem(found, declared_type, name)
        if problem:
            return refused(base, problem)
        base = replace(base, mime=found.mime)
        try:
            if found.kind == "image":
                return await self._image(person_id, base, data, found)
            if found.kind == "audio":
                return await self._audio(base, data, found, voice=voice, forwarded=forwarded)
            return await self._document(person_id, base, data, found)
        except (DecodeFailed, TranscriptionFailed) as exc:
            return refused(base, str(exc))

    def _size_problem(self, size: int) -> str:
        if size == 0:
            return "it is empty (0 bytes)"
        if size > self.limits.max_bytes:
            return f"it is larger than the {self.limits.max_bytes / 1e6:g} MB limit"
        return ""

    async def _image(self, person_id: int, base: Attachment, data: bytes, found: Sniffed
                     ) -> Attachment:
        job = {"job": "image", "mime": found.mime, "max_pixels": self.limits.image_max_pixels}
        info, payload = await run_job(job, data, self.limits.decode)
        kept = payload or data
        mime = str(info.get("mime") or found.mime)
        try:
            media_id = await self.store.put(person_id, base.name, mime, kept, self.clock.now())
        except QuotaExceeded:
            return refused(base, "it does not fit in your storage")
        details = {"width": info.get("width"), "height": info.get("height")}
        return replace(base, kind="image", mime=mime, media_id=media_id, details=details)

    async def _audio(self, base: Attachment, data: bytes, found: Sniffed, *, voice: bool,
                     forwarded: bool) -> Attachment:
        info, _ = await run_job({"job": "audio", "mime": found.mime}, data, self.limits.decode)
        seconds = info.get("seconds")
        cap = self.limits.audio_max_seconds
        if seconds is not None and seconds > cap:
            return refused(base, f"it is {seconds / 60:.1f} minutes long; the limit is "
                           f"{cap / 60:g} minutes")
        text = await self.transcriber.transcribe(base.name, data, found.mime)
        own = voice and not forwarded
        kind: AttachmentKind = "voice" if own else "audio"
        what = "your voice message" if own else (
            "the forwarded voice message" if voice else base.name)
        notice = f"Heard in {what}: “{_quote(text)}”"
        return replace(base, kind=kind, own_words=own, text=text, notice=notice,
                       details={"seconds": seconds, "voice": voice})

    async def _document(self, person_id: int, base: Attachment, data: bytes, found: Sniffed
                        ) -> Attachment:
        job = {"job": "document", "mime": found.mime, "max_pages": self.limits.document_max_pages}
        info, _ = await run_job(job, data, self.limits.decode)
        text = str(info.get("text") or "")
        if not text.strip():
            return refused(base, "no text could be found in it (a scan? send a photo instead)")
        pages, read = info.get("pages"), info.get("read_pages")
        notice = ""
        if pages and read and read < pages:
            notice = (f"{base.name} has {pages:,} pages; I read the first {read:,} "
                      "(the page limit).")
        outline = [str(o) for o in info.get("outline") or []]
        details: dict = {"pages": pages, "read_pages": read, "outline": outline}
        if self.documents is not None:
            try:
                kept = await self.documents.add(
                    person_id, base.name, found.mime, data, text, pages=pages, read_pages=read,
                    outline=outline)
                details["document_id"] = kept.id
            except DocumentQuotaExceeded:
                notice = " ".join(filter(None, [notice, (
                    f"I read {base.name} but could not keep it: your documents fill your "
                    "storage; delete some on the Files page or ask me to forget one.")]))
            except MemoryUnavailable as exc:
                notice = " ".join(filter(None, [notice, (
                    f"I read {base.name} but could not keep it for later searches: {exc}")]))
        return replace(base, kind="document", text=text, notice=notice, details=details)


def refused(base: Attachment, why: str) -> Attachment:
    """A rejected attachment with the one line the person sees."""
    return replace(base, kind="rejected", notice=f"I couldn't use {base.name}: {why}.",
                   details={"why": why})


_EXT_KIND = {
    **dict.fromkeys(("png", "jpg", "jpeg", "gif", "webp"), "image"),
    **dict.fromkeys(("ogg", "oga", "opus", "mp3", "m4a", "wav", "webm", "flac"), "audio"),
    **dict.fromkeys(("pdf", "docx", "txt", "md", "csv", "html", "htm"), "document"),
}
_KIND_WORDS = {"image": "image", "audio": "audio file", "document": "document"}


def _claimed_kind(declared: str | None, name: str) -> str | None:
    """The kind the declared type (or else the name's extension) claims, if any."""
    claimed = (declared or "").split(";")[0].strip().lower()
    major = claimed.split("/")[0]
    if major in ("image", "audio", "video"):
        return "audio" if major == "video" else major
    if claimed == "application/pdf" or major == "text" or "wordprocessingml" in claimed:
        return "document"
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _EXT_KIND.get(ext)


def _type_problem(found: Sniffed, declared: str | None, name: str) -> str:
    """Why the bytes cannot be used as what they claim to be ("" when they can)."""
    claimed = _claimed_kind(declared, name)
    if found.kind == "unknown":
        if claimed:
            return f"it is not a readable {_KIND_WORDS[claimed]}"
        return "its type is not one I can read (images, audio, PDF, DOCX, text, CSV, HTML)"
    if claimed and claimed != found.kind:
        article = "a" if claimed == "document" else "an"
        return f"it claims to be {article} {_KIND_WORDS[claimed]} but its contents are {found.mime}"
    return ""


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"

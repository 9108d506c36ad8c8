"""Attachments in the thread: what is stored, what the model is sent, what the person sees.

A turn with attachments adds two human messages: first one named
"attachments" holding each attachment as framed outside content (an image's
placeholder "[image: receipt.jpg, 25 Nov]", a forwarded voice message's
transcript, a document's text or its beginning and outline), then the
person's own words (their typed text, and the transcript of their own,
unforwarded voice message). The thread — and so every checkpoint — holds only
that text and the image ids (`MEDIA_KEY`); image bytes are read from the
person's store for the turn they arrive in and put into the model's input as
`image_url` parts (`with_images`), never into the state. Later turns see the
placeholder, which compaction keeps like any text.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage

from panager.framing import frame
from panager.services.media.intake import Attachment

MEDIA_KEY = "panager_media"  # additional_kwargs of the attachments message: [{id, mime, name}]
FILES_KEY = "panager_files"  # additional_kwargs: the names of the message's attachments
ATTACHMENTS_NAME = "attachments"
DOCUMENT_CHARS = 12_000  # of a document's text put into the turn that brings it
NO_WORDS = "(no words with this message: it is about the attachment above)"
# (mime, bytes) of the images of one message, by that message's id
Images = Mapping[str, Sequence[tuple[str, bytes]]]


def placeholder(att: Attachment) -> str:
    """The short line that stands for an image in the thread."""
    when = f", {att.received_at.day} {att.received_at:%b}" if att.received_at else ""
    return f"[image: {att.name}{when}]"


def _outside(att: Attachment, sees_images: bool) -> str:
    source = f"attachment {att.name}"
    if att.kind == "image":
        seen = "" if sees_images else " (not shown: this model cannot see images)"
        return frame(source, placeholder(att) + seen)
    if att.kind in ("voice", "audio"):
        what = "forwarded voice message" if att.details.get("voice") else "audio file"
        return frame(source, {"kind": what, "transcript": att.text})
    if att.kind == "document":
        return frame(source, document_view(att))
    return frame(source, f"[{att.name}: not read — {att.details.get('why', 'refused')}]")


def document_view(att: Attachment) -> dict[str, Any]:
    """A document as the turn that brings it sees it: all of it, or its beginning and outline."""
    view: dict[str, Any] = {"kind": "document", "pages": att.details.get("pages")}
    if att.details.get("document_id"):
        view["document_id"] = att.details["document_id"]
    if len(att.text) <= DOCUMENT_CHARS:
        view["text"] = att.text
        return view
    view["beginning"] = att.text[:DOCUMENT_CHARS]
    view["outline"] = list(att.details.get("outline") or [])
    view["note"] = "Only the beginning is shown; document_search finds the rest."
    return view


def turn_messages(
    text: str, attachments: Sequence[Attachment], key: str, *, sees_images: bool
) -> list[HumanMessage]:
    """The human messages of a turn with attachments: the framed ones, then the person's."""
    own = [a.text for a in attachments if a.own_words and a.text]
    words = "\n\n".join(part for part in (text, *own) if part) or NO_WORDS
    person = HumanMessage(words, id=key)
    outside = [a for a in attachments if not a.own_words]
    if not outside:
        return [person]
    media = [{"id": a.media_id, "mime": a.mime, "name": a.name}
             for a in outside if a.kind == "image" and a.media_id]
    parts = "\n".join(_outside(a, sees_images) for a in outside)
    kwargs: dict[str, Any] = {FILES_KEY: [a.name for a in outside]}
    if media:
        kwargs[MEDIA_KEY] = media
    return [HumanMessage(parts, name=ATTACHMENTS_NAME, id=f"{key}-attachments",
                         additional_kwargs=kwargs), person]


def attached_text(message: AnyMessage) -> str:
    """How a page shows an attachments message: the file names, not the framed data."""
    names = (message.additional_kwargs or {}).get(FILES_KEY) or []
    return "📎 " + ", ".join(str(n) for n in names) if names else "📎 (attachments)"


def media_refs(message: AnyMessage) -> list[dict]:
    """The image references an attachments message carries."""
    return list((message.additional_kwargs or {}).get(MEDIA_KEY) or [])


def with_images(history: list[AnyMessage], images: Images) -> list[AnyMessage]:
    """The model input with this turn's images as `image_url` parts (the state is untouched)."""
    if not images:
        return history
    out: list[AnyMessage] = []
    for message in history:
        found = images.get(message.id or "")
        if not found or not isinstance(message, HumanMessage):
            out.append(message)
            continue
        parts: list[str | dict] = [{"type": "text", "text": message.text}]
        for mime, data in found:
            url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        out.append(message.model_copy(update={"content": parts}))
    return out


def notes_for(
    attachments: Sequence[Attachment], *, sees_images: bool, model_name: str
) -> list[str]:
    """The lines a front end shows before the answer: what was heard, what was refused,
    and one line when images cannot be seen by the person's model."""
    lines = [a.notice for a in attachments if a.notice]
    blind = [a.name for a in attachments if a.kind == "image" and not sees_images]
    if blind:
        names = ", ".join(blind)
        lines.append(
            f"The model in use ({model_name}) can't see images, so I couldn't look at "
            f"{names}; I'll answer your words. (/model picks another; the `vision` setting "
            "marks a model that can.)"
        )
    return lines

"""Gmail v1 operations and the compact views the model reads.

Synchronous, like `api.py`: each runs inside one `GoogleService.call` thread
with services built for that call. Results are small dicts; a message body is
its text part, or its HTML part reduced to text by `html_to_text` (a parser
over the bytes we already have: no image, stylesheet or link is ever fetched).
Attachments are listed, never downloaded.

Sending goes through a draft: `draft_view` is what the person is shown before
a send (To, Cc, Bcc, subject, the full body, attachments) with its `digest`;
`send_draft` fetches the draft again and sends only when the digest is still
the one shown.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from email.message import EmailMessage
from email.utils import formataddr, getaddresses
from html.parser import HTMLParser
from typing import Any

from googleapiclient.errors import HttpError

from panager.errors import ToolError

ME = "me"
MAX_RESULTS = 50
BODY_LIMIT = 20_000  # characters of a message body the model reads
SNIPPET_LIMIT = 200
SUMMARY_HEADERS = ["From", "Subject", "Date"]
_BLOCK_TAGS = frozenset(
    {"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "blockquote"}
)
_HIDDEN_TAGS = frozenset({"script", "style", "head", "title", "template", "noscript"})
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


class _TextOnly(HTMLParser):
    """Collects the visible text of an HTML document; never resolves a URL."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN_TAGS:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of `html` (scripts, styles and markup dropped)."""
    parser = _TextOnly()
    parser.feed(html)
    parser.close()
    lines = [_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).splitlines()]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def _status(exc: HttpError) -> int:
    return int(exc.resp.status)


def _unknown(what: str, ident: str, hint: str) -> ToolError:
    return ToolError(f"No {what} {ident!r} in this Gmail account. {hint}")


def _headers(payload: dict) -> dict[str, str]:
    found: dict[str, str] = {}
    for header in payload.get("headers") or []:
        name = str(header.get("name", "")).lower()
        found.setdefault(name, str(header.get("value", "")))
    return found


def _decode(data: str | None, charset: str | None = None) -> str:
    if not data:
        return ""
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return ""
    try:
        return raw.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")


def _charset(part: dict) -> str | None:
    kind = _headers(part).get("content-type", "")
    match = re.search(r'charset="?([\w.-]+)', kind, re.IGNORECASE)
    return match.group(1) if match else None


def _walk(part: dict) -> list[dict]:
    found = [part]
    for child in part.get("parts") or []:
        found.extend(_walk(child))
    return found


def _attachment(part: dict) -> dict | None:
    if not part.get("filename"):
        return None
    return {
        "filename": part["filename"],
        "type": part.get("mimeType"),
        "size": (part.get("body") or {}).get("size"),
    }


def body_and_attachments(payload: dict) -> tuple[str, list[dict]]:
    """The text of a message (text/plain, else HTML reduced to text) and its attachments."""
    plain: list[str] = []
    html: list[str] = []
    attachments: list[dict] = []
    for part in _walk(payload):
        listed = _attachment(part)
        if listed is not None:
            attachments.append(listed)
            continue
        kind = str(part.get("mimeType", "")).lower()
        data = (part.get("body") or {}).get("data")
        if kind == "text/plain" and data:
            plain.append(_decode(data, _charset(part)))
        elif kind == "text/html" and data:
            html.append(_decode(data, _charset(part)))
    text = "\n\n".join(plain) if plain else html_to_text("\n".join(html))
    return text.strip(), attachments


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more characters)"


# -- reading ------------------------------------------------------------------------------


def search(clients: Any, query: str, limit: int) -> dict:
    """Messages matching a Gmail query: id, from, subject, date, snippet (newest first)."""
    messages = clients.gmail.users().messages()
    ids: list[str] = []
    request = messages.list(userId=ME, q=query, maxResults=min(limit, MAX_RESULTS))
    while request is not None and len(ids) < limit:
        page = request.execute(num_retries=2)
        ids.extend(m["id"] for m in page.get("messages") or [])
        request = messages.list_next(request, page)
    found = []
    for ident in ids[:limit]:
        meta = messages.get(
            userId=ME, id=ident, format="metadata", metadataHeaders=SUMMARY_HEADERS
        ).execute(num_retries=2)
        head = _headers(meta.get("payload") or {})
        found.append(
            {
                "id": ident,
                "from": head.get("from", ""),
                "subject": head.get("subject", ""),
                "date": head.get("date", ""),
                "snippet": _cut(meta.get("snippet") or "", SNIPPET_LIMIT),
            }
        )
    return {"query": query, "count": len(found), "messages": found}


def _message(clients: Any, message_id: str, fmt: str = "full") -> dict:
    try:
        return dict(
            clients.gmail.users()
            .messages()
            .get(userId=ME, id=message_id, format=fmt)
            .execute(num_retries=2)
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown("message", message_id, "Use email_search to find message ids.") from None
        raise


def read(clients: Any, message_id: str) -> dict:
    """One message: headers, its text, its attachments (names, types, sizes)."""
    message = _message(clients, message_id)
    payload = message.get("payload") or {}
    head = _headers(payload)
    text, attachments = body_and_attachments(payload)
    view = {
        "id": message.get("id", message_id),
        "thread_id": message.get("threadId"),
        "from": head.get("from", ""),
        "to": head.get("to", ""),
        "cc": head.get("cc") or None,
        "subject": head.get("subject", ""),
        "date": head.get("date", ""),
        "text": _cut(text, BODY_LIMIT),
        "attachments": attachments or None,
    }
    return {k: v for k, v in view.items() if v is not None}


# -- drafts -------------------------------------------------------------------------------


def addresses(value: str, what: str) -> str:
    """A validated address list ("a@x, B <b@y>") for a header."""
    if "\r" in value or "\n" in value:
        raise ToolError(f"{what} must be on one line.")
    found = [(name, addr) for name, addr in getaddresses([value]) if addr]
    if not found or any("@" not in addr or " " in addr for _, addr in found):
        raise ToolError(f"{what} {value!r} is not a list of e-mail addresses.")
    return ", ".join(formataddr(pair) for pair in found)


def _raw(message: EmailMessage) -> str:
    return base64.urlsafe_b64encode(message.as_bytes()).decode("ascii")


def create_draft(clients: Any, to: str, subject: str, body: str, reply_to_id: str | None) -> dict:
    """A new draft (a reply in the original's thread when `reply_to_id` is given)."""
    mail = EmailMessage()
    mail["To"] = to
    mail["Subject"] = subject
    draft_body: dict[str, Any] = {}
    if reply_to_id:
        original = _message(clients, reply_to_id, "metadata")
        head = _headers(original.get("payload") or {})
        if head.get("message-id"):
            mail["In-Reply-To"] = head["message-id"]
            mail["References"] = (head.get("references", "") + " " + head["message-id"]).strip()
        draft_body["threadId"] = original.get("threadId")
    mail.set_content(body)
    draft_body["raw"] = _raw(mail)
    made = clients.gmail.users().drafts().create(userId=ME, body={"message": draft_body}).execute()
    return {
        "ok": True,
        "draft_id": made.get("id"),
        "to": to,
        "subject": subject,
        "reply_to_id": reply_to_id,
        "note": "Saved as a draft, not sent. email_send(draft_id) sends it once the person "
        "approves the draft as shown to them.",
    }


def draft_view(clients: Any, draft_id: str) -> dict:
    """The draft as Gmail holds it now: to, cc, bcc, subject, body, attachments, digest."""
    try:
        draft = (
            clients.gmail.users()
            .drafts()
            .get(userId=ME, id=draft_id, format="full")
            .execute(num_retries=2)
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown("draft", draft_id, "Use the draft_id email_draft returned.") from None
        raise
    payload = (draft.get("message") or {}).get("payload") or {}
    head = _headers(payload)
    text, attachments = body_and_attachments(payload)
    view: dict[str, Any] = {
        "draft_id": draft.get("id", draft_id),
        "to": head.get("to", ""),
        "cc": head.get("cc", ""),
        "bcc": head.get("bcc", ""),
        "subject": head.get("subject", ""),
        "body": text,
        "attachments": [a["filename"] for a in attachments],
    }
    canonical = json.dumps(view, sort_keys=True, ensure_ascii=False)
    view["digest"] = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return view


CHANGED = (
    "Not sent: the draft changed after the person was shown it. Ask again (call email_send "
    "once more) so they see the current draft."
)


def send_draft(clients: Any, draft_id: str, digest: str) -> dict:
    """Send the draft if it is still exactly the one shown (same digest); else refuse."""
    view = draft_view(clients, draft_id)
    if view["digest"] != digest:
        raise ToolError(CHANGED)
    try:
        sent = clients.gmail.users().drafts().send(userId=ME, body={"id": draft_id}).execute()
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown("draft", draft_id, "It may have been sent or deleted.") from None
        raise
    return {
        "ok": True,
        "sent": True,
        "message_id": sent.get("id"),
        "to": view["to"],
        "subject": view["subject"],
    }

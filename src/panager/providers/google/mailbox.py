"""Gmail behind the provider contract's `Mailbox`.

The calls stay in gmail.py (MIME, HTML to text, the draft's digest); this
turns their results into provider-neutral types, each call under the Gmail
scope it needs — a link without Gmail ends in the link asking for it
(`GoogleAuthRequired` with MAIL_SCOPES), as before.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from panager.providers.google import gmail
from panager.providers.google.oauth import GMAIL_COMPOSE_SCOPE, GMAIL_READ_SCOPE
from panager.providers.google.service import GoogleService
from panager.services.accounts.provider import (
    Attachment,
    DraftView,
    Mail,
    MailSummary,
    within,
)


class GoogleMailbox:
    """One Google account's Gmail."""

    name = "Gmail"

    def __init__(self, service: GoogleService, user_id: int, timeout: float) -> None:
        self.service, self.user_id, self.timeout = service, user_id, timeout

    async def _call(self, scope: str, operation: Any, **kwargs: Any) -> Any:
        work = self.service.call(self.user_id, scope, partial(operation, **kwargs))
        return await within("Gmail", work, self.timeout)

    async def search(self, query: str, limit: int = 10) -> list[MailSummary]:
        """Messages matching a Gmail query, newest first."""
        found = await self._call(GMAIL_READ_SCOPE, gmail.search, query=query, limit=limit)
        return [MailSummary(m["id"], m["from"], m["subject"], m["date"], m["snippet"])
                for m in found["messages"]]

    async def read(self, message_id: str) -> Mail:
        """One message: headers, its text, its attachments' names, types and sizes."""
        view = await self._call(GMAIL_READ_SCOPE, gmail.read, message_id=message_id)
        return Mail(
            id=view["id"], sender=view["from"], to=view["to"], subject=view["subject"],
            date=view["date"], text=view["text"], cc=view.get("cc") or "",
            thread_id=view.get("thread_id") or "",
            attachments=tuple(Attachment(a["filename"], a.get("type"), a.get("size"))
                              for a in view.get("attachments") or []),
        )

    async def draft(
        self, to: str, subject: str, body: str, reply_to_id: str | None = None
    ) -> str:
        """A new Gmail draft; its id."""
        made = await self._call(GMAIL_COMPOSE_SCOPE, gmail.create_draft, to=to,
                                subject=subject, body=body, reply_to_id=reply_to_id)
        return str(made["draft_id"])

    async def draft_view(self, draft_id: str) -> DraftView:
        """The draft as Gmail holds it now, with its digest."""
        view = await self._call(GMAIL_COMPOSE_SCOPE, gmail.draft_view, draft_id=draft_id)
        return DraftView(
            id=view["draft_id"], to=view["to"], subject=view["subject"], body=view["body"],
            digest=view["digest"], cc=view["cc"], bcc=view["bcc"],
            attachments=tuple(view["attachments"]),
        )

    async def send_draft(self, draft_id: str, digest: str) -> str:
        """Send the draft if it is still the one shown (`digest`); the sent message's id."""
        sent = await self._call(GMAIL_COMPOSE_SCOPE, gmail.send_draft, draft_id=draft_id,
                                digest=digest)
        return str(sent["message_id"])

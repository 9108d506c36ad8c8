"""The in-memory provider's mailbox: messages, drafts and sent mail held in this process.

It behaves as the contract asks of any `Mailbox`: ids qualified with the account's key,
a draft's `digest` pinning what the person was shown, a send refused (nothing sent) when
the draft changed since, errors as one sentence, and `Unreachable` when the "server"
stalls (the provider's `stalled`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from panager.services.accounts.provider import (
    DraftView,
    Mail,
    MailSummary,
    NotFound,
    ProviderError,
    qualify,
)

NAME = "memory"
CHANGED = ("Not sent: the draft changed after the person was shown it. Ask again (call "
           "email_send once more) so they see the current draft.")


@dataclass
class MailStore:
    """One account's mail."""

    key: str
    address: str
    messages: dict[str, Mail] = field(default_factory=dict)
    drafts: dict[str, dict[str, str]] = field(default_factory=dict)
    sent: list[Mail] = field(default_factory=list)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def new_id(self, kind: str) -> str:
        """A fresh qualified id ("memory:<key>:m1")."""
        return qualify(NAME, f"{self.key}:{kind}{next(self.ids)}")

    def deliver(self, sender: str, subject: str, text: str, date: str = "") -> str:
        """A message arriving from outside; its id."""
        ident = self.new_id("m")
        self.messages[ident] = Mail(ident, sender, self.address, subject, date, text)
        return ident


class MemoryMailbox:
    """One in-memory account's mailbox (`MailStore`)."""

    name = "In-memory mail"

    def __init__(self, reached: Callable[[], Awaitable[None]], store: MailStore) -> None:
        self.reached, self.store = reached, store  # reached: the provider's (see `stalled`)

    async def search(self, query: str, limit: int = 10) -> list[MailSummary]:
        """Messages whose sender, subject or text holds `query` (any case), newest first."""
        await self.reached()
        words = query.strip().lower()
        found = [m for m in reversed(self.store.messages.values())
                 if words in f"{m.sender}\n{m.subject}\n{m.text}".lower()]
        return [MailSummary(m.id, m.sender, m.subject, m.date, m.text[:200])
                for m in found[:limit]]

    async def read(self, message_id: str) -> Mail:
        """One message, whole."""
        await self.reached()
        found = self.store.messages.get(message_id)
        if found is None:
            raise NotFound(f"No message {message_id!r} in this mailbox; use an id email_search "
                           "shows.")
        return found

    async def draft(
        self, to: str, subject: str, body: str, reply_to_id: str | None = None
    ) -> str:
        """Save a draft (not sent); its id."""
        await self.reached()
        if reply_to_id is not None and reply_to_id not in self.store.messages:
            raise NotFound(f"No message {reply_to_id!r} to reply to; use an id email_search "
                           "shows.")
        ident = self.store.new_id("d")
        self.store.drafts[ident] = {"to": to, "subject": subject, "body": body}
        return ident

    async def draft_view(self, draft_id: str) -> DraftView:
        """The draft as held now, with the digest of exactly what is shown."""
        await self.reached()
        held = self.store.drafts.get(draft_id)
        if held is None:
            raise NotFound(f"No draft {draft_id!r}; use the draft_id email_draft returned.")
        shown = json.dumps(held, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(shown.encode()).hexdigest()
        return DraftView(draft_id, held["to"], held["subject"], held["body"], digest)

    async def send_draft(self, draft_id: str, digest: str) -> str:
        """Send the draft if it is still the one shown; the sent message's id."""
        view = await self.draft_view(draft_id)
        if view.digest != digest:
            raise ProviderError(CHANGED)
        del self.store.drafts[draft_id]
        ident = self.store.new_id("s")
        self.store.sent.append(Mail(ident, self.store.address, view.to, view.subject, "",
                                    view.body))
        return ident

"""Contacts and mail in the provider contract: `Contacts` (search) and `Mailbox` (search,
read, draft, and send a draft the person approved as shown).

See provider.py for the rules every type here follows (ids, errors, outside content).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Contact:
    """One person in an address book (outside content: the server's text)."""

    id: str  # provider-qualified
    name: str
    account: str = ""
    emails: tuple[str, ...] = ()
    phones: tuple[str, ...] = ()


class Contacts(Protocol):
    """One account's address book."""

    async def search(self, query: str, limit: int = 10) -> list[Contact]:
        """Contacts whose name, address or number contains `query`."""
        ...


# -- mail ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MailSummary:
    """One message in a search result."""

    id: str  # provider-qualified
    sender: str
    subject: str
    date: str
    snippet: str = ""


@dataclass(frozen=True)
class Mail:
    """One message, read whole (outside content)."""

    id: str
    sender: str
    to: str
    subject: str
    date: str
    text: str
    attachments: tuple[str, ...] = ()
    cc: str = ""


@dataclass(frozen=True)
class DraftView:
    """A draft exactly as the server holds it now; `digest` pins what was shown."""

    id: str
    to: str
    subject: str
    body: str
    digest: str
    cc: str = ""
    bcc: str = ""
    attachments: tuple[str, ...] = ()


class Mailbox(Protocol):
    """One mailbox: search, read, draft, and send a draft the person approved as shown."""

    async def search(self, query: str, limit: int = 10) -> list[MailSummary]:
        """Messages matching `query` (the provider's own query syntax)."""
        ...

    async def read(self, message_id: str) -> Mail:
        """One message, whole."""
        ...

    async def draft(
        self, to: Sequence[str], subject: str, body: str, reply_to_id: str | None = None
    ) -> DraftView:
        """Save a draft (not sent)."""
        ...

    async def draft_view(self, draft_id: str) -> DraftView:
        """A draft as held now (for the send question)."""
        ...

    async def send_draft(self, draft_id: str, digest: str) -> str:
        """Send the draft if it still matches `digest` (what the person approved); the
        sent message's id. Send is always confirmed by the person."""
        ...

"""The provider contract: what a calendar, tasks, contacts or mail provider implements.

A provider (Google, CalDAV, …) is one package under `panager.providers`; the
tools, the briefing and the pages speak only these types. Everything here is
provider-neutral:

- **Ids are opaque and provider-qualified**: `"<provider>:<its own id>"`
  (`qualify`, `split_id`). An id with no known provider prefix is a Google
  id: Google's ids are the unqualified namespace (they never hold a colon),
  so Google keeps showing them as before and ids written before providers
  existed (threads, held proposals) keep working; `"google:<id>"` is read
  too. Every other provider qualifies its ids. A provider's ids carry
  whatever it needs (a CalDAV id may hold the object's href); nothing outside
  the provider looks inside them, except one rule: a provider with several
  accounts per person starts its own ids with the account's key
  (`"caldav:<key>:<rest>"`, `account_of`), so an id finds its account. Event
  and calendar ids alike; `"primary"` is any calendar's way to say "the
  account's default calendar".
- **Times**: an `Event`'s `start`/`end` are aware datetimes, or dates for an
  all-day event; `end` is exclusive (RFC 5545 DTEND: an all-day event on the
  25th ends on the 26th). Listings are expanded: one `Event` per occurrence,
  a moved occurrence at its new time, a cancelled one absent.
- **Versions**: every `Event` carries `version` (Google's etag, a CalDAV
  ETag, Graph's changeKey). `update` and `delete` take the version the
  caller last saw and raise `Changed` — carrying the event as it is now —
  when the server holds another; the model is shown the new one.
- **Errors are one sentence** (`ProviderError`, a `ToolError`): what went
  wrong and what to do, never a traceback, URL with credentials or secret.
  A server that does not answer in time is `Unreachable`.
- **Capabilities are data** (`Provider.capabilities`, narrowed per account in
  `Account.capabilities`): a read-only account (an ICS feed) lacks
  CALENDAR_WRITE, and the tools that need it are not offered.
- **Free/busy** is computed here from expanded events (`busy`), for every
  provider alike; servers answer free-busy queries unevenly.

The per-capability types live beside this file (calendar.py, tasks.py, mail.py) and are
all importable from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from panager.errors import ToolError
from panager.services.accounts.calendar import (
    Calendar,
    CalendarInfo,
    Created,
    Event,
    EventChange,
    Listing,
    NewEvent,
    When,
    busy,
    inclusive_end,
)
from panager.services.accounts.mail import (
    Attachment,
    Contact,
    Contacts,
    DraftView,
    Mail,
    Mailbox,
    MailSummary,
)
from panager.services.accounts.tasks import (
    NewTask,
    Task,
    TaskChange,
    TaskListInfo,
    TaskListing,
    Tasks,
)

__all__ = [  # the whole contract, importable from here (calendar.py, tasks.py, mail.py)
    "CALENDAR", "CALL_TIMEOUT", "GOOGLE", "MAIL", "TASKS", "Account", "Attachment", "Calendar",
    "CalendarInfo", "Capability", "Changed", "Checked", "Contact", "Contacts", "Created",
    "DraftView", "Event", "EventChange", "Field", "FormConnect", "FormProvider", "Listing",
    "Mail", "MailSummary", "Mailbox", "NewEvent", "NewTask", "NotFound", "OAuthConnect",
    "Provider", "ProviderError", "ReadOnly", "Task", "TaskChange", "TaskListInfo",
    "TaskListing", "Tasks", "Unreachable", "When", "account_of", "busy", "inclusive_end",
    "qualify", "split_id", "within",
]
if TYPE_CHECKING:
    from panager.services.accounts.oauth import OAuthLink

T = TypeVar("T")

GOOGLE = "google"  # the provider an unqualified id belongs to
CALL_TIMEOUT = 30.0  # seconds a provider call may take before it is `Unreachable`


# -- capabilities -----------------------------------------------------------------------------


class Capability(StrEnum):
    """What an account can do; tools are offered by these."""

    CALENDAR_READ = "calendar_read"
    CALENDAR_WRITE = "calendar_write"
    TASKS_READ = "tasks_read"
    TASKS_WRITE = "tasks_write"
    CONTACTS_READ = "contacts_read"
    MAIL_READ = "mail_read"
    MAIL_DRAFT = "mail_draft"
    MAIL_SEND = "mail_send"


CALENDAR = frozenset({Capability.CALENDAR_READ, Capability.CALENDAR_WRITE})
TASKS = frozenset({Capability.TASKS_READ, Capability.TASKS_WRITE})
MAIL = frozenset({Capability.MAIL_READ, Capability.MAIL_DRAFT, Capability.MAIL_SEND})


# -- ids ----------------------------------------------------------------------------------------


def qualify(provider: str, raw: str) -> str:
    """The opaque id the tools show for `raw`, one of `provider`'s own ids."""
    return f"{provider}:{raw}"


def split_id(ident: str, known: Iterable[str] = ()) -> tuple[str, str]:
    """(provider, its own id) of a qualified id; an id without one of the `known` provider
    prefixes (or `google:`) is a Google id, as every id was before providers existed."""
    text = (ident or "").strip()
    head, sep, rest = text.partition(":")
    if sep and (head == GOOGLE or head in known):
        return head, rest
    return GOOGLE, text


def account_of(raw: str, accounts: Sequence[Account]) -> Account | None:
    """Which of one provider's `accounts` holds the item with its own id `raw`: the one
    whose key starts it (`"<key>:…"`), or the only one."""
    for account in accounts:
        if account.key and raw.startswith(account.key + ":"):
            return account
    keyless = [a for a in accounts if not a.key]
    return keyless[0] if len(keyless) == 1 else None


# -- errors -------------------------------------------------------------------------------------


class ProviderError(ToolError):
    """A provider's failure as one sentence the model (and the person) can act on."""

    def __init__(self, message: str) -> None:
        sentence = " ".join(str(message).split())
        super().__init__(sentence)
        self.message = sentence


class NotFound(ProviderError):
    """No such event, task, calendar or message (deleted meanwhile, or a wrong id)."""


class Unreachable(ProviderError):
    """The server did not answer in time or could not be reached; nothing was changed
    that the caller can know of, and the turn goes on."""


class ReadOnly(ProviderError):
    """The calendar or account cannot be written (an ICS feed, a shared read-only one)."""


class Changed(ProviderError):
    """The item changed at the server since `version` was read: nothing was written.
    `current` is the event as it is now (None: it was deleted meanwhile)."""

    def __init__(self, message: str, current: Event | None) -> None:
        super().__init__(message)
        self.current = current


async def within(what: str, work: Awaitable[T], seconds: float = CALL_TIMEOUT) -> T:
    """`work`, or `Unreachable` naming `what` when it takes longer than `seconds`."""
    try:
        return await asyncio.wait_for(work, seconds)
    except TimeoutError:
        raise Unreachable(
            f"{what} did not answer within {seconds:g} seconds; try again in a moment."
        ) from None


# -- connecting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OAuthConnect:
    """An OAuth 2 web flow (Google, Microsoft): the shared flow (services/accounts/oauth.py)
    adds state, PKCE, sealing and the replay of the message that asked; the provider gives
    its endpoints, the scopes each capability needs, and `link` — its `OAuthLink` (consent
    address, code exchange, sealed storage) that /connect, the web callback and the
    replay use."""

    authorize_url: str
    token_url: str
    scopes: Mapping[Capability, tuple[str, ...]]
    link: OAuthLink | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Field:
    """One field of a form connect, typed on the web page's Connections page only."""

    name: str  # "url", "username", "password"
    label: str  # "Server address"
    secret: bool = False  # sealed with PANAGER_SECRET_KEY; never logged or shown back
    required: bool = True
    hint: str = ""


@dataclass(frozen=True)
class FormConnect:
    """A form connect (CalDAV, IMAP): the fields, checked at once, stored sealed."""

    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Account:
    """One account a person connected to one provider."""

    provider: str  # "google"
    key: str  # unique among this person's accounts of the provider ("" for Google's one)
    label: str  # "alice@example.com", "alice @ dav.example.org"
    capabilities: frozenset[Capability]
    connected: bool = True  # False after the server refused the credentials
    default: bool = False  # the person chose one of its calendars for new events ("primary")


@dataclass(frozen=True)
class Checked:
    """A form connect's check: the account works (`summary`: "3 calendars")."""

    label: str
    summary: str
    capabilities: frozenset[Capability]
    settings: Mapping[str, str] = field(default_factory=dict)  # unsealed, non-secret


class Provider(Protocol):
    """One kind of account: its connect, its capabilities, and its per-account services.

    Registered by one line in `panager.app.PROVIDERS`; it passes the contract suite
    (`tests/providers/contract.py`)."""

    name: str  # "google", "caldav" — the id prefix and the /connect word
    title: str  # "Google", "CalDAV" — for sentences
    connect: OAuthConnect | FormConnect
    capabilities: frozenset[Capability]  # the most any account of it can do

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's accounts of this provider (connected or not)."""
        ...

    async def require(self, user_id: int, capability: Capability) -> None:
        """Raise what a call needing `capability` meets when no connected account of this
        provider has it: an OAuth provider's `AuthRequired` (the turn ends with its link),
        a form provider's one sentence pointing at the Connections page."""
        ...

    def calendar(self, user_id: int, account: Account) -> Calendar | None:
        """The account's calendars, or None without a calendar capability."""
        ...

    def tasks(self, user_id: int, account: Account) -> Tasks | None:
        """The account's tasks, or None."""
        ...

    def contacts(self, user_id: int, account: Account) -> Contacts | None:
        """The account's address book, or None."""
        ...

    def mailbox(self, user_id: int, account: Account) -> Mailbox | None:
        """The account's mailbox, or None."""
        ...


@runtime_checkable
class FormProvider(Protocol):
    """A provider connected through a form: it checks what was typed before anything is
    stored, and removes what it cached when the account is removed."""

    async def check(self, user_id: int, values: Mapping[str, str]) -> Checked:
        """Try the values against the server; `ProviderError` as one line when they do not
        work (nothing is stored then)."""
        ...

    def forget(self, user_id: int, key: str) -> None:
        """Drop what this process keeps of the account (parsed data); called when the
        account is removed."""
        ...

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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from typing import Protocol, TypeVar, runtime_checkable
from zoneinfo import ZoneInfo

from panager.errors import ToolError

T = TypeVar("T")
When = date | datetime

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


# -- calendars ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalendarInfo:
    """One calendar of one account as the person knows it."""

    id: str  # provider-qualified; Google's primary calendar is "primary"
    name: str  # the display name (outside content: the server's text)
    account: str  # the account's label, e.g. "alice@example.com"
    provider: str  # "google", "caldav", …
    writable: bool = True
    default: bool = False  # where "primary" and new events go


@dataclass(frozen=True)
class Event:
    """One occurrence of an event, as the server holds it now."""

    id: str  # opaque, provider-qualified (an occurrence of a series has its own id)
    calendar: CalendarInfo
    title: str
    start: When  # aware datetime, or a date (all-day)
    end: When  # exclusive, the same kind as start
    version: str  # etag / ETag / changeKey; "" when the server gives none
    description: str | None = None
    location: str | None = None
    series_id: str | None = None  # set on an occurrence of a recurring event
    status: str = "confirmed"  # "confirmed" | "tentative"
    busy: bool = True  # False for a "free"/transparent event
    attendees: tuple[str, ...] = ()  # others the server may e-mail about changes

    @property
    def account(self) -> str:
        """The label of the account holding the event."""
        return self.calendar.account

    @property
    def all_day(self) -> bool:
        """True for an event of whole days (dates, no times)."""
        return not isinstance(self.start, datetime)

    @property
    def recurring(self) -> bool:
        """True for an occurrence of a recurring event."""
        return self.series_id is not None


@dataclass(frozen=True)
class NewEvent:
    """An event to create (end exclusive, the same kind as start)."""

    title: str
    start: When
    end: When
    description: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class EventChange:
    """Fields to change; None keeps a field. `start` alone moves the event, keeping its
    length (the provider resolves that against the event as held now)."""

    title: str | None = None
    start: When | None = None
    end: When | None = None  # exclusive
    description: str | None = None
    location: str | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in vars(self).values())


@dataclass(frozen=True)
class Created:
    """What `Calendar.create` made. Creates are idempotent: the same request made again
    (a retry, a replayed message) finds the event already made (`created` False)."""

    event: Event
    created: bool = True
    existing: bool = False  # an event with these fields was already there (maybe edited)


@dataclass(frozen=True)
class Listing:
    """Events of every readable calendar in a range, expanded and sorted by start."""

    events: list[Event]
    truncated: bool = False  # more events exist than were returned
    unreadable: tuple[str, ...] = ()  # calendars that refused to be read (names)


class Calendar(Protocol):
    """One account's calendars."""

    async def calendars(self) -> list[CalendarInfo]:
        """Every calendar the account can read, the default one marked."""
        ...

    async def events(self, start: datetime, end: datetime, zone: ZoneInfo) -> Listing:
        """Occurrences overlapping [start, end) in every readable calendar, recurrences
        expanded in `zone`."""
        ...

    async def event(self, calendar_id: str, event_id: str) -> Event:
        """One event as held now (`NotFound` when gone)."""
        ...

    async def create(self, calendar_id: str, event: NewEvent, zone: ZoneInfo) -> Created:
        """Add `event` to the calendar (`ReadOnly`, `NotFound` for an unknown calendar)."""
        ...

    async def update(
        self, calendar_id: str, event_id: str, change: EventChange, version: str, zone: ZoneInfo
    ) -> Event:
        """Change one event (an occurrence id changes that occurrence only); `Changed`
        when the server's version is not `version`."""
        ...

    async def delete(self, calendar_id: str, event_id: str, version: str) -> bool:
        """Delete one event; False when it was already gone; `Changed` on a version
        mismatch."""
        ...


def busy(
    events: Iterable[Event], start: datetime, end: datetime, zone: ZoneInfo
) -> list[tuple[datetime, datetime]]:
    """The busy intervals within [start, end) of expanded `events`, merged and sorted:
    free (transparent) events do not count, an all-day event covers its days in `zone`."""
    spans: list[tuple[datetime, datetime]] = []
    for event in events:
        if not event.busy:
            continue
        lo, hi = _instant(event.start, zone), _instant(event.end, zone)
        lo, hi = max(lo, start), min(hi, end)
        if lo < hi:
            spans.append((lo, hi))
    spans.sort()
    merged: list[tuple[datetime, datetime]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _instant(value: When, zone: ZoneInfo) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.combine(value, time.min, zone)


def inclusive_end(event: Event) -> When:
    """The end as a person reads it: an all-day event's last day (not the day after)."""
    if isinstance(event.end, datetime):
        return event.end
    return event.end - timedelta(days=1)


# -- tasks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskListInfo:
    """One task list of one account."""

    id: str  # provider-qualified
    name: str
    account: str
    provider: str
    default: bool = False


@dataclass(frozen=True)
class Task:
    """One task as the server holds it now."""

    id: str  # opaque, provider-qualified
    title: str
    account: str = ""
    due: date | None = None
    notes: str | None = None
    done: bool = False
    completed_at: datetime | None = None
    parent: str | None = None
    version: str = ""


@dataclass(frozen=True)
class NewTask:
    """A task to add to the default list."""

    title: str
    due: date | None = None
    notes: str | None = None


@dataclass(frozen=True)
class TaskChange:
    """Fields to change; None keeps a field, `clear_due` removes the due date."""

    title: str | None = None
    notes: str | None = None
    due: date | None = None
    clear_due: bool = False
    completed: bool | None = None

    def __bool__(self) -> bool:
        return (
            any(v is not None for v in (self.title, self.notes, self.due, self.completed))
            or self.clear_due
        )


@dataclass(frozen=True)
class TaskListing:
    """Tasks of the default list."""

    tasks: list[Task]
    truncated: bool = False


class Tasks(Protocol):
    """One account's tasks (the default list, as the tools know it)."""

    async def lists(self) -> list[TaskListInfo]:
        """The account's task lists, the default one marked."""
        ...

    async def tasks(self, show_completed: bool = False) -> TaskListing:
        """Tasks of the default list (open ones unless `show_completed`)."""
        ...

    async def task(self, task_id: str) -> Task:
        """One task as held now (`NotFound` when gone)."""
        ...

    async def create(self, task: NewTask) -> Task:
        """Add a task to the default list."""
        ...

    async def update(self, task_id: str, change: TaskChange) -> Task:
        """Change a task (`NotFound` when gone)."""
        ...

    async def complete(self, task_id: str) -> Task:
        """Mark a task done."""
        ...

    async def delete(self, task_id: str) -> None:
        """Delete a task (`NotFound` when gone)."""
        ...


# -- contacts -----------------------------------------------------------------------------------


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


# -- connecting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OAuthConnect:
    """An OAuth 2 web flow (Google, Microsoft): the shared flow adds state, PKCE, sealing
    and the replay of the message that asked; the provider gives its endpoints and the
    scopes each capability needs."""

    authorize_url: str
    token_url: str
    scopes: Mapping[Capability, tuple[str, ...]]


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

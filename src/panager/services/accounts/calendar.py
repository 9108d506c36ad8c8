"""Calendars in the provider contract: calendars, events (one per occurrence), changes,
the `Calendar` protocol every calendar provider implements, and busy intervals.

See provider.py for the rules every type here follows (ids, times, versions, errors).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

When = date | datetime


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

"""Events of every connected calendar in one listing: Google's and each CalDAV account's,
fetched concurrently, sorted by start, each event with its calendar named.

A CalDAV account that cannot be read (a server that does not answer in time, a changed
password) is named under `unreadable_calendars` with its one sentence; the others are
still listed and the turn goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from panager.services.accounts.connected import ConnectedCalendars
from panager.services.accounts.provider import Event, Listing, ProviderError

MAX_LISTED = 250  # events in one merged answer (Google's own listing caps at the same)


def event_view(event: Event, zone: ZoneInfo) -> dict[str, Any]:
    """The compact form the model reads, in the shape of Google's (`services/google/api.py`)."""
    view: dict[str, Any] = {
        "id": event.id,
        "calendar_id": event.calendar.id,
        "calendar": f"{event.calendar.name} ({event.account})",
        "title": event.title,
        "start": _shown(event.start, zone),
        "end": _shown(event.end - timedelta(days=1) if event.all_day else event.end, zone),
        "all_day": event.all_day,
        "location": event.location,
        "description": (event.description or "")[:500] or None,
        "recurring": event.recurring or None,
        "attendees": list(event.attendees) or None,
        "version": event.version or None,
        "status": event.status if event.status == "tentative" else None,
    }
    return {k: v for k, v in view.items() if v not in (None, False) or k == "all_day"}


def _shown(value: date | datetime, zone: ZoneInfo) -> str:
    if isinstance(value, datetime):
        return value.astimezone(zone).isoformat(timespec="minutes")
    return value.isoformat()


def _key(view: dict[str, Any], zone: ZoneInfo) -> datetime:
    text = view.get("start") or ""
    try:
        if "T" in text:
            return datetime.fromisoformat(text).astimezone(ZoneInfo("UTC"))
        return datetime.combine(date.fromisoformat(text), time.min, zone).astimezone(
            ZoneInfo("UTC")
        )
    except ValueError:
        return datetime.max.replace(tzinfo=ZoneInfo("UTC"))


async def connected_listings(
    calendars: ConnectedCalendars | None, user_id: int, start: datetime, end: datetime,
    zone: ZoneInfo,
) -> tuple[list[dict[str, Any]], list[str], bool]:
    """(event views, unreadable accounts/calendars with why, truncated) of the person's
    connected calendars beside Google, every account read concurrently."""
    if calendars is None:
        return [], [], False
    accounts = await calendars.connected(user_id)
    results = await asyncio.gather(
        *(calendar.events(start, end, zone) for _, calendar in accounts), return_exceptions=True
    )
    views: list[dict[str, Any]] = []
    unreadable: list[str] = []
    truncated = False
    for (account, _), result in zip(accounts, results, strict=True):
        if isinstance(result, ProviderError):
            unreadable.append(f"{account.label}: {result.message}")
            continue
        if isinstance(result, BaseException):
            raise result
        assert isinstance(result, Listing)
        views.extend(event_view(e, zone) for e in result.events)
        unreadable.extend(f"{name} ({account.label})" for name in result.unreadable)
        truncated = truncated or result.truncated
    return views, unreadable, truncated


async def merged(
    google: Awaitable[dict[str, Any]] | None,
    calendars: ConnectedCalendars | None,
    user_id: int,
    start: datetime,
    end: datetime,
    zone: ZoneInfo,
) -> dict[str, Any]:
    """Google's listing (when connected) and the connected calendars', concurrently, as one."""
    others = connected_listings(calendars, user_id, start, end, zone)
    if google is None:
        base: dict[str, Any] = {
            "from": start.astimezone(zone).isoformat(timespec="minutes"),
            "to": end.astimezone(zone).isoformat(timespec="minutes"),
            "timezone": zone.key, "events": [],
        }
        views, unreadable, truncated = await others
    else:
        base, (views, unreadable, truncated) = await asyncio.gather(google, others)
    events = list(base.get("events", []))
    for view in events:  # Google's primary calendar is unnamed in Google's own listing
        view.setdefault("calendar", "Google Calendar")
    events.extend(views)
    events.sort(key=lambda v: _key(v, zone))
    if len(events) > MAX_LISTED:
        events, truncated = events[:MAX_LISTED], True
    result = {**base, "count": len(events), "events": events}
    if truncated:
        result["truncated"] = "more events exist (over 2,000 instances of a repeating event, " \
            "or too many to list); ask for a shorter range"
    if unreadable:
        result["unreadable_calendars"] = [*base.get("unreadable_calendars", []), *unreadable]
    return result

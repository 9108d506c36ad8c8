# Over 400 lines, kept whole: one account's Calendar: the REPORT, the expansion with its cap, and
# the ETag-guarded writes share the object parsing.
"""One CalDAV account's calendars, behind the provider contract (`services/accounts/provider.py`).

Ids: a calendar is `caldav:<account>:<collection path>`, an event
`caldav:<account>:<object path>` and one instance of a series
`caldav:<account>:<object path>#<RECURRENCE-ID in UTC>`. A version is the
object's ETag: an update or a delete is sent with `If-Match`, so a change made on
a phone meanwhile is never overwritten — the server answers 412 and the model is
shown the event as it is now (`Changed`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from panager.providers.caldav import ical
from panager.providers.caldav.dav import CalDav, DavCalendar, DavObject
from panager.providers.caldav.door import (
    AuthFailed,
    CalDavError,
    Door,
    PreconditionFailed,
)
from panager.providers.caldav.door import Unreachable as DoorUnreachable
from panager.providers.caldav.parsed import ParsedObjects
from panager.services.accounts.provider import (
    CalendarInfo,
    Changed,
    Created,
    Event,
    EventChange,
    Listing,
    NewEvent,
    NotFound,
    ProviderError,
    ReadOnly,
    Unreachable,
    qualify,
)
from panager.services.web.guard import Refused

NAME = "caldav"
MAX_INSTANCES = 2_000  # expanded instances per query; a capped answer says so
YIELD_EVERY = 4  # objects read between two turns of the event loop (~1 ms each when parsed)


@dataclass(frozen=True)
class Choice:
    """Which calendars the person reads (None: all) and which one new events go to."""

    read: frozenset[str] | None = None  # collection paths
    default: str | None = None  # a collection path


DoorFactory = Callable[[], Door]


class CalDavCalendar:
    """The `Calendar` of one CalDAV account."""

    def __init__(
        self, key: str, label: str, open_door: DoorFactory, choice: Choice = Choice(),
        parsed: ParsedObjects | None = None,
    ) -> None:
        self.key = key
        self.label = label
        self._open = open_door
        self.choice = choice
        self._known: list[DavCalendar] | None = None
        self.parsed = parsed if parsed is not None else ParsedObjects()

    # -- ids ------------------------------------------------------------------------------

    def _qualified(self, path: str, recurrence: str | None = None) -> str:
        return qualify(NAME, f"{self.key}:{path}" + (f"#{recurrence}" if recurrence else ""))

    def _own(self, ident: str) -> tuple[str, str | None]:
        """(path, recurrence) of one of this account's ids; NotFound for any other."""
        text = ident.strip()
        if text.startswith(f"{NAME}:"):
            text = text[len(NAME) + 1 :]
        key, sep, rest = text.partition(":")
        if not sep or key != self.key or not rest.startswith("/"):
            raise NotFound(f"{ident[:120]!r} is not an event or calendar of {self.label}.")
        path, _, recurrence = rest.partition("#")
        return path, recurrence or None

    # -- calendars -------------------------------------------------------------------------

    async def _calendars(self, dav: CalDav) -> list[DavCalendar]:
        if self._known is None:
            self._known = await dav.calendars()
        return self._known

    def _info(self, calendar: DavCalendar, all_known: list[DavCalendar]) -> CalendarInfo:
        path = urlsplit(calendar.url).path
        default = self.choice.default
        if default is None and all_known:
            writable = [c for c in all_known if c.writable] or all_known
            default = urlsplit(writable[0].url).path
        return CalendarInfo(
            id=self._qualified(path),
            name=calendar.name,
            account=self.label,
            provider=NAME,
            writable=calendar.writable,
            default=path == default,
        )

    async def calendars(self) -> list[CalendarInfo]:
        async with self._door() as dav:
            known = await self._calendars(dav)
        return [self._info(c, known) for c in known if self._read(c)]

    def _read(self, calendar: DavCalendar) -> bool:
        return self.choice.read is None or urlsplit(calendar.url).path in self.choice.read

    async def _calendar(self, dav: CalDav, calendar_id: str) -> tuple[DavCalendar, CalendarInfo]:
        known = await self._calendars(dav)
        if calendar_id in ("primary", ""):
            for calendar in known:
                info = self._info(calendar, known)
                if info.default:
                    return calendar, info
            raise NotFound(f"{self.label} has no calendar to write to.")
        path, _ = self._own(calendar_id)
        for calendar in known:
            if urlsplit(calendar.url).path == path:
                return calendar, self._info(calendar, known)
        raise NotFound(f"{self.label} has no calendar {calendar_id[:120]!r}.")

    # -- reading ---------------------------------------------------------------------------

    async def events(self, start: dt.datetime, end: dt.datetime, zone: ZoneInfo) -> Listing:
        async with self._door() as dav:
            known = await self._calendars(dav)
            chosen = [c for c in known if self._read(c)]
            results = await asyncio.gather(
                *(self._listing(dav, c, known, start, end, zone) for c in chosen),
                return_exceptions=True,
            )
        events: list[Event] = []
        unreadable: list[str] = []
        truncated = False
        for calendar, result in zip(chosen, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, AuthFailed | DoorUnreachable):
                    raise _translated(result)
                if not isinstance(result, CalDavError | Refused):
                    raise result
                unreadable.append(calendar.name)
                continue
            found, capped = result
            events.extend(found)
            truncated = truncated or capped
        events.sort(key=lambda e: _sort_key(e.start, zone))
        if len(events) > MAX_INSTANCES:
            events, truncated = events[:MAX_INSTANCES], True
        return Listing(events, truncated, tuple(unreadable))

    async def _listing(
        self,
        dav: CalDav,
        calendar: DavCalendar,
        known: list[DavCalendar],
        start: dt.datetime,
        end: dt.datetime,
        zone: ZoneInfo,
    ) -> tuple[list[Event], bool]:
        info = self._info(calendar, known)
        objects = await dav.events(calendar.url, start, end)
        found: list[Event] = []
        capped = False
        for number, obj in enumerate(objects, 1):
            if number % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # parsing is CPU: let other accounts' answers in
            instances, more = self.parsed.instances(obj, start, end, zone,
                                                    MAX_INSTANCES - len(found))
            found.extend(self._event(info, obj, o) for o in instances)
            if more or len(found) >= MAX_INSTANCES:
                capped = capped or more
                if len(found) >= MAX_INSTANCES:
                    capped = True
                    break
        return found, capped

    def _event(self, info: CalendarInfo, obj: DavObject, occurrence: ical.Occurrence) -> Event:
        path = urlsplit(obj.url).path
        return Event(
            id=self._qualified(path, occurrence.recurrence_id),
            calendar=info,
            title=occurrence.title,
            start=occurrence.start,
            end=occurrence.end,
            version=_version(obj, occurrence),
            description=occurrence.description,
            location=occurrence.location,
            series_id=self._qualified(path) if occurrence.recurrence_id else None,
            status=occurrence.status,
            busy=occurrence.busy,
            attendees=occurrence.attendees,
        )

    async def event(self, calendar_id: str, event_id: str) -> Event:
        async with self._door() as dav:
            return await self._current(dav, event_id, ZoneInfo("UTC"))

    async def _current(self, dav: CalDav, event_id: str, zone: ZoneInfo) -> Event:
        path, recurrence = self._own(event_id)
        calendar = await self._owning(dav, path)
        obj = await self._get(dav, calendar, path)
        return self._from_object(calendar, obj, recurrence, zone)

    def _from_object(
        self, calendar: tuple[DavCalendar, CalendarInfo], obj: DavObject, recurrence: str | None,
        zone: ZoneInfo,
    ) -> Event:
        parsed = ical.parse(obj.ics)
        masters = [c for c in parsed.walk("VEVENT") if c.get("RECURRENCE-ID") is None]
        uid = str((masters or parsed.walk("VEVENT") or [{}])[0].get("UID", ""))
        if recurrence is None:
            component = ical.find_component(parsed, uid, None)
            if component is None:
                raise NotFound("The event is no longer on the server.")
            series = {uid} if component.get("RRULE") or component.get("RDATE") else set()
            occurrence = ical._occurrence(component, series, zone)
            return self._event(calendar[1], obj, replace(occurrence, recurrence_id=None))
        found = ical.instance(parsed, uid, recurrence, zone)
        if found is None:
            raise NotFound("That occurrence is no longer on the calendar (cancelled).")
        return self._event(calendar[1], obj, replace(found, recurrence_id=recurrence))

    async def _owning(self, dav: CalDav, object_path: str) -> tuple[DavCalendar, CalendarInfo]:
        known = await self._calendars(dav)
        parent = object_path.rsplit("/", 1)[0] + "/"
        for calendar in known:
            if urlsplit(calendar.url).path == parent:
                return calendar, self._info(calendar, known)
        raise NotFound(f"The event is not in a calendar of {self.label}.")

    async def _get(self, dav: CalDav, calendar: tuple[DavCalendar, CalendarInfo], path: str
                   ) -> DavObject:
        url = dav.door.resolve(calendar[0].url, path)
        try:
            return await dav.get(url)
        except CalDavError as exc:
            if "HTTP 404" in str(exc) or "HTTP 410" in str(exc):
                raise NotFound("The event is no longer on the server.") from None
            raise

    # -- writing ---------------------------------------------------------------------------

    async def create(self, calendar_id: str, event: NewEvent, zone: ZoneInfo) -> Created:
        async with self._door() as dav:
            calendar, info = await self._calendar(dav, calendar_id)
            if not calendar.writable:
                raise ReadOnly(f"The calendar {info.name!r} of {self.label} is read-only.")
            collection = urlsplit(calendar.url).path
            uid = ical.stable_uid(collection, event.title, event.start, event.end)
            url = dav.door.resolve(calendar.url, f"{collection}{uid.split('@')[0]}.ics")
            body = ical.new_object(
                uid, event.title, event.start, event.end, zone,
                description=event.description, location=event.location,
            )
            try:
                await dav.put(url, body, etag=None)
                created = True
            except PreconditionFailed:
                created = False  # the same request made before: that event stands
            obj = await dav.get(url)
            made = self._from_object((calendar, info), obj, None, zone)
            return Created(made, created=created, existing=not created)

    async def update(
        self, calendar_id: str, event_id: str, change: EventChange, version: str, zone: ZoneInfo
    ) -> Event:
        async with self._door() as dav:
            path, recurrence = self._own(event_id)
            calendar = await self._owning(dav, path)
            if not calendar[0].writable:
                raise ReadOnly(f"The calendar {calendar[1].name!r} of {self.label} is read-only.")
            obj = await self._get(dav, calendar, path)
            if version and self._version_now(calendar, obj, recurrence, zone) != version:
                raise self._changed(calendar, obj, recurrence, zone)
            parsed = ical.parse(obj.ics)
            uid = _uid(parsed)
            ical.edit(
                parsed, uid, recurrence, zone, title=change.title, start=change.start,
                end=change.end, description=change.description, location=change.location,
            )
            try:
                await dav.put(obj.url, parsed.to_ical().decode("utf-8"), etag=obj.etag)
            except PreconditionFailed:
                fresh = await self._get(dav, calendar, path)
                raise self._changed(calendar, fresh, recurrence, zone) from None
            fresh = await self._get(dav, calendar, path)
            return self._from_object(calendar, fresh, recurrence, zone)

    async def delete(self, calendar_id: str, event_id: str, version: str) -> bool:
        zone = ZoneInfo("UTC")
        async with self._door() as dav:
            path, recurrence = self._own(event_id)
            calendar = await self._owning(dav, path)
            if not calendar[0].writable:
                raise ReadOnly(f"The calendar {calendar[1].name!r} of {self.label} is read-only.")
            try:
                obj = await self._get(dav, calendar, path)
            except NotFound:
                return False
            if version and self._version_now(calendar, obj, recurrence, zone) != version:
                raise self._changed(calendar, obj, recurrence, zone)
            try:
                if recurrence is None:
                    await dav.delete(obj.url, etag=obj.etag)
                else:
                    parsed = ical.parse(obj.ics)
                    ical.cancel_instance(parsed, _uid(parsed), recurrence, zone)
                    await dav.put(obj.url, parsed.to_ical().decode("utf-8"), etag=obj.etag)
            except PreconditionFailed:
                fresh = await self._get(dav, calendar, path)
                raise self._changed(calendar, fresh, recurrence, zone) from None
            return True

    def _version_now(
        self, calendar: tuple[DavCalendar, CalendarInfo], obj: DavObject, recurrence: str | None,
        zone: ZoneInfo,
    ) -> str | None:
        try:
            return self._from_object(calendar, obj, recurrence, zone).version
        except NotFound:
            return None

    def _changed(
        self, calendar: tuple[DavCalendar, CalendarInfo], obj: DavObject, recurrence: str | None,
        zone: ZoneInfo,
    ) -> Changed:
        try:
            current: Event | None = self._from_object(calendar, obj, recurrence, zone)
        except NotFound:
            current = None
        return Changed(
            "The event was changed on the server since it was read (on another device?); "
            "nothing was written. This is how it is now.",
            current,
        )

    # -- the door ----------------------------------------------------------------------------

    def _door(self) -> _Session:
        return _Session(self._open)


class _Session:
    """A door for one call; CalDAV errors become the contract's one-sentence errors."""

    def __init__(self, open_door: DoorFactory) -> None:
        self._open = open_door
        self._door: Door | None = None

    async def __aenter__(self) -> CalDav:
        self._door = self._open()
        return CalDav(self._door)

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        assert self._door is not None
        await self._door.aclose()
        if exc is not None and not isinstance(exc, ProviderError):
            translated = _translated(exc)
            if translated is not exc:
                raise translated from None


class PasswordRefused(ProviderError):
    """The server refused the stored user name or password (changed or revoked)."""


def _translated(exc: BaseException) -> BaseException:
    if isinstance(exc, AuthFailed):
        return PasswordRefused(f"{exc} Add the account again on the Connections page.")
    if isinstance(exc, DoorUnreachable):
        return Unreachable(str(exc))
    if isinstance(exc, CalDavError | Refused):
        return ProviderError(str(exc))
    return exc


def _version(obj: DavObject, occurrence: ical.Occurrence) -> str:
    """A whole event's version is its ETag. One instance of a series has its own: the
    object's ETag changes when any instance does, so an instance's version is a digest of
    what it says now — a change to another instance leaves it, a phone's change to it (or
    to the whole series) does not. The write itself still sends the object's ETag."""
    if occurrence.recurrence_id is None:
        return obj.etag or ""
    fields = (occurrence.title, _utc(occurrence.start), _utc(occurrence.end),
              occurrence.description,
              occurrence.location, occurrence.attendees, occurrence.status, occurrence.busy)
    return "i:" + hashlib.sha256(repr(fields).encode()).hexdigest()[:24]


def _utc(value: ical.When) -> str:
    return (value.astimezone(dt.UTC) if isinstance(value, dt.datetime) else value).isoformat()


def _uid(parsed: object) -> str:
    for component in parsed.walk("VEVENT"):  # type: ignore[attr-defined]
        return str(component.get("UID", ""))
    raise NotFound("The event is no longer on the server.")


def _sort_key(value: ical.When, zone: ZoneInfo) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.combine(value, dt.time.min, zone)


Opener = Callable[[], Awaitable[Door]]

"""iCalendar objects: expansion in the person's zone, and the small edits Panager makes.

Expansion is `recurring-ical-events` over `icalendar` (RRULE, RDATE, EXDATE,
overridden instances by RECURRENCE-ID, VTIMEZONE, all-day events); nothing here
computes a recurrence. Floating times (no zone) are read in the person's zone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import recurring_ical_events

from panager.providers.caldav.door import CalDavError

PRODID = "-//Panager//CalDAV//EN"
Component = Any  # icalendar's components: their properties' declared types are a wide union
When = dt.date | dt.datetime


@dataclass(frozen=True)
class Occurrence:
    """One instance of one VEVENT, times in the person's zone."""

    uid: str
    recurrence_id: str | None  # set for an instance of a series: its RECURRENCE-ID, UTC text
    title: str
    start: When
    end: When
    description: str | None
    location: str | None
    attendees: tuple[str, ...]
    busy: bool
    status: str


def parse(ics: str) -> Component:
    try:
        return icalendar.Calendar.from_ical(ics)
    except (ValueError, KeyError, IndexError) as exc:
        raise CalDavError("The calendar server sent an event that could not be read.") from exc


def rid_text(value: When) -> str:
    """A RECURRENCE-ID as the id carries it: 20261012T070000Z, or 20261020 for a date."""
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return value.strftime("%Y%m%d")


def rid_value(text: str) -> When:
    if "T" in text:
        return dt.datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    return dt.datetime.strptime(text, "%Y%m%d").date()


def _in_zone(value: When, zone: ZoneInfo) -> When:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=zone) if value.tzinfo is None else value.astimezone(zone)
    return value


def _end_of(component: Component, start: When) -> When:
    if component.get("DTEND") is not None:
        end: When = component["DTEND"].dt
        return end
    if component.get("DURATION") is not None:
        return start + component["DURATION"].dt
    return start + dt.timedelta(days=1) if not isinstance(start, dt.datetime) else start


def _series_uids(calendar: Component) -> set[str]:
    """UIDs that recur: a master with RRULE/RDATE, or any overridden instance."""
    found: set[str] = set()
    for event in calendar.walk("VEVENT"):
        if event.get("RRULE") or event.get("RDATE") or event.get("RECURRENCE-ID"):
            found.add(str(event.get("UID", "")))
    return found


def _text(component: Component, name: str) -> str | None:
    value = component.get(name)
    return str(value) if value is not None and str(value).strip() else None


def attendees_of(component: Component) -> tuple[str, ...]:
    raw = component.get("ATTENDEE")
    values = raw if isinstance(raw, list) else [raw] if raw is not None else []
    out = []
    for value in values:
        text = str(value)
        out.append(text[7:] if text.lower().startswith("mailto:") else text)
    return tuple(out)


def occurrences(
    calendar: Component, start: dt.datetime, end: dt.datetime, zone: ZoneInfo, cap: int
) -> tuple[list[Occurrence], bool]:
    """The instances overlapping [start, end), at most `cap`, and whether there were more."""
    series = _series_uids(calendar)
    try:
        query = recurring_ical_events.of(calendar, components=["VEVENT"])
        found = list(itertools.islice(_between(query, start, end), cap + 1))
    except (ValueError, TypeError, KeyError) as exc:
        raise CalDavError("The calendar server sent a repeating event that could not be read.") \
            from exc
    out = [_occurrence(component, series, zone) for component in found[:cap]]
    return out, len(found) > cap


def _between(query: object, start: dt.datetime, end: dt.datetime) -> Iterator[Component]:
    """Instances overlapping [start, end) in time order, a window at a time, so a dense rule
    over a long range stops at the cap without expanding the rest (`after` is far slower)."""
    seen: set[tuple[str, str]] = set()
    lo, window = start, dt.timedelta(days=7)
    while lo < end:
        hi = min(end, lo + window)
        batch = query.between(lo, hi)  # type: ignore[attr-defined]
        batch.sort(key=lambda c: _moment(c["DTSTART"].dt, start))
        for component in batch:
            key = (str(component.get("UID", "")), str(_moment(component["DTSTART"].dt, start)))
            if key not in seen:
                seen.add(key)
                yield component
        lo, window = hi, window * 2


def _moment(value: When, like: dt.datetime) -> dt.datetime:
    moment = value if isinstance(value, dt.datetime) else dt.datetime.combine(
        value, dt.time.min, like.tzinfo
    )
    return moment.replace(tzinfo=like.tzinfo) if moment.tzinfo is None else moment


def _occurrence(component: Component, series: set[str], zone: ZoneInfo) -> Occurrence:
    uid = str(component.get("UID", ""))
    start = _in_zone(component["DTSTART"].dt, zone)
    end = _in_zone(_end_of(component, component["DTSTART"].dt), zone)
    rid = component.get("RECURRENCE-ID")
    recurrence = rid_text(_utc_naive_guard(rid.dt, zone)) if uid in series and rid else None
    transparent = str(component.get("TRANSP", "OPAQUE")).upper() == "TRANSPARENT"
    status = str(component.get("STATUS", "CONFIRMED")).lower()
    return Occurrence(
        uid=uid,
        recurrence_id=recurrence,
        title=_text(component, "SUMMARY") or "(no title)",
        start=start,
        end=end,
        description=_text(component, "DESCRIPTION"),
        location=_text(component, "LOCATION"),
        attendees=attendees_of(component),
        busy=not transparent,
        status="tentative" if status == "tentative" else "confirmed",
    )


def _utc_naive_guard(value: When, zone: ZoneInfo) -> When:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=zone)
    return value


# -- writing ------------------------------------------------------------------------------------


def stable_uid(calendar_path: str, title: str, start: When, end: When) -> str:
    """The same create asked twice (a retry, a replay) makes the same UID: one event."""
    raw = f"{calendar_path}\n{title}\n{start.isoformat()}\n{end.isoformat()}".encode()
    return hashlib.sha256(raw).hexdigest()[:32] + "@panager"


def _put_time(component: Component, name: str, value: When, zone: ZoneInfo) -> None:
    if name in component:
        del component[name]
    if isinstance(value, dt.datetime):
        component.add(name, value.astimezone(zone))
    else:
        component.add(name, value)


def new_object(
    uid: str,
    title: str,
    start: When,
    end: When,
    zone: ZoneInfo,
    *,
    description: str | None = None,
    location: str | None = None,
    now: dt.datetime | None = None,
) -> str:
    calendar = icalendar.Calendar()
    calendar.add("prodid", PRODID)
    calendar.add("version", "2.0")
    event = icalendar.Event()
    event.add("uid", uid)
    event.add("dtstamp", (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC))
    event.add("summary", title)
    _put_time(event, "DTSTART", start, zone)
    _put_time(event, "DTEND", end, zone)
    if description:
        event.add("description", description)
    if location:
        event.add("location", location)
    calendar.add_component(event)
    _add_zones(calendar)
    return calendar.to_ical().decode("utf-8")


def _add_zones(calendar: Component) -> None:
    # a zone icalendar cannot describe keeps its TZID alone (servers know IANA names)
    with contextlib.suppress(ValueError, KeyError, AttributeError):
        calendar.add_missing_timezones()


def find_component(
    calendar: Component, uid: str, recurrence: str | None
) -> Component | None:
    """The master (recurrence None) or the override for `recurrence`, if present."""
    for event in calendar.walk("VEVENT"):
        if str(event.get("UID", "")) != uid:
            continue
        rid = event.get("RECURRENCE-ID")
        if recurrence is None and rid is None:
            return event
        if recurrence is not None and rid is not None and rid_text(rid.dt) == recurrence:
            return event
    return None


def instance(
    calendar: Component, uid: str, recurrence: str, zone: ZoneInfo
) -> Occurrence | None:
    """One instance of a series as the object holds it now (None: cancelled or absent)."""
    value = rid_value(recurrence)
    lo = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time.min, zone)
    series = _series_uids(calendar)
    override = find_component(calendar, uid, recurrence)
    if override is not None:
        return _occurrence(override, series, zone)
    query = recurring_ical_events.of(calendar, components=["VEVENT"])
    for component in query.between(lo - dt.timedelta(days=1), lo + dt.timedelta(days=2)):
        rid = component.get("RECURRENCE-ID")
        if str(component.get("UID", "")) == uid and rid is not None and (
            rid_text(_utc_naive_guard(rid.dt, zone)) == recurrence
        ):
            return _occurrence(component, series, zone)
    return None


def _new_override(
    calendar: Component, uid: str, recurrence: str, zone: ZoneInfo
) -> Component:
    """An overriding VEVENT for one instance of a series (its RECURRENCE-ID in the master's
    zone), copied from the master at the instance's times, added to `calendar`."""
    current = instance(calendar, uid, recurrence, zone)
    master = find_component(calendar, uid, None)
    if current is None or master is None:
        raise CalDavError("That occurrence is no longer in the series.")
    target: Component = icalendar.Event()
    for name in ("UID", "SUMMARY", "DESCRIPTION", "LOCATION", "TRANSP", "STATUS"):
        if master.get(name) is not None:
            target.add(name, master[name])
    target.add("dtstamp", dt.datetime.now(dt.UTC))
    attendees = master.get("ATTENDEE")
    for attendee in attendees if isinstance(attendees, list) else (
        [attendees] if attendees is not None else []
    ):
        target.add("attendee", attendee)
    master_start = master["DTSTART"].dt
    rid = rid_value(recurrence)
    if isinstance(rid, dt.datetime) and isinstance(master_start, dt.datetime):
        if master_start.tzinfo is not None:
            target.add("recurrence-id", rid.astimezone(master_start.tzinfo))
        else:
            target.add("recurrence-id", rid.astimezone(zone).replace(tzinfo=None))
    else:
        target.add("recurrence-id", rid)
    _put_time(target, "DTSTART", current.start, zone)
    _put_time(target, "DTEND", current.end, zone)
    calendar.add_component(target)
    return target


def edit(
    calendar: Component,
    uid: str,
    recurrence: str | None,
    zone: ZoneInfo,
    *,
    title: str | None,
    start: When | None,
    end: When | None,
    description: str | None,
    location: str | None,
) -> None:
    """Change the master, or one instance (an override is made for it when needed)."""
    target = find_component(calendar, uid, recurrence)
    if target is None and recurrence is not None:
        target = _new_override(calendar, uid, recurrence, zone)
    if target is None:
        raise CalDavError("The event is no longer on the server.")
    old_start = target["DTSTART"].dt
    old_end = _end_of(target, old_start)
    if start is not None and end is None:
        end = start + (old_end - old_start)  # a move keeps the length
    if title is not None:
        _replace(target, "SUMMARY", title)
    if description is not None:
        _replace(target, "DESCRIPTION", description)
    if location is not None:
        _replace(target, "LOCATION", location)
    if start is not None:
        _put_time(target, "DTSTART", start, zone)
    if end is not None:
        if "DURATION" in target:
            del target["DURATION"]
        _put_time(target, "DTEND", end, zone)
    if "SEQUENCE" in target:
        sequence = int(target["SEQUENCE"]) + 1
        del target["SEQUENCE"]
        target.add("sequence", sequence)
    _replace(target, "DTSTAMP", dt.datetime.now(dt.UTC))
    _add_zones(calendar)


def cancel_instance(
    calendar: Component, uid: str, recurrence: str, zone: ZoneInfo
) -> None:
    """Remove one instance of a series: an EXDATE on the master, any override dropped."""
    master = find_component(calendar, uid, None)
    if master is None:
        raise CalDavError("The series is no longer on the server.")
    override = find_component(calendar, uid, recurrence)
    if override is not None:
        calendar.subcomponents.remove(override)
    rid = rid_value(recurrence)
    master_start = master["DTSTART"].dt
    if isinstance(rid, dt.datetime) and isinstance(master_start, dt.datetime):
        value: When = (
            rid.astimezone(master_start.tzinfo)
            if master_start.tzinfo is not None
            else rid.astimezone(zone).replace(tzinfo=None)
        )
    else:
        value = rid
    master.add("exdate", value)


def _replace(component: Component, name: str, value: object) -> None:
    if name in component:
        del component[name]
    component.add(name, value)

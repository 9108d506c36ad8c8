"""CalDAV calendars against two real servers (Radicale and Xandikos): reading with time
ranges, recurring events written by another client expanded in the person's zone, the
expansion cap. Writes, versions and series edits: the provider contract suite
(tests/providers/), which runs on both servers too."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from panager.providers.caldav import ical
from panager.providers.caldav.calendar import MAX_INSTANCES, CalDavCalendar, Choice
from panager.providers.caldav.door import Door, Login
from panager.services.web.guard import AddressGuard, AllowList

pytestmark = pytest.mark.timeout(60)

BERLIN = ZoneInfo("Europe/Berlin")
SERVERS = ["radicale", "xandikos"]
_counter = itertools.count()

VTIMEZONE = """BEGIN:VTIMEZONE
TZID:Europe/Berlin
BEGIN:STANDARD
DTSTART:19701025T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:19700329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
END:DAYLIGHT
END:VTIMEZONE
"""


def ics(*events: str, zone: bool = False) -> str:
    text = "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Phone//EN\n"
    text += VTIMEZONE if zone else ""
    for event in events:
        text += "BEGIN:VEVENT\nDTSTAMP:20260101T000000Z\n" + event.strip() + "\nEND:VEVENT\n"
    return (text + "END:VCALENDAR\n").replace("\n", "\r\n")


def guard() -> AddressGuard:
    return AddressGuard(allow=AllowList.parse(["127.0.0.1"]))


@pytest.fixture(params=SERVERS)
def account(request, caldav_servers):
    """A fresh calendar on one server and the CalDAV calendar of its account."""
    server = caldav_servers[request.param]
    slug = f"t{next(_counter)}"
    url = server.make_calendar("alice", slug, f"Family {slug}")
    path = url.split(server.url, 1)[1]

    def door() -> Door:
        return Door(server.url + "/", Login("alice", server.users["alice"]), guard())

    calendar = CalDavCalendar("1", f"alice @ {request.param}", door,
                              Choice(read=frozenset({path}), default=path))
    return server, url, calendar


async def test_lists_events_in_range_with_calendar_named(account) -> None:
    server, url, calendar = account
    server.put("alice", url, "dentist", ics(
        "UID:dentist\nDTSTART:20261203T100000Z\nDTEND:20261203T110000Z\nSUMMARY:Dentist\n"
        "LOCATION:Main St 5\nATTENDEE:mailto:bob@example.org"))
    server.put("alice", url, "later", ics(
        "UID:later\nDTSTART:20270110T100000Z\nDTEND:20270110T110000Z\nSUMMARY:Later"))

    listing = await calendar.events(
        dt.datetime(2026, 12, 1, tzinfo=BERLIN), dt.datetime(2026, 12, 8, tzinfo=BERLIN), BERLIN
    )

    assert [e.title for e in listing.events] == ["Dentist"]
    event = listing.events[0]
    assert event.start == dt.datetime(2026, 12, 3, 11, 0, tzinfo=BERLIN)
    assert event.calendar.name.startswith("Family t") and event.calendar.provider == "caldav"
    assert event.location == "Main St 5" and event.attendees == ("bob@example.org",)
    assert event.id.startswith("caldav:1:/") and event.version
    assert not listing.truncated


async def test_weekly_series_across_dst_with_moved_and_cancelled_instances(account) -> None:
    server, url, calendar = account
    server.put("alice", url, "standup", ics(
        "UID:standup\nDTSTART;TZID=Europe/Berlin:20261012T090000\n"
        "DTEND;TZID=Europe/Berlin:20261012T093000\nRRULE:FREQ=WEEKLY;COUNT=4\n"
        "EXDATE;TZID=Europe/Berlin:20261026T090000\nSUMMARY:Standup",
        "UID:standup\nRECURRENCE-ID;TZID=Europe/Berlin:20261019T090000\n"
        "DTSTART;TZID=Europe/Berlin:20261020T140000\nDTEND;TZID=Europe/Berlin:20261020T143000\n"
        "SUMMARY:Standup (moved)",
        zone=True))
    server.put("alice", url, "holiday", ics(
        "UID:holiday\nDTSTART;VALUE=DATE:20261030\nDTEND;VALUE=DATE:20261031\nSUMMARY:Holiday"))

    listing = await calendar.events(
        dt.datetime(2026, 10, 1, tzinfo=BERLIN), dt.datetime(2026, 11, 30, tzinfo=BERLIN), BERLIN
    )

    got = [(e.title, e.start) for e in listing.events]
    assert got == [
        ("Standup", dt.datetime(2026, 10, 12, 9, 0, tzinfo=BERLIN)),
        ("Standup (moved)", dt.datetime(2026, 10, 20, 14, 0, tzinfo=BERLIN)),
        ("Holiday", dt.date(2026, 10, 30)),
        ("Standup", dt.datetime(2026, 11, 2, 9, 0, tzinfo=BERLIN)),  # after the DST change
    ]
    assert listing.events[0].start.utcoffset() == dt.timedelta(hours=2)
    assert listing.events[3].start.utcoffset() == dt.timedelta(hours=1)
    assert listing.events[2].all_day and listing.events[2].end == dt.date(2026, 10, 31)
    assert all(e.recurring for e in listing.events if e.title.startswith("Standup"))


async def test_expansion_is_capped_and_says_so(account, monkeypatch) -> None:
    server, url, calendar = account
    monkeypatch.setattr("panager.providers.caldav.calendar.MAX_INSTANCES", 20)
    server.put("alice", url, "often", ics(
        "UID:often\nDTSTART:20260101T080000Z\nDTEND:20260101T080500Z\n"
        "RRULE:FREQ=DAILY\nSUMMARY:Tick"))

    listing = await calendar.events(
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 3, 1, tzinfo=dt.UTC), BERLIN
    )

    assert len(listing.events) == 20 and listing.truncated
    assert listing.events[-1].start == dt.datetime(2026, 1, 20, 9, 0, tzinfo=BERLIN)


def test_expansion_cap_is_two_thousand_instances() -> None:
    calendar = ical.parse(ics(
        "UID:often\nDTSTART:20260101T000000Z\nDTEND:20260101T000500Z\n"
        "RRULE:FREQ=HOURLY\nSUMMARY:Tick"))
    start, end = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    found, more = ical.occurrences(calendar, start, end, BERLIN, MAX_INSTANCES)
    assert MAX_INSTANCES == 2_000 and len(found) == 2_000 and more
    found, more = ical.occurrences(calendar, start, start + dt.timedelta(days=2), BERLIN,
                                   MAX_INSTANCES)
    assert len(found) == 48 and not more


async def test_a_changed_event_is_never_served_from_the_parse_cache(account) -> None:
    server, url, calendar = account
    server.put("alice", url, "lunch", ics(
        "UID:lunch\nDTSTART:20261203T120000Z\nDTEND:20261203T130000Z\nSUMMARY:Lunch"))
    server.put("alice", url, "standup", ics(
        "UID:standup\nDTSTART:20261201T090000Z\nDTEND:20261201T091500Z\n"
        "RRULE:FREQ=WEEKLY\nSUMMARY:Standup"))
    week = (dt.datetime(2026, 12, 1, tzinfo=BERLIN), dt.datetime(2026, 12, 8, tzinfo=BERLIN))

    def shown(listing) -> list[tuple[str, str]]:
        return [(e.title, e.start.isoformat()) for e in listing.events]

    first = await calendar.events(*week, BERLIN)
    assert calendar.parsed.parsed == 2 and calendar.parsed.expanded == 2
    again = await calendar.events(*week, BERLIN)  # another turn: nothing parsed again
    assert shown(again) == shown(first) and len(first.events) == 2
    assert (calendar.parsed.parsed, calendar.parsed.expanded) == (2, 2)

    etag = server.put("alice", url, "lunch", ics(  # changed on a phone
        "UID:lunch\nDTSTART:20261204T120000Z\nDTEND:20261204T130000Z\nSUMMARY:Lunch moved"))
    changed = await calendar.events(*week, BERLIN)
    lunch = next(e for e in changed.events if e.title.startswith("Lunch"))
    assert lunch.title == "Lunch moved" and lunch.start.day == 4
    assert etag and lunch.version == etag  # the version is the new ETag
    assert calendar.parsed.parsed == 3  # only the changed object was parsed again


def test_the_parse_cache_checks_the_text_too_and_is_bounded() -> None:
    from panager.providers.caldav.dav import DavObject
    from panager.providers.caldav.parsed import ParsedCaches, ParsedObjects

    week = (dt.datetime(2026, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 8, tzinfo=dt.UTC))
    cache = ParsedObjects(objects=2)

    def listed(path: str, title: str, etag: str = '"same"') -> str:
        obj = DavObject(path, etag, ics(
            f"UID:{path}\nDTSTART:20261203T120000Z\nDTEND:20261203T130000Z\nSUMMARY:{title}"))
        [instance], more = cache.instances(obj, *week, BERLIN, MAX_INSTANCES)
        assert not more
        return instance.title

    assert listed("/a", "Before") == "Before"
    # a server that keeps the ETag of a changed object: the text differs, so parsed again
    assert listed("/a", "After") == "After" and cache.parsed == 2
    assert listed("/a", "After") == "After" and cache.parsed == 2
    listed("/b", "B")
    listed("/c", "C")  # the third object: the least recently listed (/a) goes
    assert len(cache) == 2 and listed("/a", "After") == "After" and cache.parsed == 5

    caches = ParsedCaches(accounts=2)
    assert caches.of(1, "k") is caches.of(1, "k") and caches.of(2, "k") is not caches.of(1, "k")
    kept = caches.of(1, "k")
    kept.instances(DavObject("/a", None, ics(
        "UID:a\nDTSTART:20261203T120000Z\nDTEND:20261203T130000Z\nSUMMARY:A")), *week, BERLIN, 9)
    caches.drop(1, "k")  # the account was removed
    assert caches.of(1, "k") is not kept and len(kept) == 0

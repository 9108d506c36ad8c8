"""What only the in-memory provider has so far (contacts), and the seam's own helpers."""

from __future__ import annotations

from datetime import date, datetime

from panager.providers.memory.provider import MemoryProvider
from panager.services.accounts.provider import (
    CALENDAR,
    Account,
    CalendarInfo,
    Contact,
    Event,
    account_of,
    busy,
    qualify,
    split_id,
)
from tests.providers.drivers import ZONE


async def test_contacts_search_by_name_address_or_number():
    memory = MemoryProvider()
    account = memory.add_account(7, "me@memory")
    memory.book(7, account).contacts += [
        Contact(qualify("memory", "a"), "Ann Lee", "me@memory", ("ann@example.org",)),
        Contact(qualify("memory", "b"), "Bob Stone", "me@memory", (), ("+82 10 1234",)),
    ]
    contacts = memory.contacts(7, account)
    assert [c.name for c in await contacts.search("ann")] == ["Ann Lee"]
    assert [c.name for c in await contacts.search("example.org")] == ["Ann Lee"]
    assert [c.name for c in await contacts.search("1234")] == ["Bob Stone"]
    assert await contacts.search("  ") == []
    assert len(await contacts.search("o", limit=1)) == 1
    reader = memory.add_account(7, "feed", capabilities=CALENDAR)
    assert memory.contacts(7, reader) is None and memory.tasks(7, reader) is None


def _event(start, end, *, free: bool = False) -> Event:
    cal = CalendarInfo("c", "Home", "me", "memory")
    return Event("e", cal, "x", start, end, "1", busy=not free)


def test_busy_merges_overlaps_drops_free_time_and_clips_to_the_range():
    at = lambda d, h: datetime(2026, 11, d, h, tzinfo=ZONE)  # noqa: E731
    events = [
        _event(at(24, 9), at(24, 10)),
        _event(at(24, 9, ), at(24, 11)),
        _event(at(24, 10), at(24, 12)),
        _event(at(24, 13), at(24, 14), free=True),
        _event(at(24, 22), at(25, 2)),
        _event(date(2026, 11, 26), date(2026, 11, 27)),
    ]
    assert busy(events, at(24, 8), at(25, 1), ZONE) == [
        (at(24, 9), at(24, 12)), (at(24, 22), at(25, 1))]
    assert busy(events, at(26, 0), at(27, 0), ZONE) == [(at(26, 0), at(27, 0))]


def test_ids_qualified_unqualified_and_their_accounts():
    assert split_id("caldav:k1:/cal/x.ics", ("caldav",)) == ("caldav", "k1:/cal/x.ics")
    assert split_id("pn5abc") == ("google", "pn5abc")
    assert split_id("google:pn5abc") == ("google", "pn5abc")
    assert split_id("unknown:thing") == ("google", "unknown:thing")
    one, two = (Account("caldav", k, k, CALENDAR) for k in ("k1", "k2"))
    assert account_of("k2:/cal/x.ics", [one, two]) is two
    assert account_of("k3:/x", [one, two]) is None
    google = Account("google", "", "a@example.com", CALENDAR)
    assert account_of("pn5abc", [google]) is google

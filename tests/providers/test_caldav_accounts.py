"""CalDAV accounts: checked at once, sealed, any number per person, chosen calendars,
rate-limited checks, removal with what was cached."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from panager.clock import FakeClock
from panager.db.pool import open_pool
from panager.providers.caldav.provider import CHECKS_PER_HOUR, CalDavProvider
from panager.services.accounts.connections import Connections
from panager.services.accounts.provider import ProviderError
from panager.services.accounts.sealing import Sealer
from panager.services.web.guard import AddressGuard, AllowList

pytestmark = pytest.mark.timeout(60)
KEY = "test-secret-key-for-caldav"


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=4)
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO users (id, username, timezone) VALUES (1, 'ana', 'Europe/Berlin'), "
            "(2, 'ben', 'UTC')"
        )
    yield pool
    await pool.close()


def provider(pool, clock=None) -> CalDavProvider:
    guard = AddressGuard(allow=AllowList.parse(["127.0.0.1"]))
    clock = clock or FakeClock()
    return CalDavProvider(pool, Connections(pool, clock, Sealer(KEY)), guard, clock=clock)


async def test_connect_checks_at_once_seals_and_lists(pool, caldav_servers) -> None:
    radicale, xandikos = caldav_servers["radicale"], caldav_servers["xandikos"]
    radicale.make_calendar("alice", "acc-home", "Home")
    radicale.make_calendar("alice", "acc-work", "Work")
    caldav = provider(pool)

    account_id, said = await caldav.add(1, {
        "url": radicale.url + "/", "username": "alice", "password": radicale.users["alice"]})
    n = len([c for c in (await caldav.stored(1))[0].calendars])
    assert said == f"connected: {n} calendars" and n >= 2
    second, _ = await caldav.add(1, {
        "url": xandikos.url, "username": "alice", "password": xandikos.users["alice"]})
    assert second != account_id

    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT secret_ciphertext, settings::text AS settings FROM provider_accounts "
            "WHERE user_id = 1 AND provider = 'caldav' ORDER BY id"
        )).fetchall()
    assert len(rows) == 2
    assert all(radicale.users["alice"] not in r["secret_ciphertext"] + r["settings"]
               for r in rows)
    assert [a.label for a in await caldav.accounts(1)] == ["alice @ 127.0.0.1"] * 2
    assert await caldav.accounts(2) == []  # another person sees none of them


async def test_wrong_password_is_one_line_and_nothing_stored(pool, caldav_servers) -> None:
    server = caldav_servers["radicale"]
    caldav = provider(pool)
    with pytest.raises(ProviderError) as refused:
        await caldav.add(1, {"url": server.url, "username": "alice", "password": "nope"})
    assert str(refused.value) == (
        f"The calendar server at {server.url} refused the user name or password."
    )
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) AS n FROM provider_accounts")).fetchone()
        assert row["n"] == 0


async def test_checks_are_limited_to_ten_an_hour(pool, caldav_servers) -> None:
    server = caldav_servers["radicale"]
    clock = FakeClock()
    caldav = provider(pool, clock)
    wrong = {"url": server.url, "username": "alice", "password": "guess"}
    for _ in range(CHECKS_PER_HOUR):
        with pytest.raises(ProviderError, match="refused the user name"):
            await caldav.add(1, wrong)
    before = len(server.requests)
    with pytest.raises(ProviderError, match="Too many connection checks"):
        await caldav.add(1, {**wrong, "password": server.users["alice"]})
    assert len(server.requests) == before  # the server was not asked
    with pytest.raises(ProviderError, match="refused the user name"):
        await caldav.add(2, wrong)  # another person has their own limit
    clock.advance(hours=1, seconds=1)
    await caldav.add(1, {**wrong, "password": server.users["alice"]})


async def test_chosen_calendars_and_default_then_removal(pool, caldav_servers) -> None:
    server = caldav_servers["radicale"]
    home = server.make_calendar("alice", "pick-home", "Home")
    work = server.make_calendar("alice", "pick-work", "Work")
    server.put("alice", home, "h1", _ics("h1", "Dinner"))
    server.put("alice", work, "w1", _ics("w1", "Standup"))
    caldav = provider(pool)
    account_id, _ = await caldav.add(1, {
        "url": server.url, "username": "alice", "password": server.users["alice"]})
    home_path = home.split(server.url)[1]
    assert await caldav.choose(1, account_id, frozenset({home_path}), home_path)
    assert not await caldav.choose(2, account_id, None, None)  # not ben's account

    account = (await caldav.accounts(1))[0]
    calendar = caldav.calendar(1, account)
    assert calendar is not None
    listing = await calendar.events(dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
                                    dt.datetime(2026, 12, 31, tzinfo=dt.UTC), ZoneInfo("UTC"))
    assert [(e.title, e.calendar.name, e.calendar.default) for e in listing.events] == [
        ("Dinner", "Home", True)]

    assert not await caldav.remove(2, account_id)  # not ben's account
    assert await caldav.remove(1, account_id)
    async with pool.connection() as conn:  # the cached calendar names went with the row
        row = await (await conn.execute("SELECT count(*) AS n FROM provider_accounts")).fetchone()
    assert row["n"] == 0 and await caldav.accounts(1) == []


def _ics(uid: str, title: str) -> str:
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:{uid}\r\nDTSTAMP:20260101T000000Z\r\nDTSTART:20261210T180000Z\r\n"
        f"DTEND:20261210T190000Z\r\nSUMMARY:{title}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )


async def test_a_password_changed_at_the_server_marks_the_account(pool, caldav_servers) -> None:
    server = caldav_servers["radicale"]
    who = server.new_user("moved")
    server.make_calendar(who, "home", "Home")
    caldav = provider(pool)
    await caldav.add(1, {"url": server.url, "username": who, "password": server.users[who]})
    [account] = await caldav.accounts(1)
    assert account.connected
    server.change_password(who, "a-new-password")

    calendar = caldav.calendar(1, account)
    with pytest.raises(ProviderError) as refused:
        await calendar.events(dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
                              dt.datetime(2026, 12, 2, tzinfo=dt.UTC), ZoneInfo("UTC"))
    assert str(refused.value) == (
        f"The calendar server at {server.url} refused the user name or password. "
        "Add the account again on the Connections page."
    )
    assert [a.connected for a in await caldav.accounts(1)] == [False]

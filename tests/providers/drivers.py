"""Drivers: how the contract suite reaches one provider (tests/providers/contract.py).

A driver gives the suite the provider's `Calendar` and `Tasks` for one connected
account (and its `Mailbox`, for a provider with mail), and plays what the seam cannot:
seeding a weekly series, a message arriving, another device changing an event or a
draft behind Panager's back, a server that stops answering. Adding a provider to the
suite is one driver class here and one entry in `DRIVERS`; the mail cases run on every
entry whose provider declares the mail capability (`MAIL_DRIVERS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.providers.google.provider import GoogleProvider
from panager.providers.memory.provider import MemoryCalendar, MemoryProvider
from panager.services.accounts.provider import (
    CALENDAR,
    MAIL,
    TASKS,
    Account,
    Calendar,
    Event,
    Mailbox,
    NewEvent,
    Tasks,
)
from tests.fakes.google_server import FakeGoogle
from tests.google_helpers import ALICE, start_harness

ZONE = ZoneInfo("Europe/Berlin")  # DST ends 2026-10-25 03:00 → 02:00


class Driver(Protocol):
    """One provider, one connected account, as the suite drives it."""

    name: str
    calendar: Calendar
    tasks: Tasks | None

    async def add_weekly(self, title: str, first: datetime, minutes: int, count: int) -> None:
        """Seed a weekly series (first occurrence `first`, local in ZONE) on the default
        calendar, as another client would."""

    async def touch(self, event: Event, title: str) -> None:
        """Change an event's title at the server behind Panager's back (a phone)."""

    def stalled(self, timeout: float) -> Any:
        """An async context: the server stops answering; yields a Calendar that gives up
        after `timeout` seconds."""


class MailDriver(Driver, Protocol):
    """A provider with mail, as the suite's mail cases drive it."""

    async def mailbox(self, timeout: float | None = None) -> Mailbox:
        """The account's mailbox (giving up after `timeout` seconds when given)."""

    async def deliver(self, sender: str, subject: str, text: str) -> None:
        """A message arriving from outside."""

    async def edit_draft(self, draft_id: str, body: str) -> None:
        """The person changing a draft elsewhere (in the provider's own app)."""

    async def sent(self) -> list[tuple[str, str, str]]:
        """(to, subject, body) of every message sent, oldest first."""

    def stalled(self, timeout: float) -> Any:
        """As `Driver.stalled`; mail calls wait too."""


class MemoryDriver:
    """The in-memory provider."""

    name = "memory"

    def __init__(self) -> None:
        self.provider = MemoryProvider()
        self.account = self.provider.add_account(1, "alice@memory", self.provider.capabilities)
        calendar = self.provider.calendar(1, self.account)
        assert calendar is not None
        self.calendar: MemoryCalendar = calendar
        self.tasks = self.provider.tasks(1, self.account)
        store = self.provider.book(1, self.account).mail
        assert store is not None
        self.mail = store

    async def mailbox(self, timeout: float | None = None) -> Mailbox:
        """The account's mailbox (the provider's `timeout` is set by `stalled`)."""
        box = self.provider.mailbox(1, self.account)
        assert box is not None
        return box

    async def deliver(self, sender: str, subject: str, text: str) -> None:
        """Straight into the store."""
        self.mail.deliver(sender, subject, text)

    async def edit_draft(self, draft_id: str, body: str) -> None:
        """The stored draft's body changes."""
        self.mail.drafts[draft_id]["body"] = body

    async def sent(self) -> list[tuple[str, str, str]]:
        """What the store sent."""
        return [(m.to, m.subject, m.text) for m in self.mail.sent]

    async def add_weekly(self, title: str, first: datetime, minutes: int, count: int) -> None:
        """A series with an RRULE in ZONE."""
        event = NewEvent(title, first, first + timedelta(minutes=minutes))
        self.calendar.add_series("primary", event, f"FREQ=WEEKLY;COUNT={count}", ZONE)

    async def touch(self, event: Event, title: str) -> None:
        """A new title and version."""
        self.calendar.book.events[event.id] = replace(
            event, title=title, version=self.provider.version()
        )

    @asynccontextmanager
    async def stalled(self, timeout: float) -> AsyncIterator[Calendar]:
        """Calls wait for an event that is set only on the way out."""
        self.provider.stalled = asyncio.Event()
        timeout_was, self.provider.timeout = self.provider.timeout, timeout
        try:
            yield self.calendar
        finally:
            self.provider.stalled.set()
            self.provider.timeout = timeout_was


class GoogleDriver:
    """Google through the fake (tests/fakes/google_server.py), driven by the real client."""

    name = "google"

    def __init__(self, harness: Any, fake: FakeGoogle, user: Any) -> None:
        self.fake, self.harness, self.user = fake, harness, user
        self.provider = GoogleProvider(harness.app.deps.google)
        self.calendar, self.tasks = self._parts(self.provider)
        self._mail_linked = False

    async def mailbox(self, timeout: float | None = None) -> Mailbox:
        """Gmail, linked on first use as /connect google mail does."""
        if not self._mail_linked:
            context = CommandContext(user=self.user, assistant=self.harness.app.assistant)
            reply = await dispatch(context, "/connect google mail")
            assert reply.ok and reply.link, reply.text
            consent = await self.harness.consent(reply.link["url"])
            status, _ = await self.harness.follow(
                await self.fake.authorize(consent, account=ALICE))
            assert status == 200
            await self.harness.recorder.wait(2)
            self._mail_linked = True
        provider = self.provider if timeout is None else GoogleProvider(
            self.harness.app.deps.google, timeout)
        box = provider.mailbox(self.user.id, Account("google", "", ALICE, MAIL))
        assert box is not None
        return box

    async def deliver(self, sender: str, subject: str, text: str) -> None:
        """A message delivered to the fake Gmail."""
        self.fake.add_mail(ALICE, sender=sender, subject=subject, text=text)

    async def edit_draft(self, draft_id: str, body: str) -> None:
        """The person editing the draft in Gmail."""
        self.fake.edit_draft(ALICE, draft_id, body=body)

    async def sent(self) -> list[tuple[str, str, str]]:
        """What the fake Gmail sent."""
        return [(str(m["To"]), str(m["Subject"]), m.get_content().strip())
                for m in self.fake.sent_messages(ALICE)]

    def _parts(self, provider: GoogleProvider) -> tuple[Calendar, Tasks | None]:
        linked = Account("google", "", ALICE, CALENDAR | TASKS)
        calendar = provider.calendar(self.user.id, linked)
        assert calendar is not None
        return calendar, provider.tasks(self.user.id, linked)

    async def add_weekly(self, title: str, first: datetime, minutes: int, count: int) -> None:
        """A recurring event seeded in the fake, in ZONE."""
        local = first.astimezone(ZONE).replace(tzinfo=None)
        self.fake.add_event(
            ALICE, summary=title,
            start={"dateTime": local.isoformat(), "timeZone": ZONE.key},
            end={"dateTime": (local + timedelta(minutes=minutes)).isoformat(),
                 "timeZone": ZONE.key},
            recurrence=[f"RRULE:FREQ=WEEKLY;COUNT={count}"],
        )

    async def touch(self, event: Event, title: str) -> None:
        """Another client's write: the fake's event gets a new title and etag."""
        stored = self.fake.calendars[ALICE]["primary"]["events"][event.id]
        stored.update(summary=title, etag=self.fake._etag())

    @asynccontextmanager
    async def stalled(self, timeout: float) -> AsyncIterator[Calendar]:
        """The fake holds every API call until released on the way out."""
        self.fake.stalled = asyncio.Event()
        calendar, _ = self._parts(GoogleProvider(self.harness.app.deps.google, timeout))
        try:
            yield calendar
        finally:
            self.fake.stalled.set()
            self.fake.stalled = None


@pytest.fixture
async def google_driver(make_app: Callable, monkeypatch: Any) -> AsyncIterator[GoogleDriver]:
    """A linked Google account (the fake) for the local user."""
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    async with FakeGoogle() as fake:
        harness = await start_harness(make_app, fake)
        user = await harness.app.local_user()
        status, _ = await harness.link(user)
        assert status == 200
        await harness.recorder.wait()
        yield GoogleDriver(harness, fake, user)
        await harness.server.stop()


@pytest.fixture
def memory_driver() -> MemoryDriver:
    """An in-memory account (no database needed)."""
    return MemoryDriver()


# One fixture per provider the suite runs on (CalDAV: its driver over Radicale/Xandikos).
DRIVERS: dict[str, str] = {
    "memory": "memory_driver",
    "google": "google_driver",
}
# What each provider declares it can do: the mail cases run where it includes mail.
DECLARED = {"memory": MemoryProvider.capabilities, "google": GoogleProvider.capabilities}
MAIL_DRIVERS = {name: fixture for name, fixture in DRIVERS.items() if DECLARED[name] >= MAIL}


class CalDavDriver:
    """A CalDAV account on a real server (Radicale or Xandikos, tests/caldav_servers.py),
    one fresh calendar per test, every request through the guarded door."""

    tasks = None  # CalDAV tasks (VTODO) are not part of the CalDAV provider yet
    capabilities = CALENDAR  # what the CalDAV provider declares (no TASKS)

    def __init__(self, server: Any, slug: str) -> None:
        from panager.providers.caldav.calendar import CalDavCalendar, Choice
        from panager.providers.caldav.door import Door, Login
        from panager.services.web.guard import AddressGuard, AllowList

        self.name = "caldav"  # the provider's name (DRIVERS names the server too)
        self.server = server
        self.url = server.make_calendar("alice", slug, f"Contract {slug}")
        self.path = self.url.split(server.url, 1)[1]
        guard = AddressGuard(allow=AllowList.parse(["127.0.0.1"]))
        login = Login("alice", server.users["alice"])

        def door(url: str = server.url + "/", deadline: float = 15.0) -> Any:
            return lambda: Door(url, login, guard, deadline=deadline)

        self._door = door
        self._make = lambda opener: CalDavCalendar(
            "k1", f"alice @ {server.name}", opener,
            Choice(read=frozenset({self.path}), default=self.path))
        self.calendar = self._make(door())

    async def add_weekly(self, title: str, first: datetime, minutes: int, count: int) -> None:
        """A series PUT by another client, with its VTIMEZONE, in ZONE."""
        local = first.astimezone(ZONE)
        fmt = "%Y%m%dT%H%M%S"
        uid = f"weekly-{title.lower()}"
        self.server.put("alice", self.url, uid, _vcalendar(
            f"UID:{uid}\nDTSTAMP:20261001T000000Z\n"
            f"DTSTART;TZID={ZONE.key}:{local:{fmt}}\n"
            f"DTEND;TZID={ZONE.key}:{local + timedelta(minutes=minutes):{fmt}}\n"
            f"RRULE:FREQ=WEEKLY;COUNT={count}\nSUMMARY:{title}"))

    async def touch(self, event: Event, title: str) -> None:
        """A phone's edit: the object rewritten with a new title (and so a new ETag)."""
        href = event.id.split(":", 2)[2].split("#")[0]
        with self.server.client("alice") as http:
            body = http.get(self.server.url + href).text
            changed = "\r\n".join(
                f"SUMMARY:{title}" if line.startswith("SUMMARY") else line
                for line in body.replace("\r\n", "\n").split("\n"))
            answer = http.put(self.server.url + href, content=changed.encode(),
                              headers={"Content-Type": "text/calendar"})
            assert answer.status_code in (200, 201, 204), answer.status_code

    @asynccontextmanager
    async def stalled(self, timeout: float) -> AsyncIterator[Calendar]:
        """A server that accepts connections and never answers."""
        release = asyncio.Event()

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await release.wait()
            writer.close()

        silent = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        try:
            yield self._make(self._door(f"http://127.0.0.1:{port}/", timeout))
        finally:
            release.set()
            silent.close()
            await silent.wait_closed()


def _vcalendar(event: str) -> str:
    body = ("BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Phone//EN\nBEGIN:VEVENT\n" + event.strip()
            + "\nEND:VEVENT\nEND:VCALENDAR\n")
    return body.replace("\n", "\r\n")


_slugs = iter(range(1_000_000))


@pytest.fixture
def caldav_radicale_driver(caldav_servers: Any) -> CalDavDriver:
    """A CalDAV account on Radicale (started once per session per worker)."""
    return CalDavDriver(caldav_servers["radicale"], f"contract{next(_slugs)}")


@pytest.fixture
def caldav_xandikos_driver(caldav_servers: Any) -> CalDavDriver:
    """A CalDAV account on Xandikos (started once per session per worker)."""
    return CalDavDriver(caldav_servers["xandikos"], f"contract{next(_slugs)}")


DRIVERS["caldav-radicale"] = "caldav_radicale_driver"
DRIVERS["caldav-xandikos"] = "caldav_xandikos_driver"

"""The CalDAV provider: accounts typed on the Connections page, checked at once, sealed.

- Any number of accounts per person, kept by the seam's form-connect store
  (`services/accounts/connections.py`, table `provider_accounts`): the app password
  sealed with PANAGER_SECRET_KEY; as plain settings the server's address (a full CalDAV
  URL, or just `https://host/` for servers with `/.well-known/caldav`, or the server an
  address's DNS SRV record named: discovery.py), the user name,
  a pinned certificate fingerprint for a server with its own certificate, the calendars
  the last check found (names as the server sent them), which are read and which one
  new events go to. Removing the account deletes the row, and with it all of that.
- `add` checks before anything is stored: discovery and the calendar list through the
  door (`door.py`); a wrong password is one line and nothing is kept. At most 10 checks
  an hour per person (`caldav_checks`), so Panager is no password-guessing or
  port-scanning proxy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from psycopg.types.json import Jsonb

from panager.clock import Clock, SystemClock
from panager.db.pool import Pool
from panager.providers.caldav.calendar import NAME, CalDavCalendar, Choice, PasswordRefused
from panager.providers.caldav.dav import CalDav, DavCalendar
from panager.providers.caldav.discovery import DnsSettings, address_domain, starting_points
from panager.providers.caldav.door import (
    CalDavError,
    CertificateUnknown,
    Door,
    Login,
    normalise_fingerprint,
    peer_fingerprint,
)
from panager.providers.caldav.parsed import ParsedCaches
from panager.services.accounts.connections import Connections, StoredAccount
from panager.services.accounts.provider import (
    CALENDAR,
    Account,
    Calendar,
    CalendarInfo,
    Capability,
    Checked,
    Contacts,
    Created,
    Event,
    EventChange,
    Field,
    FormConnect,
    Listing,
    Mailbox,
    NewEvent,
    OAuthConnect,
    ProviderError,
    Tasks,
)
from panager.services.web.guard import AddressGuard, Dialer, Refused, direct, parse_url

T = TypeVar("T")
CHECKS_PER_HOUR = 10
TITLE = "CalDAV"
NOT_CONNECTED = (
    "No CalDAV calendar is connected: add one on the web page's Connections page "
    "(/connect caldav gives its link)."
)
FIELDS = (
    Field("url", "Server address",
          hint="https://caldav.example.com/, the full CalDAV URL, or your address "
               "(anna@example.org) when your domain publishes CalDAV DNS records"),
    Field("username", "User name"),
    Field("password", "App password", secret=True,
          hint="An app-specific password (iCloud, Fastmail), not your main one"),
    Field("fingerprint", "Certificate fingerprint (SHA-256)", required=False,
          hint="Only for a server with its own certificate: the fingerprint shown after a "
               "first try"),
)

COUNT_CHECKS = "SELECT count(*) AS n FROM caldav_checks WHERE user_id = %s AND at > %s"
ADD_CHECK = "INSERT INTO caldav_checks (user_id, at) VALUES (%s, %s)"
FORGET_CHECKS = "DELETE FROM caldav_checks WHERE user_id = %s AND at <= %s"
CHECK_LOCK = "SELECT pg_advisory_xact_lock(hashtext('caldav_checks'), %s)"
SETTINGS = """
UPDATE provider_accounts SET settings = settings || %s, updated_at = %s
 WHERE user_id = %s AND provider = %s AND key = %s RETURNING key
"""
CLEAR_DEFAULT = """
UPDATE provider_accounts SET settings = settings || '{"default": null}', updated_at = %s
 WHERE user_id = %s AND provider = %s AND key <> %s AND settings->>'default' IS NOT NULL
"""


@dataclass(frozen=True)
class StoredCalendar:
    path: str
    name: str  # the server's text: escape it where it is shown
    writable: bool


@dataclass(frozen=True)
class CalDavAccount:
    """One CalDAV account as the Connections page shows it (no password)."""

    key: str
    url: str
    username: str
    label: str
    fingerprint: str | None
    read: frozenset[str] | None
    default: str | None
    calendars: tuple[StoredCalendar, ...]
    connected: bool = True


class NeedsFingerprint(ProviderError):
    """The server's certificate is not publicly trusted; `fingerprint` is what it showed."""

    def __init__(self, message: str, fingerprint: str | None) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class _NoCalDav(ProviderError):
    """The server answered, but not as a CalDAV server with a principal and calendars."""


def _account(stored: StoredAccount) -> CalDavAccount:
    settings = dict(stored.settings)
    read = settings.get("read")
    return CalDavAccount(
        key=stored.key,
        url=str(settings.get("url", "")),
        username=str(settings.get("username", "")),
        label=stored.label,
        fingerprint=settings.get("fingerprint") or None,
        read=frozenset(read) if read is not None else None,
        default=settings.get("default") or None,
        calendars=tuple(
            StoredCalendar(str(c.get("path")), str(c.get("name")), bool(c.get("writable")))
            for c in settings.get("calendars", [])
        ),
        connected=stored.connected,
    )


class CalDavProvider:
    """CalDAV accounts: add (checked), list, choose calendars, remove; their calendars."""

    name: str = NAME
    title: str = TITLE
    connect: OAuthConnect | FormConnect = FormConnect(FIELDS)
    capabilities: frozenset[Capability] = CALENDAR

    def __init__(
        self,
        pool: Pool,
        connections: Connections,
        guard: AddressGuard,
        *,
        clock: Clock | None = None,
        dial: Dialer = direct,
        deadline: float = 15.0,
        dns: DnsSettings = DnsSettings(),
    ) -> None:
        self.pool = pool
        self.dns = dns
        self.parsed = ParsedCaches()  # parsed calendar objects, per account (parsed.py)
        self.connections = connections
        self.guard = guard
        self.clock = clock or SystemClock()
        self.dial = dial
        self.deadline = deadline

    # -- accounts ---------------------------------------------------------------------------

    async def stored(self, user_id: int) -> list[CalDavAccount]:
        return [_account(a) for a in await self.connections.accounts(user_id, NAME)]

    async def accounts(self, user_id: int) -> list[Account]:
        return [
            Account(NAME, a.key, a.label, CALENDAR, a.connected,
                    default=bool(dict(a.settings).get("default")))
            for a in await self.connections.accounts(user_id, NAME)
        ]

    async def require(self, user_id: int, capability: Capability) -> None:
        raise ProviderError(NOT_CONNECTED)

    def calendar(self, user_id: int, account: Account) -> Calendar | None:
        return _LazyCalendar(self, user_id, account)

    def tasks(self, user_id: int, account: Account) -> Tasks | None:
        return None

    def contacts(self, user_id: int, account: Account) -> Contacts | None:
        return None

    def mailbox(self, user_id: int, account: Account) -> Mailbox | None:
        return None

    async def open_calendar(self, user_id: int, key: str) -> CalDavCalendar:
        """The account's calendar with its password unsealed (only here, for the call)."""
        for stored in await self.connections.accounts(user_id, NAME):
            if stored.key != key:
                continue
            secret = self.connections.secret(stored)
            if secret is None:
                raise ProviderError(
                    f"The password of {stored.label} cannot be opened (PANAGER_SECRET_KEY "
                    "changed?); remove the account and add it again."
                )
            account = _account(stored)
            login = Login(account.username, secret.get("password", ""))
            return CalDavCalendar(
                key, account.label, self.door_factory(account.url, login, account.fingerprint),
                Choice(read=account.read, default=account.default),
                self.parsed.of(user_id, key),
            )
        raise ProviderError("That CalDAV account is no longer connected.")

    def door_factory(self, url: str, login: Login, fingerprint: str | None
                     ) -> Callable[[], Door]:
        def open_door() -> Door:
            return Door(url, login, self.guard, fingerprint=fingerprint, dial=self.dial,
                        deadline=self.deadline)
        return open_door

    # -- connecting -------------------------------------------------------------------------

    async def check(self, user_id: int, values: Mapping[str, str]) -> Checked:
        """`FormProvider.check`: try the values (rate-limited); nothing is stored."""
        entered, login, fingerprint = _values(values)
        url, calendars = await self._discover(user_id, entered, login, fingerprint)
        return Checked(
            label=_label(url, login.username),
            summary=_summary(calendars),
            capabilities=CALENDAR,
            settings=_settings(url, login.username, fingerprint, calendars),
        )

    async def add(self, user_id: int, values: Mapping[str, str]) -> tuple[str, str]:
        """Check the values, then store the account sealed: (its key, "connected: …")."""
        entered, login, fingerprint = _values(values)
        url, calendars = await self._discover(user_id, entered, login, fingerprint)
        for existing in await self.stored(user_id):
            if existing.url == url and existing.username == login.username:
                await self.remove(user_id, existing.key)  # typed again
        stored = await self.connections.add(
            user_id, NAME, _label(url, login.username), {"password": login.password},
            _settings(url, login.username, fingerprint, calendars),
        )
        return stored.key, f"connected: {_summary(calendars)}"

    async def _discover(
        self, user_id: int, entered: str, login: Login, fingerprint: str | None
    ) -> tuple[str, list[DavCalendar]]:
        """The URL that answered and its calendars: the URL typed, or for an address the
        server its SRV record names, then its domain's `/.well-known/caldav`."""
        await self._count_check(user_id)
        try:
            points = await starting_points(entered, self.guard, self.dns)
        except (CalDavError, Refused) as exc:
            raise ProviderError(str(exc)) from None
        for number, (url, _record) in enumerate(points, 1):
            try:
                calendars = await self._calendars_at(url, login, fingerprint)
            except _NoCalDav:
                if number < len(points):
                    continue  # the SRV server is no CalDAV server: the domain's well-known
                raise
            return url, calendars
        raise ProviderError(f"No calendar server was found for {entered}.")  # pragma: no cover

    async def _calendars_at(
        self, url: str, login: Login, fingerprint: str | None
    ) -> list[DavCalendar]:
        door = Door(url, login, self.guard, fingerprint=fingerprint, dial=self.dial,
                    deadline=self.deadline)
        try:
            async with door:
                calendars = await CalDav(door).calendars()
        except CertificateUnknown:
            shown = await peer_fingerprint(url, self.guard, self.dial)
            raise NeedsFingerprint(
                "The server's certificate is not signed by a known authority. If this is your "
                "own server, compare its fingerprint with the one shown and pin it"
                + (f": {shown}." if shown else "."),
                shown,
            ) from None
        except (CalDavError, Refused) as exc:
            # only "no CalDAV here" lets another starting point be tried; a refusal, a wrong
            # password or a time-out is the answer
            raise (_NoCalDav if type(exc) is CalDavError else ProviderError)(str(exc)) from None
        if not calendars:
            raise ProviderError(f"{door.where} answered, but shows no calendars for this user.")
        return calendars

    async def _count_check(self, user_id: int) -> None:
        now = self.clock.now()
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(CHECK_LOCK, (user_id,))
            await conn.execute(FORGET_CHECKS, (user_id, now - dt.timedelta(days=1)))
            row = await (await conn.execute(
                COUNT_CHECKS, (user_id, now - dt.timedelta(hours=1))
            )).fetchone()
            if row is not None and row["n"] >= CHECKS_PER_HOUR:
                raise ProviderError(
                    f"Too many connection checks (at most {CHECKS_PER_HOUR} an hour); try "
                    "again later."
                )
            await conn.execute(ADD_CHECK, (user_id, now))

    async def choose(
        self, user_id: int, key: str, read: frozenset[str] | None, default: str | None
    ) -> bool:
        """Which calendars are read (None: all) and the default for new events: the
        person's one default, so choosing it here clears it on their other accounts."""
        change = {"read": sorted(read) if read is not None else None, "default": default}
        async with self.pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(
                SETTINGS, (Jsonb(change), self.clock.now(), user_id, NAME, key)
            )).fetchone()
            if row is not None and default is not None:
                await conn.execute(CLEAR_DEFAULT, (self.clock.now(), user_id, NAME, key))
        return row is not None

    async def remove(self, user_id: int, key: str) -> bool:
        """Delete the account: its sealed password and its cached calendars go with it."""
        self.forget(user_id, key)
        return await self.connections.remove(user_id, NAME, key)

    def forget(self, user_id: int, key: str) -> None:
        """`FormProvider.forget`: the account's parsed objects leave this process."""
        self.parsed.drop(user_id, key)


class _LazyCalendar:
    """A CalDAV account's Calendar, opened (password unsealed) at its first call."""

    def __init__(self, provider: CalDavProvider, user_id: int, account: Account) -> None:
        self._provider = provider
        self._user_id = user_id
        self._account = account
        self._open: CalDavCalendar | None = None

    async def _calendar(self) -> CalDavCalendar:
        if self._open is None:
            self._open = await self._provider.open_calendar(self._user_id, self._account.key)
        return self._open

    async def _call(self, work: Callable[[CalDavCalendar], Awaitable[T]]) -> T:
        try:
            return await work(await self._calendar())
        except PasswordRefused:  # shown as such on the Connections page until added again
            await self._provider.connections.mark(self._user_id, NAME, self._account.key, False)
            raise

    async def calendars(self) -> list[CalendarInfo]:
        return await self._call(lambda c: c.calendars())

    async def events(self, start: dt.datetime, end: dt.datetime, zone: ZoneInfo) -> Listing:
        return await self._call(lambda c: c.events(start, end, zone))

    async def event(self, calendar_id: str, event_id: str) -> Event:
        return await self._call(lambda c: c.event(calendar_id, event_id))

    async def create(self, calendar_id: str, event: NewEvent, zone: ZoneInfo) -> Created:
        return await self._call(lambda c: c.create(calendar_id, event, zone))

    async def update(
        self, calendar_id: str, event_id: str, change: EventChange, version: str, zone: ZoneInfo
    ) -> Event:
        return await self._call(lambda c: c.update(calendar_id, event_id, change, version, zone))

    async def delete(self, calendar_id: str, event_id: str, version: str) -> bool:
        return await self._call(lambda c: c.delete(calendar_id, event_id, version))


def _values(values: Mapping[str, str]) -> tuple[str, Login, str | None]:
    url = (values.get("url") or "").strip()
    username = (values.get("username") or "").strip()
    password = values.get("password") or ""
    if not url or not username or not password:
        raise ProviderError("Enter the server address, the user name and the app password.")
    domain = address_domain(url)
    if domain is not None:
        url = url.lower()  # anna@example.org: found through DNS (discovery.py)
    else:
        if "://" not in url:
            url = "https://" + url
        try:
            url = str(parse_url(url))
        except Refused as exc:
            raise ProviderError(str(exc)) from None
    raw_fingerprint = (values.get("fingerprint") or "").strip()
    try:
        fingerprint = normalise_fingerprint(raw_fingerprint) if raw_fingerprint else None
    except ValueError as exc:
        raise ProviderError(str(exc)) from None
    return url, Login(username, password), fingerprint


def _settings(url: str, username: str, fingerprint: str | None,
              calendars: list[DavCalendar]) -> dict[str, Any]:
    return {
        "url": url,
        "username": username,
        "fingerprint": fingerprint,
        "calendars": [
            {"path": urlsplit(c.url).path, "name": c.name[:200], "writable": c.writable}
            for c in calendars
        ],
        "read": None,
        "default": None,
    }


def _label(url: str, username: str) -> str:
    host = urlsplit(url).hostname or url
    return f"{username} @ {host}"


def _summary(calendars: list[DavCalendar]) -> str:
    count = len(calendars)
    return f"{count} calendar{'s' if count != 1 else ''}"

"""The CalDAV provider: accounts typed on the Connections page, checked at once, sealed.

- Any number of accounts per person (`caldav_accounts`): the address entered (a full
  CalDAV URL, or just `https://host/` for servers with `/.well-known/caldav`), a user name,
  an app password sealed with PANAGER_SECRET_KEY, and a pinned certificate fingerprint for
  a server with its own certificate.
- `connect` checks before anything is stored: discovery and the calendar list through the
  door (`door.py`); a wrong password is one line and nothing is kept. At most 10 checks an
  hour per person (`caldav_checks`), so Panager is no password-guessing or port-scanning
  proxy.
- The person picks which calendars are read and which one new events go to
  (`choose`); `remove` deletes the account and the calendar names cached with it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from panager.clock import Clock, SystemClock
from panager.db.pool import Pool
from panager.providers.caldav.calendar import NAME, CalDavCalendar, Choice
from panager.providers.caldav.dav import CalDav, DavCalendar
from panager.providers.caldav.door import (
    CalDavError,
    CertificateUnknown,
    Door,
    Login,
    normalise_fingerprint,
    peer_fingerprint,
)
from panager.services.accounts.provider import (
    CALENDAR,
    Account,
    Calendar,
    Checked,
    Contacts,
    Field,
    FormConnect,
    Mailbox,
    ProviderError,
    Tasks,
)
from panager.services.google.sealing import Sealer
from panager.services.web.guard import AddressGuard, Dialer, Refused, direct, parse_url

CHECKS_PER_HOUR = 10
TITLE = "CalDAV"
FIELDS = (
    Field("url", "Server address", hint="https://caldav.example.com/ — or the full CalDAV URL"),
    Field("username", "User name"),
    Field("password", "App password", secret=True,
          hint="An app-specific password (iCloud, Fastmail), not your main one"),
    Field("fingerprint", "Certificate fingerprint (SHA-256)", required=False,
          hint="Only for a server with its own certificate: the fingerprint shown after a "
               "first try"),
)

ADD = """
INSERT INTO caldav_accounts (user_id, url, username, password_sealed, fingerprint, label)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, url, username) DO UPDATE
   SET password_sealed = EXCLUDED.password_sealed, fingerprint = EXCLUDED.fingerprint
RETURNING id
"""
ACCOUNTS = """
SELECT id, url, username, password_sealed, fingerprint, label, read_calendars,
       default_calendar
  FROM caldav_accounts WHERE user_id = %s ORDER BY id
"""
CALENDARS = """
SELECT account_id, path, name, writable FROM caldav_calendars
 WHERE user_id = %s ORDER BY account_id, name
"""
CLEAR_CALENDARS = "DELETE FROM caldav_calendars WHERE account_id = %s AND user_id = %s"
ADD_CALENDAR = """
INSERT INTO caldav_calendars (account_id, user_id, path, name, writable) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (account_id, path) DO UPDATE SET name = EXCLUDED.name, writable = EXCLUDED.writable
"""
REMOVE = "DELETE FROM caldav_accounts WHERE id = %s AND user_id = %s RETURNING label"
CHOOSE = """
UPDATE caldav_accounts SET read_calendars = %s, default_calendar = %s
 WHERE id = %s AND user_id = %s RETURNING id
"""
COUNT_CHECKS = "SELECT count(*) AS n FROM caldav_checks WHERE user_id = %s AND at > %s"
ADD_CHECK = "INSERT INTO caldav_checks (user_id, at) VALUES (%s, %s)"
FORGET_CHECKS = "DELETE FROM caldav_checks WHERE user_id = %s AND at <= %s"


@dataclass(frozen=True)
class StoredCalendar:
    path: str
    name: str  # the server's text: escape it where it is shown
    writable: bool


@dataclass(frozen=True)
class StoredAccount:
    """One CalDAV account as the Connections page shows it (no password)."""

    id: int
    url: str
    username: str
    label: str
    fingerprint: str | None
    read: frozenset[str] | None
    default: str | None
    calendars: tuple[StoredCalendar, ...]


class NeedsFingerprint(ProviderError):
    """The server's certificate is not publicly trusted; `fingerprint` is what it showed."""

    def __init__(self, message: str, fingerprint: str | None) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class CalDavProvider:
    """CalDAV accounts: connect, list, choose calendars, remove; their calendars."""

    name = NAME
    title = TITLE
    connect = FormConnect(FIELDS)
    capabilities = CALENDAR

    def __init__(
        self,
        pool: Pool,
        secret_key: str,
        guard: AddressGuard,
        *,
        clock: Clock | None = None,
        dial: Dialer = direct,
        deadline: float = 15.0,
    ) -> None:
        self.pool = pool
        self._sealer = Sealer(secret_key)
        self.guard = guard
        self.clock = clock or SystemClock()
        self.dial = dial
        self.deadline = deadline

    # -- accounts ---------------------------------------------------------------------------

    async def stored(self, user_id: int) -> list[StoredAccount]:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(ACCOUNTS, (user_id,))).fetchall()
            cached = await (await conn.execute(CALENDARS, (user_id,))).fetchall()
        by_account: dict[int, list[StoredCalendar]] = {}
        for row in cached:
            by_account.setdefault(row["account_id"], []).append(
                StoredCalendar(row["path"], row["name"], row["writable"])
            )
        return [
            StoredAccount(
                id=row["id"], url=row["url"], username=row["username"], label=row["label"],
                fingerprint=row["fingerprint"],
                read=frozenset(row["read_calendars"]) if row["read_calendars"] is not None
                else None,
                default=row["default_calendar"],
                calendars=tuple(by_account.get(row["id"], ())),
            )
            for row in rows
        ]

    async def accounts(self, user_id: int) -> list[Account]:
        return [
            Account(NAME, str(a.id), a.label, CALENDAR) for a in await self.stored(user_id)
        ]

    def calendar(self, user_id: int, account: Account) -> Calendar | None:
        return _LazyCalendar(self, user_id, account)

    async def connected(self, user_id: int) -> list[tuple[Account, Calendar]]:
        """`ConnectedCalendars`: every CalDAV account of the person with its calendars."""
        return [(a, _LazyCalendar(self, user_id, a)) for a in await self.accounts(user_id)]

    def tasks(self, user_id: int, account: Account) -> Tasks | None:
        return None

    def contacts(self, user_id: int, account: Account) -> Contacts | None:
        return None

    def mailbox(self, user_id: int, account: Account) -> Mailbox | None:
        return None

    async def open_calendar(self, user_id: int, key: str) -> CalDavCalendar:
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(ACCOUNTS, (user_id,))).fetchall()
        for row in rows:
            if str(row["id"]) == key:
                login = Login(row["username"], self._sealer.open(row["password_sealed"]))
                read = frozenset(row["read_calendars"]) if row["read_calendars"] is not None \
                    else None
                return CalDavCalendar(
                    key, row["label"], self._door_factory(row["url"], login, row["fingerprint"]),
                    Choice(read=read, default=row["default_calendar"]),
                )
        raise ProviderError("That CalDAV account is no longer connected.")

    def _door_factory(self, url: str, login: Login, fingerprint: str | None):  # noqa: ANN202
        def open_door() -> Door:
            return Door(url, login, self.guard, fingerprint=fingerprint, dial=self.dial,
                        deadline=self.deadline)
        return open_door

    # -- connecting -------------------------------------------------------------------------

    async def check(self, user_id: int, values: Mapping[str, str]) -> Checked:
        """Try the values (rate-limited); ProviderError as one line when they do not work."""
        url, login, fingerprint = _values(values)
        calendars = await self._discover(user_id, url, login, fingerprint)
        return Checked(
            label=_label(url, login.username),
            summary=_summary(calendars),
            capabilities=CALENDAR,
            settings={"url": url, "username": login.username, "fingerprint": fingerprint or ""},
        )

    async def add(self, user_id: int, values: Mapping[str, str]) -> tuple[int, str]:
        """Check the values, then store the account sealed: (account id, "connected: …")."""
        url, login, fingerprint = _values(values)
        calendars = await self._discover(user_id, url, login, fingerprint)
        label = _label(url, login.username)
        async with self.pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(ADD, (
                user_id, url, login.username, self._sealer.seal(login.password), fingerprint,
                label,
            ))).fetchone()
            assert row is not None
            await self._cache(conn, row["id"], user_id, calendars)
        return row["id"], f"connected: {_summary(calendars)}"

    async def _cache(self, conn, account_id: int, user_id: int,  # noqa: ANN001
                     calendars: list[DavCalendar]) -> None:
        await conn.execute(CLEAR_CALENDARS, (account_id, user_id))
        for calendar in calendars:
            await conn.execute(ADD_CALENDAR, (
                account_id, user_id, urlsplit(calendar.url).path, calendar.name[:200],
                calendar.writable,
            ))

    async def _discover(
        self, user_id: int, url: str, login: Login, fingerprint: str | None
    ) -> list[DavCalendar]:
        await self._count_check(user_id)
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
            raise ProviderError(str(exc)) from None
        if not calendars:
            raise ProviderError(f"{door.where} answered, but shows no calendars for this user.")
        return calendars

    async def _count_check(self, user_id: int) -> None:
        now = self.clock.now()
        hour_ago = now - dt.timedelta(hours=1)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('caldav_checks'), %s)",
                               (user_id,))
            await conn.execute(FORGET_CHECKS, (user_id, now - dt.timedelta(days=1)))
            row = await (await conn.execute(COUNT_CHECKS, (user_id, hour_ago))).fetchone()
            if row is not None and row["n"] >= CHECKS_PER_HOUR:
                raise ProviderError(
                    f"Too many connection checks (at most {CHECKS_PER_HOUR} an hour); try again "
                    "later."
                )
            await conn.execute(ADD_CHECK, (user_id, now))

    async def refresh(self, user_id: int, account_id: int) -> str:
        """Check a stored account again and cache its calendars (counts as a check)."""
        calendar = await self.open_calendar(user_id, str(account_id))
        await self._count_check(user_id)
        async with calendar._door() as dav:
            found = await dav.calendars()
        async with self.pool.connection() as conn, conn.transaction():
            await self._cache(conn, account_id, user_id, found)
        return f"connected: {_summary(found)}"

    async def choose(
        self, user_id: int, account_id: int, read: frozenset[str] | None, default: str | None
    ) -> bool:
        async with self.pool.connection() as conn:
            row = await (await conn.execute(CHOOSE, (
                sorted(read) if read is not None else None, default, account_id, user_id,
            ))).fetchone()
        return row is not None

    async def remove(self, user_id: int, account_id: int) -> str | None:
        """Delete the account and what was cached with it; its label, None when not found."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(REMOVE, (account_id, user_id))).fetchone()
        return row["label"] if row else None


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

    async def calendars(self):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).calendars()

    async def events(self, start, end, zone):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).events(start, end, zone)

    async def event(self, calendar_id, event_id):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).event(calendar_id, event_id)

    async def create(self, calendar_id, event, zone):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).create(calendar_id, event, zone)

    async def update(self, calendar_id, event_id, change, version, zone):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).update(calendar_id, event_id, change, version, zone)

    async def delete(self, calendar_id, event_id, version):  # type: ignore[no-untyped-def]
        return await (await self._calendar()).delete(calendar_id, event_id, version)


def _values(values: Mapping[str, str]) -> tuple[str, Login, str | None]:
    url = (values.get("url") or "").strip()
    username = (values.get("username") or "").strip()
    password = values.get("password") or ""
    if not url or not username or not password:
        raise ProviderError("Enter the server address, the user name and the app password.")
    if "://" not in url:
        url = "https://" + url
    try:
        parsed = parse_url(url)
    except Refused as exc:
        raise ProviderError(str(exc)) from None
    raw_fingerprint = (values.get("fingerprint") or "").strip()
    try:
        fingerprint = normalise_fingerprint(raw_fingerprint) if raw_fingerprint else None
    except ValueError as exc:
        raise ProviderError(str(exc)) from None
    return str(parsed), Login(username, password), fingerprint


def _label(url: str, username: str) -> str:
    host = urlsplit(url).hostname or url
    return f"{username} @ {host}"


def _summary(calendars: list[DavCalendar]) -> str:
    count = len(calendars)
    return f"{count} calendar{'s' if count != 1 else ''}"

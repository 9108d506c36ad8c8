# Over 400 lines, kept whole: the in-memory calendars, tasks and contacts (mail in
# mailbox.py): a whole provider in one place is what it is there to show.
"""An in-memory provider: calendars, tasks and contacts held in this process.

It shows what a provider is — one package, one registration line — and serves
tests and demos without a server: it passes the same contract suite as
Google's (tests/providers/). Recurring events are stored as one series with
an RRULE in the series' zone (dateutil), expanded per query in wall-clock time
so a weekly 09:00 stays 09:00 across a DST change; a moved occurrence is an
override, a cancelled one an exclusion. `stalled` plays a server that does not
answer: calls wait on it and end as `Unreachable` after `timeout`.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import TypeVar
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

from panager.providers.memory.mailbox import MailStore, MemoryMailbox
from panager.services.accounts.provider import (
    CALENDAR,
    CALL_TIMEOUT,
    MAIL,
    TASKS,
    Account,
    CalendarInfo,
    Capability,
    Changed,
    Checked,
    Contact,
    Created,
    Event,
    EventChange,
    Field,
    FormConnect,
    Listing,
    Mailbox,
    NewEvent,
    NewTask,
    NotFound,
    OAuthConnect,
    ProviderError,
    ReadOnly,
    Task,
    TaskChange,
    TaskListInfo,
    TaskListing,
    qualify,
    split_id,
    within,
)

T = TypeVar("T")
NAME = "memory"
When = date | datetime


@dataclass
class _Series:
    event: Event  # the first occurrence (id: the series id)
    rule: str  # RRULE text
    zone: ZoneInfo
    overrides: dict[str, Event | None] = field(default_factory=dict)  # instance id -> moved/None


@dataclass
class _Book:
    """One account's data."""

    account: Account
    calendars: dict[str, CalendarInfo] = field(default_factory=dict)
    events: dict[str, Event] = field(default_factory=dict)
    series: dict[str, _Series] = field(default_factory=dict)
    made: dict[tuple, str] = field(default_factory=dict)  # create request -> event id
    gone: set[str] = field(default_factory=set)
    tasks: dict[str, Task] = field(default_factory=dict)
    contacts: list[Contact] = field(default_factory=list)
    mail: MailStore | None = None  # with a mail capability


class MemoryProvider:
    """Accounts kept in a dict; `add_account` is what a connect would store."""

    name = NAME
    title = "In-memory"
    capabilities = CALENDAR | TASKS | {Capability.CONTACTS_READ} | MAIL  # the most
    default = CALENDAR | TASKS | {Capability.CONTACTS_READ}  # an account's, unless asked
    connect: OAuthConnect | FormConnect = FormConnect((
        Field("label", "Account name"),
        Field("password", "Password", secret=True, required=False),
    ))

    def __init__(self, timeout: float = CALL_TIMEOUT, password: str = "") -> None:
        self.timeout = timeout
        self.password = password  # what `check` accepts (the "server's" password)
        self.books: dict[int, dict[str, _Book]] = {}
        self.stalled: asyncio.Event | None = None  # set: calls wait until it is set
        self._versions = itertools.count(1)

    def version(self) -> str:
        """A fresh version (each write gets its own)."""
        return f'"{next(self._versions)}"'

    def add_account(
        self, user_id: int, label: str, capabilities: frozenset[Capability] | None = None,
        calendars: tuple[str, ...] = ("Personal",),
    ) -> Account:
        """Connect an account for `user_id` with calendars by name (the first the default)."""
        key = uuid.uuid4().hex[:8]
        account = Account(NAME, key, label, capabilities or self.default)
        book = _Book(account)
        if account.capabilities & MAIL:
            book.mail = MailStore(key, label)
        for index, name in enumerate(calendars):
            ident = qualify(NAME, f"{key}:{name.lower().replace(' ', '-')}")
            book.calendars[ident] = CalendarInfo(ident, name, label, NAME,
                                                 Capability.CALENDAR_WRITE in account.capabilities,
                                                 index == 0)
        self.books.setdefault(user_id, {})[key] = book
        return account

    def book(self, user_id: int, account: Account) -> _Book:
        """The data of one account."""
        return self.books[user_id][account.key]

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's in-memory accounts."""
        return [b.account for b in self.books.get(user_id, {}).values()]

    async def require(self, user_id: int, capability: Capability) -> None:
        """No account with `capability`: one sentence."""
        raise ProviderError("No in-memory account can do that; add one first.")

    def forget(self, user_id: int, key: str) -> None:
        """Nothing is kept outside the account's row."""

    async def check(self, user_id: int, values: Mapping[str, str]) -> Checked:
        """A form connect's check: any non-empty name works."""
        label = (values.get("label") or "").strip()
        if not label:
            raise ProviderError("Give the account a name.")
        if (values.get("password") or "") != self.password:
            raise ProviderError("The server refused this password; nothing was stored.")
        return Checked(label, "connected: 1 calendar", self.default)

    async def reached(self) -> None:
        """Returns once the server "answers" (see `stalled`); `Unreachable` after `timeout`."""

        async def answered() -> None:
            if self.stalled is not None:
                await self.stalled.wait()

        await within("The in-memory server", answered(), self.timeout)

    def calendar(self, user_id: int, account: Account) -> MemoryCalendar | None:
        """The account's calendars."""
        if not account.capabilities & CALENDAR:
            return None
        return MemoryCalendar(self, self.book(user_id, account))

    def tasks(self, user_id: int, account: Account) -> MemoryTasks | None:
        """The account's one task list."""
        if not account.capabilities & TASKS:
            return None
        return MemoryTasks(self, self.book(user_id, account))

    def contacts(self, user_id: int, account: Account) -> MemoryContacts | None:
        """The account's address book."""
        if Capability.CONTACTS_READ not in account.capabilities:
            return None
        return MemoryContacts(self, self.book(user_id, account))

    def mailbox(self, user_id: int, account: Account) -> Mailbox | None:
        """The account's mailbox (mailbox.py), or None without a mail capability."""
        store = self.book(user_id, account).mail
        return MemoryMailbox(self.reached, store) if store is not None else None


class _Part:
    def __init__(self, provider: MemoryProvider, book: _Book) -> None:
        self.provider, self.book = provider, book



class MemoryCalendar(_Part):
    """One in-memory account's calendars."""

    async def calendars(self) -> list[CalendarInfo]:
        """Every calendar of the account."""
        await self.provider.reached()
        return list(self.book.calendars.values())

    def _calendar(self, calendar_id: str) -> CalendarInfo:
        if calendar_id == "primary":
            return next(c for c in self.book.calendars.values() if c.default)
        found = self.book.calendars.get(calendar_id)
        if found is None:
            raise NotFound(f"Unknown calendar_id {calendar_id!r}; use one calendar_list_events "
                           "shows.")
        return found

    def add_series(self, calendar_id: str, event: NewEvent, rule: str, zone: ZoneInfo) -> Event:
        """Seed a recurring event (`rule`: an RRULE such as "FREQ=WEEKLY;COUNT=6")."""
        cal = self._calendar(calendar_id)
        ident = qualify(NAME, f"{self.book.account.key}:{uuid.uuid4().hex[:12]}")
        first = Event(ident, cal, event.title, event.start, event.end, self.provider.version(),
                      event.description, event.location, series_id=ident)
        self.book.series[ident] = _Series(first, rule, zone)
        return first

    def _instances(self, series: _Series, lo: datetime, hi: datetime) -> list[Event]:
        first = series.event
        assert isinstance(first.start, datetime) and isinstance(first.end, datetime)
        start = first.start.astimezone(series.zone).replace(tzinfo=None)
        length = first.end.astimezone(series.zone).replace(tzinfo=None) - start
        rule = rrulestr(series.rule, dtstart=start)
        local = (lo.astimezone(series.zone).replace(tzinfo=None) - length,
                 hi.astimezone(series.zone).replace(tzinfo=None))
        found: list[Event] = []
        for wall in rule.between(local[0], local[1], inc=True):
            ident = f"{first.id}_{wall:%Y%m%dT%H%M%S}"
            if ident in series.overrides:
                moved = series.overrides[ident]
                found += [moved] if moved is not None else []
                continue
            found.append(replace(first, id=ident, start=wall.replace(tzinfo=series.zone),
                                 end=(wall + length).replace(tzinfo=series.zone)))
        return found

    async def events(self, start: datetime, end: datetime, zone: ZoneInfo) -> Listing:
        """Occurrences overlapping [start, end), sorted by start."""
        await self.provider.reached()
        found = [e for e in self.book.events.values() if _overlaps(e, start, end, zone)]
        for series in self.book.series.values():
            found += [e for e in self._instances(series, start - timedelta(days=1), end)
                      if _overlaps(e, start, end, zone)]
        found = list({e.id: e for e in found}.values())
        found.sort(key=lambda e: _instant(e.start, zone))
        return Listing(found)

    def _find(self, event_id: str) -> Event:
        ident = self._raw_id(event_id)
        if ident in self.book.events:
            return self.book.events[ident]
        if ident in self.book.series:
            return self.book.series[ident].event
        master, _, stamp = ident.rpartition("_")
        series = self.book.series.get(master)
        if series is not None and ident in series.overrides:
            moved = series.overrides[ident]
            if moved is not None:
                return moved
        elif series is not None:
            try:
                wall = datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=series.zone)
            except ValueError:
                wall = None
            for event in self._instances(series, wall, wall) if wall else []:
                if event.id == ident:
                    return event
        raise NotFound(f"No event {event_id!r}; use calendar_list_events to see event ids.")

    def _raw_id(self, event_id: str) -> str:
        name, raw = split_id(event_id, (NAME,))
        return qualify(NAME, raw) if name == NAME else event_id

    async def event(self, calendar_id: str, event_id: str) -> Event:
        """One event as held now."""
        await self.provider.reached()
        return self._find(event_id)

    async def create(self, calendar_id: str, event: NewEvent, zone: ZoneInfo) -> Created:
        """Add an event; the same request again finds the one it made."""
        await self.provider.reached()
        cal = self._calendar(calendar_id)
        if not cal.writable:
            raise ReadOnly(f"The calendar {cal.name!r} is read-only.")
        request = (cal.id, event.title, _instant(event.start, zone), _instant(event.end, zone))
        known = self.book.made.get(request)
        if known is not None and known in self.book.events:
            return Created(self.book.events[known], False,
                                                              True)
        ident = known or qualify(NAME, f"{self.book.account.key}:{uuid.uuid4().hex[:12]}")
        made = Event(ident, cal, event.title, event.start, event.end, self.provider.version(),
                     event.description, event.location)
        self.book.events[ident] = made
        self.book.made[request] = ident
        self.book.gone.discard(ident)
        return Created(made, True, known is not None)

    def _check(self, current: Event, version: str) -> None:
        if version and version != current.version:
            raise Changed(f"The event {current.title!r} was changed elsewhere since it was "
                          "read, so nothing was written; here it is as it is now.", current)

    async def update(
        self, calendar_id: str, event_id: str, change: EventChange, version: str, zone: ZoneInfo
    ) -> Event:
        """Change one event (an occurrence alone becomes an override)."""
        await self.provider.reached()
        current = self._find(event_id)
        self._check(current, version)
        if not current.calendar.writable:
            raise ReadOnly(f"The calendar {current.calendar.name!r} is read-only.")
        start, end = current.start, current.end
        if change.start is not None:
            end = change.end if change.end is not None else change.start + (end - start)  # type: ignore[operator]
            start = change.start
        elif change.end is not None:
            end = change.end
        if _instant(end, zone) <= _instant(start, zone):
            raise ProviderError("end must be after start.")
        new = replace(
            current, start=start, end=end, version=self.provider.version(),
            title=current.title if change.title is None else change.title,
            description=current.description if change.description is None else change.description,
            location=current.location if change.location is None else change.location,
        )
        self._store(new)
        return new

    def _store(self, event: Event | None, ident: str = "") -> None:
        key = event.id if event is not None else ident
        if event is not None and key in self.book.series:
            self.book.series[key].event = event
            return
        master = key.rpartition("_")[0]
        if key in self.book.events or master not in self.book.series:
            if event is None:
                self.book.events.pop(key, None)
            else:
                self.book.events[key] = event
            return
        self.book.series[master].overrides[key] = event

    async def delete(self, calendar_id: str, event_id: str, version: str) -> bool:
        """Delete one event (an occurrence alone is cancelled); False when already gone."""
        await self.provider.reached()
        ident = self._raw_id(event_id)
        if ident in self.book.gone:
            return False
        current = self._find(event_id)
        self._check(current, version)
        if ident in self.book.series:
            del self.book.series[ident]
        else:
            self._store(None, ident)
        self.book.gone.add(ident)
        return True


def _instant(value: When, zone: ZoneInfo) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.combine(value, datetime.min.time(), zone)


def _overlaps(event: Event, start: datetime, end: datetime, zone: ZoneInfo) -> bool:
    return _instant(event.start, zone) < end and _instant(event.end, zone) > start


class MemoryTasks(_Part):
    """One in-memory account's task list."""

    async def lists(self) -> list[TaskListInfo]:
        """The one list."""
        await self.provider.reached()
        info = TaskListInfo(qualify(NAME, f"{self.book.account.key}:tasks"), "Tasks",
                            self.book.account.label, NAME, True)
        return [info]

    async def tasks(self, show_completed: bool = False) -> TaskListing:
        """Tasks, newest first; open ones unless `show_completed`."""
        await self.provider.reached()
        found = [t for t in reversed(self.book.tasks.values()) if show_completed or not t.done]
        return TaskListing(found)

    def _find(self, task_id: str) -> Task:
        name, raw = split_id(task_id, (NAME,))
        found = self.book.tasks.get(qualify(NAME, raw)) if name == NAME else None
        if found is None:
            raise NotFound(f"No task {task_id!r}. Use task_list to see task ids.")
        return found

    async def task(self, task_id: str) -> Task:
        """One task."""
        await self.provider.reached()
        return self._find(task_id)

    async def create(self, task: NewTask) -> Task:
        """Add a task."""
        await self.provider.reached()
        ident = qualify(NAME, f"{self.book.account.key}:{uuid.uuid4().hex[:12]}")
        made = Task(ident, task.title, self.book.account.label, task.due, task.notes,
                    version=self.provider.version())
        self.book.tasks[ident] = made
        return made

    async def update(self, task_id: str, change: TaskChange) -> Task:
        """Change a task."""
        await self.provider.reached()
        current = self._find(task_id)
        due = None if change.clear_due else (change.due or current.due)
        done = current.done if change.completed is None else change.completed
        new = replace(
            current,
            title=change.title if change.title is not None else current.title,
            notes=change.notes if change.notes is not None else current.notes,
            due=due, done=done, version=self.provider.version(),
            completed_at=(current.completed_at or datetime.now().astimezone()) if done else None,
        )
        self.book.tasks[current.id] = new
        return new

    async def complete(self, task_id: str) -> Task:
        """Mark a task done."""
        return await self.update(task_id, TaskChange(completed=True))

    async def delete(self, task_id: str) -> None:
        """Delete a task."""
        await self.provider.reached()
        del self.book.tasks[self._find(task_id).id]

class MemoryContacts(_Part):
    """One in-memory account's address book (`book.contacts`)."""

    async def search(self, query: str, limit: int = 10) -> list[Contact]:
        """Contacts whose name, address or number holds `query` (any case)."""
        await self.provider.reached()
        words = query.strip().lower()
        found = [c for c in self.book.contacts
                 if words and any(words in v.lower() for v in (c.name, *c.emails, *c.phones))]
        return found[:limit]

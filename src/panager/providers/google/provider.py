"""Google behind the provider contract: Calendar and Tasks as `Calendar` and `Tasks`.

`GoogleProvider` reads the person's one Google account from `GoogleService`
(linking, sealed tokens and authorised calls stay there) and answers with
provider-neutral objects. Google's ids are the unqualified namespace (see
`services/accounts/provider.py`), so event and task ids look as they always
did, and `"primary"` is Google's primary calendar. Every call is bounded by
`timeout`: a Google that does not answer becomes `Unreachable`, one sentence.
"""

from __future__ import annotations

from datetime import date, datetime, time
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from panager.providers.google import api
from panager.providers.google.mailbox import GoogleMailbox
from panager.providers.google.oauth import (
    CALENDAR_SCOPE,
    GMAIL_COMPOSE_SCOPE,
    GMAIL_READ_SCOPE,
    TASKS_SCOPE,
)
from panager.providers.google.service import GoogleService
from panager.services.accounts.provider import (
    CALENDAR,
    CALL_TIMEOUT,
    MAIL,
    TASKS,
    Account,
    Calendar,
    CalendarInfo,
    Capability,
    Changed,
    Contacts,
    Created,
    Event,
    EventChange,
    FormConnect,
    Listing,
    Mailbox,
    NewEvent,
    NewTask,
    NotFound,
    OAuthConnect,
    Task,
    TaskChange,
    TaskListInfo,
    TaskListing,
    Tasks,
    within,
)

NAME = "google"
SCOPES_BY_CAPABILITY: dict[Capability, tuple[str, ...]] = {
    Capability.CALENDAR_READ: (CALENDAR_SCOPE,),
    Capability.CALENDAR_WRITE: (CALENDAR_SCOPE,),
    Capability.TASKS_READ: (TASKS_SCOPE,),
    Capability.TASKS_WRITE: (TASKS_SCOPE,),
    Capability.MAIL_READ: (GMAIL_READ_SCOPE,),
    Capability.MAIL_DRAFT: (GMAIL_COMPOSE_SCOPE,),
    Capability.MAIL_SEND: (GMAIL_COMPOSE_SCOPE,),
}


def capabilities_of(scopes: tuple[str, ...]) -> frozenset[Capability]:
    """What a link with `scopes` can do."""
    return frozenset(c for c, needs in SCOPES_BY_CAPABILITY.items() if set(needs) <= set(scopes))


def scope_of(capability: Capability) -> str:
    """The scope a call needing `capability` runs under."""
    return SCOPES_BY_CAPABILITY[capability][0]


class GoogleProvider:
    """Google as a provider: one OAuth account per person (Calendar, Tasks, Gmail)."""

    name = NAME
    title = "Google"
    capabilities = CALENDAR | TASKS | MAIL

    def __init__(self, service: GoogleService, timeout: float = CALL_TIMEOUT) -> None:
        self.service = service
        self.timeout = timeout
        endpoints = service.endpoints
        self.connect: OAuthConnect | FormConnect = OAuthConnect(
            endpoints.auth_uri, endpoints.token_uri, SCOPES_BY_CAPABILITY, link=service
        )

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's Google account, if linked (a revoked one as not connected)."""
        found = await self.service.account(user_id)
        if found is None:
            return []
        return [Account(NAME, "", found.email or "Google", capabilities_of(found.scopes),
                        found.connected)]

    async def require(self, user_id: int, capability: Capability) -> None:
        """Raise what a call needing `capability` meets without a usable link: the link
        to connect (or reconnect, or allow the missing access)."""
        await self.service.require(user_id, scope_of(capability))

    def calendar(self, user_id: int, account: Account) -> Calendar | None:
        """The account's calendars."""
        if not account.capabilities & CALENDAR:
            return None
        return GoogleCalendar(self.service, user_id, account.label, self.timeout)

    def tasks(self, user_id: int, account: Account) -> Tasks | None:
        """The account's default task list."""
        if not account.capabilities & TASKS:
            return None
        return GoogleTasks(self.service, user_id, account.label, self.timeout)

    def contacts(self, user_id: int, account: Account) -> Contacts | None:
        """Not yet: Google People comes in a later change."""
        return None

    def mailbox(self, user_id: int, account: Account) -> Mailbox | None:
        """The account's Gmail (reading and composing each need their own scope)."""
        if not account.capabilities & MAIL:
            return None
        return GoogleMailbox(self.service, user_id, self.timeout)


class _GoogleCalls:
    def __init__(self, service: GoogleService, user_id: int, label: str, timeout: float) -> None:
        self.service, self.user_id, self.label, self.timeout = service, user_id, label, timeout

    async def _call(self, scope: str, operation: Any, **kwargs: Any) -> Any:
        work = self.service.call(self.user_id, scope, partial(operation, **kwargs))
        return await within("Google", work, self.timeout)


class GoogleCalendar(_GoogleCalls):
    """One Google account's calendars."""

    def _info(self, entry: dict) -> CalendarInfo:
        primary = bool(entry.get("primary"))
        return CalendarInfo(
            id="primary" if primary else entry["id"],
            name=entry.get("summaryOverride") or entry.get("summary") or entry["id"],
            account=self.label,
            provider=NAME,
            writable=entry.get("accessRole") in ("owner", "writer"),
            default=primary,
        )

    def _named(self, calendar_id: str) -> CalendarInfo:
        """A calendar known only by the id a caller gave (no extra request)."""
        return CalendarInfo(calendar_id, calendar_id, self.label, NAME,
                            default=calendar_id == "primary")

    async def calendars(self) -> list[CalendarInfo]:
        """Every calendar the account can read."""
        return [self._info(e) for e in await self._call(CALENDAR_SCOPE, api.calendar_entries)]

    async def events(self, start: datetime, end: datetime, zone: ZoneInfo) -> Listing:
        """Occurrences in [start, end) of every readable calendar, sorted by start."""
        found, skipped, truncated = await self._call(
            CALENDAR_SCOPE, api.list_events, time_min=start, time_max=end
        )
        infos: dict[str, CalendarInfo] = {}
        events = [
            to_event(raw, infos.setdefault(entry["id"], self._info(entry)))
            for entry, raw in found
        ]
        events.sort(key=lambda e: sort_key(e, zone))
        return Listing(events[: api.MAX_EVENTS], truncated, tuple(skipped))

    async def event(self, calendar_id: str, event_id: str) -> Event:
        """One event as Google holds it now."""
        raw = await self._call(CALENDAR_SCOPE, api.read_event, calendar_id=calendar_id,
                               event_id=event_id)
        return to_event(raw, self._named(calendar_id))

    async def create(self, calendar_id: str, event: NewEvent, zone: ZoneInfo) -> Created:
        """Insert under an id derived from the request, so a retry finds what it made."""
        body: dict[str, Any] = {
            "summary": event.title,
            "start": api.event_time(event.start, zone),
            "end": api.event_time(event.end, zone),
        }
        body.update({k: v for k, v in (("description", event.description),
                                       ("location", event.location)) if v})
        ident = api.event_id_for(self.user_id, calendar_id, event.title, body["start"],
                                 body["end"])
        raw, created, existing = await self._call(
            CALENDAR_SCOPE, api.create_event, calendar_id=calendar_id, body=body,
            event_id=ident,
        )
        return Created(to_event(raw, self._named(calendar_id)), created, existing)

    async def update(
        self, calendar_id: str, event_id: str, change: EventChange, version: str, zone: ZoneInfo
    ) -> Event:
        """Patch the event if it is still `version`."""
        fields = {k: v for k, v in (("summary", change.title), ("description",
                  change.description), ("location", change.location)) if v is not None}
        try:
            raw = await self._call(
                CALENDAR_SCOPE, api.update_event, calendar_id=calendar_id, event_id=event_id,
                fields=fields, times=(change.start, change.end), version=version, zone=zone,
            )
        except Changed as exc:
            raise Changed(exc.message, await self._now(calendar_id, event_id)) from None
        return to_event(raw, self._named(calendar_id))

    async def delete(self, calendar_id: str, event_id: str, version: str) -> bool:
        """Delete the event if it is still `version`; False when already deleted."""
        try:
            return bool(await self._call(CALENDAR_SCOPE, api.delete_event,
                                         calendar_id=calendar_id, event_id=event_id,
                                         version=version))
        except Changed as exc:
            raise Changed(exc.message, await self._now(calendar_id, event_id)) from None

    async def _now(self, calendar_id: str, event_id: str) -> Event | None:
        try:
            return await self.event(calendar_id, event_id)
        except NotFound:
            return None


def to_event(raw: dict, calendar: CalendarInfo) -> Event:
    """Google's event JSON as a provider-neutral `Event`."""
    return Event(
        id=raw["id"],
        calendar=calendar,
        title=raw.get("summary") or "",
        start=api.read_time(raw.get("start", {})),
        end=api.read_time(raw.get("end", {})),
        version=raw.get("etag") or "",
        description=raw.get("description"),
        location=raw.get("location"),
        series_id=raw.get("recurringEventId"),
        status=raw.get("status") or "confirmed",
        busy=raw.get("transparency") != "transparent",
        attendees=tuple(
            str(a.get("email") or a.get("displayName") or "")
            for a in raw.get("attendees") or [] if not a.get("self")
        ),
    )


def sort_key(event: Event, zone: ZoneInfo) -> datetime:
    """An event's start as an instant (an all-day event from midnight in `zone`)."""
    start = event.start
    return start if isinstance(start, datetime) else datetime.combine(start, time.min, zone)


class GoogleTasks(_GoogleCalls):
    """One Google account's default task list."""

    async def lists(self) -> list[TaskListInfo]:
        """The account's task lists (the first is Google's default)."""
        found = await self._call(TASKS_SCOPE, api.task_lists)
        return [TaskListInfo(t["id"], t.get("title") or "", self.label, NAME, i == 0)
                for i, t in enumerate(found)]

    async def tasks(self, show_completed: bool = False) -> TaskListing:
        """Tasks of the default list."""
        items, truncated = await self._call(TASKS_SCOPE, api.list_tasks,
                                            show_completed=show_completed)
        return TaskListing([self._task(t) for t in items], truncated)

    async def task(self, task_id: str) -> Task:
        """One task as held now."""
        return self._task(await self._call(TASKS_SCOPE, api.read_task, task_id=task_id))

    async def create(self, task: NewTask) -> Task:
        """Add a task at the top of the default list."""
        body: dict[str, Any] = {"title": task.title}
        if task.due is not None:
            body["due"] = api.task_due(task.due)
        if task.notes:
            body["notes"] = task.notes
        return self._task(await self._call(TASKS_SCOPE, api.create_task, body=body))

    async def update(self, task_id: str, change: TaskChange) -> Task:
        """Patch a task."""
        body: dict[str, Any] = {}
        if change.title is not None:
            body["title"] = change.title
        if change.notes is not None:
            body["notes"] = change.notes
        if change.clear_due:
            body["due"] = None
        elif change.due is not None:
            body["due"] = api.task_due(change.due)
        if change.completed is not None:
            body["status"] = "completed" if change.completed else "needsAction"
            if not change.completed:
                body["completed"] = None
        raw = await self._call(TASKS_SCOPE, api.update_task, task_id=task_id, body=body)
        return self._task(raw)

    async def complete(self, task_id: str) -> Task:
        """Mark a task done."""
        return await self.update(task_id, TaskChange(completed=True))

    async def delete(self, task_id: str) -> None:
        """Delete a task."""
        await self._call(TASKS_SCOPE, api.delete_task, task_id=task_id)

    def _task(self, raw: dict) -> Task:
        done = raw.get("status") == "completed"
        completed = raw.get("completed")
        due = raw.get("due")
        return Task(
            id=raw["id"],
            title=raw.get("title") or "",
            account=self.label,
            due=date.fromisoformat(due[:10]) if due else None,
            notes=raw.get("notes"),
            done=done,
            completed_at=datetime.fromisoformat(completed) if done and completed else None,
            parent=raw.get("parent"),
            version=raw.get("etag") or "",
        )

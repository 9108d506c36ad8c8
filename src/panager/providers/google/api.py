"""Calendar v3 and Tasks v1 operations on Google's own JSON (provider.py turns it into
the provider-neutral `Event` and `Task`).

Everything here is synchronous and runs inside one `asyncio.to_thread` call
(see `GoogleService.call`), with services built for that call only. Writes to
an event send `If-Match` with the etag the caller last saw, so a change made
elsewhere meanwhile is never overwritten (`Changed`, carrying the event now).

Event creation is idempotent: the event id is derived from the request
(calendar, title, start, end), so a retried or replayed create finds the event
it already made (Google answers 409) instead of adding a duplicate.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo

from googleapiclient.errors import HttpError

from panager.services.accounts.provider import Changed, NotFound, ProviderError

When = date | datetime
MAX_EVENTS = 100
MAX_TASKS = 100
CALENDARS_AT_ONCE = 8  # a listing asks this many calendars for their events at once
HTTP_TIMEOUT = 30
RETRIES = 2  # for idempotent requests only


class GoogleClients:
    """Calendar, Tasks and Gmail services for one thread, built on first use."""

    def __init__(self, credentials: Any, endpoints: Any) -> None:
        self.credentials = credentials
        self.endpoints = endpoints
        self._built: list[Any] = []
        self._connections: list[Any] = []

    def http(self) -> Any:
        """A new authorized connection: httplib2's are not thread-safe, so each thread
        that sends requests of its own (`list_events`) needs one."""
        import httplib2
        from google_auth_httplib2 import AuthorizedHttp

        http = AuthorizedHttp(self.credentials, http=httplib2.Http(timeout=HTTP_TIMEOUT))
        self._connections.append(http)
        return http

    def _build(self, name: str, version: str, endpoint: str | None) -> Any:
        from googleapiclient.discovery import build

        http = self.http()
        options = {"api_endpoint": endpoint} if endpoint else None
        service = build(
            name,
            version,
            http=http,
            static_discovery=True,
            cache_discovery=False,
            client_options=options,
        )
        self._built.append(service)
        return service

    @cached_property
    def calendar(self) -> Any:
        """Calendar v3."""
        return self._build("calendar", "v3", self.endpoints.calendar_api)

    @cached_property
    def tasks(self) -> Any:
        """Tasks v1."""
        return self._build("tasks", "v1", self.endpoints.tasks_api)

    @cached_property
    def gmail(self) -> Any:
        """Gmail v1."""
        return self._build("gmail", "v1", getattr(self.endpoints, "gmail_api", None))

    def close(self) -> None:
        """Close the HTTP connections of every service built."""
        for service in self._built:
            service.close()
        for http in self._connections:
            http.close()


def _status(exc: HttpError) -> int:
    return int(exc.resp.status)


def _pages(collection: Any, limit: int, http: Any = None, **params: Any) -> Iterator[dict]:
    """Every item of a list call, page by page (`list_next`), up to `limit`; sent over
    `http` when given (else the service's own connection)."""
    request = collection.list(**params)
    count = 0
    while request is not None:
        page = request.execute(http=http, num_retries=RETRIES)
        for item in page.get("items", []):  # Tasks omits "items" when a page is empty
            yield item
            count += 1
            if count >= limit:
                return
        request = collection.list_next(request, page)


def _conditional(request: Any, version: str) -> Any:
    """`request` sent only if the item's etag is still `version` (412 otherwise)."""
    if version:
        request.headers["If-Match"] = version
    return request


# -- calendar -------------------------------------------------------------------------------


def event_time(value: When, zone: ZoneInfo) -> dict:
    """Google's start/end object for a datetime or a date (ends are exclusive, as Google's)."""
    if isinstance(value, datetime):
        return {"dateTime": value.astimezone(zone).isoformat(), "timeZone": zone.key}
    return {"date": value.isoformat()}


def read_time(value: dict) -> When:
    """A Google start/end object as an aware datetime, or a date (all-day)."""
    if value.get("dateTime"):
        return datetime.fromisoformat(value["dateTime"])
    return date.fromisoformat(value["date"])


def calendar_entries(clients: GoogleClients) -> list[dict]:
    """Every calendar the account can read (calendarList entries)."""
    return list(_pages(clients.calendar.calendarList(), 250, minAccessRole="reader"))


def calendar_entry(clients: GoogleClients, calendar_id: str) -> dict:
    """One calendarList entry (`NotFound` naming the calendar_id when there is none)."""
    try:
        return dict(
            clients.calendar.calendarList().get(calendarId=calendar_id).execute(
                num_retries=RETRIES
            )
        )
    except HttpError as exc:
        if _status(exc) == 404:
            raise unknown_calendar(calendar_id) from None
        raise


def list_events(
    clients: GoogleClients, time_min: datetime, time_max: datetime
) -> tuple[list[tuple[dict, dict]], list[str], bool]:
    """([(calendar entry, event)], names of calendars that refused, truncated): the events of
    every readable calendar between two instants, recurrences expanded, cancelled left out.
    The calendars are asked at once (up to CALENDARS_AT_ONCE, each thread on a connection
    of its own): a person with five calendars waits one round trip, not five."""
    cal = clients.calendar
    entries = calendar_entries(clients)

    def one(entry: dict) -> list[dict] | None:
        query = {
            "calendarId": entry["id"],
            "singleEvents": True,
            "orderBy": "startTime",
            "timeMin": time_min.isoformat(),
            "timeMax": time_max.isoformat(),
        }
        http = clients.http() if len(entries) > 1 else None
        try:
            return [e for e in _pages(cal.events(), MAX_EVENTS + 1, http=http, **query)
                    if e.get("status") != "cancelled"]
        except HttpError as exc:
            if _status(exc) not in (403, 404):
                raise
            return None  # a calendar this account may list but not read

    if len(entries) > 1:
        with ThreadPoolExecutor(min(CALENDARS_AT_ONCE, len(entries))) as pool:
            answers = list(pool.map(one, entries))
    else:
        answers = [one(entry) for entry in entries]
    found: list[tuple[dict, dict]] = []
    skipped: list[str] = []
    for entry, events in zip(entries, answers, strict=True):
        if events is None:
            skipped.append(entry.get("summaryOverride") or entry.get("summary") or entry["id"])
        else:
            found.extend((entry, event) for event in events)
    return found, skipped, len(found) > MAX_EVENTS


def event_id_for(user_id: int, calendar_id: str, title: str, start: dict, end: dict) -> str:
    """A deterministic Google event id (base32hex) for this request: retries never duplicate."""
    key = "|".join(
        [str(user_id), calendar_id, title, repr(sorted(start.items())), repr(sorted(end.items()))]
    )
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return "pn" + base64.b32hexencode(digest).decode("ascii").lower().rstrip("=")[:30]


def create_event(
    clients: GoogleClients, calendar_id: str, body: dict, event_id: str
) -> tuple[dict, bool, bool]:
    """(event, created, existing): insert the event under `event_id`; an earlier identical
    create is returned instead (existing), brought back when it was deleted since."""
    events = clients.calendar.events()
    try:
        made = events.insert(calendarId=calendar_id, body={**body, "id": event_id}).execute(
            num_retries=RETRIES
        )
        return made, True, False
    except HttpError as exc:
        if _status(exc) == 404:
            raise unknown_calendar(calendar_id) from None
        if _status(exc) != 409:
            raise
    existing = events.get(calendarId=calendar_id, eventId=event_id).execute(num_retries=RETRIES)
    if existing.get("status") == "cancelled":  # made before, then deleted: bring it back
        revived = events.patch(
            calendarId=calendar_id, eventId=event_id, body={**body, "status": "confirmed"}
        ).execute(num_retries=RETRIES)
        return revived, True, True
    return existing, False, True


def unknown_calendar(calendar_id: str) -> NotFound:
    """The error for a calendar id the account does not have."""
    return NotFound(
        f"Unknown calendar_id {calendar_id!r}. Use 'primary' or a calendar_id shown by "
        "calendar_list_events."
    )


def unknown_event(event_id: str, calendar_id: str) -> NotFound:
    """The error for an event id the calendar does not hold (any more)."""
    return NotFound(
        f"No event {event_id!r} in calendar {calendar_id!r}. Use calendar_list_events to see "
        "event ids (and their calendar_id)."
    )


def changed(event_id: str) -> Changed:
    """The error for a write refused because the event changed since it was read."""
    return Changed(
        f"The event {event_id!r} was changed elsewhere since it was read, so nothing was "
        "written; here it is as it is now — decide again with the person.",
        None,  # provider.py reads the event as it is now and attaches it
    )


def check_order(start: When, end: When) -> None:
    """`ProviderError` unless start and end are the same kind and end comes after start."""
    if isinstance(start, datetime) != isinstance(end, datetime):
        raise ProviderError(
            "start and end must both be dates (all-day event) or both be date-times."
        )
    if end <= start:
        raise ProviderError("end must be after start.")


def new_times(existing: dict, start: When | None, end: When | None, zone: ZoneInfo) -> dict:
    """start/end patch (ends exclusive): moving only the start keeps the duration."""
    old_start, old_end = read_time(existing["start"]), read_time(existing["end"])
    if start is not None and end is None:
        if isinstance(start, datetime) != isinstance(old_start, datetime):
            raise ProviderError("Switching between all-day and timed needs both start and end.")
        return {"start": event_time(start, zone), "end": event_time(start + (old_end - old_start),
                                                                     zone)}
    new_start = start if start is not None else old_start
    new_end = end if end is not None else old_end
    check_order(new_start, new_end)
    times = {"end": event_time(end, zone)} if end is not None else {}
    if start is not None:
        times["start"] = event_time(start, zone)
    return times


def update_event(
    clients: GoogleClients,
    calendar_id: str,
    event_id: str,
    fields: dict,
    times: tuple[When | None, When | None],
    version: str,
    zone: ZoneInfo,
) -> dict:
    """Patch an event (an instance id changes only that occurrence) if it is still
    `version`; `Changed` (with the event now) when it is not."""
    events = clients.calendar.events()
    existing = read_event(clients, calendar_id, event_id)
    if version and existing.get("etag") != version:
        raise changed(event_id)
    body = dict(fields)
    if times != (None, None):
        body.update(new_times(existing, times[0], times[1], zone))
    request = events.patch(calendarId=calendar_id, eventId=event_id, body=body)
    try:
        return dict(_conditional(request, existing.get("etag") or version).execute())
    except HttpError as exc:
        if _status(exc) == 412:
            raise changed(event_id) from None
        if _status(exc) in (404, 410):
            raise unknown_event(event_id, calendar_id) from None
        raise


def delete_event(clients: GoogleClients, calendar_id: str, event_id: str, version: str) -> bool:
    """Delete an event if it is still `version`; False when it was already deleted."""
    request = clients.calendar.events().delete(calendarId=calendar_id, eventId=event_id)
    try:
        _conditional(request, version).execute()
    except HttpError as exc:
        if _status(exc) == 410:
            return False
        if _status(exc) == 404:
            raise unknown_event(event_id, calendar_id) from None
        if _status(exc) == 412:
            raise changed(event_id) from None
        raise
    return True


# -- tasks ----------------------------------------------------------------------------------

DEFAULT_LIST = "@default"


def task_due(day: date) -> str:
    """Google's form of a due date (Tasks keeps only the date)."""
    return f"{day.isoformat()}T00:00:00.000Z"


def task_lists(clients: GoogleClients) -> list[dict]:
    """The account's task lists."""
    return list(_pages(clients.tasks.tasklists(), 100))


def list_tasks(clients: GoogleClients, show_completed: bool) -> tuple[list[dict], bool]:
    """(tasks, truncated): the default list, open ones only unless `show_completed`."""
    items = list(
        _pages(
            clients.tasks.tasks(),
            MAX_TASKS + 1,
            tasklist=DEFAULT_LIST,
            showCompleted=show_completed,
            showHidden=show_completed,
            maxResults=100,
        )
    )
    return [t for t in items[:MAX_TASKS] if not t.get("deleted")], len(items) > MAX_TASKS


def create_task(clients: GoogleClients, body: dict) -> dict:
    """Insert a task at the top of the default list (not retried: Tasks has no client ids)."""
    return dict(clients.tasks.tasks().insert(tasklist=DEFAULT_LIST, body=body).execute())


def unknown_task(task_id: str) -> NotFound:
    """The error for a task id the default list does not hold."""
    return NotFound(f"No task {task_id!r}. Use task_list to see task ids.")


def update_task(clients: GoogleClients, task_id: str, body: dict) -> dict:
    """Patch a task (title, notes, due, status)."""
    try:
        made = (
            clients.tasks.tasks()
            .patch(tasklist=DEFAULT_LIST, task=task_id, body=body)
            .execute(num_retries=RETRIES)
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise unknown_task(task_id) from None
        raise
    if made.get("deleted"):
        raise unknown_task(task_id)
    return dict(made)


def delete_task(clients: GoogleClients, task_id: str) -> None:
    """Delete a task."""
    try:
        clients.tasks.tasks().delete(tasklist=DEFAULT_LIST, task=task_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise unknown_task(task_id) from None
        raise


# -- one item, as held now ------------------------------------------------------------------


def read_event(clients: GoogleClients, calendar_id: str, event_id: str) -> dict:
    """One event as Google holds it now, whole."""
    try:
        event = clients.calendar.events().get(calendarId=calendar_id, eventId=event_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (404, 410):
            raise unknown_event(event_id, calendar_id) from None
        raise
    if event.get("status") == "cancelled":
        raise unknown_event(event_id, calendar_id)
    return dict(event)


def read_task(clients: GoogleClients, task_id: str) -> dict:
    """One task of the default list as Google holds it now, whole."""
    try:
        task = clients.tasks.tasks().get(tasklist=DEFAULT_LIST, task=task_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise unknown_task(task_id) from None
        raise
    if task.get("deleted"):
        raise unknown_task(task_id)
    return dict(task)

"""Calendar v3 and Tasks v1 operations, and the compact views the model reads.

Everything here is synchronous and runs inside one `asyncio.to_thread` call
(see `GoogleService.call`), with services built for that call only. Results
are small dicts: ids the model can reuse, times in the user's zone, nothing
Google-internal (etags, links, creators).

Event creation is idempotent: the event id is derived from the request
(calendar, title, start, end), so a retried or replayed create finds the event
it already made (Google answers 409) instead of adding a duplicate.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo

from googleapiclient.errors import HttpError

from panager.errors import ToolError

When = date | datetime
MAX_EVENTS = 100
MAX_TASKS = 100
TEXT_LIMIT = 300
HTTP_TIMEOUT = 30
RETRIES = 2  # for idempotent requests only


class GoogleClients:
    """Calendar, Tasks and Gmail services for one thread, built on first use."""

    def __init__(self, credentials: Any, endpoints: Any) -> None:
        self.credentials = credentials
        self.endpoints = endpoints
        self._built: list[Any] = []

    def _build(self, name: str, version: str, endpoint: str | None) -> Any:
        import httplib2
        from google_auth_httplib2 import AuthorizedHttp
        from googleapiclient.discovery import build

        http = AuthorizedHttp(self.credentials, http=httplib2.Http(timeout=HTTP_TIMEOUT))
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


def _status(exc: HttpError) -> int:
    return int(exc.resp.status)


def _pages(collection: Any, limit: int, **params: Any) -> Iterator[dict]:
    """Every item of a list call, page by page (`list_next`), up to `limit`."""
    request = collection.list(**params)
    count = 0
    while request is not None:
        page = request.execute(num_retries=RETRIES)
        for item in page.get("items", []):  # Tasks omits "items" when a page is empty
            yield item
            count += 1
            if count >= limit:
                return
        request = collection.list_next(request, page)


def _short(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "…"


def _compact(view: dict) -> dict:
    return {k: v for k, v in view.items() if v not in (None, "", False)}


# -- calendar -------------------------------------------------------------------------------


def local_iso(moment: datetime, zone: ZoneInfo) -> str:
    """`moment` in `zone`, ISO 8601 to the minute with its offset."""
    return moment.astimezone(zone).isoformat(timespec="minutes")


def event_time(value: When, zone: ZoneInfo, *, end: bool = False) -> dict:
    """Google's start/end object; a date is all-day (an end date is the last day, inclusive)."""
    if isinstance(value, datetime):
        return {"dateTime": value.astimezone(zone).isoformat(), "timeZone": zone.key}
    return {"date": (value + timedelta(days=1) if end else value).isoformat()}


def _read_time(value: dict, zone: ZoneInfo, *, end: bool = False) -> str | None:
    if value.get("dateTime"):
        return local_iso(datetime.fromisoformat(value["dateTime"]), zone)
    if value.get("date"):
        day = date.fromisoformat(value["date"])
        return (day - timedelta(days=1) if end else day).isoformat()
    return None


def event_view(event: dict, zone: ZoneInfo, calendar_id: str = "primary", name: str = "") -> dict:
    """The compact form of an event the model reads."""
    start, end = event.get("start", {}), event.get("end", {})
    return _compact(
        {
            "id": event.get("id"),
            "calendar_id": calendar_id,
            "calendar": name if calendar_id != "primary" else None,
            "title": event.get("summary") or "(no title)",
            "start": _read_time(start, zone),
            "end": _read_time(end, zone, end=True),
            "all_day": "date" in start,
            "location": _short(event.get("location")),
            "description": _short(event.get("description")),
            "recurring": bool(event.get("recurringEventId")),
            "status": event.get("status") if event.get("status") == "tentative" else None,
        }
    )


def _sort_key(event: dict) -> str:
    start = event.get("start", {})
    if start.get("dateTime"):
        return datetime.fromisoformat(start["dateTime"]).astimezone(ZoneInfo("UTC")).isoformat()
    return (start.get("date") or "") + "T00:00"


def list_events(
    clients: GoogleClients, time_min: datetime, time_max: datetime, zone: ZoneInfo
) -> dict:
    """Events of every calendar the user can read between two instants, recurrences expanded."""
    cal = clients.calendar
    found: list[tuple[str, dict, str, str]] = []
    skipped: list[str] = []
    for entry in _pages(cal.calendarList(), 250, minAccessRole="reader"):
        calendar_id = "primary" if entry.get("primary") else entry["id"]
        name = entry.get("summaryOverride") or entry.get("summary") or entry["id"]
        query = {
            "calendarId": entry["id"],
            "singleEvents": True,
            "orderBy": "startTime",
            "timeMin": time_min.isoformat(),
            "timeMax": time_max.isoformat(),
        }
        try:
            for event in _pages(cal.events(), MAX_EVENTS + 1, **query):
                if event.get("status") != "cancelled":
                    found.append((_sort_key(event), event, calendar_id, name))
        except HttpError as exc:
            if _status(exc) not in (403, 404):
                raise
            skipped.append(name)
    found.sort(key=lambda item: item[0])
    events = [event_view(e, zone, cid, name) for _, e, cid, name in found[:MAX_EVENTS]]
    result: dict[str, Any] = {
        "from": local_iso(time_min, zone),
        "to": local_iso(time_max, zone),
        "timezone": zone.key,
        "count": len(events),
        "events": events,
    }
    if len(found) > MAX_EVENTS:
        result["truncated"] = "more events exist; ask for a shorter range"
    if skipped:
        result["unreadable_calendars"] = skipped
    return result


def event_id_for(user_id: int, calendar_id: str, title: str, start: dict, end: dict) -> str:
    """A deterministic Google event id (base32hex) for this request: retries never duplicate."""
    key = "|".join(
        [str(user_id), calendar_id, title, repr(sorted(start.items())), repr(sorted(end.items()))]
    )
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return "pn" + base64.b32hexencode(digest).decode("ascii").lower().rstrip("=")[:30]


def create_event(
    clients: GoogleClients, calendar_id: str, body: dict, event_id: str, zone: ZoneInfo
) -> dict:
    """Insert the event under `event_id`; an earlier identical create is returned instead,
    marked `existing` (its fields were written at Google, maybe by others)."""
    events = clients.calendar.events()
    try:
        made = events.insert(calendarId=calendar_id, body={**body, "id": event_id}).execute(
            num_retries=RETRIES
        )
        return {"ok": True, "created": True, "event": event_view(made, zone, calendar_id)}
    except HttpError as exc:
        if _status(exc) == 404:
            raise _unknown_calendar(calendar_id) from None
        if _status(exc) != 409:
            raise
    existing = events.get(calendarId=calendar_id, eventId=event_id).execute(num_retries=RETRIES)
    if existing.get("status") == "cancelled":  # made before, then deleted: bring it back
        existing = events.patch(
            calendarId=calendar_id, eventId=event_id, body={**body, "status": "confirmed"}
        ).execute(num_retries=RETRIES)
        return {
            "ok": True, "created": True, "existing": True,
            "event": event_view(existing, zone, calendar_id),
        }
    return {
        "ok": True,
        "created": False,
        "existing": True,
        "note": "this event already existed (same title and time); not duplicated",
        "event": event_view(existing, zone, calendar_id),
    }


def _unknown_calendar(calendar_id: str) -> ToolError:
    return ToolError(
        f"Unknown calendar_id {calendar_id!r}. Use 'primary' or a calendar_id shown by "
        "calendar_list_events."
    )


def _unknown_event(event_id: str, calendar_id: str) -> ToolError:
    return ToolError(
        f"No event {event_id!r} in calendar {calendar_id!r}. Use calendar_list_events to see "
        "event ids (and their calendar_id)."
    )


def _moment(value: dict, zone: ZoneInfo) -> When:
    if value.get("dateTime"):
        return datetime.fromisoformat(value["dateTime"])
    return date.fromisoformat(value["date"])


def _exclusive_end(value: When) -> When:
    """Google's (exclusive) end for the user's end: an end date is the last day, inclusive."""
    return value if isinstance(value, datetime) else value + timedelta(days=1)


def _new_times(
    existing: dict, start: When | None, end: When | None, zone: ZoneInfo
) -> dict[str, dict]:
    """start/end patch: moving only the start keeps the duration; checks the order."""
    old_start, old_end = _moment(existing["start"], zone), _moment(existing["end"], zone)
    if start is not None and end is None:
        if isinstance(start, datetime) != isinstance(old_start, datetime):
            raise ToolError("Switching between all-day and timed needs both start and end.")
        moved = start + (old_end - old_start)
        moved_end = (
            event_time(moved, zone) if isinstance(moved, datetime) else {"date": moved.isoformat()}
        )
        return {"start": event_time(start, zone), "end": moved_end}
    new_start = start if start is not None else old_start
    new_end = _exclusive_end(end) if end is not None else old_end
    check_order(new_start, new_end, inclusive_end=False)
    times = {"end": event_time(end, zone, end=True)} if end is not None else {}
    if start is not None:
        times["start"] = event_time(start, zone)
    return times


def check_order(start: When, end: When, *, inclusive_end: bool = True) -> None:
    """ToolError unless start and end are the same kind and end comes after start."""
    if isinstance(start, datetime) != isinstance(end, datetime):
        raise ToolError("start and end must both be dates (all-day event) or both be date-times.")
    if end < start or (end == start and (isinstance(start, datetime) or not inclusive_end)):
        raise ToolError("end must be after start.")


def update_event(
    clients: GoogleClients,
    calendar_id: str,
    event_id: str,
    fields: dict,
    times: tuple[When | None, When | None],
    zone: ZoneInfo,
) -> dict:
    """Patch the given fields of an event (an instance id changes only that occurrence)."""
    events = clients.calendar.events()
    try:
        body = dict(fields)
        if times != (None, None):
            existing = events.get(calendarId=calendar_id, eventId=event_id).execute(
                num_retries=RETRIES
            )
            if existing.get("status") == "cancelled":
                raise _unknown_event(event_id, calendar_id)
            body.update(_new_times(existing, times[0], times[1], zone))
        made = events.patch(calendarId=calendar_id, eventId=event_id, body=body).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (404, 410):
            raise _unknown_event(event_id, calendar_id) from None
        raise
    return {"ok": True, "event": event_view(made, zone, calendar_id)}


def delete_event(clients: GoogleClients, calendar_id: str, event_id: str) -> dict:
    """Delete an event (already deleted counts as done)."""
    try:
        clients.calendar.events().delete(calendarId=calendar_id, eventId=event_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) == 410:
            return {"ok": True, "deleted": event_id, "note": "it was already deleted"}
        if _status(exc) == 404:
            raise _unknown_event(event_id, calendar_id) from None
        raise
    return {"ok": True, "deleted": event_id}


# -- tasks ----------------------------------------------------------------------------------

DEFAULT_LIST = "@default"


def task_due(day: date) -> str:
    """Google's form of a due date (Tasks keeps only the date)."""
    return f"{day.isoformat()}T00:00:00.000Z"


def task_view(task: dict, zone: ZoneInfo) -> dict:
    """The compact form of a task the model reads."""
    done = task.get("status") == "completed"
    completed = task.get("completed")
    return _compact(
        {
            "id": task.get("id"),
            "title": task.get("title") or "(no title)",
            "due": (task.get("due") or "")[:10] or None,
            "notes": _short(task.get("notes")),
            "done": done,
            "completed_at": local_iso(datetime.fromisoformat(completed), zone)
            if done and completed
            else None,
            "parent": task.get("parent"),
        }
    )


def list_tasks(clients: GoogleClients, show_completed: bool, zone: ZoneInfo) -> dict:
    """Tasks of the default list, open ones only unless `show_completed`."""
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
    tasks = [task_view(t, zone) for t in items[:MAX_TASKS] if not t.get("deleted")]
    result: dict[str, Any] = {"count": len(tasks), "tasks": tasks}
    if len(items) > MAX_TASKS:
        result["truncated"] = f"only the first {MAX_TASKS} tasks are shown"
    return result


def create_task(clients: GoogleClients, body: dict, zone: ZoneInfo) -> dict:
    """Insert a task at the top of the default list (not retried: Tasks has no client ids)."""
    made = clients.tasks.tasks().insert(tasklist=DEFAULT_LIST, body=body).execute()
    return {"ok": True, "task": task_view(made, zone)}


def _unknown_task(task_id: str) -> ToolError:
    return ToolError(f"No task {task_id!r}. Use task_list to see task ids.")


def update_task(clients: GoogleClients, task_id: str, body: dict, zone: ZoneInfo) -> dict:
    """Patch a task (title, notes, due, status)."""
    try:
        made = (
            clients.tasks.tasks()
            .patch(tasklist=DEFAULT_LIST, task=task_id, body=body)
            .execute(num_retries=RETRIES)
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown_task(task_id) from None
        raise
    if made.get("deleted"):
        raise _unknown_task(task_id)
    return {"ok": True, "task": task_view(made, zone)}


def delete_task(clients: GoogleClients, task_id: str) -> dict:
    """Delete a task."""
    try:
        clients.tasks.tasks().delete(tasklist=DEFAULT_LIST, task=task_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown_task(task_id) from None
        raise
    return {"ok": True, "deleted": task_id}


# -- what a question shows ------------------------------------------------------------------


def read_event(clients: GoogleClients, calendar_id: str, event_id: str) -> dict:
    """One event as Google holds it now, whole (for the question about changing it)."""
    try:
        event = clients.calendar.events().get(calendarId=calendar_id, eventId=event_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (404, 410):
            raise _unknown_event(event_id, calendar_id) from None
        raise
    if event.get("status") == "cancelled":
        raise _unknown_event(event_id, calendar_id)
    return dict(event)


def read_task(clients: GoogleClients, task_id: str) -> dict:
    """One task of the default list as Google holds it now, whole."""
    try:
        task = clients.tasks.tasks().get(tasklist=DEFAULT_LIST, task=task_id).execute(
            num_retries=RETRIES
        )
    except HttpError as exc:
        if _status(exc) in (400, 404):
            raise _unknown_task(task_id) from None
        raise
    if task.get("deleted"):
        raise _unknown_task(task_id)
    return dict(task)


def event_times(event: dict, zone: ZoneInfo) -> str:
    """An event's start–end in `zone` as a person reads them."""
    start = _read_time(event.get("start", {}), zone) or "?"
    end = _read_time(event.get("end", {}), zone, end=True) or "?"
    if "date" in event.get("start", {}):
        return f"{start} – {end} (all day, {zone.key})"
    return f"{start} – {end} ({zone.key})"

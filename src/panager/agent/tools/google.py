"""Google Calendar and Tasks tools (SPEC §2), bound to one user by closure.

Tools validate and translate arguments (times without an offset are in the
user's zone; a bare date means an all-day event or a due date), then hand a
synchronous operation from `services.google_api` to `GoogleService.call`,
which runs it with this user's tokens only. When the user has not linked
Google, the service raises `GoogleAuthRequired` and the graph answers with a
link instead; when the instance has no Google client, the tools say so.

Eight schemas are a large part of a small context window, so they are offered
only where they can work (`offered_google_tools`): not at all without a Google
client, and as the one argument-free `google_connect` to a person who has not
linked Google. Where the window is so small that all schemas would take more
than a quarter of it, a linked person's model gets `google_load` instead, which
adds the eight for the rest of the turn. The eight still run if the model calls
one anyway (unlisted), which ends in the same link, reason or result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from functools import partial
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.history import schema_tokens
from panager.agent.tools.calendars import merged
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    Describer,
    Lookup,
    ToolClass,
    looks_up,
    shown_text,
    tool,
)
from panager.errors import ToolError
from panager.framing import frame
from panager.services.google import api
from panager.services.google.calls import GoogleAuthRequired
from panager.services.google.service import CALENDAR_SCOPE, NOT_CONFIGURED, TASKS_SCOPE
from panager.services.users import User

GOOGLE_TOOL_NAMES = frozenset(
    {
        "task_list",
        "task_create",
        "task_update",
        "task_delete",
        "calendar_list_events",
        "calendar_create_event",
        "calendar_update_event",
        "calendar_delete_event",
    }
)
GOOGLE_CONNECT = "google_connect"  # offered instead of the eight until Google is linked
GOOGLE_LOAD = "google_load"  # offered instead of the eight where the window is small
FIXED_SHARE = 0.25  # of a small window: the most the system prompt and tool schemas may take
PROMPT_TOKENS = 250  # the system prompt's own text (persona, time), for that share
DEFAULT_WINDOW = timedelta(days=7)
MAX_TITLE = 1_000
MAX_TEXT = 8_000


def parse_time(value: str, zone: Any, what: str) -> date | datetime:
    """A date, or an aware datetime (no offset: the user's zone), from ISO 8601 text."""
    text = (value or "").strip()
    try:
        if len(text) == 10:
            return date.fromisoformat(text)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"Could not read {what} {value!r}. Use ISO 8601: '2026-11-25T09:00' (local time in "
            f"{zone.key}), '2026-11-25T09:00+09:00' (explicit offset) or '2026-11-25' (a date)."
        ) from None
    return moment.replace(tzinfo=zone) if moment.tzinfo is None else moment


def _day(value: date | datetime, zone: Any) -> date:
    return value.astimezone(zone).date() if isinstance(value, datetime) else value


def _range_start(value: date | datetime, zone: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.combine(value, datetime.min.time(), zone)


def _text(value: str | None, what: str, limit: int = MAX_TEXT) -> str | None:
    if value is not None and len(value) > limit:
        raise ToolError(f"{what} is {len(value):,} characters; keep it under {limit:,}.")
    return value


def _title(value: str) -> str:
    title = (value or "").strip()
    if not title:
        raise ToolError("title must not be empty.")
    return _text(title, "title", MAX_TITLE) or title


def _calendar_id(value: str | None) -> str:
    return (value or "primary").strip() or "primary"


def list_window(start: str | None, end: str | None, zone: Any, now: datetime) -> tuple:
    """(from, to) instants for a listing; a bare end date includes that whole day."""
    lo = _range_start(parse_time(start, zone, "start"), zone) if start else now
    if not end:
        return lo, lo + DEFAULT_WINDOW
    parsed = parse_time(end, zone, "end")
    hi = parsed if isinstance(parsed, datetime) else _range_start(parsed + timedelta(days=1), zone)
    if hi <= lo:
        raise ToolError("end must be after start.")
    return lo, hi


def _optional_fields(description: str | None, location: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if description is not None:
        fields["description"] = _text(description, "description")
    if location is not None:
        fields["location"] = _text(location, "location", MAX_TITLE)
    return fields


def event_body(
    title: str, start: str, end: str, description: str | None, location: str | None, zone: Any
) -> dict[str, Any]:
    """The Calendar insert body for a new event (validated)."""
    first, last = parse_time(start, zone, "start"), parse_time(end, zone, "end")
    api.check_order(first, last)
    body = {
        "summary": _title(title),
        "start": api.event_time(first, zone),
        "end": api.event_time(last, zone, end=True),
    }
    body.update({k: v for k, v in _optional_fields(description, location).items() if v})
    return body


def event_patch(
    title: str | None,
    start: str | None,
    end: str | None,
    description: str | None,
    location: str | None,
    zone: Any,
) -> tuple[dict[str, Any], tuple]:
    """(fields to patch, (new start, new end)) for calendar_update_event."""
    fields = _optional_fields(description, location)
    if title is not None:
        fields["summary"] = _title(title)
    first = parse_time(start, zone, "start") if start else None
    last = parse_time(end, zone, "end") if end else None
    if not fields and first is None and last is None:
        raise ToolError("Nothing to change: give title, start, end, description or location.")
    return fields, (first, last)


def _due(due: str, zone: Any) -> str | None:
    return api.task_due(_day(parse_time(due, zone, "due"), zone)) if due else None


def task_body(title: str, due: str | None, notes: str | None, zone: Any) -> dict[str, Any]:
    """The Tasks insert body for a new task (validated)."""
    body: dict[str, Any] = {"title": _title(title)}
    if due:
        body["due"] = _due(due, zone)
    if notes:
        body["notes"] = _text(notes, "notes")
    return body


def task_patch(
    title: str | None, notes: str | None, due: str | None, completed: bool | None, zone: Any
) -> dict[str, Any]:
    """The Tasks patch body for task_update; an empty due clears the due date."""
    body: dict[str, Any] = {}
    if title is not None:
        body["title"] = _title(title)
    if notes is not None:
        body["notes"] = _text(notes, "notes")
    if due is not None:
        body["due"] = _due(due, zone)
    if completed is not None:
        body["status"] = "completed" if completed else "needsAction"
        if not completed:
            body["completed"] = None
    if not body:
        raise ToolError("Nothing to change: give title, notes, due or completed.")
    return body


def describe_change(what: str, key: str) -> Describer:
    """Plain words for a change or deletion: the item's id, then any new values."""

    def describe(args: Mapping[str, Any]) -> str:
        rest = {k: v for k, v in args.items() if k != key and v is not None}
        values = ", ".join(f"{k} = {shown_text(str(v))}" for k, v in rest.items())
        return f"{what} {shown_text(str(args.get(key, '')))}" + (f": {values}" if values else "")

    return describe


def create_event_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """An event on the person's own primary calendar is a write they see and can undo; on
    any other calendar (shared with, or owned by, other people) its text reaches them, so
    a tainted call may not choose it alone."""
    other = _calendar_id(args.get("calendar_id")) != "primary"
    return CONSEQUENTIAL if view.tainted and other else ORDINARY


def describe_create_event(args: Mapping[str, Any]) -> str:
    """The event a question shows: title, times, calendar, and any text it carries."""
    words = (
        f"Create the event {shown_text(str(args.get('title', '')))} from "
        f"{args.get('start', '')} to {args.get('end', '')} on calendar "
        f"{shown_text(_calendar_id(args.get('calendar_id')))}"
    )
    extra = {k: args[k] for k in ("location", "description") if args.get(k)}
    return words + "".join(f"; {k} = {shown_text(str(v))}" for k, v in extra.items())


def google_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The eight Google tools for `user`."""
    zone = user.zone

    async def run(scope: str, operation: Any, *args: Any, **kwargs: Any) -> dict:
        if deps.google is None:
            raise ToolError(NOT_CONFIGURED)
        return await deps.google.call(user.id, scope, partial(operation, *args, **kwargs))

    async def read(scope: str, operation: Any, **kwargs: Any) -> str:
        """A result holding fields anyone who can invite the user may have written (event
        and task texts): framed once, whole, as outside content."""
        source = "Google Calendar" if scope == CALENDAR_SCOPE else "Google Tasks"
        return frame(source, await run(scope, operation, **kwargs))

    @tool(classify=ORDINARY)
    async def calendar_list_events(start: str | None = None, end: str | None = None) -> str:
        """List the user's calendar events (Google and CalDAV, all calendars, each named) with
        ids; start/end ISO 8601, a bare date is the whole day; default the next 7 days."""
        lo, hi = list_window(start, end, zone, deps.clock.now())
        if deps.calendars is None or not await deps.calendars.connected(user.id):
            return await read(CALENDAR_SCOPE, api.list_events, time_min=lo, time_max=hi, zone=zone)
        google = None
        if deps.google is not None and await deps.google.account(user.id) is not None:
            google = run(CALENDAR_SCOPE, api.list_events, time_min=lo, time_max=hi, zone=zone)
        listing = await merged(google, deps.calendars, user.id, lo, hi, zone)
        return frame("Calendars (Google, CalDAV)", listing)

    @tool(classify=create_event_class, describe=describe_create_event)
    async def calendar_create_event(
        title: str,
        start: str,
        end: str,
        description: str | None = None,
        location: str | None = None,
        calendar_id: str = "primary",
    ) -> dict | str:
        """Create a Google Calendar event; start/end ISO 8601, or two dates for an all-day
        event (end inclusive)."""
        body = event_body(title, start, end, description, location, zone)
        cal = _calendar_id(calendar_id)
        event_id = api.event_id_for(user.id, cal, body["summary"], body["start"], body["end"])
        made = await run(
            CALENDAR_SCOPE,
            api.create_event,
            calendar_id=cal,
            body=body,
            event_id=event_id,
            zone=zone,
        )
        # An event found already there holds what others with access may have written.
        return frame("Google Calendar", made) if made.pop("existing", False) else made

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Change the calendar event", "event_id"))
    async def calendar_update_event(
        event_id: str,
        calendar_id: str = "primary",
        title: str | None = None,
        start: str | None = None,
        end: str | None = None,
        description: str | None = None,
        location: str | None = None,
    ) -> str:
        """Change an event by event_id, giving only the fields to change (a new start alone
        keeps the duration)."""
        fields, times = event_patch(title, start, end, description, location, zone)
        return await read(
            CALENDAR_SCOPE,
            api.update_event,
            calendar_id=_calendar_id(calendar_id),
            event_id=event_id.strip(),
            fields=fields,
            times=times,
            zone=zone,
        )

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Delete the calendar event", "event_id"))
    async def calendar_delete_event(event_id: str, calendar_id: str = "primary") -> dict:
        """Delete an event by its event_id."""
        return await run(
            CALENDAR_SCOPE,
            api.delete_event,
            calendar_id=_calendar_id(calendar_id),
            event_id=event_id.strip(),
        )

    @tool(classify=ORDINARY)
    async def task_list(show_completed: bool = False) -> str:
        """List the user's Google Tasks with their ids (open ones unless show_completed)."""
        return await read(TASKS_SCOPE, api.list_tasks, show_completed=show_completed, zone=zone)

    @tool(classify=ORDINARY)
    async def task_create(title: str, due: str | None = None, notes: str | None = None) -> dict:
        """Add a Google Task; due is an ISO 8601 date."""
        body = task_body(title, due, notes, zone)
        return await run(TASKS_SCOPE, api.create_task, body=body, zone=zone)

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Change the task", "task_id"))
    async def task_update(
        task_id: str,
        title: str | None = None,
        notes: str | None = None,
        due: str | None = None,
        completed: bool | None = None,
    ) -> str:
        """Change a Google Task by task_id (due '' clears the date)."""
        body = task_patch(title, notes, due, completed, zone)
        return await read(
            TASKS_SCOPE, api.update_task, task_id=task_id.strip(), body=body, zone=zone
        )

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Delete the task", "task_id"))
    async def task_delete(task_id: str) -> dict:
        """Delete a Google Task by its task_id."""
        return await run(TASKS_SCOPE, api.delete_task, task_id=task_id.strip())

    made: list[BaseTool] = [
        task_list,
        task_create,
        task_update,
        task_delete,
        calendar_list_events,
        calendar_create_event,
        calendar_update_event,
        calendar_delete_event,
    ]
    described_by_lookups(deps, user, run, {t.name: t for t in made})
    return made


def described_by_lookups(
    deps: AgentDeps, user: User, run: Callable[..., Awaitable[Any]], tools: Mapping[str, BaseTool]
) -> None:
    """Questions about Google's consequential calls name the event or task as Google holds
    it now (title, times in the person's zone, calendar, account, attendees)."""
    zone = user.zone
    calendar_update_event, calendar_delete_event = (
        tools["calendar_update_event"], tools["calendar_delete_event"])
    calendar_create_event, task_update, task_delete = (
        tools["calendar_create_event"], tools["task_update"], tools["task_delete"])

    async def account() -> str:
        found = await deps.google.account(user.id) if deps.google is not None else None
        return shown_text(found.email) if found is not None and found.email else "(unknown)"

    async def event_lines(calendar_id: str, event_id: str) -> list[str]:
        cal = _calendar_id(calendar_id)
        event = await run(CALENDAR_SCOPE, api.read_event, calendar_id=cal, event_id=event_id)
        mailed = [
            shown_text(str(a.get("email") or a.get("displayName") or ""))
            for a in event.get("attendees") or [] if not a.get("self")
        ]
        lines = [
            f"  - title: {shown_text(str(event.get('summary') or ''))}",
            f"  - when: {api.event_times(event, zone)}",
            f"  - calendar: {shown_text(cal)} of Google account {await account()}",
            "  - attendees Google may e-mail: " + (", ".join(mailed) if mailed else "none"),
        ]
        for key, label in (("location", "location"), ("description", "description")):
            if event.get(key):
                lines.append(f"  - {label}: {shown_text(str(event[key]))}")
        lines.append(f"  - (event id {shown_text(event_id)})")
        return lines

    async def describe_event_change(args: Mapping[str, Any]) -> str:
        ident = str(args.get("event_id", "")).strip()
        lines = ["Change this calendar event:", *await event_lines(
            str(args.get("calendar_id") or "primary"), ident)]
        new = {k: v for k, v in args.items()
               if k not in ("event_id", "calendar_id") and v is not None}
        lines.append("  - to these new values:" if new else "  - with no new values")
        lines += [f"    - {k} → {shown_text(str(v))}" for k, v in new.items()]
        return "\n".join(lines)

    async def describe_event_delete(args: Mapping[str, Any]) -> str:
        ident = str(args.get("event_id", "")).strip()
        lines = await event_lines(str(args.get("calendar_id") or "primary"), ident)
        return "\n".join(["Delete this calendar event:", *lines])

    async def describe_event_create(args: Mapping[str, Any]) -> str:
        cal = _calendar_id(args.get("calendar_id"))
        return (f"{describe_create_event(args)}\n  (calendar {shown_text(cal)} of Google "
                f"account {await account()}; its other members see it)")

    async def task_lines(task_id: str) -> list[str]:
        task = await run(TASKS_SCOPE, api.read_task, task_id=task_id)
        return [
            f"  - title: {shown_text(str(task.get('title') or ''))}",
            f"  - due: {(task.get('due') or '')[:10] or 'none'}",
            f"  - list: {shown_text('My Tasks (default list)')} of Google account "
            f"{await account()}",
            f"  - notes: {shown_text(str(task.get('notes') or ''))}",
            f"  - status: {task.get('status') or '?'}",
            f"  - (task id {shown_text(task_id)})",
        ]

    async def describe_task_change(args: Mapping[str, Any]) -> str:
        lines = ["Change this task:", *await task_lines(str(args.get("task_id", "")).strip())]
        new = {k: v for k, v in args.items() if k != "task_id" and v is not None}
        lines.append("  - to these new values:" if new else "  - with no new values")
        lines += [f"    - {k} → {shown_text(str(v))}" for k, v in new.items()]
        return "\n".join(lines)

    async def describe_task_delete(args: Mapping[str, Any]) -> str:
        return "\n".join(["Delete this task:",
                          *await task_lines(str(args.get("task_id", "")).strip())])

    def thing(kind: str, key: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda args: f"{kind} {shown_text(str(args.get(key, '')))}"

    looks_up(calendar_update_event, Lookup(describe_event_change, thing("event", "event_id"),
                                           "Google"))
    looks_up(calendar_delete_event, Lookup(describe_event_delete, thing("event", "event_id"),
                                           "Google"))
    looks_up(calendar_create_event, Lookup(describe_event_create, thing("calendar",
                                           "calendar_id"), "Google"))
    looks_up(task_update, Lookup(describe_task_change, thing("task", "task_id"), "Google"))
    looks_up(task_delete, Lookup(describe_task_delete, thing("task", "task_id"), "Google"))


def google_connect_tool(deps: AgentDeps, user: User) -> BaseTool:
    """`google_connect`: the link to connect Google, for a person who has not linked it."""

    @tool(classify=ORDINARY)
    async def google_connect() -> dict:
        """Connect the user's Google account (for Calendar and Tasks): they get a link."""
        if deps.google is None:
            raise ToolError(NOT_CONFIGURED)
        raise GoogleAuthRequired()

    return google_connect


async def google_linked(deps: AgentDeps, user: User) -> bool:
    """True when `user` has a connected Google account (a failed check counts as linked)."""
    if deps.google is None:
        return False
    try:
        account = await deps.google.account(user.id)
    except Exception:
        return True  # offer the tools; a call reports what is wrong
    return account is not None and account.connected


def google_load_tool(offered: list[BaseTool], google: Sequence[BaseTool]) -> BaseTool:
    """`google_load`: adds the Google tools to `offered` (this turn's list) when called."""

    @tool(classify=ORDINARY)
    async def google_load() -> dict:
        """Load the Google Calendar and Tasks tools; call it first for any calendar or task
        request."""
        offered.extend(t for t in google if t not in offered)
        return {"ok": True, "loaded": [t.name for t in google]}

    return google_load


async def offered_google_tools(
    deps: AgentDeps, user: User, tools: list[BaseTool], window: int | None = None
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted): `tools` with Google's eight offered only where they can work and,
    in a `window` too small for every schema, only once the model asks for them."""
    linked = deps.google is not None and await google_linked(deps, user)
    room = FIXED_SHARE * window - PROMPT_TOKENS if window else None
    if linked and (room is None or schema_tokens(tools) <= room):
        return tools, []
    offered = [t for t in tools if t.name not in GOOGLE_TOOL_NAMES]
    unlisted = [t for t in tools if t.name in GOOGLE_TOOL_NAMES]
    if linked:
        offered.append(google_load_tool(offered, unlisted))
        return offered, unlisted
    if deps.calendars is not None and await deps.calendars.connected(user.id):
        # CalDAV without Google: the merged listing reads the connected calendars
        offered.extend(t for t in unlisted if t.name == "calendar_list_events")
    if deps.google is not None:
        offered.append(google_connect_tool(deps, user))
    return offered, unlisted

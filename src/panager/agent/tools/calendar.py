# Over 400 lines, kept whole: the calendar and task tools share argument parsing and the question
# lines; split, each half would import the other.
"""Calendar and task tools (SPEC §2), written once against the provider contract.

Tools validate and translate arguments (times without an offset are in the
user's zone; a bare date means an all-day event or a due date), then call the
`Calendar`/`Tasks` of the person's connected accounts (`deps.accounts`, see
services/accounts/): listings merge every calendar account, fetched
concurrently, each event naming its calendar; a write goes to the account its
id names (an unqualified id is Google's, as ids were before providers) or, for
`calendar_id="primary"`, to the person's default calendar. An update or
delete is sent with the version just read, so a change made elsewhere
meanwhile is refused and the model is shown the event as it is now. With no
account that can serve a call, the provider's own "connect first" ends the
turn (Google: `GoogleAuthRequired` and its link); with no provider configured,
the tools say so.

Which of them a turn offers is decided in offer.py (`offered_calendar_tools`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    Lookup,
    ToolClass,
    looks_up,
    shown_text,
    tool,
)
from panager.agent.tools.provided import (
    MAX_TITLE,
    accounts_of,
    compact,
    describe_change,
    limited,
    local,
    lookup_source,
    new_values,
    own_id,
    parse_time,
    range_start,
    short,
    source_of,
    thing,
    title_text,
)
from panager.errors import ToolError
from panager.framing import frame
from panager.services.accounts.provider import (
    GOOGLE,
    Account,
    Calendar,
    Capability,
    Changed,
    Event,
    EventChange,
    NewEvent,
    NotFound,
    Provider,
    inclusive_end,
    split_id,
)
from panager.services.accounts.service import AccountService
from panager.services.users import User

DEFAULT_WINDOW = timedelta(days=7)
MAX_EVENTS = 100  # in one listing, across accounts


def _calendar_id(value: str | None) -> str:
    return (value or "primary").strip() or "primary"


def list_window(start: str | None, end: str | None, zone: Any, now: datetime) -> tuple:
    """(from, to) instants for a listing; a bare end date includes that whole day."""
    lo = range_start(parse_time(start, zone, "start"), zone) if start else now
    if not end:
        return lo, lo + DEFAULT_WINDOW
    parsed = parse_time(end, zone, "end")
    hi = parsed if isinstance(parsed, datetime) else range_start(parsed + timedelta(days=1), zone)
    if hi <= lo:
        raise ToolError("end must be after start.")
    return lo, hi


def check_order(start: date | datetime, end: date | datetime) -> None:
    """ToolError unless start and end are the same kind and end is not before start (an
    all-day end is the last day, inclusive)."""
    if isinstance(start, datetime) != isinstance(end, datetime):
        raise ToolError("start and end must both be dates (all-day event) or both be date-times.")
    if end < start or (end == start and isinstance(start, datetime)):
        raise ToolError("end must be after start.")


def _exclusive(value: date | datetime) -> date | datetime:
    """The contract's (exclusive) end for the person's end: a date is the last day."""
    return value if isinstance(value, datetime) else value + timedelta(days=1)


def _optional(description: str | None, location: str | None) -> dict[str, str | None]:
    return {"description": limited(description, "description"),
            "location": limited(location, "location", MAX_TITLE)}


def new_event(
    title: str, start: str, end: str, description: str | None, location: str | None, zone: Any
) -> NewEvent:
    """The event calendar_create_event asks for (validated)."""
    first, last = parse_time(start, zone, "start"), parse_time(end, zone, "end")
    check_order(first, last)
    extra = _optional(description, location)
    return NewEvent(title_text(title), first, _exclusive(last), extra["description"] or None,
                    extra["location"] or None)


def event_change(
    title: str | None,
    start: str | None,
    end: str | None,
    description: str | None,
    location: str | None,
    zone: Any,
) -> EventChange:
    """What calendar_update_event changes (a new start alone keeps the length)."""
    first = parse_time(start, zone, "start") if start else None
    last = parse_time(end, zone, "end") if end else None
    if first is not None and last is not None:
        check_order(first, last)
    change = EventChange(
        title=title_text(title) if title is not None else None,
        start=first,
        end=_exclusive(last) if last is not None else None,
        **_optional(description, location),
    )
    if not change:
        raise ToolError("Nothing to change: give title, start, end, description or location.")
    return change


# -- what the model reads ---------------------------------------------------------------------


def _google_primary(event: Event) -> bool:
    return event.calendar.provider == GOOGLE and event.calendar.id == "primary"


def event_view(event: Event, zone: Any, accounts: bool = False) -> dict:
    """The compact form of an event the model reads (`accounts`: name the account too)."""
    return compact(
        {
            "id": event.id,
            "calendar_id": event.calendar.id,
            "calendar": None if _google_primary(event) else event.calendar.name,
            "account": event.account if accounts else None,
            "title": event.title or "(no title)",
            "start": local(event.start, zone),
            "end": local(inclusive_end(event), zone),
            "all_day": event.all_day,
            "location": short(event.location),
            "description": short(event.description),
            "recurring": event.recurring,
            "status": "tentative" if event.status == "tentative" else None,
        }
    )


def event_times(event: Event, zone: Any) -> str:
    """An event's start–end in `zone` as a person reads them."""
    start, end = local(event.start, zone), local(inclusive_end(event), zone)
    if event.all_day:
        return f"{start} – {end} (all day, {zone.key})"
    return f"{start} – {end} ({zone.key})"


def _sort_key(event: Event, zone: Any) -> datetime:
    return range_start(event.start, zone)


# -- questions ------------------------------------------------------------------------------


def create_event_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """An event on the person's own default calendar is a write they see and can undo; on
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


# -- the tools ------------------------------------------------------------------------------


def calendar_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The four calendar tools for `user`."""
    zone = user.zone
    seen: dict[tuple, Event] = {}  # the event a question read last, by (calendar, id)

    async def writer(calendar_id: str, event_id: str = "") -> tuple[Provider, Any, str, str]:
        accounts = accounts_of(deps)
        if not event_id and by_name(calendar_id, accounts.names):
            calendar_id = await named_calendar(accounts, user.id, calendar_id)
        provider, _, cal = await accounts.calendar_for(user.id, calendar_id, event_id)
        return (provider, cal, own_id(calendar_id, accounts.names),
                own_id(event_id, accounts.names))

    @tool(classify=ORDINARY)
    async def calendar_list_events(start: str | None = None, end: str | None = None) -> str:
        """List the user's calendar events (all calendars of every connected account) with
        ids; start/end ISO 8601, a bare date is the whole day; default the next 7 days."""
        lo, hi = list_window(start, end, zone, deps.clock.now())
        serving = await accounts_of(deps).calendars(user.id)
        result = await merged_listing(serving, lo, hi, zone)
        return frame(source_of([p for p, _, _ in serving], "Calendar"), result)

    @tool(classify=create_event_class, describe=describe_create_event)
    async def calendar_create_event(
        title: str,
        start: str,
        end: str,
        description: str | None = None,
        location: str | None = None,
        calendar_id: str = "primary",
    ) -> dict | str:
        """Create a calendar event; start/end ISO 8601, or two dates for an all-day event
        (end inclusive)."""
        event = new_event(title, start, end, description, location, zone)
        provider, cal, cal_id, _ = await writer(_calendar_id(calendar_id))
        made = await cal.create(cal_id, event, zone)
        result: dict[str, Any] = {"ok": True, "created": made.created}
        if not made.created:
            result["note"] = "this event already existed (same title and time); not duplicated"
        result["event"] = event_view(made.event, zone)
        # An event found already there holds what others with access may have written.
        return frame(source_of([provider], "Calendar"), result) if made.existing else result

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
        change = event_change(title, start, end, description, location, zone)
        provider, cal, cal_id, ident = await writer(_calendar_id(calendar_id), event_id)
        source = source_of([provider], "Calendar")
        current = seen.pop((cal_id, ident), None) or await cal.event(cal_id, ident)
        try:
            updated = await cal.update(cal_id, ident, change, current.version, zone)
        except Changed as exc:
            raise ToolError(_changed(exc, source, zone)) from None
        return frame(source, {"ok": True, "event": event_view(updated, zone)})

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Delete the calendar event", "event_id"))
    async def calendar_delete_event(event_id: str, calendar_id: str = "primary") -> dict:
        """Delete an event by its event_id."""
        provider, cal, cal_id, ident = await writer(_calendar_id(calendar_id), event_id)
        try:
            version = (seen.pop((cal_id, ident), None) or await cal.event(cal_id, ident)).version
        except NotFound:
            version = ""  # gone already, or never there: the delete says which
        try:
            deleted = await cal.delete(cal_id, ident, version)
        except Changed as exc:
            raise ToolError(_changed(exc, source_of([provider], "Calendar"), zone)) from None
        shown = event_id.strip()
        if not deleted:
            return {"ok": True, "deleted": shown, "note": "it was already deleted"}
        return {"ok": True, "deleted": shown}

    made: list[BaseTool] = [
        calendar_list_events,
        calendar_create_event,
        calendar_update_event,
        calendar_delete_event,
    ]
    described_by_lookups(deps, user, {t.name: t for t in made}, seen)
    return made


def by_name(calendar_id: str, names: Sequence[str]) -> bool:
    """Whether `calendar_id` may be a calendar's name rather than an id (no address, no
    provider prefix, not "primary")."""
    unqualified = split_id(calendar_id, names)[0] == GOOGLE
    return (unqualified and calendar_id not in ("", "primary") and "@" not in calendar_id
            and not calendar_id.startswith(f"{GOOGLE}:"))


async def named_calendar(accounts: AccountService, user_id: int, calendar_id: str) -> str:
    """The id of the writable calendar the person knows by the name `calendar_id` (any
    case), or `calendar_id` itself when none has that name."""
    wanted = calendar_id.strip().casefold()
    for _, _, cal in await accounts.calendars(user_id, Capability.CALENDAR_WRITE):
        for info in await cal.calendars():
            if info.writable and info.name.strip().casefold() == wanted:
                return info.id
    return calendar_id


async def merged_listing(
    serving: Sequence[tuple[Provider, Account, Calendar]], lo: datetime, hi: datetime, zone: Any
) -> dict[str, Any]:
    """Events of every serving calendar account in [lo, hi), fetched concurrently and merged
    by start; an account that fails is named in `unavailable` (all failing: the error)."""
    answers = await asyncio.gather(*(c.events(lo, hi, zone) for _, _, c in serving),
                                   return_exceptions=True)
    result: dict[str, Any] = {"from": local(lo, zone), "to": local(hi, zone), "timezone": zone.key}
    events: list[Event] = []
    failed: list[str] = []
    for (provider, account, _), answer in zip(serving, answers, strict=True):
        if isinstance(answer, ToolError):
            failed.append(f"{provider.title} ({account.label}): {answer}")
        elif isinstance(answer, BaseException):
            raise answer
        else:
            events += answer.events
            result.setdefault("unreadable_calendars", []).extend(answer.unreadable)
            if answer.truncated:
                result["truncated"] = "more events exist; ask for a shorter range"
    if failed and len(failed) == len(serving):
        raise ToolError(" ".join(failed))
    events.sort(key=lambda e: _sort_key(e, zone))
    if len(events) > MAX_EVENTS:
        result["truncated"] = "more events exist; ask for a shorter range"
    shown = [event_view(e, zone, len(serving) > 1) for e in events[:MAX_EVENTS]]
    result.update(count=len(shown), events=shown)
    if not result["unreadable_calendars"]:
        del result["unreadable_calendars"]
    if failed:
        result["unavailable"] = failed
    return result


def _changed(exc: Changed, source: str, zone: Any) -> str:
    """The refusal of a stale write, with the event as it is now (framed: its text is the
    server's)."""
    if exc.current is None:
        return f"{exc.message} It has been deleted meanwhile."
    return f"{exc.message} {frame(source, {'event': event_view(exc.current, zone)})}"


def described_by_lookups(
    deps: AgentDeps, user: User, tools: Mapping[str, BaseTool], seen: dict[tuple, Event]
) -> None:
    """Questions about the consequential calls name the event as its server holds it now
    (title, times in the person's zone, calendar, account, attendees). The event read last
    is kept in `seen`: the write that follows an Approve goes out with the version that
    question's check read, so a change made since is refused, not overwritten."""
    zone = user.zone
    source = lookup_source(deps, Capability.CALENDAR_READ)

    async def event_lines(calendar_id: str, event_id: str) -> list[str]:
        accounts = accounts_of(deps)
        provider, account, cal = await accounts.calendar_for(user.id, calendar_id, event_id)
        cal_id = own_id(_calendar_id(calendar_id), accounts.names)
        event = await cal.event(cal_id, own_id(event_id, accounts.names))
        seen[(cal_id, own_id(event_id, accounts.names))] = event
        mailed = [shown_text(a) for a in event.attendees]
        lines = [
            f"  - title: {shown_text(event.title)}",
            f"  - when: {event_times(event, zone)}",
            f"  - calendar: {shown_text(_calendar_id(calendar_id))} of {provider.title} "
            f"account {shown_text(account.label)}",
            f"  - the server ({provider.title}) may send an update to: " + ", ".join(mailed)
            if mailed else "  - attendees: none",
        ]
        for key, value in (("location", event.location), ("description", event.description)):
            if value:
                lines.append(f"  - {key}: {shown_text(value)}")
        lines.append(f"  - (event id {shown_text(event_id)})")
        return lines

    async def describe_event_change(args: Mapping[str, Any]) -> str:
        ident = str(args.get("event_id", "")).strip()
        lines = ["Change this calendar event:", *await event_lines(
            str(args.get("calendar_id") or "primary"), ident)]
        return "\n".join(lines + new_values(args, ("event_id", "calendar_id")))

    async def describe_event_delete(args: Mapping[str, Any]) -> str:
        ident = str(args.get("event_id", "")).strip()
        lines = await event_lines(str(args.get("calendar_id") or "primary"), ident)
        return "\n".join(["Delete this calendar event:", *lines])

    async def describe_event_create(args: Mapping[str, Any]) -> str:
        cal = _calendar_id(args.get("calendar_id"))
        provider, account, _ = await accounts_of(deps).calendar_for(user.id, cal)
        return (f"{describe_create_event(args)}\n  (calendar {shown_text(cal)} of "
                f"{provider.title} account {shown_text(account.label)}; its other members "
                "see it)")

    for name, read, kind, key in (
        ("calendar_update_event", describe_event_change, "event", "event_id"),
        ("calendar_delete_event", describe_event_delete, "event", "event_id"),
        ("calendar_create_event", describe_event_create, "calendar", "calendar_id"),
    ):
        looks_up(tools[name], Lookup(read, thing(kind, key), source))

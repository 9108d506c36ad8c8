"""Schedule tools: reminders and scheduled agent runs, bound to one user by closure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.state import SCHEDULED_RUN
from panager.agent.graph.taint import CALL_TAINTED
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    Lookup,
    ToolClass,
    looks_up,
    shown_block,
    shown_text,
    tool,
)
from panager.agent.models import current_model
from panager.errors import ToolError
from panager.framing import frame
from panager.services.schedules.recurrence import ScheduleInputError
from panager.services.schedules.recurrence import describe_schedule as schedule_words
from panager.services.schedules.service import Schedule
from panager.services.users import User

OUTSIDE_SCHEDULE = "schedule written while reading outside content"


def schedule_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """schedule_create, schedule_list, schedule_cancel for `user` (none without a scheduler)."""
    service = deps.scheduler
    if service is None:
        return []

    @tool(classify=schedule_class, describe=describe_schedule)
    async def schedule_create(
        message: str,
        at: str,
        kind: Literal["reminder", "agent"] = "reminder",
        repeat: str | None = None,
    ) -> dict:
        """Schedule a message for later. kind=reminder: message is sent as written;
        kind=agent: message is an instruction you carry out then, sending the answer.
        at: ISO 8601 local time ('2026-11-25T09:00'; '09:00' = the next 09:00). repeat: an
        RRULE, e.g. 'FREQ=WEEKLY;BYDAY=MO'. Tell the user the returned confirmation."""
        if kind == "agent" and SCHEDULED_RUN.get():
            raise ToolError(
                "Limit: a scheduled task cannot create further scheduled tasks (kind='agent'); "
                "a reminder is allowed, or ask the user to set it up."
            )
        current = await deps.users.get(user.id) or user  # the zone may have just changed
        try:
            created = await service.create(
                current, message, at, kind=kind, repeat=repeat, tainted=CALL_TAINTED.get(),
                model=current_model(deps, current),  # an agent task keeps the person's model
            )
        except ScheduleInputError as exc:
            raise ToolError(str(exc)) from None
        now = deps.clock.now()
        assert created.next_run_at is not None  # a new schedule always has its first run
        what = "Reminder" if created.kind == "reminder" else "Scheduled task"
        return {
            "ok": True,
            "id": created.id,
            "confirmation": f"{what} set for {created.describe(now)}.",
            "next_run_at": created.next_run_at.isoformat(),
        }

    @tool(classify=ORDINARY)
    async def schedule_list() -> dict:
        """List the user's reminders and scheduled tasks with their ids, soonest first."""
        now = deps.clock.now()
        items = [schedule_summary(s, now) for s in await service.list(user.id)]
        return {"schedules": items, "count": len(items)}

    @tool(classify=CONSEQUENTIAL, describe=describe_cancel)
    async def schedule_cancel(schedule_id: str) -> dict:
        """Cancel a schedule by its id."""
        cancelled = await service.cancel(user.id, schedule_id)
        if cancelled is None:
            existing = await service.get(user.id, schedule_id)
            if existing is not None:
                return {"ok": True, "id": existing.id, "note": f"already {existing.status}"}
            raise ToolError(
                f"Unknown schedule id {schedule_id!r}; use schedule_list to see the ids."
            )
        return {"ok": True, "id": cancelled.id, "cancelled": schedule_text(cancelled)}

    described_by_lookups(deps, user, schedule_create, schedule_cancel)
    return [schedule_create, schedule_list, schedule_cancel]


def described_by_lookups(
    deps: AgentDeps, user: User, schedule_create: BaseTool, schedule_cancel: BaseTool
) -> None:
    """Questions name a new schedule's times in the person's zone and a cancelled one's
    kind, next time, repetition and whole text."""
    service = deps.scheduler
    assert service is not None

    async def create_now(args: Mapping[str, Any]) -> str:
        current = await deps.users.get(user.id) or user
        try:
            first, *times = service.preview(current, str(args.get("at", "")), args.get("repeat"))
        except ScheduleInputError as exc:
            raise ToolError(str(exc)) from None
        agent = args.get("kind") == "agent"
        kind = "a scheduled task (the assistant acts on its own then)" if agent else "a reminder"
        lines = [f"Create {kind}:", f"- first {first}", "- next times: " + "; ".join(times)]
        if CALL_TAINTED.get():
            lines.append("- written while reading outside content")
        text = shown_block(str(args.get("message", "")))
        return "\n".join([*lines, "- the whole text:", text])

    async def cancel_now(args: Mapping[str, Any]) -> str:
        ident = str(args.get("schedule_id", ""))
        found = await service.get(user.id, ident)
        if found is None:
            raise ToolError("there is no such schedule of yours")
        kind = "scheduled task (the assistant acts on its own)" if found.kind == "agent" else (
            "reminder")
        nxt = "no further runs" if found.next_run_at is None else schedule_words(
            found.next_run_at, found.zone, deps.clock.now(), found.rrule, relative=False)
        lines = [f"Cancel this {kind} ({found.status}; schedule id {shown_text(ident)}):",
                 f"- next: {nxt}"]
        if found.rrule:
            lines.append(f"- repeating: {shown_text(found.rrule)}")
        if found.tainted:
            lines.append("- written while reading outside content")
        return "\n".join([*lines, "- the whole text:", shown_block(found.message)])

    looks_up(schedule_create, Lookup(
        create_now, lambda a: f"the time {shown_text(str(a.get('at', '')))}", "the database"))
    looks_up(schedule_cancel, Lookup(
        cancel_now, lambda a: f"schedule {shown_text(str(a.get('schedule_id', '')))}",
        "the database"))


def schedule_summary(schedule: Schedule, now: datetime) -> dict:
    """A compact description of one schedule for the model."""
    item = {
        "id": schedule.id,
        "kind": schedule.kind,
        "message": schedule_text(schedule, 200),
        "status": schedule.status,
    }
    if schedule.status == "active":
        item["next"] = schedule.describe(now)
    elif schedule.next_run_at is not None:
        item["was_due"] = schedule.next_run_at.astimezone(schedule.zone).isoformat()
    if schedule.rrule:
        item["repeat"] = schedule.rrule
    if schedule.last_error:
        item["last_error"] = schedule.last_error
    return item


def schedule_text(schedule: Schedule, limit: int = 80) -> str:
    """A schedule's message for the model, shortened; one written in a tainted call is
    framed again (reading it back taints the call, so nothing launders through a schedule)."""
    text = _short(schedule.message, limit)
    return frame(OUTSIDE_SCHEDULE, text) if schedule.tainted else text


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def schedule_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """An agent schedule acts later on its own: consequential. A reminder speaks later in
    Panager's place, so it is consequential in a tainted call (outside text could have
    written it), and a repeating one in a run with nobody present; a one-shot reminder is
    ordinary when the run read no outside content."""
    if args.get("kind") == "agent" or view.tainted:
        return CONSEQUENTIAL
    if view.unattended and args.get("repeat"):
        return CONSEQUENTIAL
    return ORDINARY


def describe_schedule(args: Mapping[str, Any]) -> str:
    """The schedule a confirmation question shows."""
    agent = args.get("kind") == "agent"
    kind = "a scheduled task (the assistant acts on its own then)" if agent else "a reminder"
    repeat = f", repeating {shown_text(str(args.get('repeat')))}" if args.get("repeat") else ""
    return (f"Create {kind} at {shown_text(str(args.get('at', '')))}{repeat}:\n"
            f"{shown_block(str(args.get('message', '')))}")


def describe_cancel(args: Mapping[str, Any]) -> str:
    """The cancellation a confirmation question shows."""
    return f"Cancel the schedule {shown_text(str(args.get('schedule_id', '')))}"

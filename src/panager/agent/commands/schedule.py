"""/schedules: list the user's schedules, or cancel one (`/schedules cancel ID`)."""

from __future__ import annotations

from datetime import datetime

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.schedules.occurrences import local_label
from panager.services.schedules.service import Schedule

USAGE = "/schedules [cancel ID]"


@command("schedules", USAGE, "list your reminders and scheduled tasks; cancel one")
async def schedules_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """List schedules, or cancel one by id."""
    service = ctx.deps.scheduler
    if service is None:
        return CommandReply("The scheduler is not available in this setup.", ok=False)
    verb, _, rest = args.partition(" ")
    if not verb:
        return await _list(ctx)
    if verb.lower() in ("cancel", "delete", "rm") and rest.strip():
        return await _cancel(ctx, rest.strip())
    return CommandReply(f"Usage: {USAGE}", ok=False)


async def _list(ctx: CommandContext) -> str:
    schedules = await ctx.deps.scheduler.list(ctx.user.id)
    if not schedules:
        return "You have no reminders or scheduled tasks. Ask me to remind you of something."
    now = ctx.deps.clock.now()
    lines = ["Your schedules:"]
    lines += [schedule_line(s, now) for s in schedules]
    lines.append("Cancel one with /schedules cancel ID.")
    return "\n".join(lines)


def schedule_line(schedule: Schedule, now: datetime) -> str:
    """One schedule as a line (plus a warning line when its last delivery failed)."""
    what = "⏰" if schedule.kind == "reminder" else "🤖"
    message = " ".join(schedule.message.split())
    if len(message) > 60:
        message = message[:59] + "…"
    if schedule.status == "active":
        when = schedule.describe(now)
    else:
        due = local_label(schedule.next_run_at, schedule.timezone) if schedule.next_run_at else "?"
        when = f"{schedule.status.upper()} (was due {due} {schedule.timezone})"
    line = f"  {schedule.id}  {what} {when} — “{message}”"
    if schedule.last_error:
        line += f"\n            ⚠️ {schedule.last_error}"
    return line


async def _cancel(ctx: CommandContext, schedule_id: str) -> CommandReply | str:
    service = ctx.deps.scheduler
    cancelled = await service.cancel(ctx.user.id, schedule_id)
    if cancelled is not None:
        return f"Cancelled {cancelled.id} (“{cancelled.message[:60]}”)."
    existing = await service.get(ctx.user.id, schedule_id)
    if existing is not None:
        return f"{existing.id} is already {existing.status}; nothing to cancel."
    return CommandReply(
        f"No schedule with id {schedule_id!r}. /schedules lists your schedules and their ids.",
        ok=False,
    )

"""/heartbeat, /briefing and /webhook: the system jobs a person turns on (agent/flows/jobs.py)."""

from __future__ import annotations

import re
from datetime import time, timedelta
from urllib.parse import urlencode

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.models import current_model
from panager.services.schedules.recurrence import ScheduleInputError
from panager.services.schedules.system import SystemJobService

HEARTBEAT_USAGE = "/heartbeat [30m 08:00-22:00 | off]"
BRIEFING_USAGE = "/briefing [HH:MM | off]"
WEBHOOK_USAGE = "/webhook [new NAME [--signed] INSTRUCTION… | revoke NAME]"
SIGNED_FLAG = "--signed"
WEBHOOK_FORM_PATH = "/schedules/webhooks/new"
MAX_LINK = 4_000  # characters of a link to the form (a long non-Latin instruction: left out)
_EVERY = re.compile(r"^(\d{1,4})\s*(m|min|h)$", re.IGNORECASE)
_HOURS = re.compile(r"^(\d{1,2}:\d{2})-(\d{1,2}:\d{2})$")
UNAVAILABLE = CommandReply("System jobs are not available in this setup.", ok=False)


def _service(ctx: CommandContext) -> SystemJobService | None:
    return ctx.deps.system_jobs


def parse_every(text: str) -> timedelta:
    """'30m', '45min', '2h' as a timedelta."""
    found = _EVERY.match(text.strip())
    if not found:
        raise ScheduleInputError(f"Could not read the interval {text!r}; write e.g. 30m or 2h.")
    amount = int(found.group(1))
    return timedelta(hours=amount) if found.group(2).lower() == "h" else timedelta(minutes=amount)


def parse_clock(text: str) -> time:
    """'07:30' as a time (00:00–23:59)."""
    try:
        hours, minutes = (int(p) for p in text.strip().split(":"))
        return time(hours, minutes)
    except ValueError:
        raise ScheduleInputError(
            f"Could not read the time {text!r}; write HH:MM, e.g. 07:30."
        ) from None


def parse_hours(text: str) -> tuple[time, time]:
    """'08:00-22:00' as (start, end)."""
    found = _HOURS.match(text.strip())
    if not found:
        raise ScheduleInputError(f"Could not read the hours {text!r}; write e.g. 08:00-22:00.")
    return parse_clock(found.group(1)), parse_clock(found.group(2))


@command("heartbeat", HEARTBEAT_USAGE, "a quiet check that speaks up only when something is near")
async def heartbeat_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show, set or stop the heartbeat."""
    service = _service(ctx)
    if service is None:
        return UNAVAILABLE
    words = args.split()
    if not words:
        beat = await service.heartbeat(ctx.user.id)
        if beat is None:
            return "The heartbeat is off. Turn it on with /heartbeat 30m 08:00-22:00."
        return f"Heartbeat: {beat.describe()} ({ctx.user.timezone}). /heartbeat off stops it."
    if words[0].lower() == "off":
        ended = await service.end(ctx.user.id, "heartbeat")
        return "Heartbeat stopped." if ended else "The heartbeat was already off."
    try:
        every = parse_every(words[0])
        start, end = parse_hours(words[1]) if len(words) > 1 else (time(8), time(22))
        beat = await service.set_heartbeat(ctx.user, every, start, end)
    except ScheduleInputError as exc:
        return CommandReply(f"{exc}\nUsage: {HEARTBEAT_USAGE}", ok=False)
    return (
        f"Heartbeat on: {beat.describe()} ({ctx.user.timezone}). I check what is coming and "
        "write only when something needs you; outside those hours only for an event that "
        "starts before the next check."
    )


@command("briefing", BRIEFING_USAGE, "a daily morning overview of your day")
async def briefing_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show, set or stop the daily briefing."""
    service = _service(ctx)
    if service is None:
        return UNAVAILABLE
    arg = args.strip().lower()
    if not arg:
        job = await service.job(ctx.user.id, "briefing")
        if job is None:
            return "The daily briefing is off. Turn it on with /briefing 07:30."
        at = (job.params or {}).get("at", "?")
        return f"Daily briefing at {at} ({ctx.user.timezone}). /briefing off stops it."
    if arg == "off":
        ended = await service.end(ctx.user.id, "briefing")
        return "Daily briefing stopped." if ended else "The daily briefing was already off."
    try:
        job = await service.set_briefing(ctx.user, parse_clock(arg),
                                         current_model(ctx.deps, ctx.user))
    except ScheduleInputError as exc:
        return CommandReply(f"{exc}\nUsage: {BRIEFING_USAGE}", ok=False)
    first = job.describe(ctx.deps.clock.now())
    return f"Daily briefing set: every day at {arg} ({ctx.user.timezone}), first {first}."


def webhook_form_reply(ctx: CommandContext, service: SystemJobService, rest: str) -> CommandReply:
    """`/webhook new`: the web page's form, filled in. The address (a bearer secret) and a
    signing secret are shown there once, never in a chat, whose messages the chat platform
    keeps; nothing is created here. Bad input is said here already."""
    name, _, instruction = rest.strip().partition(" ")
    signed = instruction.startswith(SIGNED_FLAG + " ")
    instruction = instruction.removeprefix(SIGNED_FLAG + " ") if signed else instruction
    name, instruction = service.check_webhook(name, instruction, signed=signed)
    form = f"{ctx.deps.settings.public_url.rstrip('/')}{WEBHOOK_FORM_PATH}?"
    flag = {"signed": "1"} if signed else {}
    url = form + urlencode({"name": name, "instruction": instruction, **flag})
    filled = "filled in for you"
    if len(url) > MAX_LINK:  # past what servers and proxies take in a request line
        url, filled = form + urlencode({"name": name, **flag}), "paste the instruction there"
    text = (f"Create the webhook {name!r} on the web page ({filled}): its secret address is "
            "shown there once, never in a chat. Use /web if you are not signed in there.")
    return CommandReply(text, link={"url": url, "label": f"Create webhook {name}"})


@command("webhook", WEBHOOK_USAGE, "a secret address that makes me act when something calls it")
async def webhook_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """List, create or revoke the person's webhooks."""
    service = _service(ctx)
    if service is None:
        return UNAVAILABLE
    verb, _, rest = args.strip().partition(" ")
    verb = verb.lower()
    try:
        if verb == "new":
            return webhook_form_reply(ctx, service, rest)
        if verb == "revoke" and rest.strip():
            name = rest.strip()
            done = await service.revoke_webhook(ctx.user.id, name)
            return f"Webhook {name!r} revoked." if done else f"No webhook named {name!r}."
    except ScheduleInputError as exc:
        return CommandReply(f"{exc}\nUsage: {WEBHOOK_USAGE}", ok=False)
    if verb:
        return CommandReply(f"Usage: {WEBHOOK_USAGE}", ok=False)
    hooks = await service.webhooks(ctx.user.id)
    if not hooks:
        return ("You have no webhooks. Create one with /webhook new NAME INSTRUCTION… or on the "
                "web page's Schedules page.")
    lines = ["Your webhooks (each address was shown once, on the web page, when it was created):"]
    lines += [f"  {h.name}{' (signed)' if h.signed else ''} — “{h.instruction}”"
              for h in hooks]
    lines.append("Revoke one with /webhook revoke NAME.")
    return "\n".join(lines)

"""Core commands: /help, /clear, /timezone, /approve, /deny."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, available, command
from panager.agent.tools.profile import validate_zone_name
from panager.agent.turns import approvals
from panager.errors import ToolError


@command("help", "/help", "list commands")
async def help_command(ctx: CommandContext, args: str) -> str:
    """List the commands this user can run."""
    rows = [(c.usage, c.help) for c in await available(ctx)]
    if ctx.front_end == "terminal":
        rows += [
            ("exit, quit, /q", "leave (Ctrl+D also works)"),
            ("line ending in \\", "continues on the next line"),
            ("/paste … /submit", "send long text as one message"),
        ]
    width = max(len(usage) for usage, _ in rows)
    lines = ["Commands (they never use the model):"]
    lines += [f"  {usage:<{width}}  {help_}" for usage, help_ in rows]
    lines.append("Anything else you type goes to the assistant.")
    return "\n".join(lines)


@command("clear", "/clear", "start a new conversation (memories are kept)")
async def clear_command(ctx: CommandContext, args: str) -> str:
    """Forget the conversation thread; long-term memories and schedules stay."""
    question = await ctx.assistant.pending_question(ctx.user)
    if question is not None and not question.expired(ctx.deps.clock.now()):
        return (
            "A question from me is still open (approve or deny the action I asked about); "
            "answer it first, or send a message to decline it, then /clear."
        )
    await ctx.assistant.clear(ctx.user)
    return "Started a new conversation. Your memories and schedules are kept."


@command("timezone", "/timezone [Area/City]", "show or set your time zone")
async def timezone_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show the user's zone, or set it when an IANA name is given."""
    now = ctx.deps.clock.now()
    if not args:
        local = now.astimezone(ctx.user.zone)
        return f"Your time zone is {ctx.user.timezone} (local time {local:%a %Y-%m-%d %H:%M})."
    try:
        zone = validate_zone_name(args)
    except ToolError as exc:
        return CommandReply(str(exc), ok=False)
    user = await ctx.deps.users.set_timezone(ctx.user.id, zone)
    assert user is not None  # the caller is a stored user
    local = now.astimezone(user.zone)
    return f"Time zone set to {zone} (local time {local:%a %Y-%m-%d %H:%M})."


@command("approve", "/approve [ID]", "alone: what waits for your approval; with an ID: "
         "see that held action again and decide")
async def approve_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """List what waits; with an ID, show its stored description and ask again (a typed id
    never runs anything by itself: the Approve comes with the description)."""
    if not args.strip():
        return approvals.waiting_text(await approvals.waiting(ctx.assistant, ctx.user))
    result = await ctx.assistant.approve_proposal(ctx.user, args.strip().split()[0])
    return CommandReply(result.text, link=result.link, ok=result.ok, offers=result.offers)


@command("deny", "/deny ID", "refuse an action held for your approval")
async def deny_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Refuse the held call `ID`: it never runs."""
    if not args.strip():
        return CommandReply("Usage: /deny ID (/approve alone lists what waits).", ok=False)
    result = await ctx.assistant.deny_proposal(ctx.user, args.strip().split()[0])
    return CommandReply(result.text, ok=result.ok)

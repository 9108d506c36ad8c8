"""/connect google and /disconnect google."""

from __future__ import annotations

from panager.agent.commands import CommandContext, CommandReply, command
from panager.services.google.service import NOT_CONFIGURED, SCOPE_NAMES, STATE_TTL

LINK_LABEL = "Connect Google"


def _provider_problem(args: str, verb: str) -> CommandReply | None:
    if args.strip().lower() == "google":
        return None
    return CommandReply(f"Usage: /{verb} google (Google Calendar and Tasks).", ok=False)


@command("connect", "/connect google", "link Google Calendar and Tasks")
async def connect_command(ctx: CommandContext, args: str) -> CommandReply:
    """Hand out a consent link (valid for a few minutes, usable once)."""
    problem = _provider_problem(args, "connect")
    if problem is not None:
        return problem
    google = ctx.deps.google
    if google is None:
        return CommandReply(NOT_CONFIGURED, ok=False)
    account = await google.account(ctx.user.id)
    url = await google.create_link(ctx.user.id)
    minutes = int(STATE_TTL.total_seconds() // 60)
    if account is not None and account.connected:
        allowed = " and ".join(SCOPE_NAMES.get(s, s) for s in account.scopes)
        who = f" as {account.email}" if account.email else ""
        text = (
            f"Google is already connected{who} ({allowed}). To link again (another account, "
            f"or to allow more), open this link within {minutes} minutes:"
        )
    else:
        text = (
            f"Open this link within {minutes} minutes to let me use your Google Calendar and "
            "Tasks. Only you should open it."
        )
    return CommandReply(text, link={"url": url, "label": LINK_LABEL})


@command("disconnect", "/disconnect google", "unlink Google (revokes and deletes tokens)")
async def disconnect_command(ctx: CommandContext, args: str) -> CommandReply:
    """Revoke the grant at Google and delete the stored tokens."""
    problem = _provider_problem(args, "disconnect")
    if problem is not None:
        return problem
    google = ctx.deps.google
    if google is None:
        return CommandReply(NOT_CONFIGURED, ok=False)
    if not await google.disconnect(ctx.user.id):
        return CommandReply("Google is not connected; nothing to do.")
    return CommandReply(
        "Google is disconnected: access revoked and your tokens deleted. "
        "Use /connect google to link again."
    )

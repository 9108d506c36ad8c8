"""Access commands: /start CODE (join with an invite) and the admins' /invite."""

from __future__ import annotations

from datetime import timedelta

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.access import (
    DEFAULT_INVITE_TTL,
    MAX_INVITE_USES,
    AccessError,
    describe_invite,
    parse_duration,
)
from panager.services.telegram_updates import TelegramState


@command("start", "/start CODE", "join with an invite code")
async def start_command(ctx: CommandContext, args: str) -> CommandReply:
    """Redeem an invite code; already registered users are simply greeted."""
    access = ctx.deps.access
    if ctx.user.status == "active":
        return CommandReply(
            f"Hi {ctx.user.name}, you're all set — just send me a message. Type /help for commands."
        )
    if not args:
        return CommandReply(
            "Send /start followed by your invite code, e.g. /start K7QXM9PA2B.", ok=False
        )
    result = await access.redeem(args.split()[0], ctx.user)
    return CommandReply(result.message, ok=result.ok)


@command(
    "invite",
    "/invite [USES] [EXPIRES]",
    "create an invite code (admins), e.g. /invite 3 14d",
    admin_only=True,
)
async def invite_command(ctx: CommandContext, args: str) -> CommandReply:
    """Create an invite code: single use and valid for 7 days unless told otherwise."""
    try:
        uses, expires_in = parse_invite_args(args)
        invite = await ctx.deps.access.create_invite(
            ctx.user.id, max_uses=uses, expires_in=expires_in
        )
    except AccessError as exc:
        return CommandReply(f"{exc} Usage: /invite [USES] [EXPIRES], e.g. /invite 3 14d", ok=False)
    text = (
        f"Invite code: {invite.code} ({describe_invite(invite)}).\n"
        f"The new user sends me a DM: /start {invite.code}"
    )
    link = await TelegramState(ctx.deps.pool).invite_link(invite.code)
    if link:
        text += f"\nOn Telegram they open: {link}"
    return CommandReply(text)


def parse_invite_args(args: str) -> tuple[int, timedelta | None]:
    """'3 14d' → (3, 14 days); a bare number is uses, anything else is an expiry."""
    uses = 1
    expires_in: timedelta | None = DEFAULT_INVITE_TTL
    for token in args.split():
        if token.isdecimal():  # not isdigit: int() refuses '²'
            if len(token.lstrip("0")) > len(str(MAX_INVITE_USES)):  # int() of 5,000 digits fails
                raise AccessError(f"Uses must be between 1 and {MAX_INVITE_USES}.")
            uses = int(token)
        else:
            expires_in = parse_duration(token)
    return uses, expires_in

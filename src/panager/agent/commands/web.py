"""/web (a one-time sign-in link to the web page) and /web signout."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.web_sessions import LINK_TTL

LINK_LABEL = "Open Panager"
SIGNIN_PATH = "/signin"


def signin_url(public_url: str, token: str) -> str:
    """The address a sign-in link points at."""
    return f"{public_url.rstrip('/')}{SIGNIN_PATH}?token={token}"


@command("web", "/web [signout]", "a one-time sign-in link to your web page")
async def web_command(ctx: CommandContext, args: str) -> CommandReply:
    """Hand out a sign-in link, or end every web session of this user."""
    service = ctx.deps.web_sessions
    arg = args.strip().lower()
    if arg == "signout":
        ended = await service.end_all(ctx.user.id)
        noun = "session" if ended == 1 else "sessions"
        return CommandReply(f"Signed out of the web page everywhere ({ended} {noun} ended).")
    if arg:
        return CommandReply("Usage: /web for a sign-in link, /web signout to sign out.", ok=False)
    token = await service.create_link(ctx.user.id)
    minutes = int(LINK_TTL.total_seconds() // 60)
    text = (
        f"Your sign-in link for the web page works once, within {minutes} minutes. "
        "Only you should open it; /web signout signs out every browser."
    )
    return CommandReply(text, link={"url": signin_url(ctx.deps.settings.public_url, token),
                                    "label": LINK_LABEL})

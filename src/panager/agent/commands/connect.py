"""/connect <provider> and /disconnect <provider>: Google's consent link (and `mail` for
Gmail); a form-connect provider (CalDAV, …) is connected on the web page's Connections page
only, so its passwords are never typed in a chat — the command answers with that page."""

from __future__ import annotations

from panager.agent.commands import CommandContext, CommandReply, command
from panager.providers.google.service import MAIL_SCOPES, NOT_CONFIGURED, SCOPE_NAMES, STATE_TTL
from panager.services.accounts.provider import FormConnect

LINK_LABEL = "Connect Google"


def _provider_problem(args: str, verb: str) -> CommandReply | None:
    if args.strip().lower() == "google":
        return None
    extra = " or /connect google mail (adds Gmail)" if verb == "connect" else ""
    return CommandReply(f"Usage: /{verb} google (Google Calendar and Tasks){extra}.", ok=False)


def _form_connect(ctx: CommandContext, args: str, verb: str) -> CommandReply | None:
    """The Connections page, for a provider whose accounts are connected with a form."""
    accounts = ctx.deps.accounts
    word = (args.strip().lower().split() or [""])[0]
    provider = accounts.provider(word) if accounts is not None and word != "google" else None
    if provider is None or not isinstance(provider.connect, FormConnect):
        return None
    url = ctx.deps.settings.public_url.rstrip("/") + "/connections"
    what = "Add" if verb == "connect" else "Remove"
    text = (f"{what} your {provider.title} account on the web page's Connections page "
            "(passwords are typed there only, never in a chat). Use /web if you are not "
            "signed in there.")
    return CommandReply(text, link={"url": url, "label": f"{provider.title} connections"})


def _names(scopes: tuple[str, ...]) -> str:
    return " and ".join(SCOPE_NAMES.get(s, s) for s in scopes)


@command(
    "connect",
    "/connect google [mail]",
    "link Google Calendar and Tasks; `mail` adds Gmail (read, drafts, approved sends)",
)
async def connect_command(ctx: CommandContext, args: str) -> CommandReply:
    """Hand out a consent link (valid for a few minutes, usable once)."""
    form = _form_connect(ctx, args, "connect")
    if form is not None:
        return form
    words = args.strip().lower().split()
    mail = words == ["google", "mail"]
    problem = None if mail else _provider_problem(args, "connect")
    if problem is not None:
        return problem
    google = ctx.deps.google
    if google is None:
        return CommandReply(NOT_CONFIGURED, ok=False)
    account = await google.account(ctx.user.id)
    url = await google.create_link(ctx.user.id, MAIL_SCOPES if mail else ())
    minutes = int(STATE_TTL.total_seconds() // 60)
    if mail:
        who = f" ({account.email})" if account and account.connected and account.email else ""
        text = (
            f"Open this link within {minutes} minutes to let me read and search your Gmail and "
            "write drafts; I send a mail only after you approve it as shown. Use the Google "
            f"account already linked{who}: another account is refused. Only you should open it."
        )
        return CommandReply(text, link={"url": url, "label": LINK_LABEL})
    if account is not None and account.connected:
        allowed = _names(account.scopes)
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
    form = _form_connect(ctx, args, "disconnect")
    if form is not None:
        return form
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

"""/connect <provider> and /disconnect <provider>: an OAuth provider's consent link (and
`mail` for its mailbox, e.g. Gmail); a form-connect provider (CalDAV, …) is connected on the
web page's Connections page only, so its passwords are never typed in a chat — the command
answers with that page. Which provider connects how is asked of the registry
(`AccountService.oauth_links`, `form_providers`), never of a provider's own code."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.services.accounts.oauth import STATE_TTL, UNCONFIGURED, OAuthLink
from panager.services.accounts.provider import MAIL


def _words(args: str) -> list[str]:
    return args.strip().lower().split()


def _usage(verb: str) -> CommandReply:
    extra = " or /connect google mail (adds Gmail)" if verb == "connect" else ""
    return CommandReply(f"Usage: /{verb} google (Google Calendar and Tasks){extra}.", ok=False)


def _form_connect(ctx: CommandContext, word: str, verb: str) -> CommandReply | None:
    """The Connections page, for a provider whose accounts are connected with a form."""
    accounts = ctx.deps.accounts
    forms = accounts.form_providers() if accounts is not None else []
    provider = next((p for p in forms if p.name == word), None)
    if provider is None:
        return None
    url = ctx.deps.settings.public_url.rstrip("/") + "/connections"
    what = "Add" if verb == "connect" else "Remove"
    text = (f"{what} your {provider.title} account on the web page's Connections page "
            "(passwords are typed there only, never in a chat). Use /web if you are not "
            "signed in there.")
    return CommandReply(text, link={"url": url, "label": f"{provider.title} connections"})


def _oauth(ctx: CommandContext, word: str) -> OAuthLink | CommandReply | None:
    """The OAuth provider `word` names, or why it cannot connect (None: not an OAuth
    provider's word at all)."""
    accounts = ctx.deps.accounts
    link = accounts.oauth_link(word) if accounts is not None else None
    if link is not None:
        return link
    if word in UNCONFIGURED:
        return CommandReply(UNCONFIGURED[word], ok=False)
    return None


@command(
    "connect",
    "/connect google [mail]",
    "link Google Calendar and Tasks; `mail` adds Gmail (read, drafts, approved sends)",
)
async def connect_command(ctx: CommandContext, args: str) -> CommandReply:
    """Hand out a consent link (valid for a few minutes, usable once)."""
    words = _words(args)
    word = (words or [""])[0]
    form = _form_connect(ctx, word, "connect")
    if form is not None:
        return form
    mail = words[1:] == ["mail"]
    if words[1:] and not mail:
        return _usage("connect")
    link = _oauth(ctx, word)
    if link is None or isinstance(link, CommandReply):
        return link or _usage("connect")
    assert ctx.deps.accounts is not None
    account = await link.linked(ctx.user.id)
    scopes = ctx.deps.accounts.oauth_scopes(link.name, MAIL) if mail else ()
    url = await link.create_link(ctx.user.id, scopes)
    minutes = int(STATE_TTL.total_seconds() // 60)
    label = f"Connect {link.title}"
    if mail:
        who = f" ({account.label})" if account and account.connected and account.label else ""
        text = (
            f"Open this link within {minutes} minutes to let me read and search your "
            f"{link.mail_title} and write drafts; I send a mail only after you approve it as "
            f"shown. Use the {link.title} account already linked{who}: another account is "
            "refused. Only you should open it."
        )
        return CommandReply(text, link={"url": url, "label": label})
    if account is not None and account.connected:
        allowed = " and ".join(link.scope_names.get(s, s) for s in account.scopes)
        who = f" as {account.label}" if account.label else ""
        text = (
            f"{link.title} is already connected{who} ({allowed}). To link again (another "
            f"account, or to allow more), open this link within {minutes} minutes:"
        )
    else:
        text = (
            f"Open this link within {minutes} minutes to let me use your {link.title} "
            f"{link.access}. Only you should open it."
        )
    return CommandReply(text, link={"url": url, "label": label})


@command("disconnect", "/disconnect google", "unlink Google (revokes and deletes tokens)")
async def disconnect_command(ctx: CommandContext, args: str) -> CommandReply:
    """Revoke the grant at the provider and delete the stored tokens."""
    words = _words(args)
    word = (words or [""])[0]
    form = _form_connect(ctx, word, "disconnect")
    if form is not None:
        return form
    link = _oauth(ctx, word) if len(words) == 1 else None
    if link is None or isinstance(link, CommandReply):
        return link or _usage("disconnect")
    if not await link.disconnect(ctx.user.id):
        return CommandReply(f"{link.title} is not connected; nothing to do.")
    return CommandReply(
        f"{link.title} is disconnected: access revoked and your tokens deleted. "
        f"Use /connect {link.name} to link again."
    )

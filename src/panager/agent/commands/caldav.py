"""/connect caldav: the link to the web page's Connections page (passwords are never typed
into a chat), and /disconnect caldav, which points there too."""

from __future__ import annotations

from panager.agent.commands import CommandContext, CommandReply

LINK_LABEL = "Open Connections"
CONNECTIONS_PATH = "/connections#caldav"


def connect_caldav(ctx: CommandContext) -> CommandReply:
    """Where a CalDAV account is added: typed on the web page only, checked there at once."""
    accounts = ctx.deps.accounts
    if accounts is None or accounts.provider("caldav") is None:
        return CommandReply(
            "CalDAV accounts need PANAGER_SECRET_KEY set on the server (passwords are stored "
            "sealed with it); ask the person running Panager.",
            ok=False,
        )
    url = ctx.deps.settings.public_url.rstrip("/") + CONNECTIONS_PATH
    return CommandReply(
        "Add a CalDAV calendar (iCloud, Fastmail, Nextcloud, Radicale, …) on the web page's "
        "Connections page: passwords are never typed into a chat. Use an app-specific "
        "password; it is checked at once. Not signed in there? /web gives you a link.",
        link={"url": url, "label": LINK_LABEL},
    )


def disconnect_caldav(ctx: CommandContext) -> CommandReply:
    """CalDAV accounts are removed on the Connections page (there may be several)."""
    url = ctx.deps.settings.public_url.rstrip("/") + CONNECTIONS_PATH
    return CommandReply(
        "Remove a CalDAV account on the web page's Connections page (each account has its "
        "Remove button; what was cached with it is deleted).",
        link={"url": url, "label": LINK_LABEL},
    )

"""The web page's pages, one module per area; `web.routes` registers them.

Handlers receive the request and the signed-in `WebSession`; everything they
read or change is keyed by `session.user` on the server side. Ids from URLs
and forms only ever select among that user's own rows (others' → 404).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from panager.frontends.web.render import message_page
from panager.services.web_sessions import WebSession

NOTICES = {
    "created": "Saved.",
    "saved": "Saved.",
    "paused": "Paused: it will not fire until you resume it.",
    "resumed": "Resumed.",
    "cancelled": "Cancelled.",
    "deleted": "Deleted.",
    "disconnected": "Google is disconnected.",
    "connected": "Connected.",
    "removed": "Removed: the account and its stored password are deleted.",
    "allowed": "User allowed.",
    "blocked": "User blocked: their web sessions ended and their messages are refused.",
    "revoked": "Invite revoked.",
    "invited": "Invite created.",
    "profile-saved": "Profile saved.",
    "profile-approved": "Profile change applied.",
    "profile-rejected": "Profile change rejected.",
    "webhook-revoked": "Webhook revoked: its address no longer works.",
    "heartbeat-on": "Heartbeat on: it writes only when something needs you.",
    "heartbeat-off": "Heartbeat off.",
    "heartbeat-invalid": (
        "Heartbeat not changed: every 15 minutes at the most often (and at least once a day), "
        "hours as HH:MM with a different start and end."
    ),
}


def page(session: WebSession, nav: str, title: str, request: web.Request | None = None,
         **context: Any) -> dict:
    """The context every template gets (session for the CSRF token, nav, notice)."""
    notice = NOTICES.get(request.query.get("done", "")) if request is not None else None
    return {"session": session, "nav": nav, "title": title, "notice": notice, "error": None,
            **context}


def not_found(session: WebSession, what: str = "page") -> web.Response:
    """The 404 page: also what another user's id gets (no hint that it exists)."""
    return message_page(404, "Not found", f"There is no such {what} here.", session=session)


def see_other(path: str, done: str | None = None) -> web.HTTPSeeOther:
    """Redirect after a change (so a reload does not repeat it)."""
    return web.HTTPSeeOther(f"{path}?done={done}" if done else path)


async def form_of(request: web.Request) -> dict[str, str]:
    """The posted form as plain strings."""
    return {k: v for k, v in (await request.post()).items() if isinstance(v, str)}

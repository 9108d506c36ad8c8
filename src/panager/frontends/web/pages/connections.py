"""Connections: Google linked or not; connect (the usual consent link) and disconnect."""

from __future__ import annotations

from aiohttp import web

from panager.frontends.web.pages import page, see_other
from panager.frontends.web.render import render
from panager.providers.google.service import MAIL_SCOPES, NOT_CONFIGURED, SCOPE_NAMES
from panager.services.web_sessions import WebSession


class ConnectionsPage:
    """/connections."""

    def __init__(self, app) -> None:
        self.app = app

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [
            web.get("/connections", gate.page(self.index)),
            web.post("/connections/google/connect", gate.page(self.connect)),
            web.post("/connections/google/mail", gate.page(self.connect_mail)),
            web.post("/connections/google/disconnect", gate.page(self.disconnect)),
        ]

    async def index(self, request: web.Request, session: WebSession) -> web.Response:
        """The state of each connection."""
        google = self.app.deps.google
        account = await google.account(session.user.id) if google is not None else None
        scopes = [SCOPE_NAMES.get(s, s) for s in account.scopes] if account else []
        has_mail = bool(account and set(MAIL_SCOPES) <= set(account.scopes))
        return render("connections.html", **page(
            session, "connections", "Connections", request, configured=google is not None,
            not_configured=NOT_CONFIGURED, account=account, scopes=scopes, has_mail=has_mail))

    async def connect(self, request: web.Request, session: WebSession) -> web.Response:
        """On to Google's consent page through a fresh single-use link."""
        google = self.app.deps.google
        if google is None:
            raise see_other("/connections")
        raise web.HTTPSeeOther(await google.create_link(session.user.id))

    async def connect_mail(self, request: web.Request, session: WebSession) -> web.Response:
        """Add Gmail to the linked account (incremental consent; the same account only)."""
        google = self.app.deps.google
        if google is None:
            raise see_other("/connections")
        raise web.HTTPSeeOther(await google.create_link(session.user.id, MAIL_SCOPES))

    async def disconnect(self, request: web.Request, session: WebSession) -> web.Response:
        """Revoke and delete the user's Google tokens."""
        google = self.app.deps.google
        if google is not None:
            await google.disconnect(session.user.id)
        raise see_other("/connections", "disconnected")

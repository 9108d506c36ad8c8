"""Connections: Google linked or not (the registry's OAuth link named "google": connect
through the consent link, disconnect), and
every form-connect provider's accounts: its form, typed here only, checked before anything is
stored, its secret fields sealed (services/accounts/connections.py) and never shown back."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import render
from panager.providers.caldav.provider import CalDavProvider
from panager.services.accounts.connections import split_fields
from panager.services.accounts.oauth import UNCONFIGURED, OAuthLink
from panager.services.accounts.provider import MAIL, FormConnect, FormProvider, ProviderError
from panager.services.web_sessions import WebSession

log = logging.getLogger(__name__)


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
            web.post("/connections/{provider}/add", gate.page(self.add)),
            web.post("/connections/{provider}/{key}/remove", gate.page(self.remove)),
            web.post("/connections/caldav/{key}/calendars", gate.page(self.caldav_choose)),
        ]

    def _form_providers(self) -> list[Any]:
        accounts = self.app.deps.accounts
        providers = accounts.providers if accounts is not None else []
        return [p for p in providers
                if isinstance(p.connect, FormConnect) and isinstance(p, FormProvider)]

    async def _forms(self, session: WebSession) -> list[dict]:
        connections = self.app.deps.connections
        found = []
        for provider in self._form_providers():
            stored = (await connections.accounts(session.user.id, provider.name)
                      if connections is not None else [])
            found.append({"provider": provider, "fields": provider.connect.fields,
                          "accounts": stored})
        return found

    def _google(self) -> OAuthLink | None:
        accounts = self.app.deps.accounts
        return accounts.oauth_link("google") if accounts is not None else None

    def _mail_scopes(self) -> tuple[str, ...]:
        accounts = self.app.deps.accounts
        return accounts.oauth_scopes("google", MAIL) if accounts is not None else ()

    async def index(
        self, request: web.Request, session: WebSession, error: str | None = None,
        typed: dict[str, str] | None = None,
    ) -> web.Response:
        """The state of each connection."""
        google = self._google()
        account = await google.linked(session.user.id) if google is not None else None
        names = google.scope_names if google is not None else {}
        scopes = [names.get(s, s) for s in account.scopes] if account else []
        has_mail = bool(account and set(self._mail_scopes()) <= set(account.scopes))
        return render("connections.html", **page(
            session, "connections", "Connections", request, configured=google is not None,
            not_configured=UNCONFIGURED["google"], account=account, scopes=scopes,
            has_mail=has_mail,
            forms=await self._forms(session), form_error=error, typed=typed or {},
            sealing=self.app.deps.connections is not None), status=400 if error else 200)

    async def add(self, request: web.Request, session: WebSession) -> web.Response:
        """Check what was typed with the provider; store the account only when it works."""
        name = request.match_info["provider"]
        provider = next((p for p in self._form_providers() if p.name == name), None)
        connections = self.app.deps.connections
        if provider is None or connections is None:
            raise see_other("/connections")
        values = await form_of(request)
        plain = {f.name: values.get(f.name, "") for f in provider.connect.fields if not f.secret}
        try:
            secret, plain = split_fields(provider.connect, values)
            checked = await provider.check(session.user.id, {**plain, **secret})
        except (ValueError, ProviderError) as exc:
            return await self.index(request, session, f"{provider.title}: {exc}",
                                    {"provider": name, **plain})
        await connections.add(session.user.id, name, checked.label, secret,
                              {**plain, **checked.settings})
        log.info("%s account connected for user %s", provider.title, session.user.id)
        raise see_other("/connections", "connected")

    async def remove(self, request: web.Request, session: WebSession) -> web.Response:
        """Delete one form-connected account, its sealed credentials and what the provider
        keeps of it."""
        connections = self.app.deps.connections
        name, key = request.match_info["provider"], request.match_info["key"]
        if connections is not None:
            await connections.remove(session.user.id, name, key)
        for provider in self._form_providers():
            if provider.name == name:
                provider.forget(session.user.id, key)
        raise see_other("/connections", "removed")

    async def caldav_choose(self, request: web.Request, session: WebSession) -> web.Response:
        """A CalDAV account's calendars: which are read, and which one new events go to."""
        accounts = self.app.deps.accounts
        provider = accounts.provider("caldav") if accounts is not None else None
        if not isinstance(provider, CalDavProvider):
            raise see_other("/connections")
        form = await request.post()
        read = frozenset(str(v) for v in form.getall("read", []))
        default = str(form.get("default", "")) or None
        if not await provider.choose(session.user.id, request.match_info["key"], read, default):
            return not_found(session, "account")
        raise see_other("/connections", "saved")

    async def connect(self, request: web.Request, session: WebSession) -> web.Response:
        """On to Google's consent page through a fresh single-use link."""
        google = self._google()
        if google is None:
            raise see_other("/connections")
        raise web.HTTPSeeOther(await google.create_link(session.user.id))

    async def connect_mail(self, request: web.Request, session: WebSession) -> web.Response:
        """Add Gmail to the linked account (incremental consent; the same account only)."""
        google = self._google()
        if google is None:
            raise see_other("/connections")
        raise web.HTTPSeeOther(await google.create_link(session.user.id, self._mail_scopes()))

    async def disconnect(self, request: web.Request, session: WebSession) -> web.Response:
        """Revoke and delete the user's Google tokens."""
        google = self._google()
        if google is not None:
            await google.disconnect(session.user.id)
        raise see_other("/connections", "disconnected")

"""Connections: Google linked or not (the usual consent link, disconnect); CalDAV accounts
typed here only — checked at once, sealed, their calendars chosen, removable."""

from __future__ import annotations

from aiohttp import web

from panager.frontends.web.pages import form_of, not_found, page, see_other
from panager.frontends.web.render import render
from panager.providers.caldav.provider import CalDavProvider, NeedsFingerprint
from panager.providers.google.service import MAIL_SCOPES, NOT_CONFIGURED, SCOPE_NAMES
from panager.services.accounts.provider import ProviderError
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
            web.post("/connections/caldav/add", gate.page(self.caldav_add)),
            web.post(r"/connections/caldav/{key:[0-9a-f]+}/calendars",
                     gate.page(self.caldav_choose)),
            web.post(r"/connections/caldav/{key:[0-9a-f]+}/remove",
                     gate.page(self.caldav_remove)),
        ]

    async def index(self, request: web.Request, session: WebSession,
                    **caldav: object) -> web.Response:
        """The state of each connection."""
        google = self.app.deps.google
        account = await google.account(session.user.id) if google is not None else None
        scopes = [SCOPE_NAMES.get(s, s) for s in account.scopes] if account else []
        has_mail = bool(account and set(MAIL_SCOPES) <= set(account.scopes))
        provider = self._caldav()
        accounts = await provider.stored(session.user.id) if provider is not None else []
        status = 200 if not caldav.get("caldav_error") else 400
        response = render("connections.html", **page(
            session, "connections", "Connections", request, configured=google is not None,
            not_configured=NOT_CONFIGURED, account=account, scopes=scopes, has_mail=has_mail,
            caldav_on=provider is not None, caldav_accounts=accounts,
            **{"caldav_notice": None, "caldav_error": None, "caldav_form": {},
               "caldav_fingerprint": None, **caldav}))
        response.set_status(status)
        return response

    def _caldav(self) -> CalDavProvider | None:
        accounts = self.app.deps.accounts
        found = accounts.provider("caldav") if accounts is not None else None
        return found if isinstance(found, CalDavProvider) else None

    async def caldav_add(self, request: web.Request, session: WebSession) -> web.Response:
        """Check the typed account at once; store it sealed only when it works."""
        provider = self._caldav()
        if provider is None:
            raise see_other("/connections")
        form = await form_of(request)
        kept = {k: form.get(k, "") for k in ("url", "username", "fingerprint")}  # not the password
        try:
            _, said = await provider.add(session.user.id, form)
        except NeedsFingerprint as exc:
            return await self.index(request, session, caldav_error=exc.message,
                                    caldav_form=kept, caldav_fingerprint=exc.fingerprint)
        except ProviderError as exc:
            return await self.index(request, session, caldav_error=exc.message,
                                    caldav_form=kept)
        return await self.index(request, session, caldav_notice=said)

    async def caldav_choose(self, request: web.Request, session: WebSession) -> web.Response:
        """Which calendars are read, and which one new events go to."""
        provider = self._caldav()
        if provider is None:
            raise see_other("/connections")
        key = request.match_info["key"]
        form = await request.post()
        read = frozenset(str(v) for v in form.getall("read", []))
        default = str(form.get("default", "")) or None
        if not await provider.choose(session.user.id, key, read, default):
            return not_found(session, "account")
        raise see_other("/connections", "saved")

    async def caldav_remove(self, request: web.Request, session: WebSession) -> web.Response:
        """Delete the account, its sealed password and its cached calendars."""
        provider = self._caldav()
        if provider is None:
            raise see_other("/connections")
        if not await provider.remove(session.user.id, request.match_info["key"]):
            return not_found(session, "account")
        raise see_other("/connections", "deleted")

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

"""An OAuth link's pages, for every OAuth provider: the start page (GET: whose link; POST:
Continue) and the provider's callback.

Routes: `/connect/<provider>/start` and `/connect/<provider>/callback`, and the older
`/oauth/<provider>/…` — Google's link addresses from before providers existed, whose
callback operators registered as the redirect URI in Google Cloud, so it keeps working
unchanged. A provider is served only at its own `start_path` and `callback_path`.

A link names its Panager user and needs Continue. The page sets a random cookie
(`panager_<provider>`, SameSite=Lax so the provider's redirect back brings it, scoped to
the link's folder) and its form carries the same value; Continue binds the link's state
to the cookie's hash, and the callback must come with that cookie. So the consent
address, once a browser has continued, works only in that browser: forwarded to someone
else (or reached by another site posting Continue for its own link) it finishes nothing.
A browser signed in to Panager as someone else can neither continue nor finish a link.
The callback completes the link in this process (`finish_link`) and replays the person's
pending message here too, in a background task the server's closer waits for.
"""

from __future__ import annotations

import hmac
import html
import logging
import re
import secrets
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from panager.frontends.web.auth import COOKIE
from panager.frontends.web.oauth_pages import (
    CONFIRM_FORM,
    CONFIRM_TEXT,
    PAGE,
    SECURITY_HEADERS,
    render_page,
)
from panager.services.accounts.oauth import (
    STATE_TTL,
    Browser,
    LinkOutcome,
    OAuthLink,
    finish_link,
)

if TYPE_CHECKING:
    from panager.app import App
    from panager.frontends.web.running import WebServer

log = logging.getLogger(__name__)

LINK_COOKIE_AGE = 3 * STATE_TTL  # outlives the link it continues
_LINK_VALUE = re.compile(r"[A-Za-z0-9_-]{32}")
_PROVIDER = "{provider:[a-z][a-z0-9_]{0,31}}"


def link_cookie(link: OAuthLink) -> str:
    """The name of the cookie a provider's link page sets ("panager_google")."""
    return f"panager_{link.name}"


def link_key(
    request: web.Request, link: OAuthLink, sent: object = None, *, form: bool = False
) -> bytes | None:
    """The hash of this browser's link cookie; with `form`, only when the form's `browser`
    field repeats it (a page of another site can neither read the cookie nor, SameSite,
    make the browser send it with its post)."""
    kept = request.cookies.get(link_cookie(link), "")
    if not _LINK_VALUE.fullmatch(kept):
        return None
    if form and not (isinstance(sent, str) and hmac.compare_digest(sent, kept)):
        return None
    return Browser.key_of(kept)


class OAuthLinkPages:
    """The handlers of every OAuth provider's start page, Continue and callback."""

    def __init__(self, app: App, server: WebServer) -> None:
        self.app = app
        self.server = server
        self.secure = app.settings.public_url.lower().startswith("https://")

    def routes(self) -> list[web.RouteDef]:
        """Start page, Continue, callback — under /connect/ and the older /oauth/."""
        found: list[web.RouteDef] = []
        for base in ("/connect", "/oauth"):
            found += [
                web.get(f"{base}/{_PROVIDER}/start", self.start),
                web.post(f"{base}/{_PROVIDER}/start", self.continue_),
                web.get(f"{base}/{_PROVIDER}/callback", self.callback),
            ]
        return found

    def _link(self, request: web.Request) -> OAuthLink | None:
        """The OAuth provider this address belongs to (its own paths only)."""
        accounts = self.app.deps.accounts
        link = accounts.oauth_link(request.match_info["provider"]) if accounts else None
        if link is None or request.path not in (link.start_path, link.callback_path):
            return None
        return link

    def _not_configured(self, request: web.Request) -> web.Response:
        return render_page("not_configured", name=request.match_info["provider"])

    async def _owner(self, user_id: int | None) -> str:
        user = await self.app.deps.users.get(user_id) if user_id is not None else None
        return user.username if user is not None else "unknown"

    async def _signed_in(self, request: web.Request) -> int | None:
        """The Panager user this browser's web session belongs to, if any."""
        session = await self.app.deps.web_sessions.lookup(request.cookies.get(COOKIE))
        return session.user.id if session is not None else None

    async def _checked(self, link: OAuthLink, state: str | None) -> dict | LinkOutcome:
        """The link's state row, or why it cannot be continued."""
        try:
            row = await link.states.check(state)
            if not isinstance(row, LinkOutcome) and not await link.may_link(row["user_id"]):
                return LinkOutcome(False, "blocked", row["user_id"])
        except Exception as exc:  # malformed input must never become a 500
            log.warning("%s start refused a malformed link (%s)", link.title,
                        type(exc).__name__)
            return LinkOutcome(False, "forged")
        return row

    async def start(self, request: web.Request) -> web.Response:
        """A page naming the Panager user the link belongs to, with a Continue button."""
        link = self._link(request)
        if link is None:
            return self._not_configured(request)
        state = request.query.get("state")
        row = await self._checked(link, state)
        if isinstance(row, LinkOutcome):
            self.server.counters[("oauth_start", row.reason)] += 1
            return render_page(row.reason, link=link)
        kept = request.cookies.get(link_cookie(link), "")
        cookie = kept if _LINK_VALUE.fullmatch(kept) else secrets.token_urlsafe(24)
        owner = html.escape(await self._owner(row["user_id"]))
        instance = html.escape(urlsplit(self.app.settings.public_url).netloc or "this instance")
        title = html.escape(link.title)
        form = CONFIRM_FORM.format(
            action=link.start_path, state=html.escape(state or "", quote=True), browser=cookie,
            title=title,
        )
        body = PAGE.format(
            title=f"Link {title} to @{owner} on {instance}",
            text=CONFIRM_TEXT.format(owner=owner, instance=instance, title=title,
                                     access=html.escape(link.access)),
            icon="🔗", extra=form,
        )
        response = web.Response(text=body, content_type="text/html", headers=SECURITY_HEADERS)
        response.set_cookie(
            link_cookie(link), cookie, max_age=int(LINK_COOKIE_AGE.total_seconds()),
            httponly=True, samesite="Lax", secure=self.secure,
            path=link.start_path.rsplit("/", 1)[0],
        )
        return response

    async def continue_(self, request: web.Request) -> web.Response:
        """The Continue button: bind the link to this browser, then on to the provider's
        consent page; else a page saying why not."""
        link = self._link(request)
        if link is None:
            return self._not_configured(request)
        form = await request.post()
        state = str(form.get("state") or "") or None
        row = await self._checked(link, state)
        target = row if isinstance(row, LinkOutcome) else await self._bind(
            request, link, state, row, form.get("browser"))
        if isinstance(target, LinkOutcome):
            self.server.counters[("oauth_start", target.reason)] += 1
            return render_page(target.reason, link=link)
        raise web.HTTPFound(target, headers={"Cache-Control": "no-store"})

    async def _bind(
        self, request: web.Request, link: OAuthLink, state: str | None, row: dict,
        sent: object,
    ) -> str | LinkOutcome:
        """The consent address for a browser that came from the link's page and is not
        signed in as someone else; the state is now this browser's."""
        owner = row["user_id"]
        signed_in = await self._signed_in(request)
        if signed_in is not None and signed_in != owner:
            return LinkOutcome(False, "other_browser", owner)
        key = link_key(request, link, sent, form=True)
        if key is None:
            return LinkOutcome(False, "no_cookie", owner)
        if not await link.states.bind(state, key):
            return LinkOutcome(False, "other_browser", owner)
        try:
            return await link.consent_url(state)
        except Exception as exc:
            log.warning("%s start refused a malformed link (%s)", link.title,
                        type(exc).__name__)
            return LinkOutcome(False, "forged")

    async def callback(self, request: web.Request) -> web.Response:
        """Finish linking; on success, replay the person's pending message in the
        background."""
        link = self._link(request)
        if link is None:
            return self._not_configured(request)
        query = request.query
        try:
            browser = Browser(link_key(request, link), await self._signed_in(request))
            outcome = await finish_link(
                link, state=query.get("state"), code=query.get("code"),
                error=query.get("error"), browser=browser,
            )
        except Exception:
            log.exception("%s callback failed", link.title)
            self.server.counters[("oauth", "error")] += 1
            return render_page("error", link=link)
        self.server.counters[("oauth", outcome.reason)] += 1
        flow = self.app.link_replay
        if outcome.ok and outcome.user_id is not None and flow is not None:
            self.server.spawn(flow.replay_pending(outcome.user_id, link.name))
        return render_page(outcome.reason, outcome, await self._owner(outcome.user_id), link)

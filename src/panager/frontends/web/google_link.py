"""The Google link's pages: `/oauth/google/start` (GET: whose link; POST: Continue) and
`/oauth/google/callback`.

A link names its Panager user and needs Continue. The page sets a random cookie
(`panager_google`, SameSite=Lax so Google's redirect back brings it) and its form
carries the same value; Continue binds the link's state to the cookie's hash, and
the callback must come with that cookie. So Google's consent address, once a
browser has continued, works only in that browser: forwarded to someone else (or
reached by another site posting Continue for its own link) it finishes nothing. A
browser signed in to Panager as someone else can neither continue nor finish a
link. The callback completes the link in this process and replays the user's
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
from panager.providers.google.service import (
    CALLBACK_PATH,
    START_PATH,
    STATE_TTL,
    Browser,
    LinkOutcome,
)

if TYPE_CHECKING:
    from panager.app import App
    from panager.frontends.web.running import WebServer

log = logging.getLogger(__name__)

LINK_COOKIE = "panager_google"
LINK_COOKIE_PATH = "/oauth/google"
LINK_COOKIE_AGE = 3 * STATE_TTL  # outlives the link it continues
_LINK_VALUE = re.compile(r"[A-Za-z0-9_-]{32}")


def link_key(request: web.Request, sent: object = None, *, form: bool = False) -> bytes | None:
    """The hash of this browser's link cookie; with `form`, only when the form's `browser`
    field repeats it (a page of another site can neither read the cookie nor, SameSite,
    make the browser send it with its post)."""
    kept = request.cookies.get(LINK_COOKIE, "")
    if not _LINK_VALUE.fullmatch(kept):
        return None
    if form and not (isinstance(sent, str) and hmac.compare_digest(sent, kept)):
        return None
    return Browser.key_of(kept)


class GoogleLinkPages:
    """The handlers of the link's start page, its Continue and Google's callback."""

    def __init__(self, app: App, server: WebServer) -> None:
        self.app = app
        self.server = server
        self.secure = app.settings.public_url.lower().startswith("https://")

    def routes(self) -> list[web.RouteDef]:
        """Start page, Continue, callback."""
        return [
            web.get(START_PATH, self.start),
            web.post(START_PATH, self.continue_),
            web.get(CALLBACK_PATH, self.callback),
        ]

    async def _owner(self, user_id: int | None) -> str:
        user = await self.app.deps.users.get(user_id) if user_id is not None else None
        return user.username if user is not None else "unknown"

    async def _signed_in(self, request: web.Request) -> int | None:
        """The Panager user this browser's web session belongs to, if any."""
        session = await self.app.deps.web_sessions.lookup(request.cookies.get(COOKIE))
        return session.user.id if session is not None else None

    async def _checked(self, state: str | None) -> dict | LinkOutcome:
        """The link's state row, or why it cannot be continued."""
        google = self.app.deps.google
        assert google is not None
        try:
            row = await google.oauth.check_state(state)
            if not isinstance(row, LinkOutcome) and not await google.may_link(row["user_id"]):
                return LinkOutcome(False, "blocked", row["user_id"])
        except Exception as exc:  # malformed input must never become a 500
            log.warning("Google start refused a malformed link (%s)", type(exc).__name__)
            return LinkOutcome(False, "forged")
        return row

    async def start(self, request: web.Request) -> web.Response:
        """A page naming the Panager user the link belongs to, with a Continue button."""
        if self.app.deps.google is None:
            return render_page("not_configured")
        state = request.query.get("state")
        row = await self._checked(state)
        if isinstance(row, LinkOutcome):
            self.server.counters[("oauth_start", row.reason)] += 1
            return render_page(row.reason)
        kept = request.cookies.get(LINK_COOKIE, "")
        cookie = kept if _LINK_VALUE.fullmatch(kept) else secrets.token_urlsafe(24)
        owner = html.escape(await self._owner(row["user_id"]))
        instance = html.escape(urlsplit(self.app.settings.public_url).netloc or "this instance")
        form = CONFIRM_FORM.format(
            action=START_PATH, state=html.escape(state or "", quote=True), browser=cookie
        )
        body = PAGE.format(
            title=f"Link Google to @{owner} on {instance}",
            text=CONFIRM_TEXT.format(owner=owner, instance=instance), icon="🔗", extra=form,
        )
        response = web.Response(text=body, content_type="text/html", headers=SECURITY_HEADERS)
        response.set_cookie(
            LINK_COOKIE, cookie, max_age=int(LINK_COOKIE_AGE.total_seconds()), httponly=True,
            samesite="Lax", secure=self.secure, path=LINK_COOKIE_PATH,
        )
        return response

    async def continue_(self, request: web.Request) -> web.Response:
        """The Continue button: bind the link to this browser, then on to Google's consent
        page; else a page saying why not."""
        google = self.app.deps.google
        if google is None:
            return render_page("not_configured")
        form = await request.post()
        state = str(form.get("state") or "") or None
        row = await self._checked(state)
        target = row if isinstance(row, LinkOutcome) else await self._bind(request, state, row,
                                                                           form.get("browser"))
        if isinstance(target, LinkOutcome):
            self.server.counters[("oauth_start", target.reason)] += 1
            return render_page(target.reason)
        raise web.HTTPFound(target, headers={"Cache-Control": "no-store"})

    async def _bind(
        self, request: web.Request, state: str | None, row: dict, sent: object
    ) -> str | LinkOutcome:
        """Google's consent address for a browser that came from the link's page and is
        not signed in as someone else; the state is now this browser's."""
        google = self.app.deps.google
        assert google is not None
        owner = row["user_id"]
        signed_in = await self._signed_in(request)
        if signed_in is not None and signed_in != owner:
            return LinkOutcome(False, "other_browser", owner)
        key = link_key(request, sent, form=True)
        if key is None:
            return LinkOutcome(False, "no_cookie", owner)
        if not await google.oauth.bind_state(state, key):
            return LinkOutcome(False, "other_browser", owner)
        try:
            return await google.consent_url(state)
        except Exception as exc:
            log.warning("Google start refused a malformed link (%s)", type(exc).__name__)
            return LinkOutcome(False, "forged")

    async def callback(self, request: web.Request) -> web.Response:
        """Finish linking; on success, replay the user's pending message in the background."""
        google = self.app.deps.google
        if google is None:
            return render_page("not_configured")
        query = request.query
        try:
            browser = Browser(link_key(request), await self._signed_in(request))
            outcome = await google.complete_link(
                state=query.get("state"), code=query.get("code"), error=query.get("error"),
                browser=browser,
            )
        except Exception:
            log.exception("Google callback failed")
            self.server.counters[("oauth", "error")] += 1
            return render_page("error")
        self.server.counters[("oauth", outcome.reason)] += 1
        flow = self.app.google_link
        if outcome.ok and outcome.user_id is not None and flow is not None:
            self.server.spawn(flow.replay_pending(outcome.user_id))
        return render_page(outcome.reason, outcome, await self._owner(outcome.user_id))

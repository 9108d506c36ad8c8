"""Sign-in, sessions and CSRF for the web page.

`/signin?token=…` (the link `/web` hands out) only shows a confirmation page
with one button: chat apps fetch links to draw previews, and such a fetch
must not use the link up. The button POSTs the token; the POST must come
from that page — its form carries a nonce equal to a SameSite=Strict cookie the
page set, or the browser's `Sec-Fetch-Site`/`Origin` say this server — so
another site cannot sign a visitor in as someone else (login CSRF). The link
is spent atomically, a session starts and its cookie is set (HttpOnly, SameSite=Lax,
Secure when PANAGER_PUBLIC_URL is https). Sign-in posts are rate limited per
account (links that are no one's share one bucket), in bounded memory.
`Gate.page` wraps every page handler: no live session → a page saying how to
sign in; a state-changing request without the session's CSRF
token → 403; admin pages → 403 for everyone but the admins
`PANAGER_ADMIN_IDS` names at this request (the stored role is not trusted).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from panager.agent.commands.web import SIGNIN_PATH
from panager.frontends.web.render import message_page, render
from panager.services.web_sessions import LINK_TTL, WebSession

if TYPE_CHECKING:
    from panager.app import App

COOKIE = "panager_session"
NONCE_COOKIE = "panager_signin"  # set by the confirmation page; its form carries the same value
COOKIE_MAX_AGE = 7 * 24 * 3600
RATE_LIMIT = (10, 60.0)  # sign-in posts per account (or for unknown links) per this many s
RATE_KEYS = 10_000  # the most keys the limiter remembers (oldest dropped first)
SAFE_METHODS = ("GET", "HEAD")
_NONCE = re.compile(r"[A-Za-z0-9_-]{32}")
_MINUTES = int(LINK_TTL.total_seconds() // 60)
_NEW_LINK = "Send /web to Panager (in Discord or the terminal) for a new link."
REFUSALS = {
    "unknown": (400, "This sign-in link is not valid",
                "It was not issued by Panager, or part of it is missing. " + _NEW_LINK),
    "used": (410, "This sign-in link was already used",
             "Each link signs in once. If that was not you, send /web signout to end every "
             "web session. " + _NEW_LINK),
    "expired": (410, "This sign-in link has expired",
                f"Links work for {_MINUTES} minutes. " + _NEW_LINK),
    "blocked": (403, "Your access is blocked", "Ask the person running Panager."),
    "elsewhere": (403, "Sign in from Panager's own page",
                  "This sign-in was sent by another web site, so nothing happened. Open your "
                  "sign-in link yourself and press the button there. " + _NEW_LINK),
}

PageHandler = Callable[[web.Request, WebSession], Awaitable[web.StreamResponse]]


class RateLimit:
    """At most `limit` events per `window` seconds per key (in this process), remembering
    at most `max_keys` keys: past that, keys with nothing in the window go, then the
    oldest, so memory stays bounded whatever the keys."""

    def __init__(self, limit: int, window: float, max_keys: int = RATE_KEYS) -> None:
        self.limit, self.window, self.max_keys = limit, window, max_keys
        self._seen: dict[str, deque[float]] = {}

    def allow(self, key: str) -> bool:
        """Count one event for `key`; False when it is over the limit."""
        now = time.monotonic()
        seen = self._seen.setdefault(key, deque())
        while seen and now - seen[0] > self.window:
            seen.popleft()
        if len(seen) >= self.limit:
            return False
        seen.append(now)
        if len(self._seen) > self.max_keys:
            self._seen = {k: v for k, v in self._seen.items() if v and now - v[-1] <= self.window}
            for old in list(self._seen)[: max(0, len(self._seen) - self.max_keys)]:
                del self._seen[old]
        return True

    def __len__(self) -> int:
        return len(self._seen)


class Gate:
    """Sessions for the web page: sign-in routes and the guard around every page."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.sessions = app.deps.web_sessions
        self.secure = app.settings.public_url.lower().startswith("https://")
        self.limiter = RateLimit(*RATE_LIMIT)
        public = urlsplit(app.settings.public_url)
        self.public_origin = f"{public.scheme}://{public.netloc}".lower()

    def routes(self) -> list[web.RouteDef]:
        """The sign-in and sign-out routes."""
        return [
            web.get(SIGNIN_PATH, self.signin_page),
            web.post(SIGNIN_PATH, self.signin),
            web.post("/signout", self.page(self.signout)),
        ]

    def page(self, handler: PageHandler, *, admin: bool = False) -> Callable:
        """Wrap a page handler: session required, CSRF on changes, admin check."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            session = await self.sessions.lookup(request.cookies.get(COOKIE))
            if session is None:
                return signed_out_page()
            # Admin rights follow the person's identities and PANAGER_ADMIN_IDS on every
            # request, not the stored role.
            session = replace(session, user=await self.app.deps.access.with_rights(session.user))
            if request.method not in SAFE_METHODS and not await csrf_ok(request, session):
                return message_page(
                    403, "This form has expired",
                    "The request did not carry this page's security token, so nothing was "
                    "changed. Go back, reload the page and try again.", session=session)
            if admin and session.user.role != "admin":
                return message_page(403, "For admins only",
                                    "This page is for the people running Panager.",
                                    session=session)
            return await handler(request, session)

        return guarded

    async def signin_page(self, request: web.Request) -> web.Response:
        """The one-button confirmation page (opening the link changes nothing)."""
        token = request.query.get("token", "")
        found = await self.sessions.peek_link(token)
        if found.refusal or found.user_id is None:
            return _refusal(found.refusal or "unknown")
        user = await self.app.deps.users.get(found.user_id)
        if user is None or user.status != "active":
            return _refusal("blocked")
        nonce = request.cookies.get(NONCE_COOKIE, "")
        if not _NONCE.fullmatch(nonce):  # kept when present, so two open links both work
            nonce = secrets.token_urlsafe(24)
        response = render("signin.html", title="Sign in", token=token, who=user.name,
                          nonce=nonce, session=None, nav=None)
        response.set_cookie(NONCE_COOKIE, nonce, max_age=int(LINK_TTL.total_seconds()),
                            httponly=True, samesite="Strict", secure=self.secure, path=SIGNIN_PATH)
        return response

    async def signin(self, request: web.Request) -> web.Response:
        """Spend the link, start a session, set the cookie and go home."""
        form = await request.post()
        token = str(form.get("token", ""))
        # Per account (or one bucket for links that are no one's), not per client address:
        # behind a reverse proxy every visitor has the proxy's address.
        owner = (await self.sessions.peek_link(token)).user_id
        if not self.limiter.allow(f"user:{owner}" if owner is not None else "unknown"):
            return message_page(429, "Too many sign-in attempts",
                                "Wait a minute, then open your link again.")
        if not (_nonce_ok(request, form.get("nonce")) or self._same_origin(request)):
            return _refusal("elsewhere")  # login CSRF: another site posting its own link
        used = await self.sessions.use_link(token)
        if used.refusal or used.user_id is None:
            return _refusal(used.refusal or "unknown")
        user = await self.app.deps.users.get(used.user_id)
        if user is None or user.status != "active":
            return _refusal("blocked")
        cookie = await self.sessions.start(user.id)
        response = web.HTTPSeeOther("/")
        response.set_cookie(COOKIE, cookie, max_age=COOKIE_MAX_AGE, httponly=True,
                            samesite="Lax", secure=self.secure, path="/")
        response.del_cookie(NONCE_COOKIE, path=SIGNIN_PATH)
        raise response

    def _same_origin(self, request: web.Request) -> bool:
        """The browser says the POST came from a page of this server: `Sec-Fetch-Site`
        when it sends one, else `Origin` naming this server (PANAGER_PUBLIC_URL or the
        address the request came in on)."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None:
            return site == "same-origin"
        origin = request.headers.get("Origin", "").rstrip("/").lower()
        return origin in (self.public_origin, f"{request.scheme}://{request.host}".lower())

    async def signout(self, request: web.Request, session: WebSession) -> web.Response:
        """End this browser's session."""
        await self.sessions.end(request.cookies.get(COOKIE))
        response = message_page(200, "Signed out", "This browser is signed out. " + _NEW_LINK)
        response.del_cookie(COOKIE, path="/")
        return response


async def csrf_ok(request: web.Request, session: WebSession) -> bool:
    """The form field `csrf` or header X-CSRF-Token equals the session's token."""
    sent: object = request.headers.get("X-CSRF-Token")
    if sent is None and request.content_type in (
        "application/x-www-form-urlencoded", "multipart/form-data"
    ):
        sent = (await request.post()).get("csrf")
    return isinstance(sent, str) and hmac.compare_digest(sent, session.csrf_token)


def _nonce_ok(request: web.Request, sent: object) -> bool:
    """The form's nonce equals the cookie the confirmation page set (SameSite=Strict: a
    page of another site can neither read it nor make the browser send it)."""
    kept = request.cookies.get(NONCE_COOKIE, "")
    return bool(_NONCE.fullmatch(kept)) and isinstance(sent, str) and hmac.compare_digest(
        sent, kept)


def signed_out_page() -> web.Response:
    """What a request without a live session gets."""
    return message_page(
        401, "Please sign in",
        "Send /web to Panager in Discord or the terminal: it answers with a one-time sign-in "
        "link. (Sessions end after 7 days without use, on /web signout, and when access "
        "is blocked.)")


def _refusal(reason: str) -> web.Response:
    status, title, text = REFUSALS[reason]
    return message_page(status, title, text)

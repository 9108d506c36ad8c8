"""The web server: the web page (web/routes.py), Google's OAuth callback, health, metrics.

`start_web(app)` binds PANAGER_HTTP_HOST/PANAGER_HTTP_PORT (port 0 picks a
free port; the bound one is on the returned server) and registers the server's
closer in `app.closers`. The callback completes the link in this process and
replays the user's pending message here too, in a background task the closer
waits for. The access log never contains a query string: the callback's
carries the authorization code and the state.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from panager.services.google.service import (
    CALLBACK_PATH,
    SCOPE_NAMES,
    START_PATH,
    STATE_TTL,
    LinkOutcome,
)

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 2.0
REPLAY_DRAIN_SECONDS = 30.0
_MINUTES = int(STATE_TTL.total_seconds() // 60)
_AGAIN = "Send /connect google to Panager for a new link."

# reason -> (HTTP status, title, explanation)
PAGES: dict[str, tuple[int, str, str]] = {
    "linked": (
        200,
        "Google account linked",
        "Panager can now use the Google {scopes}{who} for @{owner}.",
    ),
    "blocked": (
        403,
        "Linking is not available",
        "This Panager account has no access, so nothing was stored.",
    ),
    "already_linked": (
        409,
        "This Google account is already linked",
        "It is linked to another Panager user, and one Google account can be linked to one "
        "user at a time. Nothing was stored. Disconnect it there first (/disconnect google).",
    ),
    "missing_state": (
        400,
        "This link is not valid",
        "The address is missing its security code, so nothing was stored. " + _AGAIN,
    ),
    "forged": (
        400,
        "This link is not valid",
        "Its security code was not issued by Panager or was altered, so nothing was stored. "
        + _AGAIN,
    ),
    "expired": (
        400,
        "This link has expired",
        f"Links work for {_MINUTES} minutes. Nothing was stored. " + _AGAIN,
    ),
    "replayed": (
        400,
        "This link was already used",
        "Each link works once. Nothing was changed. " + _AGAIN,
    ),
    "denied": (
        200,
        "Access not granted",
        "You did not allow access, so nothing was stored. If you change your mind: "
        "/connect google.",
    ),
    "exchange_failed": (
        502,
        "Google did not complete the sign-in",
        "Google refused the sign-in code, so nothing was stored. " + _AGAIN,
    ),
    "no_scopes": (
        400,
        "No access was granted",
        "Calendar and Tasks were both unticked, so nothing was stored. " + _AGAIN,
    ),
    "no_refresh_token": (
        400,
        "Google did not grant lasting access",
        "Nothing was stored. Please sign in once more and confirm the consent screen.",
    ),
    "not_configured": (
        404,
        "Google is not configured",
        "This Panager instance has no Google OAuth client (GOOGLE_CLIENT_ID).",
    ),
    "error": (
        500,
        "Something went wrong",
        "Panager could not finish linking, and nothing was stored. " + _AGAIN,
    ),
}

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Panager</title>
<style>body{{font-family:system-ui,sans-serif;max-width:34rem;margin:4rem auto;padding:0 1rem;
line-height:1.5;color:#222}}h1{{font-size:1.4rem}}a.button{{display:inline-block;
padding:.5rem 1rem;background:#1a73e8;color:#fff;border-radius:.3rem;text-decoration:none}}
</style></head>
<body><h1>{icon} {title}</h1><p>{text}</p>{extra}</body></html>
"""
CONFIRM_TEXT = (
    "This link connects a Google account to the Panager user @{owner} on {instance}. "
    "Continue only if you are @{owner}: whoever continues gives @{owner} access to the "
    "Calendar and Tasks of the Google account they sign in with."
)
CONFIRM_FORM = (
    '<form method="post" action="{action}"><input type="hidden" name="state" value="{state}">'
    '<button class="button" type="submit">Continue to Google</button></form>'
)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' https: http:"
    ),
}


class PathOnlyAccessLogger(AbstractAccessLogger):
    """Access log lines without query strings (they may carry codes and state)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """One line: method, path, status, duration."""
        self.logger.info("%s %s %s %.3fs", request.method, request.path, response.status, time)


@dataclass
class WebServer:
    """A running web server; awaiting it (or `stop()`) shuts it down."""

    host: str
    port: int
    runner: web.AppRunner | None = None
    tasks: set[asyncio.Task] = field(default_factory=set)
    counters: Counter = field(default_factory=Counter)
    _stopped: bool = False

    @property
    def url(self) -> str:
        """Base URL of the bound socket."""
        return f"http://{self.host}:{self.port}"

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        """Run background work (a replay) that stop() waits for."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background work failed", exc_info=task.exception())

    async def stop(self) -> None:
        """Stop listening, let running replays finish (bounded), then clean up. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.tasks:
            _done, pending = await asyncio.wait(set(self.tasks), timeout=REPLAY_DRAIN_SECONDS)
            for task in pending:
                task.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    async def __call__(self) -> None:
        """Closer protocol of `App.closers`."""
        await self.stop()


def render_page(
    reason: str, outcome: LinkOutcome | None = None, owner: str | None = None
) -> web.Response:
    """The small HTML page for a callback outcome."""
    status, title, text = PAGES.get(reason, PAGES["error"])
    extra = ""
    if outcome is not None and outcome.ok:
        names = " and ".join(SCOPE_NAMES.get(s, s) for s in outcome.scopes)
        who = f" of {outcome.email}" if outcome.email else " account"
        text = text.format(scopes=names or "account", who=who, owner=owner or "you")
        if len(outcome.scopes) < len(SCOPE_NAMES):
            text += " Only part of the access was allowed; /connect google again to add the rest."
        text += " You can close this tab — your answer arrives in the chat."
    if outcome is not None and outcome.retry_link:
        url = html.escape(outcome.retry_link, quote=True)
        extra = f'<p><a class="button" href="{url}">Try again</a></p>'
    icon = "✅" if status == 200 and reason == "linked" else "⚠️"
    body = PAGE.format(title=html.escape(title), text=html.escape(text), icon=icon, extra=extra)
    return web.Response(
        text=body, status=status, content_type="text/html", headers=SECURITY_HEADERS
    )


def build_web_app(app: App, server: WebServer) -> web.Application:
    """The aiohttp application with its routes."""
    handlers = _Handlers(app, server)
    from panager.web.pages.chat import MAX_UPLOADS  # a chat post may carry attachments

    upload_cap = app.settings.runtime.attachment_max_bytes * MAX_UPLOADS + 1_000_000
    web_app = web.Application(middlewares=[handlers.count_requests], client_max_size=upload_cap)
    web_app.add_routes(
        [
            web.get("/healthz", handlers.healthz),
            web.get(START_PATH, handlers.google_start),
            web.post(START_PATH, handlers.google_continue),
            web.get(CALLBACK_PATH, handlers.google_callback),
            web.get("/metrics", handlers.metrics),
        ]
    )
    from panager.web.routes import add_pages

    add_pages(web_app, app, server.spawn)
    return web_app


class _Handlers:
    def __init__(self, app: App, server: WebServer) -> None:
        self.app = app
        self.server = server

    @web.middleware
    async def count_requests(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]
    ) -> web.StreamResponse:
        route = request.match_info.route.resource
        path = route.canonical if route is not None else "other"
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.server.counters[("http", path, exc.status)] += 1
            raise
        self.server.counters[("http", path, response.status)] += 1
        return response

    async def healthz(self, request: web.Request) -> web.Response:
        """200 when the database answers, else 503."""
        try:
            async with (
                asyncio.timeout(HEALTH_TIMEOUT),
                self.app.pool.connection(timeout=HEALTH_TIMEOUT) as conn,
            ):
                await conn.execute("SELECT 1")
        except Exception as exc:
            log.warning("health check: database unreachable (%s)", type(exc).__name__)
            return web.json_response(
                {"status": "unavailable", "database": "unreachable"}, status=503
            )
        return web.json_response({"status": "ok", "database": "ok"})

    async def _owner(self, user_id: int | None) -> str:
        user = await self.app.deps.users.get(user_id) if user_id is not None else None
        return user.username if user is not None else "unknown"

    async def google_start(self, request: web.Request) -> web.Response:
        """A page naming the Panager user the link belongs to, with a Continue button."""
        google = self.app.deps.google
        if google is None:
            return render_page("not_configured")
        state = request.query.get("state")
        try:
            row = await google.oauth.check_state(state)
            if not isinstance(row, LinkOutcome) and not await google.may_link(row["user_id"]):
                row = LinkOutcome(False, "blocked", row["user_id"])
        except Exception as exc:  # malformed input must never become a 500
            log.warning("Google start refused a malformed link (%s)", type(exc).__name__)
            row = LinkOutcome(False, "forged")
        if isinstance(row, LinkOutcome):
            self.server.counters[("oauth_start", row.reason)] += 1
            return render_page(row.reason)
        owner = html.escape(await self._owner(row["user_id"]))
        instance = html.escape(urlsplit(self.app.settings.public_url).netloc or "this instance")
        text = CONFIRM_TEXT.format(owner=owner, instance=instance)
        form = CONFIRM_FORM.format(action=START_PATH, state=html.escape(state or "", quote=True))
        body = PAGE.format(
            title=f"Link Google to @{owner} on {instance}", text=text, icon="🔗", extra=form
        )
        return web.Response(text=body, content_type="text/html", headers=SECURITY_HEADERS)

    async def google_continue(self, request: web.Request) -> web.Response:
        """The Continue button: on to Google's consent page for a valid link, else explain."""
        google = self.app.deps.google
        if google is None:
            return render_page("not_configured")
        state = str((await request.post()).get("state") or "") or None
        try:
            row = await google.oauth.check_state(state)
            if not isinstance(row, LinkOutcome) and not await google.may_link(row["user_id"]):
                target: str | LinkOutcome = LinkOutcome(False, "blocked", row["user_id"])
            else:
                target = await google.consent_url(state)
        except Exception as exc:
            log.warning("Google start refused a malformed link (%s)", type(exc).__name__)
            target = LinkOutcome(False, "forged")
        if isinstance(target, LinkOutcome):
            self.server.counters[("oauth_start", target.reason)] += 1
            return render_page(target.reason)
        raise web.HTTPFound(target, headers={"Cache-Control": "no-store"})

    async def google_callback(self, request: web.Request) -> web.Response:
        """Finish linking; on success, replay the user's pending message in the background."""
        google = self.app.deps.google
        if google is None:
            return render_page("not_configured")
        query = request.query
        try:
            outcome = await google.complete_link(
                state=query.get("state"), code=query.get("code"), error=query.get("error")
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

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format; needs `Authorization: Bearer $PANAGER_METRICS_TOKEN`.

        Without PANAGER_METRICS_TOKEN the endpoint is off (404)."""
        token = self.app.settings.metrics_token
        if not token:
            raise web.HTTPNotFound(text="metrics are off (set PANAGER_METRICS_TOKEN)")
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8")):
            raise web.HTTPUnauthorized(
                text="metrics need: Authorization: Bearer <PANAGER_METRICS_TOKEN>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return self._metrics_text()

    def _metrics_text(self) -> web.Response:
        lines = ["# TYPE panager_up gauge", "panager_up 1"]
        lines.append("# TYPE panager_http_requests_total counter")
        for key, value in sorted(self.server.counters.items(), key=str):
            if key[0] == "http":
                lines.append(
                    f'panager_http_requests_total{{path="{key[1]}",status="{key[2]}"}} {value}'
                )
        lines.append("# TYPE panager_oauth_callbacks_total counter")
        for key, value in sorted(self.server.counters.items(), key=str):
            if key[0] == "oauth":
                lines.append(f'panager_oauth_callbacks_total{{outcome="{key[1]}"}} {value}')
        lines.append("# TYPE panager_replays_running gauge")
        lines.append(f"panager_replays_running {len(self.server.tasks)}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def start_web(app: App, *, host: str | None = None, port: int | None = None) -> WebServer:
    """Serve on settings.http_host/http_port (or the given ones); raises OSError if taken."""
    host = host if host is not None else app.settings.http_host
    port = port if port is not None else app.settings.http_port
    server = WebServer(host=host, port=port)
    runner = web.AppRunner(
        build_web_app(app, server),
        access_log_class=PathOnlyAccessLogger,
        handle_signals=False,
        shutdown_timeout=5.0,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        raise
    server.runner = runner
    server.port = runner.addresses[0][1]
    app.closers.append(server)
    log.info("web server listening on %s", server.url)
    return server


async def start_for_terminal(app: App) -> WebServer | None:
    """`panager chat`'s starter: the web page for the local user (and the OAuth callback).

    A taken port prints one line when Google linking needs the server (else it is only
    logged: /web links then point at whichever server holds the port) and the REPL
    carries on without it.
    """
    try:
        return await start_web(app)
    except OSError as exc:
        where = f"{app.settings.http_host}:{app.settings.http_port}"
        if app.deps.google is None:
            log.info("web server not started: %s is unavailable (%s)", where, exc)
            return None
        print(
            f"Web server not started: {where} is unavailable ({exc.strerror or exc}); Google "
            "linking needs it — free the port or set PANAGER_HTTP_PORT.",
            flush=True,
        )
        return None

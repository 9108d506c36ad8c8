"""The web server: the web page (web/routes.py), Google's OAuth callback, health, metrics.

`start_web(app)` binds PANAGER_HTTP_HOST/PANAGER_HTTP_PORT (port 0 picks a
free port; the bound one is on the returned server) and registers the server's
closer in `app.closers`. A Google link continued in a browser signed in to
Panager must be that user's, and is bound to that web session: the callback
must come with it (a forwarded consent address fails elsewhere); a callback
in a browser signed in as someone else is refused too. The callback
completes the link in this process and
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
    START_PATH,
    BrowserSession,
    LinkOutcome,
)
from panager.services.web_sessions import WebSessionService
from panager.web.auth import COOKIE
from panager.web.hooks import WebhookEndpoint, log_path
from panager.web.oauth_pages import (
    CONFIRM_FORM,
    CONFIRM_TEXT,
    PAGE,
    SECURITY_HEADERS,
    render_page,
)
from panager.web.telegram_hook import TelegramWebhook

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 2.0
REPLAY_DRAIN_SECONDS = 30.0
class PathOnlyAccessLogger(AbstractAccessLogger):
    """Access log lines without query strings (they may carry codes and state)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """One line: method, path, status, duration."""
        path = log_path(request.path)
        self.logger.info("%s %s %s %.3fs", request.method, path, response.status, time)


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

    web_app.add_routes(WebhookEndpoint(app).routes())
    web_app.add_routes(TelegramWebhook(app).routes())
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

    async def _browser(self, request: web.Request) -> BrowserSession | None:
        """The Panager web session this browser is signed in with, if any."""
        cookie = request.cookies.get(COOKIE)
        session = await self.app.deps.web_sessions.lookup(cookie)
        if session is None or not cookie:
            return None
        return BrowserSession(session.user.id, WebSessionService.key(cookie))

    async def _bind(
        self, state: str | None, owner: int, browser: BrowserSession
    ) -> str | LinkOutcome:
        """Continue pressed in a signed-in browser: only the link's own user's, and the
        callback must then come with this same session."""
        google = self.app.deps.google
        assert google is not None
        if browser.user_id != owner:
            return LinkOutcome(False, "other_browser", owner)
        await google.oauth.bind_state(state, browser.key)
        return await google.consent_url(state)

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
        browser = await self._browser(request)
        try:
            row = await google.oauth.check_state(state)
            if not isinstance(row, LinkOutcome) and not await google.may_link(row["user_id"]):
                target: str | LinkOutcome = LinkOutcome(False, "blocked", row["user_id"])
            elif not isinstance(row, LinkOutcome) and browser is not None:
                target = await self._bind(state, row["user_id"], browser)
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
                state=query.get("state"), code=query.get("code"), error=query.get("error"),
                browser=await self._browser(request),
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

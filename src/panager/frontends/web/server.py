"""The web server: the web page (frontends/web/routes.py), the Google link's pages
(frontends/web/oauth_link.py), webhooks, health, metrics.

`start_web(app)` binds PANAGER_HTTP_HOST/PANAGER_HTTP_PORT (port 0 picks a
free port; the bound one is on the returned server) and registers the server's
closer in `app.closers`; background work (a replay after linking) runs in tasks
the closer waits for. The access log never contains a query string: the OAuth
callback's carries the authorization code and the state.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from panager.frontends.web.hooks import WebhookEndpoint
from panager.frontends.web.oauth_link import OAuthLinkPages
from panager.frontends.web.running import PathOnlyAccessLogger, WebServer
from panager.frontends.web.telegram_hook import TelegramWebhook

if TYPE_CHECKING:
    from panager.app import App

__all__ = ["WebServer", "build_web_app", "start_for_terminal", "start_web"]
log = logging.getLogger(__name__)

HEALTH_TIMEOUT = 2.0


def build_web_app(app: App, server: WebServer) -> web.Application:
    """The aiohttp application with its routes."""
    handlers = _Handlers(app, server)
    from panager.frontends.web.pages.chat import MAX_UPLOADS  # a chat post may carry attachments

    upload_cap = app.settings.runtime.attachment_max_bytes * MAX_UPLOADS + 1_000_000
    web_app = web.Application(middlewares=[handlers.count_requests], client_max_size=upload_cap)
    web_app.add_routes(
        [
            web.get("/healthz", handlers.healthz),
            web.get("/metrics", handlers.metrics),
        ]
    )
    from panager.frontends.web.routes import add_pages

    web_app.add_routes(OAuthLinkPages(app, server).routes())
    web_app.add_routes(WebhookEndpoint(app).routes())
    web_app.add_routes(TelegramWebhook(app).routes())
    gate = add_pages(web_app, app, server.spawn)
    web_app.add_routes(server.notices.routes(gate))
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
    server.delivery = app.deps.messenger
    app.deps.messenger.add(server.notices)
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
        links = app.deps.accounts.oauth_links() if app.deps.accounts is not None else []
        if not links:
            log.info("web server not started: %s is unavailable (%s)", where, exc)
            return None
        print(
            f"Web server not started: {where} is unavailable ({exc.strerror or exc}); "
            f"{links[0].title} linking needs it — free the port or set PANAGER_HTTP_PORT.",
            flush=True,
        )
        return None

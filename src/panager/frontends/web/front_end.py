"""The web page as `panager run` starts it (frontends/shared/front_end.py): sign-in, the
pages, the chat, the OAuth callback, webhooks, /healthz and /metrics. It always runs by
default; it has no intake to check before the database starts and delivers only to an
open page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from panager.config import ConfigError
from panager.frontends.shared.front_end import Running
from panager.platforms import WEB

if TYPE_CHECKING:
    from panager.app import App
    from panager.config import Settings


class ComponentUnavailable(ConfigError):
    """A requested component is not part of this build."""


class WebEntry:
    """The web server."""

    platform = WEB

    def configured(self, settings: Settings) -> bool:
        """Always part of the default components."""
        return True

    def settings_problem(self, settings: Settings, *, chosen: bool) -> str | None:
        """Nothing to check before it starts (a taken port is said when it starts)."""
        return None

    async def check(self, settings: Settings) -> None:
        """Nothing to check before the database starts."""

    async def start(self, app: App) -> Running:
        """Listen on PANAGER_HTTP_HOST:PANAGER_HTTP_PORT (a taken port is one line)."""
        try:
            from panager.frontends.web.server import start_web
        except ImportError:
            raise ComponentUnavailable(
                "the web server is not available in this build; leave out 'web'."
            ) from None
        settings = app.settings
        try:
            server = await start_web(app)
        except OSError as exc:
            raise ConfigError(
                f"the web server cannot listen on {settings.http_host}:{settings.http_port} "
                f"({exc.strerror or exc}); free the port or set PANAGER_HTTP_PORT."
            ) from None
        return Running("web", server.stop, None, f"on {server.url}")

    async def deliver_only(self, app: App, *, alone: bool) -> list[Running]:
        """An open page is reached through the running server only."""
        return []

    async def answer_only(self, app: App) -> list[Running]:
        """The web chat answers in the web process itself (it stores no inbox rows)."""
        return []

    def explain(self, exc: BaseException) -> str | None:
        """The server runs no watched task of its own."""
        return None


WEB_FRONT_END = WebEntry()

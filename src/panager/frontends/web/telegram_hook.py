"""`POST /telegram/webhook`: Telegram's updates when the bot runs on a webhook.

Enabled by `telegram_webhook: true` with an https `PANAGER_PUBLIC_URL`
(frontends/telegram/bot.py then calls `setWebhook` with a random secret of 43
characters, kept in `telegram_state` so every process agrees). Telegram sends
the secret in `X-Telegram-Bot-Api-Secret-Token`; it is compared in constant
time and a call without it, or with a wrong one, answers 403 with nothing
stored. The path holds no bot token. The update is stored (private chats
only, once per `update_id`) before the 200, so Telegram sends again whatever
was not stored; any process running the `telegram` component answers it.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from panager.services.inbox import InboxService, worker_name
from panager.services.telegram_updates import TelegramState, store_update

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

TELEGRAM_HOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY = 1024 * 1024


class TelegramWebhook:
    """The handler of `POST /telegram/webhook`."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.state = TelegramState(app.pool)
        self.inbox = InboxService(app.pool, app.clock, worker_name(), table="telegram_inbox")
        self._secret: str | None = None

    def routes(self) -> list[web.RouteDef]:
        """Its one route."""
        return [web.post(TELEGRAM_HOOK_PATH, self.call)]

    def enabled(self) -> bool:
        """Only with `telegram_webhook: true`, an https public URL and a bot token."""
        settings = self.app.settings
        return bool(
            settings.runtime.telegram_webhook
            and settings.public_url.startswith("https://")
            and settings.telegram_bot_token
        )

    async def call(self, request: web.Request) -> web.Response:
        """403 without the right secret; 200 once the update is stored."""
        if not self.enabled():
            return web.Response(status=404)
        secret = await self._expected()
        given = request.headers.get(SECRET_HEADER, "")
        if not secret or not hmac.compare_digest(given.encode(), secret.encode()):
            return web.Response(status=403)
        body = await request.content.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return web.Response(status=413)
        try:
            update = json.loads(body)
        except ValueError:
            return web.Response(status=400)
        if not isinstance(update, dict):
            return web.Response(status=400)
        await store_update(self.inbox, update)  # a database error answers 500: Telegram retries
        return web.Response(status=200)

    async def _expected(self) -> str | None:
        if self._secret is None:
            self._secret = await self.state.get("webhook_secret")
        return self._secret

"""The Telegram front end as `panager run` starts it (frontends/shared/front_end.py).

The token's shape is checked when the command starts and the token itself
(getMe) before the database starts; a process without the bot still delivers
to Telegram people over the Bot API.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from panager.config import ConfigError
from panager.frontends.shared.front_end import Running
from panager.platforms import TELEGRAM

if TYPE_CHECKING:
    from panager.app import App
    from panager.config import Settings

log = logging.getLogger("panager.run")

TOKEN_MISSING = (
    "TELEGRAM_BOT_TOKEN is not set; create a bot with @BotFather (see docs/telegram.md) and "
    "set TELEGRAM_BOT_TOKEN, or leave telegram out of --components."
)


class TelegramEntry:
    """Telegram: the bot (polling or the webhook's updates), or delivery only."""

    platform = TELEGRAM

    def configured(self, settings: Settings) -> bool:
        """Runs by default when TELEGRAM_BOT_TOKEN is set."""
        return bool(settings.telegram_bot_token)

    def settings_problem(self, settings: Settings, *, chosen: bool) -> str | None:
        """The bot needs TELEGRAM_BOT_TOKEN; a set token (the bot or the delivery uses it)
        must have a token's shape."""
        if chosen and not settings.telegram_bot_token:
            return TOKEN_MISSING
        if settings.telegram_bot_token:
            from panager.frontends.telegram.api import check_token

            try:
                check_token(settings.telegram_bot_token)
            except ConfigError as exc:
                return str(exc)
        return None

    async def check(self, settings: Settings) -> None:
        """Fail fast, before the database starts, when Telegram rejects the token or
        TELEGRAM_API_URL is not a Bot API server (one line, never the token)."""
        from panager.frontends.telegram.api import close_bot, make_bot, start_problem

        token, url = settings.telegram_bot_token or "", settings.telegram_api_url
        bot = make_bot(token, url)
        try:
            await bot.get_me()
        except Exception as exc:
            raise ConfigError(start_problem(exc, url, token)) from None
        finally:
            await close_bot(bot)

    async def start(self, app: App) -> Running:
        """Check the token (getMe; a bad one, or a TELEGRAM_API_URL that is not a Bot API
        server, fails here with one line that never holds the token), then poll or take the
        webhook's updates."""
        from panager.frontends.telegram.api import start_problem
        from panager.frontends.telegram.bot import TelegramFrontEnd

        settings = app.settings
        front = TelegramFrontEnd(app)
        try:
            await front.start()
        except BaseException as exc:
            try:
                await front.close()
            except Exception:
                log.warning("the Telegram bot did not close cleanly")
            if isinstance(exc, Exception):
                problem = start_problem(exc, settings.telegram_api_url,
                                        settings.telegram_bot_token)
                raise ConfigError(problem) from None
            raise
        return Running("telegram", front.close, None, f"as @{front.username}")

    async def deliver_only(self, app: App, *, alone: bool) -> list[Running]:
        """Without the Telegram bot in this process, reminders still reach Telegram people."""
        token = app.settings.telegram_bot_token
        if not token:
            return []
        from panager.frontends.telegram.api import close_bot, make_bot
        from panager.frontends.telegram.messenger import TelegramMessenger

        bot = make_bot(token, app.settings.telegram_api_url)
        messenger = TelegramMessenger(bot, app.deps.users)
        app.deps.messenger.add(messenger)

        async def close() -> None:
            with contextlib.suppress(ValueError):
                app.deps.messenger.messengers.remove(messenger)
            await close_bot(bot)

        return [Running("telegram-delivery", close)]

    async def answer_only(self, app: App) -> list[Running]:
        """Answer the updates another process stored (`--components answers`) over the Bot
        API, without polling (frontends/shared/workers.py); reminders go out through it."""
        from panager.frontends.telegram.api import start_problem
        from panager.frontends.telegram.bot import TelegramFrontEnd

        settings = app.settings
        front = TelegramFrontEnd(app)
        try:
            await front.start_answering()
        except BaseException as exc:
            await front.close()
            if isinstance(exc, Exception):
                problem = start_problem(exc, settings.telegram_api_url,
                                        settings.telegram_bot_token)
                raise ConfigError(problem) from None
            raise
        return [Running("answers", front.close, None, "telegram")]

    def explain(self, exc: BaseException) -> str | None:
        """Telegram's front end runs no watched task of its own."""
        return None


TELEGRAM_FRONT_END = TelegramEntry()

"""The Bot API client (aiogram's `Bot`) and keeping its token out of every log line.

Every Bot API URL holds the bot token (`…/bot<token>/sendMessage`, and file
downloads `…/file/bot<token>/<path>`), and an HTTP error can carry its URL
(aiohttp's `ClientResponseError` prints it). So from the moment a bot is made,
every log record of the process is redacted: `TokenRedaction` wraps the log
record factory, replacing the token — and anything shaped like a bot token —
in the message, its arguments and the formatted traceback. It is installed
once per token and removed with the bot.
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

DEFAULT_API_URL = "https://api.telegram.org"
TOKEN_SHAPE = re.compile(r"\d{5,}:[A-Za-z0-9_-]{20,}")
REDACTED = "[telegram-token]"
REQUEST_TIMEOUT = 30


def redact(text: str, token: str | None = None) -> str:
    """`text` without the token (or anything shaped like one)."""
    if token:
        text = text.replace(token, REDACTED)
    return TOKEN_SHAPE.sub(REDACTED, text)


class TokenRedaction:
    """Redacts bot tokens from every log record made while installed (module doc)."""

    _installed: ClassVar[dict[str, int]] = {}  # token -> users; one factory layer per token
    _previous: ClassVar[dict[str, Any]] = {}

    @classmethod
    def install(cls, token: str) -> None:
        """Start redacting `token` (idempotent; counted)."""
        if cls._installed.get(token):
            cls._installed[token] += 1
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _scrub(record, token)
            return record

        cls._previous[token] = (previous, factory)
        cls._installed[token] = 1
        logging.setLogRecordFactory(factory)

    @classmethod
    def uninstall(cls, token: str) -> None:
        """Stop redacting once the last user is gone (only when still the newest layer)."""
        count = cls._installed.get(token, 0) - 1
        if count > 0:
            cls._installed[token] = count
            return
        cls._installed.pop(token, None)
        previous, factory = cls._previous.pop(token, (None, None))
        if previous is not None and logging.getLogRecordFactory() is factory:
            logging.setLogRecordFactory(previous)


def _scrub(record: logging.LogRecord, token: str) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: leave it to logging's own error report
        return
    record.msg, record.args = redact(message, token), None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info), token)
        record.exc_info = None
    if record.stack_info:
        record.stack_info = redact(record.stack_info, token)


def make_bot(token: str, api_url: str | None = None) -> Bot:
    """An aiogram Bot talking to `api_url` (Telegram's or a local Bot API server)."""
    TokenRedaction.install(token)
    server = TelegramAPIServer.from_base((api_url or DEFAULT_API_URL).rstrip("/"))
    session = AiohttpSession(api=server, timeout=REQUEST_TIMEOUT)
    return Bot(token, session=session)


async def close_bot(bot: Bot) -> None:
    """Close the bot's HTTP session and stop redacting its token."""
    try:
        await bot.session.close()
    finally:
        TokenRedaction.uninstall(bot.token)

"""The Bot API client (aiogram's `Bot`) and keeping its token out of every log line.

Every Bot API URL holds the bot token (`…/bot<token>/sendMessage`, and file
downloads `…/file/bot<token>/<path>`), and an HTTP error can carry its URL
(aiohttp's `ClientResponseError` prints it). So from the moment a bot is made,
every log record of the process is redacted: `TokenRedaction` wraps the log
record factory, replacing the token — and anything shaped like a bot token —
in the message, its arguments and the formatted traceback. It is installed
once per token and removed with the bot.

Text that leaves the process another way — the one line `panager run` prints
when the bot cannot start — is built by `describe_error` and `start_problem`,
which redact the same way and keep to one line.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramUnauthorizedError,
)
from aiogram.utils.token import TokenValidationError, validate_token

from panager.config import BOT_TOKEN_SHAPE, DEFAULT_TELEGRAM_API_URL, REDACTED_TOKEN, ConfigError

DEFAULT_API_URL = DEFAULT_TELEGRAM_API_URL
TOKEN_SHAPE = BOT_TOKEN_SHAPE
REDACTED = REDACTED_TOKEN
REQUEST_TIMEOUT = 30
ERROR_TEXT_LIMIT = 200  # characters of an error's text worth a log line
TOKEN_MALFORMED = (
    "TELEGRAM_BOT_TOKEN is not a bot token (it looks like 123456789:AA…, digits, a colon "
    "and a key, no spaces); copy the token @BotFather gave you (/mybots → your bot → "
    "API Token) into TELEGRAM_BOT_TOKEN."
)
TOKEN_REJECTED = (
    "TELEGRAM_BOT_TOKEN was rejected by Telegram; copy the token @BotFather gave you "
    "(/mybots → your bot → API Token) into TELEGRAM_BOT_TOKEN."
)


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


def describe_error(exc: BaseException, token: str | None = None) -> str:
    """One short line about a failed Bot API call, without the token (logs, the terminal)."""
    if isinstance(exc, ClientDecodeError):
        content = " ".join(str(exc.data).split())[:60]
        text = f"the answer is not the Bot API's JSON: {content!r}"
    elif isinstance(exc, TelegramAPIError):
        text = str(exc)  # aiogram's label ("Telegram server says - …") and the description
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = text.strip().splitlines()
    return redact(lines[0][:ERROR_TEXT_LIMIT] if lines else type(exc).__name__, token)


def check_token(token: str) -> None:
    """Raise ConfigError (one line, no token) unless `token` is shaped like a bot token."""
    try:
        validate_token(token)
    except TokenValidationError:
        raise ConfigError(TOKEN_MALFORMED) from None


def start_problem(exc: Exception, api_url: str, token: str | None) -> str:
    """The one line for the operator when the bot cannot start (getMe failed)."""
    if isinstance(exc, TelegramUnauthorizedError):
        return TOKEN_REJECTED
    why = describe_error(exc, token)
    if isinstance(exc, TelegramNotFound | ClientDecodeError):
        text = (
            f"TELEGRAM_API_URL ({api_url}) does not answer like the Telegram Bot API ({why}); "
            "set it to a Bot API server's base URL, or unset it for Telegram's own."
        )
    elif isinstance(exc, TelegramNetworkError):
        text = (
            f"cannot reach Telegram at {api_url} ({why}); "
            "check the network and TELEGRAM_API_URL."
        )
    else:
        text = f"Telegram did not answer getMe ({why}); try again in a minute."
    return redact(text, token)


def make_bot(token: str, api_url: str | None = None) -> Bot:
    """An aiogram Bot talking to `api_url` (Telegram's or a local Bot API server); a token
    that is not shaped like one raises ConfigError."""
    check_token(token)
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

"""Telegram as a streaming surface (frontends/shared/streaming.py): one chat's messages of
one answer.

Messages go out as HTML (frontends/telegram/markup.py) and fall back to the plain text
when Telegram still cannot parse them; chunks stay under 4,096 characters as
Telegram counts them (UTF-16 units, after parsing). Link previews are off
unless the surface allows them (never in a tainted turn). A link becomes an
inline-keyboard URL button on the last message (a local address, which Telegram
refuses in a button, stays text).

Telegram has no nonces: the ids of the messages an answer posted are handed
to `remember` as they are sent (the inbox row keeps them), and a turn run
again after a crash edits those messages instead of posting new ones.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
)

from panager.frontends.shared.chunking import split_message
from panager.frontends.shared.links import link_label
from panager.frontends.telegram.markup import to_html

log = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096
CHUNK_CHARS = 4000  # room under the limit; re-split when UTF-16 counts more
MAX_BUTTON_LABEL = 64
MAX_RETRIES = 3
Remember = Callable[[list[int]], Awaitable[None]]


def utf16_len(text: str) -> int:
    """Length as Telegram counts it."""
    return len(text.encode("utf-16-le")) // 2


def split_for_telegram(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Chunks Telegram accepts, code fences balanced in each."""
    chunks: list[str] = []
    for chunk in split_message(text, limit):
        if utf16_len(chunk) <= TELEGRAM_LIMIT or limit <= 100:
            chunks.append(chunk)
        else:  # astral characters (emoji) count twice
            chunks.extend(split_for_telegram(chunk, limit // 2))
    return chunks


def button_ok(url: str) -> bool:
    """Telegram refuses URL buttons to local addresses (BUTTON_URL_INVALID): those stay text."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    local = host in ("localhost", "") or host.startswith("127.") or "." not in host
    return parts.scheme in ("http", "https") and not local and len(url) <= 2048


def link_keyboard(link: dict | None) -> InlineKeyboardMarkup | None:
    """One URL button, or None."""
    if not link or not button_ok(link.get("url", "")):
        return None
    button = InlineKeyboardButton(text=link_label(link, MAX_BUTTON_LABEL), url=link["url"])
    return InlineKeyboardMarkup(inline_keyboard=[[button]])


class TelegramSurface:
    """One answer's messages in a private chat."""

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        *,
        previews: bool = False,
        posted: list[int] | None = None,
        remember: Remember | None = None,
    ) -> None:
        self.bot = bot
        self.chat_id = chat_id
        self.previews = previews
        self.posted = list(posted or [])  # messages posted for this answer before a restart
        self.remember = remember

    def split(self, text: str) -> list[str]:
        """Chunks under Telegram's 4,096 characters."""
        return split_for_telegram(text)

    def button_ok(self, url: str) -> bool:
        """True when the link can be a URL button."""
        return button_ok(url)

    async def send(
        self, i: int, text: str, link: dict | None, *, buttons: Any = None, previews: bool = False
    ) -> Message | int:
        """Post message `i` (or take over the one posted before a restart)."""
        if i < len(self.posted):
            try:
                return await self.edit(
                    self.posted[i], i, text, link, buttons=buttons, previews=previews
                )
            except TelegramBadRequest as exc:
                log.info("could not take over an earlier message: %s", exc)
        options = self._options(link, buttons, previews)
        message = await self._call(
            lambda kw: self.bot.send_message(chat_id=self.chat_id, **kw), text, options
        )
        self.posted[i:] = [message.message_id]
        if self.remember is not None:
            await self.remember(list(self.posted))
        return message

    async def edit(
        self,
        message: Message | int,
        i: int,
        text: str,
        link: dict | None,
        *,
        buttons: Any = None,
        previews: bool | None = None,
    ) -> Message | int:
        """Make message `i` show `text` (an unchanged message is fine)."""
        message_id = message if isinstance(message, int) else message.message_id

        def edit(kw: dict) -> Awaitable[Message | bool]:
            return self.bot.edit_message_text(chat_id=self.chat_id, message_id=message_id, **kw)

        try:
            await self._call(edit, text, self._options(link, buttons, previews))
        except TelegramBadRequest as exc:
            if "not modified" not in str(exc):
                raise
        return message_id

    async def delete(self, message: Message | int) -> None:
        """Delete a message the answer outgrew (best effort)."""
        message_id = message if isinstance(message, int) else message.message_id
        try:
            await self.bot.delete_message(self.chat_id, message_id)
        except Exception as exc:
            log.info("could not delete message %s: %s", message_id, exc)

    async def _call(self, method: Callable[[dict], Awaitable], text: str, kwargs: dict) -> Any:
        """Send as HTML; plain text when Telegram cannot parse it; wait out rate limits."""
        for attempt in range(MAX_RETRIES + 1):
            try:
                try:
                    return await method({**kwargs, "text": to_html(text), "parse_mode": "HTML"})
                except TelegramBadRequest as exc:
                    if "parse" not in str(exc).lower():
                        raise
                    log.warning("Telegram refused the markup (%s); sending plain text", exc)
                    return await method({**kwargs, "text": text, "parse_mode": None})
            except TelegramRetryAfter as exc:
                if attempt == MAX_RETRIES:
                    raise
                await asyncio.sleep(exc.retry_after)
        raise AssertionError("unreachable")

    def _options(self, link: dict | None, buttons: Any, previews: bool | None) -> dict:
        shown = self.previews if previews is None else previews
        options: dict = {"link_preview_options": LinkPreviewOptions(is_disabled=not shown)}
        keyboard = buttons or link_keyboard(link)
        if keyboard is not None:
            options["reply_markup"] = keyboard
        return options

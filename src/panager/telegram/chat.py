"""Telegram as a conversation of the shared answerer (adapters/answering.py).

`TelegramChat` is the private chat of one stored update: replies and the
streamed answer through `TelegramSurface` (HTML with a plain-text fallback,
link previews off while streaming and in tainted answers), the typing action
repeated every few seconds while a turn runs, and files handed to the
attachment intake as bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from panager.adapters.answering import ATTACHMENT_NOTE, Attachment, Incoming
from panager.adapters.streaming import StreamedReply
from panager.telegram.surface import TelegramSurface

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from panager.agent.runner import TurnResult
    from panager.services.inbox import InboxMessage
    from panager.services.users import User
    from panager.telegram.bot import TelegramFrontEnd

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows the action for about five seconds


def incoming(row: InboxMessage) -> Incoming:
    """A stored Telegram message as the shared answerer sees it."""
    return Incoming.from_row("telegram", row)


class TelegramChat:
    """The private chat one stored update came from."""

    def __init__(self, front: TelegramFrontEnd, row: InboxMessage) -> None:
        self.front = front
        self.row = row
        self.payload: dict[str, Any] = row.payload or {}

    def surface(self, *, previews: bool) -> TelegramSurface:
        """The messages of one reply in this chat, remembered on the inbox row."""
        return TelegramSurface(
            self.front.bot,
            self.row.channel_id,
            previews=previews,
            posted=self.payload.get("posted"),
            remember=self._remember,
        )

    async def _remember(self, posted: list[int]) -> None:
        await self.front.inbox.remember(self.row.message_id, {"posted": posted})

    async def reply(self, text: str, link: dict | None = None) -> None:
        """Post a whole reply (chunks, the link as a button)."""
        await StreamedReply(self.surface(previews=False)).finish(text, link)

    async def attachments(self, user: User) -> None:
        """Hand each file to the intake as bytes, or say files can't be read yet."""
        intake = self.front.attachment_intake
        files = self.payload.get("files") or []
        if intake is None or not files:
            await self.front.tell(self.row.channel_id, ATTACHMENT_NOTE)
            return
        for item in files:
            data = await self.front.download(item.get("file_id") or "")
            if data is None:
                await self.front.tell(self.row.channel_id, "Sorry, I couldn't fetch that file.")
                continue
            about = Attachment(
                item.get("kind", "document"), item.get("name"), item.get("mime"), item.get("size")
            )
            note = await intake(user, data, about)
            if note:
                await self.reply(note)

    def typing(self) -> AbstractAsyncContextManager[None]:
        """The typing action, repeated while the block runs."""
        return self._typing()

    @contextlib.asynccontextmanager
    async def _typing(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self._keep_typing())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _keep_typing(self) -> None:
        while True:
            try:
                await self.front.bot.send_chat_action(self.row.channel_id, "typing")
            except Exception as exc:  # no indicator beats no answer
                log.info("typing action failed: %s", exc)
            await asyncio.sleep(TYPING_EVERY)

    def progress(self) -> None:
        """Telegram shows the typing action only."""
        return None

    def stream(self, interval: float, first_after: float) -> StreamedReply[Any]:
        """The answer's messages; no link previews while the text is still coming."""
        return StreamedReply(
            self.surface(previews=False), interval=interval, first_after=first_after
        )

    async def finish(self, reply: StreamedReply[Any], result: TurnResult) -> None:
        """The final text; link previews only in an answer not written from outside content."""
        await reply.finish(result.text, result.link, previews=not result.tainted)

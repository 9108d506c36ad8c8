"""Telegram as a conversation of the shared answerer (frontends/shared/answering.py).

`TelegramChat` is the private chat of one stored update: replies and the
streamed answer through `TelegramSurface` (HTML with a plain-text fallback,
link previews off while streaming and in tainted answers), the typing action
repeated every few seconds while a turn runs, and files downloaded through
the Bot API (the file URL holds the token and stays inside `download`) and
handed to the media intake as bytes. A forwarded message is someone else's:
its text or caption reaches the turn framed as outside content (never as a
command), its files as outside content too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from panager.frontends.shared.answering import ATTACHMENT_NOTE, Incoming
from panager.frontends.shared.streaming import StreamedReply
from panager.frontends.telegram.host import TelegramHost, row_surface
from panager.frontends.telegram.questions import proposal_keyboard, result_keyboard
from panager.frontends.telegram.surface import TelegramSurface
from panager.services.media.intake import Attachment, refused
from panager.services.media.sniff import clean_name
from panager.tasks import cancel_and_wait

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractAsyncContextManager

    from panager.agent.turns.result import TurnResult
    from panager.services.inbox import InboxMessage
    from panager.services.proposals import Offer
    from panager.services.users import User

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows the action for about five seconds
FORWARDED = "a forwarded Telegram message"
UNREADABLE = ("sticker",)  # said in words instead


def incoming(row: InboxMessage) -> Incoming:
    """A stored Telegram message as the shared answerer sees it: a forwarded one's text or
    caption is outside content, its source naming whom Telegram says it came from."""
    described = Incoming.from_row("telegram", row)
    payload = row.payload or {}
    if not payload.get("forwarded"):
        return described
    origin = str(payload.get("forwarded_from") or "")
    return replace(described, outside_source=f"{FORWARDED} from {origin}" if origin else FORWARDED)


class TelegramChat:
    """The private chat one stored update came from."""

    def __init__(self, front: TelegramHost, row: InboxMessage) -> None:
        self.front = front
        self.row = row
        self.payload: dict[str, Any] = row.payload or {}

    def surface(self, *, previews: bool) -> TelegramSurface:
        """The messages of one reply in this chat, remembered on the inbox row."""
        return row_surface(self.front, self.row, previews=previews)

    async def reply(
        self, text: str, link: dict | None = None, offers: Sequence[Offer] = ()
    ) -> None:
        """Post a whole reply (chunks, the link as a button, or the Approve/Deny buttons of
        the held calls it offers)."""
        buttons = None if link else proposal_keyboard(offers)
        await StreamedReply(self.surface(previews=False)).finish(text, link, buttons=buttons)

    async def attachments(self, user: User) -> Sequence[Attachment]:
        """Each file downloaded and taken in; a sticker gets a note instead."""
        files = self.payload.get("files") or []
        if any(item.get("kind") in UNREADABLE for item in files):
            await self.front.tell(self.row.channel_id, ATTACHMENT_NOTE)
        media = self.front.app.deps.media
        taken: list[Attachment] = []
        for item in files:
            if item.get("kind") in UNREADABLE or media is None:
                continue
            taken.append(await self._take(media, user, item))
        return taken

    async def _take(self, media: Any, user: User, item: dict[str, Any]) -> Attachment:
        kind = str(item.get("kind") or "document")
        name = clean_name(str(item.get("name") or _default_name(kind)))
        cap = media.limits.max_bytes
        size = int(item.get("size") or 0)
        if size > cap:
            return refused(Attachment("rejected", name, size=size),
                           f"it is larger than the {cap / 1e6:g} MB limit")
        data = await self.front.download(str(item.get("file_id") or ""), cap)
        if data is None:
            return refused(Attachment("rejected", name, size=size),
                           f"it could not be downloaded from Telegram (or is over "
                           f"{cap / 1e6:g} MB)")
        return await media.take(
            user.id, name, data, declared_type=item.get("mime"),
            forwarded=bool(self.payload.get("forwarded")), voice=kind == "voice",
        )

    async def note(self, text: str) -> None:
        """A line before the answer."""
        await self.front.tell(self.row.channel_id, text)

    def typing(self) -> AbstractAsyncContextManager[None]:
        """The typing action, repeated while the block runs."""
        return self._typing()

    @contextlib.asynccontextmanager
    async def _typing(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self._keep_typing())
        try:
            yield
        finally:
            await cancel_and_wait([task])

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
        """The final text (the question's buttons last); link previews only in an answer not
        written from outside content."""
        await reply.finish(
            result.text, result.link, buttons=result_keyboard(result), previews=not result.tainted
        )


def _default_name(kind: str) -> str:
    return {"photo": "photo.jpg", "voice": "voice-message.ogg"}.get(kind, "file")

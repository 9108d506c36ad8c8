"""An answer posted to Discord while it is written: one message, edited as text arrives.

`StreamedReply` follows the turn's `message_delta` / `message_reset` events. An
answer finished within `first_after` seconds is sent once, without edits. A
longer one is posted then, and edited at most once per `interval` (Discord
rate-limits edits); past 2,000 characters it continues in a new message, cut
by `split_message` so code fences stay balanced (a fence still open in the
partial text is closed for display). `finish` makes every message carry its
exact part of the final text, the link button on the last one.

Message n of an answer is sent with the nonce `<message id>.<n>`, as
`send_reply` does: a turn run again after a crash gets the message it posted
before back from Discord (not a second one), and edits it — so the person
ends with one copy of the answer. The caller records the message as answered
only after `finish` returns, i.e. after the final edit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import discord

from panager.agent.events import Event
from panager.discord.chunking import FENCE, split_message
from panager.discord.replies import link_view, nonce, with_link_text

log = logging.getLogger(__name__)

PLACEHOLDER = "…"
ReferenceFactory = Callable[[], Awaitable[discord.MessageReference | None]]


class StreamedReply:
    """One turn's answer in Discord, updated while it streams (see the module doc)."""

    def __init__(
        self,
        channel: discord.abc.Messageable,
        *,
        nonce_base: int | str | None = None,
        reference: ReferenceFactory | None = None,
        interval: float = 1.0,
        first_after: float = 1.0,
    ) -> None:
        self.channel = channel
        self.nonce_base = nonce_base
        self.reference = reference
        self.interval = interval
        self.first_after = first_after
        self.text = ""
        self.messages: list[discord.Message] = []
        self.shown: list[str] = []
        self.edits = 0
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None

    def on_event(self, event: Event) -> None:
        """Collect the streamed text; the first piece starts the updater."""
        if event.type == "message_delta":
            self.text += event.data.get("text", "")
        elif event.type == "message_reset":
            self.text = ""
        else:
            return
        self._changed.set()
        if self._task is None and not self._closing.is_set():
            self._task = asyncio.create_task(self._run())

    async def finish(
        self,
        text: str,
        link: dict | None = None,
        *,
        view: discord.ui.View | None = None,
        suppress_embeds: bool = False,
    ) -> list[discord.Message]:
        """Stop updating; make the messages hold exactly the final text (and link button,
        or `view`). Live messages are posted without link previews; `suppress_embeds`
        keeps them off (an answer written with outside content), else they come back."""
        await self.close()
        chunks = split_message(with_link_text(text, link)) or ["(empty answer)"]
        view = view or link_view(link)
        for i, chunk in enumerate(chunks):
            extra: dict = {"view": view} if view is not None and i == len(chunks) - 1 else {}
            if i < len(self.messages):
                if self.shown[i] != chunk or extra or not suppress_embeds:
                    await self._edit(i, chunk, suppress=suppress_embeds, **extra)
            else:
                await self._send(i, chunk, suppress_embeds=suppress_embeds, **extra)
        for message in self.messages[len(chunks) :]:  # the answer got shorter (a reset)
            with contextlib.suppress(discord.HTTPException):
                await message.delete()
        del self.messages[len(chunks) :], self.shown[len(chunks) :]
        return list(self.messages)

    async def close(self) -> None:
        """Stop the updater (what is shown stays)."""
        self._closing.set()
        self._changed.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        if await self._closed_within(self.first_after):
            return  # a short answer: finish() sends it once
        while True:
            self._changed.clear()
            try:
                await self._show(self._live_chunks())
            except Exception as exc:  # the final edit still comes; a missed update is cosmetic
                log.warning("could not update the streamed answer: %s", exc)
            if await self._closed_within(self.interval):
                return
            await self._changed.wait()
            if self._closing.is_set():
                return

    async def _closed_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)
        return self._closing.is_set()

    def _live_chunks(self) -> list[str]:
        text = self.text
        if text.count(FENCE) % 2:  # a code block still being written: close it for display
            text += FENCE if text.endswith("\n") else "\n" + FENCE
        chunks = split_message(text)
        if not chunks and self.messages:
            chunks = [PLACEHOLDER]  # the text was reset: keep the message, emptied
        return chunks

    async def _show(self, chunks: list[str]) -> None:
        for i, chunk in enumerate(chunks):
            if self._closing.is_set():
                return
            if i >= len(self.messages):
                await self._send(i, chunk, suppress_embeds=True)
            elif self.shown[i] != chunk:
                await self._edit(i, chunk)

    async def _send(self, i: int, chunk: str, **extra) -> None:
        kwargs: dict = dict(extra)
        if self.nonce_base is not None:
            kwargs["nonce"] = nonce(self.nonce_base, i)
        if i == 0 and self.reference is not None:
            reference = await self.reference()
            if reference is not None:
                kwargs.update(reference=reference, mention_author=False)
        message = await self.channel.send(chunk, **kwargs)
        self.messages.append(message)
        self.shown.append(message.content)
        if message.content != chunk:  # posted before a restart (same nonce): bring it up to date
            edit = {k: v for k, v in extra.items() if k != "suppress_embeds"}
            await self._edit(i, chunk, **edit)

    async def _edit(self, i: int, chunk: str, **extra) -> None:
        self.messages[i] = await self.messages[i].edit(content=chunk, **extra) or self.messages[i]
        self.shown[i] = chunk
        self.edits += 1

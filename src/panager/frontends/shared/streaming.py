"""An answer posted while it is written: its messages edited as text arrives, on any platform.

`StreamedReply` follows the turn's `message_delta` / `message_reset` events. An
answer finished within `first_after` seconds is sent once, without edits. A
longer one is posted then — if it is still arriving (a piece came within the
last half of `first_after`; else at its next piece, or once by `finish`: text
that is all there gains nothing from a post and an edit while the turn winds
up, as it does when many turns share the process) — and edited at most once
per `interval` (platforms rate-limit edits); past the platform's limit it
continues in a new message, cut by `split_message` so code fences stay balanced
(a fence still open in the partial text is closed for display). Live messages show no link previews.
`finish` makes every message carry its exact part of the final text, the link
(a button where the platform can) or the question's buttons on the last one,
and link previews only when the caller allows them (never for an answer written
with outside content: a preview is a fetch nobody approved).

The platform is a `Surface`: send message n, edit it, delete it. A surface
that can recognise a message it posted before a crash (Discord's nonces)
returns that one from `send`, so a turn run again still ends with one copy.
The caller records the message as answered only after `finish` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Generic, Protocol, TypeVar

from panager.agent.graph.events import Event
from panager.frontends.shared.chunking import FENCE
from panager.frontends.shared.links import with_link_text

log = logging.getLogger(__name__)

PLACEHOLDER = "…"
EMPTY_ANSWER = "(empty answer)"
H = TypeVar("H")


class Surface(Protocol[H]):
    """Where an answer's messages live on one platform; `H` is a posted message."""

    def split(self, text: str) -> list[str]:
        """`text` cut into messages the platform accepts (fences balanced)."""
        ...

    def button_ok(self, url: str) -> bool:
        """True when `url` can be a link button."""
        ...

    async def send(
        self, i: int, text: str, link: dict | None, *, buttons: Any = None, previews: bool = False
    ) -> H:
        """Post message `i` showing `text`, with `buttons` (the platform's own) or the link's."""
        ...

    async def edit(
        self,
        message: H,
        i: int,
        text: str,
        link: dict | None,
        *,
        buttons: Any = None,
        previews: bool | None = None,
    ) -> H:
        """Make message `i` show `text` (`previews` None: leave them as they are)."""
        ...

    async def delete(self, message: H) -> None:
        """Remove a message the answer no longer needs (best effort)."""
        ...


class StreamedReply(Generic[H]):
    """One turn's answer, updated while it streams (see the module doc)."""

    def __init__(
        self, surface: Surface[H], *, interval: float = 1.0, first_after: float = 1.0
    ) -> None:
        self.surface = surface
        self.interval = interval
        self.first_after = first_after
        self.text = ""
        self.messages: list[H] = []
        self.shown: list[str] = []
        self.edits = 0
        self._last_piece = 0.0  # loop time of the latest text piece
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None

    def on_event(self, event: Event) -> None:
        """Collect the streamed text; the first piece starts the updater."""
        if event.type == "message_delta":
            self.text += event.data.get("text", "")
            self._last_piece = asyncio.get_running_loop().time()
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
        buttons: Any = None,
        previews: bool = False,
    ) -> list[H]:
        """Stop updating; make the messages hold exactly the final text, with the link or
        `buttons` on the last one and link previews only when `previews`."""
        await self.close()
        chunks = self.surface.split(with_link_text(text, link, self.surface.button_ok))
        chunks = chunks or [EMPTY_ANSWER]
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            here, extra = (link, buttons) if last else (None, None)
            if i >= len(self.messages):
                await self._send(i, chunk, here, buttons=extra, previews=previews)
            elif self.shown[i] != chunk or here or extra is not None or previews:
                await self._edit(i, chunk, here, buttons=extra, previews=previews)
        for message in self.messages[len(chunks) :]:  # the answer got shorter (a reset)
            await self.surface.delete(message)
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
        loop = asyncio.get_running_loop()
        while loop.time() - self._last_piece > self.first_after / 2:  # not arriving now
            self._changed.clear()
            await self._changed.wait()  # its next piece, or finish() sends it once
            if self._closing.is_set():
                return
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
        chunks = self.surface.split(text)
        if not chunks and self.messages:
            chunks = [PLACEHOLDER]  # the text was reset: keep the message, emptied
        return chunks

    async def _show(self, chunks: list[str]) -> None:
        for i, chunk in enumerate(chunks):
            if self._closing.is_set():
                return
            if i >= len(self.messages):
                await self._send(i, chunk, None)
            elif self.shown[i] != chunk:
                await self._edit(i, chunk, None)

    async def _send(self, i: int, chunk: str, link: dict | None, **options: Any) -> None:
        self.messages.append(await self.surface.send(i, chunk, link, **options))
        self.shown.append(chunk)

    async def _edit(self, i: int, chunk: str, link: dict | None, **options: Any) -> None:
        self.messages[i] = await self.surface.edit(self.messages[i], i, chunk, link, **options)
        self.shown[i] = chunk
        self.edits += 1

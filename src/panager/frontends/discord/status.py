"""Progress while a turn runs: the typing indicator and the tool-status message.

The status message appears with the first tool call ("🔎 searching memories…"),
is edited as tools start and finish — at most once per `interval`, since
Discord rate-limits edits — and is deleted once the answer is posted. A plain
answer without tools never shows one; the typing indicator covers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import discord

from panager.agent.graph.events import Event
from panager.services.messengers import tool_status_label

log = logging.getLogger(__name__)

MAX_LINES = 8
MAX_STATUS_CHARS = 1900


@contextlib.asynccontextmanager
async def typing(channel: discord.abc.Messageable) -> AsyncIterator[None]:
    """discord.py's typing indicator, minus its failures: no indicator beats no answer."""
    indicator = channel.typing()
    try:
        await indicator.__aenter__()
    except discord.HTTPException as exc:
        log.warning("typing indicator failed: %s", exc)
        yield
        return
    try:
        yield
    finally:
        await indicator.__aexit__(None, None, None)


class StatusMessage:
    """One turn's tool-progress message, driven by the turn's events."""

    def __init__(
        self, channel: discord.abc.Messageable, *, interval: float = 1.0, nonce: str | None = None
    ) -> None:
        self.channel = channel
        self.interval = interval
        self.nonce = nonce
        self.message: discord.Message | None = None
        self._tools: dict[str, list[str]] = {}  # call id -> [name, state]
        self._shown = ""
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None

    def on_event(self, event: Event) -> None:
        """Track tool_start/tool_end; the first tool starts the message."""
        call_id = str(event.data.get("id") or event.data.get("name"))
        if event.type == "tool_start":
            self._tools[call_id] = [event.data.get("name", "?"), "running"]
        elif event.type == "tool_end" and call_id in self._tools:
            self._tools[call_id][1] = "error" if event.data.get("status") == "error" else "done"
        else:
            return
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    def render(self) -> str:
        """The message text: one line per tool call, the latest last."""
        lines = [_line(name, state) for name, state in self._tools.values()][-MAX_LINES:]
        return "\n".join(lines)[:MAX_STATUS_CHARS]

    async def _run(self) -> None:
        while not self._closing.is_set():
            await self._changed.wait()
            self._changed.clear()
            if self._closing.is_set():
                return
            try:
                await self._show(self.render())
            except Exception as exc:  # progress is cosmetic: never fail the turn for it
                log.warning("status message update failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.interval)

    async def _show(self, text: str) -> None:
        if not text or text == self._shown:
            return
        if self.message is None:
            if self.nonce:
                self.message = await self.channel.send(text, nonce=self.nonce)
            else:
                self.message = await self.channel.send(text)
        else:
            await self.message.edit(content=text)
        self._shown = text

    async def close(self) -> None:
        """Stop updating and delete the message (the answer replaces it)."""
        self._closing.set()
        self._changed.set()
        if self._task is not None:
            await self._task
        if self.message is not None:
            try:
                await self.message.delete()
            except discord.HTTPException as exc:
                log.warning("could not delete the status message: %s", exc)


def _line(name: str, state: str) -> str:
    label = tool_status_label(name)
    if state == "running":
        return label
    mark = "✓" if state == "done" else "⚠️ failed"
    return f"{label.removesuffix('…')} {mark}"

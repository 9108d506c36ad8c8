"""Running a PanagerBot against FakeDiscord in tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from panager.frontends.discord.bot import PanagerBot

STEP = 10  # seconds: the bound for any single wait


@contextlib.asynccontextmanager
async def running_bot(app, fake) -> AsyncIterator[PanagerBot]:
    """A connected, ready bot with its slash commands synced; closed cleanly afterwards."""
    bot = PanagerBot(app, status_interval=0.05, poll_interval=0.05, guild_ready_timeout=0)
    task = asyncio.create_task(bot.start("fake-token"))
    try:
        ready = asyncio.create_task(bot.wait_until_ready())
        done, _ = await asyncio.wait({ready, task}, timeout=STEP, return_when="FIRST_COMPLETED")
        if ready not in done:
            ready.cancel()
            raise AssertionError(f"bot did not get ready: {task.exception() if done else ''}")
        await fake.wait_for(lambda: fake.commands, STEP)
        yield bot
    finally:
        await asyncio.wait_for(bot.close(), STEP)
        await asyncio.wait_for(task, STEP)
    assert not bot.queue._background, "the bot left tasks running after close()"

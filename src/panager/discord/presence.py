"""Recovery in seconds for Discord messages: a dead bot process's claims are queued at once.

The bot process holds its presence lock (db/presence.py) under the name it
writes into inbox claims; about once a second every live bot process asks the
inbox for claims whose owner holds none (`InboxService.recover_orphaned`) and
answers them, instead of waiting out `inbox_lease_seconds`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from panager.db.presence import Presence

if TYPE_CHECKING:
    from panager.discord.bot import PanagerBot

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0


async def start_presence(bot: PanagerBot) -> Presence | None:
    """Take the bot's presence lock before it claims anything; None when it cannot."""
    presence = Presence(bot.app.url, bot.inbox.worker)
    try:
        await presence.start()
    except Exception as exc:  # still correct without it: a crash then costs one lease
        log.warning("no presence lock (%s); a crashed process is noticed after the lease", exc)
        return None
    return presence


async def reclaim_loop(bot: PanagerBot, presence: Presence, every: float = CHECK_SECONDS) -> None:
    """Queue again the messages of dead bot processes and answer them, until cancelled."""
    try:
        while True:
            await presence.held.wait()
            try:
                taken = await bot.queue.take_back_orphaned()
            except Exception as exc:
                log.warning("looking for a stopped process's messages failed: %s", exc)
                taken = 0
            if taken:
                log.info("took back %d message(s) of a stopped process", taken)
            await asyncio.sleep(every)
    finally:
        await presence.close()

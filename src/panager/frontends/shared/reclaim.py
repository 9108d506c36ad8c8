"""Recovery in seconds for chat messages: a dead process's claims are queued again at once.

Each front-end process holds its presence lock (db/presence.py) under the name
it writes into inbox claims; about once a second every live process asks the
inbox for claims whose owner holds none (`InboxQueue.take_back_orphaned`) and
answers them, instead of waiting out `inbox_lease_seconds`. The same for every
front end: it only needs the database URL, its worker name and its queue.
"""

from __future__ import annotations

import asyncio
import logging

from panager.db.presence import Presence
from panager.services.inbox_queue import InboxQueue

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0


async def start_presence(url: str, worker: str) -> Presence | None:
    """Take the process's presence lock before it claims anything; None when it cannot."""
    presence = Presence(url, worker)
    try:
        await presence.start()
    except Exception as exc:  # still correct without it: a crash then costs one lease
        log.warning("no presence lock (%s); a crashed process is noticed after the lease", exc)
        return None
    return presence


async def reclaim_loop(queue: InboxQueue, presence: Presence, every: float = CHECK_SECONDS) -> None:
    """Queue again the messages of dead processes and answer them, until cancelled."""
    try:
        while True:
            await presence.held.wait()
            try:
                taken = await queue.take_back_orphaned()
            except Exception as exc:
                log.warning("looking for a stopped process's messages failed: %s", exc)
                taken = 0
            if taken:
                log.info("took back %d message(s) of a stopped process", taken)
            await asyncio.sleep(every)
    finally:
        await presence.close()

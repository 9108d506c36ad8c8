"""Answer workers: any number of processes answering the messages one receiver stored.

`panager run --components answers` starts, for every chat front end whose token
is set, its answering without its intake (`FrontEnd.answer_only`): the front
end's inbox and queue (services/inbox.py, inbox_queue.py), its shared
`Answerer` and a client of the platform's HTTP API (no gateway, no poller).
The receiver stores each message; `InboxService.accept` NOTIFYs
`NOTIFY_CHANNEL` in the same statement, and every process answering that
front end's messages wakes the sender's drain here (`watch_inbox`). The inbox's
claims do the rest: a person's oldest unfinished message is claimed by one
process at a time, in order, exactly once, whichever process that is; a
process that dies is taken over through its presence lock
(frontends/shared/reclaim.py). A slow poll (`queued_users`) catches what a lost
LISTEN connection missed.

`answering(app, inbox, queue)` starts that in the background of `queue`, the
same for a receiver that answers its own messages and for an answer worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import psycopg

from panager.frontends.shared.reclaim import reclaim_loop, start_presence
from panager.services.inbox import NOTIFY_CHANNEL

if TYPE_CHECKING:
    from panager.app import App
    from panager.services.inbox import InboxService
    from panager.services.inbox_queue import InboxQueue

log = logging.getLogger(__name__)

FALLBACK_POLL_SECONDS = 5.0  # queued rows looked for without a notification


async def answering(
    app: App, inbox: InboxService, queue: InboxQueue, *, worker: bool = False
) -> None:
    """Claim and answer this front end's stored messages from now on: the presence lock
    before any claim, a dead process's rows taken back, what waits resumed, new rows
    followed (`watch_inbox`). An answer worker (`worker`) takes at most
    `inbox_max_active` at once, so a burst is shared among the workers."""
    if worker:
        queue.limit(app.settings.runtime.inbox_max_active)
    presence = await start_presence(app.url, inbox.worker)
    if presence is not None:
        queue.spawn(reclaim_loop(queue, presence))
    await queue.recover_patiently()
    queue.start_pruning()
    # A sender whose message another process is answering is that process's until its drain
    # ends (it claims their next message itself), and a new message NOTIFYs: looking again
    # every second for each such sender would only cost queries.
    queue.poll_interval = max(queue.poll_interval, FALLBACK_POLL_SECONDS)
    queue.spawn(watch_inbox(app.url, inbox, queue))


async def watch_inbox(
    url: str, inbox: InboxService, queue: InboxQueue, every: float = FALLBACK_POLL_SECONDS
) -> None:
    """Wake a sender's drain when any process stores their message (LISTEN), and every
    `every` seconds for rows stored while not listening."""
    poller = queue.spawn(_poll(inbox, queue, every))
    delay = 1.0
    try:
        while not queue.stopping:
            try:
                conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await _kick_queued(inbox, queue)  # stored before LISTEN took hold
                    delay = 1.0
                    async for note in conn.notifies():
                        table, _, user = note.payload.partition(":")
                        if table == inbox.table and user.lstrip("-").isdigit():
                            queue.kick(int(user))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("inbox LISTEN connection lost (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
    finally:
        poller.cancel()


async def _poll(inbox: InboxService, queue: InboxQueue, every: float) -> None:
    while not queue.stopping:
        await asyncio.sleep(every)
        await _kick_queued(inbox, queue)


async def _kick_queued(inbox: InboxService, queue: InboxQueue) -> None:
    try:
        for user_id in await inbox.queued_users():
            queue.kick(user_id)
    except Exception as exc:
        log.warning("could not look for queued messages: %s", exc)

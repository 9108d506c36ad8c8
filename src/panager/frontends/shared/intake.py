"""Taking in one message: stored in the inbox before anything else, even through an outage.

`store_patiently(accept, tell, stopping)` runs the front end's `accept` (an
`InboxService.accept` with the message's fields; False for a message seen
before). When the database does not answer within `STORE_NOTICE_AFTER`
seconds the person is told once that their message waits, and storing is
retried until it is back — or, after `STORE_PATIENCE`, given up on with a
note to resend. Nothing is answered that was not stored first, so a message
is handled at most once and never lost silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg

from panager.services.inbox import InboxMessage, InboxService, worker_name
from panager.services.inbox_queue import Handler, InboxQueue, Notifier, retry_delay

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

ERROR_MESSAGE = "Sorry, something went wrong on my side with that message. Please try again."
NOT_STORED = "Sorry, I couldn't take that message just now (database unavailable). Please resend."
STORE_DELAYED = (
    "I can't reach my database right now, so your message is waiting with me; "
    "I'll answer as soon as it's back."
)
ABANDONED = (
    "Sorry — I was restarted while working on your message “{snippet}”. "
    "Please send it again if you still need an answer."
)
STORE_NOTICE_AFTER = 3.0  # seconds of waiting for the database before the person is told
STORE_PATIENCE = 120.0  # then keep trying this long before asking for a resend


def open_inbox(
    app: App,
    table: str,
    handle: Handler,
    on_abandoned: Notifier,
    *,
    poll_interval: float,
    shutdown_grace: float,
) -> tuple[InboxService, InboxQueue]:
    """A front end's inbox (named by this process) and the queue that drains it."""
    lease = timedelta(seconds=app.settings.runtime.inbox_lease_seconds)
    inbox = InboxService(app.pool, app.clock, worker_name(), table=table, lease=lease)
    queue = InboxQueue(
        inbox, handle, on_abandoned, poll_interval=poll_interval, shutdown_grace=shutdown_grace
    )
    return inbox, queue


Accept = Callable[[], Awaitable[bool]]
Tell = Callable[[str, str], Awaitable[None]]  # (text, nonce suffix)


async def store_patiently(
    accept: Accept, tell: Tell, stopping: Callable[[], bool], name: object
) -> bool:
    """Store one message, riding out a database outage; False if not stored (or a replay)."""
    loop = asyncio.get_running_loop()
    deadline, told, attempt = loop.time() + STORE_PATIENCE, False, 0
    while True:
        task = asyncio.ensure_future(accept())
        try:
            if not told and not (await asyncio.wait({task}, timeout=STORE_NOTICE_AFTER))[0]:
                await tell(STORE_DELAYED, "w")
                told = True
            return await task
        except (TimeoutError, psycopg.OperationalError) as exc:
            log.warning("could not store message %s yet: %s", name, exc)
        except Exception:
            log.exception("could not store message %s", name)
            await tell(ERROR_MESSAGE, "x")
            return False
        finally:
            task.cancel()
        if loop.time() >= deadline or stopping():
            await tell(NOT_STORED, "x")
            return False
        if not told:
            await tell(STORE_DELAYED, "w")
            told = True
        await asyncio.sleep(retry_delay(attempt))
        attempt += 1


def abandoned_notice(row: InboxMessage) -> str:
    """What a person is told about a message given up on (it kept killing the process)."""
    snippet = row.content.strip().replace("\n", " ")
    snippet = snippet[:60] + ("…" if len(snippet) > 60 else "")
    return ABANDONED.format(snippet=snippet or "(attachment)")

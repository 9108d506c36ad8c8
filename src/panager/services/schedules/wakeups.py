"""The worker's wake-up line: LISTEN on the schedules channel, wake at any NOTIFY.

A created or changed schedule (services/schedules/service.py, system.py) and
claims taken back from a dead worker (liveness.py) NOTIFY `NOTIFY_CHANNEL`;
the worker loop then runs at once instead of at its next poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from panager.services.schedules.service import NOTIFY_CHANNEL

log = logging.getLogger(__name__)


async def listen_for_wakeups(url: str, wake: Callable[[], None]) -> None:
    """LISTEN on a dedicated connection; any notification wakes the loop."""
    delay = 1.0
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            async with conn:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                wake()  # catch up on anything created while not listening
                delay = 1.0
                async for _ in conn.notifies():
                    wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("scheduler: LISTEN connection lost (%s); retrying", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)

"""Recovery in seconds: hand back the claims of workers PostgreSQL knows are dead.

A lease alone makes a crash cost a whole `scheduler_lease_seconds` (60 s by
default). Every worker also holds its presence lock (db/presence.py); about
once a second a live worker releases the claims whose owner holds none, and
wakes every worker (NOTIFY) to claim them. The occurrence's `schedule_runs`
row still fences the send: a run the dead worker left `sending` is taken over
with the same run id, so the same Discord nonce, and the user sees it once. A
slow but living worker keeps its connection, its lock, and so its claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from panager.db.pool import Pool
from panager.db.presence import HELD_OWNERS, OWNER_IS_GONE, Presence
from panager.services.schedules.service import NOTIFY_CHANNEL
from panager.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RECLAIM_ORPHANS = f"""
WITH held AS MATERIALIZED ({HELD_OWNERS}),
orphans AS (
    SELECT id FROM schedules
     WHERE claimed_by IS NOT NULL AND claimed_by <> %(me)s AND status = 'active'
       AND {OWNER_IS_GONE.format(column="claimed_by")}
     FOR UPDATE SKIP LOCKED
)
UPDATE schedules AS s SET claimed_by = NULL, lease_until = NULL
  FROM orphans
 WHERE s.id = orphans.id
RETURNING s.id, pg_notify('{NOTIFY_CHANNEL}', 'reclaimed') AS notified
"""


async def reclaim_orphans(pool: Pool, me: str) -> int:
    """Release every schedule claimed by a worker without a presence lock; returns how many."""
    async with pool.connection() as conn:
        return len(await (await conn.execute(RECLAIM_ORPHANS, {"me": me})).fetchall())


class OrphanReclaimer:
    """While this worker's presence is held, reclaim dead workers' claims every `every` s."""

    def __init__(
        self,
        pool: Pool,
        presence: Presence,
        on_reclaimed: Callable[[int], None],
        *,
        every: float = 1.0,
    ) -> None:
        self.pool = pool
        self.presence = presence
        self.on_reclaimed = on_reclaimed
        self.every = every

    async def run(self) -> None:
        """Loop until cancelled; a database error is logged and retried next round."""
        while True:
            await self.presence.held.wait()  # never judge others while we cannot be seen
            try:
                found = await reclaim_orphans(self.pool, self.presence.owner)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("scheduler: looking for dead workers' claims failed: %s", exc)
                found = 0
            if found:
                log.info("scheduler: took back %d claim(s) of a stopped worker", found)
                self.on_reclaimed(found)
            await asyncio.sleep(self.every)


@contextlib.asynccontextmanager
async def worker_liveness(
    url: str, owner: str, pool: Pool, on_reclaimed: Callable[[int], None]
) -> AsyncIterator[Presence | None]:
    """Hold `owner`'s presence and reclaim dead workers' claims for the duration."""
    presence = Presence(url, owner)
    try:
        await presence.start()
    except Exception as exc:  # still correct without it: a crash then costs one lease
        log.warning("scheduler: no presence lock (%s); a crash is noticed after the lease", exc)
        yield None
        return
    task = asyncio.create_task(OrphanReclaimer(pool, presence, on_reclaimed).run())
    try:
        yield presence
    finally:
        await cancel_and_wait([task])
        await presence.close()

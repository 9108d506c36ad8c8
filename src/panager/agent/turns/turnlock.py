"""One turn at a time per user, in this process and across processes.

In-process, an `asyncio.Lock` per user orders turns. Across processes, a
PostgreSQL session advisory lock per user is taken on ONE dedicated connection
shared by every user of this process, with `pg_try_advisory_lock` and a short
poll instead of a blocking `pg_advisory_lock`. Holding a pooled connection per
running turn (the obvious design) exhausts the pool as soon as more users talk
at once than the pool has connections — the lock holders then wait forever for
a connection to do their work. A blocking lock on a shared connection would
stall every user behind one contended key; the try-lock never blocks it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg

from panager.db.locks import TURN_LOCK_NAMESPACE
from panager.errors import UserBusy

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05
TRY_LOCK = "SELECT pg_try_advisory_lock(%s, %s) AS ok"
UNLOCK = "SELECT pg_advisory_unlock(%s, %s)"


def lock_key(user_id: int) -> tuple[int, int]:
    """The (namespace, key) pair of a user's advisory lock."""
    return TURN_LOCK_NAMESPACE, user_id % 2_147_483_647


class TurnLocks:
    """Per-user turn locks; `conninfo=None` means in-process only (no database)."""

    def __init__(self, conninfo: str | None) -> None:
        self.conninfo = conninfo
        self._local: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._conn: psycopg.AsyncConnection | None = None
        self._connecting = asyncio.Lock()

    @asynccontextmanager
    async def hold(self, user_id: int, *, wait: bool = True) -> AsyncIterator[None]:
        """Hold the user's lock for the duration of the block.

        With `wait=False` a lock held by another turn raises UserBusy at once."""
        local = self._local[user_id]
        if not wait and local.locked():
            raise UserBusy(user_id)
        async with local:
            if self.conninfo is None:
                yield
                return
            if not await self._acquire(user_id, wait=wait):
                raise UserBusy(user_id)
            try:
                yield
            finally:
                await self._release(user_id)

    async def _connection(self) -> psycopg.AsyncConnection:
        async with self._connecting:
            if self._conn is None or self._conn.closed:
                assert self.conninfo is not None  # hold() uses the database only with one
                self._conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True
                )
            return self._conn

    async def _acquire(self, user_id: int, *, wait: bool = True) -> bool:
        while True:
            conn = await self._connection()
            try:
                row = await (await conn.execute(TRY_LOCK, lock_key(user_id))).fetchone()
            except psycopg.OperationalError:
                log.warning("turn-lock connection lost; reconnecting")
                await conn.close()
                continue
            assert row is not None  # SELECT pg_try_advisory_lock(…) returns one row
            if row[0]:
                return True
            if not wait:
                return False
            await asyncio.sleep(POLL_SECONDS)  # another process runs this user's turn

    async def _release(self, user_id: int) -> None:
        conn = self._conn
        if conn is None or conn.closed:
            return  # the session ended, and with it every lock it held
        try:
            await conn.execute(UNLOCK, lock_key(user_id))
        except psycopg.Error:
            log.warning("could not release the turn lock of user %s", user_id)

    async def close(self) -> None:
        """Close the lock connection (releasing any lock still held)."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

"""A process's presence, as PostgreSQL sees it: a session advisory lock on its own connection.

Each worker (and bot) process holds `pg_advisory_lock(PRESENCE_NS,
hashtext(owner))` — `owner` being the id it writes into `claimed_by` — on a
dedicated connection for as long as it lives. When the process dies (kill -9,
OOM, a crashed host once TCP keepalive gives up), PostgreSQL ends that
session and releases the lock at once; a process that is merely slow (GC
pause, SIGSTOP) keeps its connection, so its lock and its claims.

`HELD_OWNERS` lists the owner keys locked in this database right now; claim
tables compare `hashtext(claimed_by)` against it to find the claims of dead
processes (see services/schedules/liveness.py and services/inbox.py). A hash
collision with a live owner only means falling back to the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from panager.db.locks import PRESENCE_NS
from panager.tasks import cancel_and_wait

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0
LOCK = "SELECT pg_advisory_lock(%s, hashtext(%s))"
# Server-side keepalive on this session, so a vanished host (not just a killed process)
# also releases its lock within ~11 s instead of the kernel's two hours.
KEEPALIVE = (
    "SET tcp_keepalives_idle = 5",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
)
HELD_OWNERS = f"""
SELECT objid FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND classid = {PRESENCE_NS}::oid AND objsubid = 2
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
# SQL true when the process named by `column` holds no presence lock (it is gone).
OWNER_IS_GONE = "hashtext({column})::oid NOT IN (SELECT objid FROM held)"


class SessionLock:
    """An advisory lock held by one dedicated session: `held` while it is, `close` drops it."""

    def __init__(self, url: str, *, check_seconds: float = CHECK_SECONDS) -> None:
        self.url = url
        self.check_seconds = check_seconds
        self._conn: psycopg.AsyncConnection | None = None
        self._task: asyncio.Task | None = None
        self.held = asyncio.Event()

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
        self._conn = None

    async def close(self) -> None:
        """Release the lock (closing the session releases it) and stop keeping it."""
        if self._task is not None:
            await cancel_and_wait([self._task])
        self.held.clear()
        await self._drop()


class Presence(SessionLock):
    """Holds this process's presence lock while running; reconnects and re-locks after a drop."""

    def __init__(self, url: str, owner: str, *, check_seconds: float = CHECK_SECONDS) -> None:
        super().__init__(url, check_seconds=check_seconds)
        self.owner = owner

    async def start(self) -> None:
        """Take the lock once (errors propagate), then keep it in the background."""
        await self._acquire()
        self._task = asyncio.create_task(self._keep(), name=f"presence {self.owner}")

    async def _acquire(self) -> None:
        conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        try:
            for statement in KEEPALIVE:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute(statement)
            await conn.execute(LOCK, (PRESENCE_NS, self.owner))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self.held.set()

    async def _keep(self) -> None:
        """Ping the lock's connection; when it is gone, the lock is too: take it again."""
        delay = self.check_seconds
        while True:
            await asyncio.sleep(delay)
            try:
                if self._conn is None or self._conn.closed:
                    await self._acquire()
                    log.info("presence of %s restored", self.owner)
                assert self._conn is not None  # _acquire() opened it or raised
                await self._conn.execute("SELECT 1")
                delay = self.check_seconds
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.held.is_set():
                    log.warning("presence of %s lost (%s); reconnecting", self.owner, exc)
                self.held.clear()
                await self._drop()
                delay = min(max(delay * 2, 1.0), 30.0)

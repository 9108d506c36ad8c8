"""One leader among processes: a session advisory lock tried on a dedicated connection.

Some work must be done by exactly one process at a time (Telegram allows one
`getUpdates` consumer per bot). Each candidate tries `pg_try_advisory_lock`
about once a second; the holder keeps its connection (and so the lock) while
it lives and PostgreSQL releases it the moment the process dies, so another
candidate takes over within a second or so. `held` is set while this process
leads; work done as leader checks it between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from panager.db.locks import LEADER_NS
from panager.db.presence import KEEPALIVE, SessionLock

log = logging.getLogger(__name__)

TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS ok"


class Leadership(SessionLock):
    """Competes for the lock named `name`; `held` is set while this process has it."""

    def __init__(self, url: str, name: str, *, check_seconds: float = 1.0) -> None:
        super().__init__(url, check_seconds=check_seconds)
        self.name = name

    def start(self) -> None:
        """Start competing in the background."""
        self._task = asyncio.create_task(self._run(), name=f"leader {self.name}")

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.held.is_set():
                    log.warning("lost the %s lock (%s)", self.name, exc)
                self.held.clear()
                await self._drop()
            await asyncio.sleep(self.check_seconds)

    async def _step(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            for statement in KEEPALIVE:
                with contextlib.suppress(psycopg.Error):
                    await self._conn.execute(statement)
        if self.held.is_set():
            await self._conn.execute("SELECT 1")  # still connected, so still holding it
            return
        row = await (await self._conn.execute(TRY_LOCK, (LEADER_NS, self.name))).fetchone()
        if row and row[0]:
            log.info("this process now leads %s", self.name)
            self.held.set()

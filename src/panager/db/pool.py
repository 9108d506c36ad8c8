"""The one shared async connection pool (checkpointer + services).

`autocommit=True` is required by the LangGraph checkpointer's `setup()`
(CREATE INDEX CONCURRENTLY); services open explicit transactions with
`conn.transaction()` where they need one.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TypeAlias

from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from panager.config import Settings

log = logging.getLogger(__name__)

# The pool's connections are opened with `row_factory=dict_row`, so every
# cursor on them yields `dict[str, Any]` rows.
DictConnection: TypeAlias = AsyncConnection[DictRow]
Pool: TypeAlias = AsyncConnectionPool[DictConnection]


def resolve_database_url(settings: Settings) -> str:
    """DATABASE_URL when set, else the embedded server under PANAGER_HOME (started on demand)."""
    if settings.database_url:
        return settings.database_url
    from panager.db.embedded import start_embedded

    return start_embedded(settings.home / "pgdata")


async def _configure(conn: DictConnection) -> None:
    """Per-connection set-up: pgvector adapters when the extension exists."""
    from pgvector.psycopg import register_vector_async

    try:
        await register_vector_async(conn)
    except Exception:  # extension not created yet (before the first migration)
        log.debug("pgvector type not registered on this connection")


# A connection taken again within this many seconds of its last checkout is not checked
# (one round trip saved per checkout in a busy process); one idle longer is, so pooled
# connections still survive a database restart. HikariCP does the same (aliveBypassWindowMs,
# 500 ms).
CHECK_AFTER = 0.5
_LAST_TAKEN: weakref.WeakKeyDictionary[DictConnection, float] = weakref.WeakKeyDictionary()


async def check_idle_connection(conn: DictConnection) -> None:
    """The pool's check on checkout: `check_connection` unless the connection was taken less
    than CHECK_AFTER seconds ago (a dead one raises, and the pool replaces it)."""
    now = time.monotonic()
    last = _LAST_TAKEN.get(conn)
    if last is None or now - last >= CHECK_AFTER:
        await AsyncConnectionPool.check_connection(conn)
    _LAST_TAKEN[conn] = now


async def open_pool(url: str, *, min_size: int = 1, max_size: int = 20) -> Pool:
    """Open the shared pool and wait until one connection works."""
    pool: Pool = AsyncConnectionPool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": dict_row},
        configure=_configure,
        check=check_idle_connection,  # survive a database restart
        open=False,
        reconnect_timeout=30,
    )
    await pool.open(wait=True, timeout=30)
    return pool

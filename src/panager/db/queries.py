"""One statement on a pooled connection: the shapes services use most.

The pool is opened with `autocommit=True` and dict rows (db/pool.py), so each
call is its own transaction and rows come back as dicts.
"""

from __future__ import annotations

from typing import Any

from panager.db.pool import Pool

Row = dict[str, Any]


async def fetch_one(pool: Pool, sql: str, params: Any = None) -> Row | None:
    """The first row of `sql`, or None."""
    async with pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        return await cursor.fetchone()


async def fetch_all(pool: Pool, sql: str, params: Any = None) -> list[Row]:
    """Every row of `sql`."""
    async with pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        return await cursor.fetchall()


async def execute(pool: Pool, sql: str, params: Any = None) -> None:
    """Run `sql` for its effect."""
    async with pool.connection() as conn:
        await conn.execute(sql, params)


def one(row: Row | None) -> Row:
    """The row of a statement that always yields one (an aggregate, an upsert's RETURNING)."""
    if row is None:
        raise LookupError("the statement returned no row")
    return row

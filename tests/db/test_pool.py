"""The shared pool's check on checkout (db/pool.py), against the real PostgreSQL.

A connection taken again within CHECK_AFTER of its last checkout is handed out
without the check's round trip; one idle longer is checked first, so a
connection whose server process died while it sat in the pool is replaced,
never handed out.
"""

from __future__ import annotations

import asyncio

import psycopg
from psycopg_pool import AsyncConnectionPool

from panager.db import pool as pool_module
from panager.db.pool import open_pool


async def test_a_connection_killed_while_idle_is_replaced_not_handed_out(db_url, monkeypatch):
    monkeypatch.setattr(pool_module, "CHECK_AFTER", 0.2)
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        async with pool.connection() as conn:
            dead = conn.info.backend_pid
        with psycopg.connect(db_url, autocommit=True) as admin:  # as a restart would
            admin.execute("SELECT pg_terminate_backend(%s)", (dead,))
        await asyncio.sleep(0.3)
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT 1 AS one")).fetchone()
            assert row == {"one": 1}
            assert conn.info.backend_pid != dead
    finally:
        await pool.close()


async def test_a_connection_taken_again_at_once_is_checked_only_the_first_time(
    db_url, monkeypatch
):
    checked: list[int] = []
    check = AsyncConnectionPool.check_connection

    async def counted(conn) -> None:
        checked.append(conn.info.backend_pid)
        await check(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(counted))
    monkeypatch.setattr(pool_module, "CHECK_AFTER", 60.0)
    pool = await open_pool(db_url, min_size=1, max_size=1)
    try:
        for _ in range(5):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        assert len(checked) == 1  # its first checkout
        monkeypatch.setattr(pool_module, "CHECK_AFTER", 0.0)  # now every checkout is "idle"
        for _ in range(2):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        assert len(checked) == 3 and len(set(checked)) == 1
    finally:
        await pool.close()

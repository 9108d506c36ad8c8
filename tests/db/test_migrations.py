"""Migrations: a blank database upgrades to head and downgrades to base."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from panager.db import migrate
from panager.db.pool import open_pool

TABLES = """
SELECT table_name FROM information_schema.tables
WHERE table_schema = 'public' ORDER BY table_name
"""


async def tables(pool) -> set[str]:
    async with pool.connection() as conn:
        return {r["table_name"] for r in await (await conn.execute(TABLES)).fetchall()}


async def test_upgrade_blank_database_then_downgrade(fresh_db):
    url = fresh_db()
    pool = await open_pool(url, max_size=2)
    try:
        before = await migrate.schema_status(url, pool)
        assert before.current is None and not before.up_to_date
        await migrate.upgrade(url, pool)
        after = await migrate.schema_status(url, pool)
        assert after.up_to_date and after.current == after.head
        present = await tables(pool)
        assert {"users", "checkpoints", "checkpoint_blobs", "checkpoint_writes"} <= present
        async with pool.connection() as conn:
            row = await (
                await conn.execute("SELECT 1 AS ok FROM pg_extension WHERE extname='vector'")
            ).fetchone()
        assert row is not None
        await migrate.upgrade(url, pool)  # idempotent
        await migrate.downgrade(url, pool, "base")
        left = await tables(pool) - {"alembic_version"}
        assert all(t.startswith("checkpoint") for t in left), left
        assert (await migrate.schema_status(url, pool)).current is None
    finally:
        await pool.close()


async def test_every_revision_downgrades_one_step(fresh_db):
    url = fresh_db()
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
        head = (await migrate.schema_status(url, pool)).head
        await migrate.downgrade(url, pool, "-1")
        assert (await migrate.schema_status(url, pool)).current != head
        await migrate.upgrade(url, pool)
        assert (await migrate.schema_status(url, pool)).current == head
    finally:
        await pool.close()


def test_alembic_has_one_head_and_files_are_numbered_by_revision():
    """A branch merged with its own migration must re-parent it onto the new head (and take
    the next number): two heads fail here."""
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://x/y"))
    assert len(script.get_heads()) == 1, script.get_heads()
    for revision in script.walk_revisions():
        assert Path(revision.path).name.startswith(f"{revision.revision}_")


def test_the_head_read_from_the_files_is_alembics():
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/db"))
    assert migrate.alembic_head() == script.get_current_head()


def test_status_at_head_does_not_load_alembic(db_url):
    code = (
        "import asyncio, sys\n"
        "from panager.db import migrate\n"
        "from panager.db.pool import open_pool\n"
        "async def main(url):\n"
        "    pool = await open_pool(url, max_size=1)\n"
        "    status = await migrate.schema_status(url, pool)\n"
        "    await pool.close()\n"
        "    print(status.up_to_date, 'alembic' in sys.modules, 'sqlalchemy' in sys.modules)\n"
        f"asyncio.run(main({db_url!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "False", "False"], done.stderr

"""Bring the database to the current schema: alembic (our tables) + LangGraph's checkpointer.

Both run under one PostgreSQL advisory lock, so concurrent starts (several
workers, a `panager chat` beside `panager run`) are safe: the second waits and
then finds nothing to do.
"""

from __future__ import annotations

import ast
import asyncio
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from panager.config import ConfigError
from panager.db.extension import ensure_vector
from panager.db.locks import MIGRATION_LOCK_KEY
from panager.db.pool import Pool
from panager.db.queries import one

if TYPE_CHECKING:
    from alembic.config import Config

# alembic and SQLAlchemy (about 0.35 s of imports) load only to change the schema: every
# start asks where the database stands, which needs neither (`schema_status`).
ALEMBIC_DIR = Path(__file__).parent / "alembic"


def sqlalchemy_url(url: str) -> str:
    """The psycopg (v3) SQLAlchemy form of a libpq URI."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def alembic_config(url: str) -> Config:
    """An alembic Config pointing at our bundled migrations."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return cfg


class MigrationRefused(ConfigError):
    """The server refused a migration statement (e.g. a missing privilege): one line."""


def _alembic(url: str, action: str, target: str) -> None:
    from alembic import command
    from sqlalchemy.exc import DBAPIError

    cfg = alembic_config(url)
    try:
        if action == "upgrade":
            command.upgrade(cfg, target)
        else:
            command.downgrade(cfg, target)
    except DBAPIError as exc:
        first = str(exc.orig or exc).splitlines()[0]
        raise MigrationRefused(
            f"the database refused the schema change ({first}); `panager doctor` shows "
            "the privileges the role needs"
        ) from None


@dataclass(frozen=True)
class SchemaStatus:
    """Where the database stands against the code."""

    current: str | None
    head: str
    checkpointer_version: int | None
    checkpointer_head: int

    @property
    def up_to_date(self) -> bool:
        """True when both alembic and the checkpointer are at head."""
        return self.current == self.head and self.checkpointer_version == self.checkpointer_head


@functools.cache
def alembic_head() -> str:
    """The newest revision among the bundled migrations, read from their `revision` and
    `down_revision` assignments (tests/db/test_migrations.py checks it against alembic)."""
    revisions: dict[str, str | None] = {}
    for path in (ALEMBIC_DIR / "versions").glob("*.py"):
        found: dict[str, str | None] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                        found[target.id] = value if isinstance(value, str) else None
        if "revision" in found:
            revisions[str(found["revision"])] = found.get("down_revision")
    heads = set(revisions) - {down for down in revisions.values() if down}
    if len(heads) != 1:
        raise RuntimeError(f"the bundled migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


async def _alembic_current(db: Pool) -> str | None:
    async with db.connection() as conn:
        row = await (await conn.execute("SELECT to_regclass('alembic_version') AS t")).fetchone()
        if one(row)["t"] is None:
            return None
        row = await (await conn.execute("SELECT version_num FROM alembic_version")).fetchone()
        return None if row is None else row["version_num"]


async def _checkpointer_version(db: Pool) -> int | None:
    async with db.connection() as conn:
        row = await (
            await conn.execute("SELECT to_regclass('checkpoint_migrations') AS t")
        ).fetchone()
        if one(row)["t"] is None:
            return None
        row = await (await conn.execute("SELECT max(v) AS v FROM checkpoint_migrations")).fetchone()
        return one(row)["v"]


async def schema_status(url: str, db: Pool) -> SchemaStatus:
    """Current and head revisions of alembic and of the checkpointer tables."""
    current, head = await _alembic_current(db), alembic_head()
    cp_head = len(AsyncPostgresSaver.MIGRATIONS) - 1
    return SchemaStatus(current, head, await _checkpointer_version(db), cp_head)


async def upgrade(url: str, db: Pool, target: str = "head") -> None:
    """Run alembic to `target` and the checkpointer setup, under the migration lock."""
    async with db.connection() as lock_conn:
        await lock_conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            await ensure_vector(lock_conn)  # one line naming the fix, not alembic's traceback
            await asyncio.to_thread(_alembic, url, "upgrade", target)
            await AsyncPostgresSaver(db).setup()
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


async def downgrade(url: str, db: Pool, target: str) -> None:
    """Run alembic down to `target` (e.g. "base"), under the migration lock."""
    async with db.connection() as lock_conn:
        await lock_conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            await asyncio.to_thread(_alembic, url, "downgrade", target)
        finally:
            await lock_conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))

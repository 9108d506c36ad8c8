"""`panager db upgrade` and `panager db status`."""

from __future__ import annotations

import typer

from panager.config import Settings
from panager.db import migrate
from panager.db.pool import open_pool, resolve_database_url


async def upgrade_command(settings: Settings) -> None:
    """Run migrations and the checkpointer setup, then print the status."""
    url = resolve_database_url(settings)
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
        status = await migrate.schema_status(url, pool)
    finally:
        await pool.close()
    typer.echo(f"schema: {status.current} (head) · checkpointer: v{status.checkpointer_version}")


async def status_command(settings: Settings) -> int:
    """Print where the schema stands; exit code 1 when behind."""
    url = resolve_database_url(settings)
    pool = await open_pool(url, max_size=2)
    try:
        status = await migrate.schema_status(url, pool)
    finally:
        await pool.close()
    ours = "up to date" if status.current == status.head else "behind: run `panager db upgrade`"
    typer.echo(f"schema: {status.current or 'empty'} / head {status.head} — {ours}")
    cp = status.checkpointer_version
    cp_state = "up to date" if cp == status.checkpointer_head else "behind"
    shown = "none" if cp is None else f"v{cp}"
    typer.echo(f"checkpointer: {shown} / v{status.checkpointer_head} — {cp_state}")
    return 0 if status.up_to_date else 1

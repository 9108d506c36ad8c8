"""`panager memory status` and `panager memory reembed` (switching embedding models)."""

from __future__ import annotations

import typer

from panager.config import Settings

memory_app = typer.Typer(
    help="Long-term memory store: embedder status and re-embedding.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    """Attach `panager memory …` to the main CLI."""
    app.add_typer(memory_app, name="memory")


@memory_app.command("status")
def status() -> None:
    """Show the embedder the stored memories use, the configured one, and counts."""
    from panager.cli.common import run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()
    run_async(lambda: status_command(settings))


@memory_app.command("reembed")
def reembed(
    model: str = typer.Option(
        None, "--model", help="embedding model to move to (default: PANAGER_EMBEDDING_MODEL)"
    ),
) -> None:
    """Re-embed every stored memory and document passage with the configured (or given)
    embedding model."""
    from panager.cli.common import run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()
    run_async(lambda: reembed_command(settings, model))


async def _open(settings: Settings):
    from panager.app import ensure_schema
    from panager.db.pool import open_pool, resolve_database_url

    url = resolve_database_url(settings)
    await ensure_schema(url, settings.auto_migrate)
    return await open_pool(url, max_size=2)


async def status_command(settings: Settings) -> None:
    """Print the store's embedder and what is configured."""
    from panager.services.memory.binding import (
        build_embedder,
        requested_model,
        store_status,
        stored_passages,
    )

    pool = await _open(settings)
    try:
        meta, count, users = await store_status(pool)
        passages = await stored_passages(pool)
    finally:
        await pool.close()
    configured = build_embedder(requested_model(settings), settings).name
    stored = f"{meta.embedder} ({meta.dim} dimensions)" if meta else "none yet"
    typer.echo(f"memories: {count} of {users} user(s)")
    typer.echo(f"document passages: {passages}")
    typer.echo(f"stored with: {stored}")
    typer.echo(f"configured: {configured}")
    if meta and meta.embedder != configured and (count or passages):
        typer.echo("these differ: run `panager memory reembed` to move to the configured one")


async def reembed_command(settings: Settings, model: str | None) -> None:
    """Re-embed all memories with `model` (default: the configured embedder)."""
    from panager.services.memory.binding import (
        build_embedder,
        reembed,
        requested_model,
        setting_for,
    )

    embedder = build_embedder(model or requested_model(settings), settings)
    pool = await _open(settings)

    def progress(done: int, total: int) -> None:
        typer.echo(f"\rembedding {done}/{total}", nl=done == total, err=True)

    try:
        report = await reembed(pool, embedder, progress)
    finally:
        await pool.close()
    typer.echo(
        f"re-embedded {report.count} memories and {report.passages} document passages with "
        f"{report.new} ({report.dim} dimensions, "
        f"was {report.old or 'none'}) in {report.seconds:.1f}s"
    )
    if build_embedder(requested_model(settings), settings).name != report.new:
        typer.echo(
            f"now set PANAGER_EMBEDDING_MODEL={setting_for(report.new)} so Panager uses it"
        )

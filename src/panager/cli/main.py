"""`panager` command line: chat, ask, run, db, invite, users, doctor, secret, backup, restore.

Every command loads settings first; a configuration problem prints one line
(`panager: PANAGER_X is invalid …`) and exits 2 — never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any

import typer

from panager.config import ConfigError, Settings, load_settings

app = typer.Typer(
    help="Panager: a self-hosted personal assistant.", no_args_is_help=True, add_completion=False
)
db_app = typer.Typer(help="Database schema: upgrade and status.", no_args_is_help=True)
app.add_typer(db_app, name="db")


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit."""
    typer.echo(f"panager: {message}", err=True)
    raise typer.Exit(code)


def settings_or_exit() -> Settings:
    """Load settings, turning ConfigError into a one-line exit."""
    try:
        settings = load_settings()
        _ = settings.runtime
        return settings
    except ConfigError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def run_async(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine; configuration and database errors become one line, never a traceback."""
    try:
        return asyncio.run(factory())
    except ConfigError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except OSError as exc:
        fail(f"cannot reach the database or a service: {exc.strerror or exc}")
    except Exception as exc:
        if type(exc).__name__ == "PoolTimeout":
            where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "the embedded database"
            fail(f"cannot connect to {where} within 30 s; check that the server is running")
        if type(exc).__module__.startswith("psycopg"):
            fail(f"database error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise


LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


def setup_logging(debug: bool = False) -> None:
    """Quiet logs on stderr for interactive commands; every line starts with its time."""
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format=LOG_FORMAT,
        datefmt=LOG_DATEFMT,
        stream=sys.stderr,
    )
    for noisy in ("httpx", "openai", "httpcore", "pgserver", "discord", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # the pool retries a refused connection with a warning each time; we say it once
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


@app.command()
def chat(
    debug: bool = typer.Option(False, "--debug", help="print the state after each turn"),
) -> None:
    """Talk to the assistant in the terminal (same graph, tools and database as Discord)."""
    settings = settings_or_exit()
    setup_logging()
    from panager.frontends.terminal.chat import run_chat

    run_async(lambda: run_chat(settings, debug=debug))


@app.command()
def ask(
    text: list[str] = typer.Argument(..., help="the message"),
    as_json: bool = typer.Option(
        False, "--json", help="print one JSON object: answer, ok, tool_calls, usage, link"
    ),
    yes: bool = typer.Option(
        False,
        "--yes",
        help="approve actions the assistant would otherwise ask about (sending, deleting, "
        "scheduling chosen while reading outside text); without it they are declined. "
        "In cron this approves whatever a calendar invitation or message talks it into.",
    ),
) -> None:
    """Run one turn for the local user; stream the answer to stdout (exit 1 on failure)."""
    settings = settings_or_exit()
    setup_logging()
    from panager.frontends.terminal.ask import ask_once

    ok = run_async(lambda: ask_once(settings, " ".join(text), as_json=as_json, yes=yes))
    raise typer.Exit(0 if ok else 1)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Bring the database to the current schema (alembic + checkpointer tables)."""
    settings = settings_or_exit()
    setup_logging()
    from panager.cli.dbcmd import upgrade_command

    run_async(lambda: upgrade_command(settings))


@db_app.command("status")
def db_status() -> None:
    """Show the schema revision of our tables and of the checkpointer."""
    settings = settings_or_exit()
    setup_logging()
    from panager.cli.dbcmd import status_command

    code = run_async(lambda: status_command(settings))
    raise typer.Exit(code)


@app.command()
def doctor() -> None:
    """Check configuration, database, pgvector, migrations, model endpoint, Discord, Google."""
    setup_logging()
    from panager.cli.doctor import run_doctor

    code = run_async(run_doctor)
    raise typer.Exit(code)


@app.command()
def secret() -> None:
    """Print a strong random PANAGER_SECRET_KEY (43 URL-safe characters)."""
    import secrets as _secrets

    typer.echo(_secrets.token_urlsafe(32))


def register_extensions() -> None:
    """Attach command groups that live in their own modules (imported here, at start-up, not
    when this module is imported)."""
    for module in extension_modules():
        module.register(app)


def extension_modules() -> tuple[ModuleType, ...]:
    """The command-group modules, each with `register(app)`: one line per group."""
    from panager.cli import access, backup, mcp, memory, run

    return (run, access, memory, mcp, backup)


def main() -> None:
    """Console-script entry point."""
    register_extensions()
    app()


if __name__ == "__main__":
    main()

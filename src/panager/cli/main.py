"""`panager` command line: chat, ask, run, db, invite, users, doctor, secret, backup, restore.

Every command loads settings first; a configuration problem prints one line
(`panager: PANAGER_X is invalid …`) and exits 2 — never a traceback.
"""

from __future__ import annotations

from types import ModuleType

import typer

from panager.cli.common import run_async, settings_or_exit, setup_logging

app = typer.Typer(
    help="Panager: a self-hosted personal assistant.", no_args_is_help=True, add_completion=False
)
db_app = typer.Typer(help="Database schema: upgrade and status.", no_args_is_help=True)
app.add_typer(db_app, name="db")


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

"""`panager backup [PATH]` and `panager restore PATH` (docs/backup.md).

A refused backup or restore is one line on stderr and exit code 1; nothing is changed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from panager.config import Settings
from panager.services.backup.crypto import MIN_PASSPHRASE, BackupRefused, KeySource


def register(app: typer.Typer) -> None:
    """Attach `panager backup` and `panager restore` to the main CLI."""
    app.command("backup")(backup)
    app.command("restore")(restore)


def read_secret_file(path: Path, what: str) -> str:
    """The first line of a passphrase or key file (BackupRefused when unusable)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BackupRefused(f"cannot read the {what} file {path} ({type(exc).__name__})") from None
    value = text.splitlines()[0].strip() if text.strip() else ""
    if what == "passphrase" and len(value) < MIN_PASSPHRASE:
        raise BackupRefused(
            f"the passphrase in {path} is too short; use at least {MIN_PASSPHRASE} characters"
        )
    if not value:
        raise BackupRefused(f"the {what} file {path} is empty")
    return value


def key_source(settings: Settings, passphrase_file: Path | None) -> KeySource:
    """The passphrase when a file is given, else PANAGER_SECRET_KEY."""
    if passphrase_file is not None:
        return KeySource(passphrase=read_secret_file(passphrase_file, "passphrase"))
    return KeySource(secret_key=settings.secret_key)


def backup(
    path: Path = typer.Argument(
        Path("."), help="the file to write, or a directory for a new dated name (default: here)"
    ),
    passphrase_file: Path = typer.Option(
        None, "--passphrase-file", help="encrypt with the passphrase in this file "
        "(the backup then carries PANAGER_SECRET_KEY too)"
    ),
    without_sessions: bool = typer.Option(
        False, "--without-sessions", help="leave out the per-person session recordings"
    ),
) -> None:
    """Write an encrypted backup of the whole instance (database last, then the home files)."""
    from panager.cli.common import fail, run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()

    async def go() -> None:
        from panager.db.pool import resolve_database_url
        from panager.services.backup.archive import make_backup

        key = key_source(settings, passphrase_file)
        url = resolve_database_url(settings)
        result = await asyncio.to_thread(
            make_backup, settings, url, path, key, sessions=not without_sessions
        )
        rows = sum(result.tables.values())
        typer.echo(
            f"backup written: {result.path} ({result.size / 1e6:.1f} MB, {rows} rows in "
            f"{len(result.tables)} tables, {result.files} home files, schema "
            f"{result.revision}, {result.seconds:.1f}s)"
        )

    try:
        run_async(go)
    except BackupRefused as exc:
        fail(str(exc), 1)


def restore(
    path: Path = typer.Argument(..., help="the backup file"),
    passphrase_file: Path = typer.Option(
        None, "--passphrase-file", help="the passphrase the backup was made with"
    ),
    reseal: Path = typer.Option(
        None, "--reseal", help="a file holding the PANAGER_SECRET_KEY the backup was made "
        "with: its sealed secrets are re-sealed with the current key"
    ),
) -> None:
    """Restore a backup into an empty PANAGER_HOME and an empty database."""
    from panager.cli.common import fail, run_async, settings_or_exit, setup_logging

    settings = settings_or_exit()
    setup_logging()

    async def go() -> None:
        from panager.db.pool import resolve_database_url
        from panager.services.backup.restore import restore_backup

        old = read_secret_file(reseal, "key") if reseal is not None else None
        if passphrase_file is not None:
            key = key_source(settings, passphrase_file)
        else:
            key = KeySource(secret_key=old or settings.secret_key)
        url = resolve_database_url(settings)
        result = await restore_backup(settings, url, path, key, old_key=old)
        moved = "" if result.revision == result.migrated_to else (
            f", migrated from {result.revision}"
        )
        typer.echo(
            f"restored {result.rows} rows in {result.tables} tables and {result.files} home "
            f"files; schema {result.migrated_to}{moved}"
            + (f"; {result.resealed} sealed secret(s) re-sealed" if result.resealed else "")
        )
        if result.secret_file is not None:
            typer.echo(
                f"the backup's PANAGER_SECRET_KEY is in {result.secret_file} (only you can read "
                "it): set PANAGER_SECRET_KEY to it, then delete the file"
            )

    try:
        run_async(go)
    except BackupRefused as exc:
        fail(str(exc), 1)

"""Which `pg_dump` / `pg_restore` to run: one whose major version is at least the server's.

For the embedded server it is the one bundled with it (pgserver's PostgreSQL 16). For
`DATABASE_URL` the candidates are, in order, `PANAGER_PG_DUMP`, the bundled one and
`pg_dump` on PATH; the first new enough is used and its `pg_restore` is the one beside
it. None new enough is one line naming what was found and the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from panager.services.backup.crypto import BackupRefused

VERSION = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class PgTools:
    """A matching pg_dump and the pg_restore beside it."""

    pg_dump: Path
    pg_restore: Path
    major: int


def bundled_bin() -> Path | None:
    """The bin directory of the embedded server's PostgreSQL (pgserver), when installed."""
    try:
        import pgserver
    except ImportError:
        return None
    path = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return path if (path / "pg_dump").is_file() else None


def tool_major(path: Path) -> int | None:
    """The major version `path --version` reports, or None when it does not run."""
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except OSError:
        return None
    found = VERSION.search(done.stdout)
    return int(found.group(1)) if done.returncode == 0 and found else None


def candidates(embedded: bool, configured: str | None) -> list[tuple[str, Path]]:
    """Where to look for pg_dump, in order, each with how it was found."""
    found: list[tuple[str, Path]] = []
    if configured and not embedded:
        found.append(("PANAGER_PG_DUMP", Path(configured)))
    bundled = bundled_bin()
    if bundled is not None:
        found.append(("bundled", bundled / "pg_dump"))
    if not embedded:
        on_path = shutil.which("pg_dump")
        if on_path:
            found.append(("PATH", Path(on_path)))
    return found


def choose_tools(server_major: int, *, embedded: bool, configured: str | None) -> PgTools:
    """The first candidate whose major version is ≥ the server's; BackupRefused otherwise."""
    seen = []
    for how, dump in candidates(embedded, configured):
        major = tool_major(dump)
        if major is None:
            seen.append(f"{dump} ({how}) does not run")
            continue
        restore = dump.with_name("pg_restore")
        if major >= server_major and restore.is_file():
            return PgTools(dump, restore, major)
        seen.append(f"pg_dump {major} at {dump} ({how})")
    what = "; ".join(seen) if seen else "no pg_dump at all"
    raise BackupRefused(
        f"no pg_dump for the PostgreSQL {server_major} server: found {what}; install the "
        f"PostgreSQL {server_major} client tools (or newer) and set PANAGER_PG_DUMP to its pg_dump"
    )


def libpq_target(url: str) -> tuple[str, dict[str, str]]:
    """A conninfo string without the password, and an environment carrying it (PGPASSWORD),
    so the password never shows in a process list."""
    params = conninfo_to_dict(url)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), env

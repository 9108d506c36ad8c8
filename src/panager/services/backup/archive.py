"""Making a backup file: the home's files, then the database, then the manifest.

Inside the encryption (crypto.py) is a tar stream:

- `files/config.yaml` — the YAML config (`PANAGER_CONFIG` or `$PANAGER_HOME/config.yaml`)
- `files/skills/…` — `$PANAGER_HOME/skills`
- `files/sessions/<user>/<name>.jsonl` — saved conversations; `files/sessions/<user>.jsonl`
  — the live recordings, unless left out (`--without-sessions`)
- `database.dump` — `pg_dump --format=custom --compress=1` of the whole database, taken
  last (level 1: at 100,000 memories it dumps in under a third of the default level's time
  for a file 12 % larger; embeddings barely compress — BENCHMARKS.md)
- `manifest.json` — Panager's version, the alembic revision, rows per table (counted in
  the very snapshot pg_dump dumps), SHA-256 and size of every member, the fingerprint of
  PANAGER_SECRET_KEY and, in a passphrase backup, the key itself

Files and database are not one atomic snapshot: a file written while the database is
being dumped may be newer than the dump. The database is taken last so that what the
files refer to is in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql

from panager.config import Settings
from panager.services.backup.crypto import (
    BackupRefused,
    EncryptingWriter,
    KeySource,
    key_fingerprint,
)
from panager.services.backup.pgtools import PgTools, choose_tools, libpq_target

MANIFEST = "manifest.json"
DATABASE = "database.dump"
FILES = "files/"
NAME_PREFIX = "panager-backup-"
SUFFIX = ".pbak"

TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"


def panager_version() -> str:
    """The installed Panager's version."""
    try:
        return version("panager")
    except PackageNotFoundError:
        return "unknown"


def backup_name(at: datetime) -> str:
    """`panager-backup-20261128T053000Z.pbak`: the name scheduled backups are kept under."""
    return f"{NAME_PREFIX}{at.astimezone(UTC):%Y%m%dT%H%M%SZ}{SUFFIX}"


@dataclass
class BackupResult:
    """What one backup wrote."""

    path: Path
    size: int
    seconds: float
    tables: dict[str, int]
    files: int
    revision: str | None
    manifest: dict[str, Any] = field(default_factory=dict)


class _Hashing:
    """Wraps a file read by tarfile, hashing exactly the bytes it takes."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.sha.update(data)
        return data


def home_files(settings: Settings, *, sessions: bool) -> Iterator[tuple[str, Path]]:
    """(name in the backup, path) of every home file a backup holds."""
    config = settings.config_path or settings.home / "config.yaml"
    if config.is_file():
        yield FILES + "config.yaml", config
    for folder in ("skills", "sessions"):
        root = settings.home / folder
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink() or path.suffix == ".tmp":
                continue
            relative = path.relative_to(settings.home)
            recording = folder == "sessions" and len(relative.parts) == 2
            if recording and not sessions:
                continue
            yield FILES + relative.as_posix(), path


def _add(tar: tarfile.TarFile, name: str, path: Path, sums: dict[str, dict[str, Any]]) -> None:
    with path.open("rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = int(os.fstat(raw.fileno()).st_mtime)
        info.mode = 0o600
        hashing = _Hashing(raw)
        tar.addfile(info, hashing)
    sums[name] = {"sha256": hashing.sha.hexdigest(), "bytes": size}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(data))


def server_major(conn: psycopg.Connection[Any]) -> int:
    """The server's major version (16 for 16.2)."""
    row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None
    return int(row[0]) // 10000


def tools_for(settings: Settings, url: str) -> PgTools:
    """The pg_dump/pg_restore to use with this database (see pgtools)."""
    with psycopg.connect(url, connect_timeout=30) as conn:
        major = server_major(conn)
    return choose_tools(
        major, embedded=settings.database_url is None, configured=settings.pg_dump
    )


# Every value rendered the same way on both sides (the restored server's defaults may differ).
SESSION_FORMAT = (
    "SET TimeZone TO 'UTC'",
    "SET DateStyle TO 'ISO, YMD'",
    "SET IntervalStyle TO 'postgres'",
    "SET extra_float_digits TO 1",
)
# Rows and an order-free digest of a table: the sum of each row's text's MD5 (60 bits).
TABLE_FACTS = (
    "SELECT count(*) AS n, coalesce(sum(('x' || substr(md5(t::text), 1, 15))::bit(60)::bigint),"
    " 0)::text AS d FROM public.{} AS t"
)


def table_facts(conn: psycopg.Connection[Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Rows per table of the public schema, and a digest of each table's content, as this
    connection's snapshot sees them."""
    for statement in SESSION_FORMAT:
        conn.execute(statement)
    counts, digests = {}, {}
    for (name,) in conn.execute(TABLES).fetchall():
        query = sql.SQL(TABLE_FACTS).format(sql.Identifier(name))
        row = conn.execute(query).fetchone()
        assert row is not None
        counts[name], digests[name] = int(row[0]), str(row[1])
    return counts, digests


def _revision(conn: psycopg.Connection[Any], tables: dict[str, int]) -> str | None:
    if "alembic_version" not in tables:
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(row[0]) if row else None


def _dump(
    url: str, tools: PgTools, out: Path
) -> tuple[dict[str, int], dict[str, str], str | None, int]:
    """pg_dump the database into `out` from an exported snapshot; the counts it holds."""
    target, env = libpq_target(url)
    with psycopg.connect(url, connect_timeout=30) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        snapshot = str(row[0])
        tables, digests = table_facts(conn)
        revision = _revision(conn, tables)
        major = server_major(conn)
        done = subprocess.run(
            [str(tools.pg_dump), "--format=custom", "--compress=1", "--no-owner", "--no-privileges",
             f"--snapshot={snapshot}", f"--file={out}", f"--dbname={target}"],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        conn.rollback()
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise BackupRefused(f"pg_dump failed: {first}")
    return tables, digests, revision, major


def make_backup(
    settings: Settings,
    url: str,
    dest: Path,
    key: KeySource,
    *,
    sessions: bool = True,
    tools: PgTools | None = None,
) -> BackupResult:
    """Write an encrypted backup of the instance to `dest` (a directory: a new name in it).

    The file appears under its name only when complete (written beside it, then renamed)."""
    started = time.monotonic()
    if key.passphrase is None and not key.secret_key:
        raise BackupRefused(
            "PANAGER_SECRET_KEY is not set, so backups need a passphrase: give one with "
            "--passphrase-file FILE (or set PANAGER_SECRET_KEY)"
        )
    if dest.is_dir():
        dest = dest / backup_name(datetime.now(UTC))
    if dest.exists():
        raise BackupRefused(f"{dest} already exists; choose another name")
    if not dest.parent.is_dir():
        raise BackupRefused(f"{dest.parent} is not a directory; create it first")
    tools = tools or tools_for(settings, url)
    fingerprint = key_fingerprint(settings.secret_key) if settings.secret_key else None
    partial = dest.with_name(dest.name + ".partial")
    sums: dict[str, dict[str, Any]] = {}
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, tempfile.TemporaryDirectory(
            prefix=".panager-dump-", dir=dest.parent
        ) as scratch:
            writer = EncryptingWriter(out, key, fingerprint)
            with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for name, path in home_files(settings, sessions=sessions):
                    try:
                        _add(tar, name, path, sums)
                    except FileNotFoundError:  # removed while we were listing: not lost
                        continue
                dump = Path(scratch) / DATABASE
                tables, digests, revision, major = _dump(url, tools, dump)
                _add(tar, DATABASE, dump, sums)
                manifest = {
                    "panager_version": panager_version(),
                    "created_at": datetime.now(UTC).isoformat(),
                    "alembic_revision": revision,
                    "tables": tables,
                    "digests": digests,
                    "members": sums,
                    "server_major": major,
                    "pg_dump_major": tools.major,
                    "key_fingerprint": fingerprint,
                    "sessions": sessions,
                    "embedded": settings.database_url is None,
                }
                if key.passphrase is not None and settings.secret_key:
                    manifest["secret_key"] = settings.secret_key
                _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
            writer.close()
            out.flush()
            os.fsync(out.fileno())
        partial.replace(dest)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    shown = {k: v for k, v in manifest.items() if k != "secret_key"}
    return BackupResult(
        dest, dest.stat().st_size, time.monotonic() - started, tables,
        len(sums) - 1, revision, shown,
    )  # fmt: skip

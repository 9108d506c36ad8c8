# Over 400 lines, kept whole: the restore's steps in the order they run (stage, check, load,
# migrate, re-seal, place), each refusing before anything changes.
"""Restoring a backup into an empty home and an empty database.

Order, so that a refused backup changes nothing:

1. Decrypt and unpack into a staging directory inside the home, checking every chunk
   (crypto.py), then every member against the manifest's SHA-256 and size.
2. Refuse a schema newer than this Panager knows, a key that does not match (unless
   re-sealing with the old one), a home or database that is not empty.
3. `pg_restore --no-owner --no-privileges --single-transaction`: all or nothing.
4. Count the rows of every table against the manifest (on a mismatch the restored
   tables are dropped again), re-seal sealed secrets when asked, put the files in place
   and migrate the schema forward.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import psycopg
from alembic.script import ScriptDirectory
from psycopg import sql

from panager.config import Settings
from panager.db import migrate
from panager.db.pool import open_pool
from panager.services.accounts.sealing import InvalidToken, Sealer
from panager.services.backup.archive import DATABASE, FILES, MANIFEST, table_facts, tools_for
from panager.services.backup.crypto import (
    BackupRefused,
    DecryptingReader,
    KeySource,
    decrypted_chunks,
    key_fingerprint,
    read_header,
)
from panager.services.backup.pgtools import PgTools, libpq_target

SECRET_FILE = "restored-secret-key"
# Columns that hold values sealed with PANAGER_SECRET_KEY: (table, key column, column).
SEALED = (
    ("google_accounts", "user_id", "token_ciphertext"),
    ("oauth_states", "state_hash", "code_verifier"),
    ("webhooks", "id", "signing_secret"),
    ("provider_accounts", "id", "secret_ciphertext"),  # from 0032 on
)


@dataclass
class RestoreResult:
    """What a restore did."""

    revision: str | None  # the backup's schema
    migrated_to: str  # the schema now
    tables: int
    rows: int
    files: int
    resealed: int
    secret_file: Path | None  # where the backup's own key was written, when it was used


def _safe_member(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise BackupRefused(f"the backup holds an unsafe name ({name[:80]!r}); refused")
    if name not in (MANIFEST, DATABASE) and not name.startswith(FILES):
        raise BackupRefused(f"the backup holds an unexpected member ({name[:80]!r}); refused")
    return path


def unpack(backup: Path, key: KeySource, staging: Path) -> dict[str, Any]:
    """Decrypt and unpack `backup` into `staging`; the manifest, every member checked."""
    sums: dict[str, dict[str, Any]] = {}
    with backup.open("rb") as stream:
        header = read_header(stream)
        _check_key_before_opening(header, key)
        reader = DecryptingReader(decrypted_chunks(stream, key, header))
        try:
            with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    if not member.isfile():
                        raise BackupRefused(f"the backup holds a non-file ({member.name[:80]!r})")
                    target = staging / _safe_member(member.name)
                    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                    source = tar.extractfile(member)
                    assert source is not None
                    sha = hashlib.sha256()
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        while block := source.read(1 << 20):
                            sha.update(block)
                            out.write(block)
                    sums[member.name] = {"sha256": sha.hexdigest(), "bytes": member.size}
            reader.drain()
        except tarfile.TarError:
            raise BackupRefused(
                "the backup's contents are damaged (not a readable archive)"
            ) from None
    if MANIFEST not in sums:
        raise BackupRefused("the backup has no manifest (damaged or cut short)")
    manifest = json.loads((staging / MANIFEST).read_text(encoding="utf-8"))
    del sums[MANIFEST]
    if sums != manifest.get("members"):
        wrong = sorted(set(sums) ^ set(manifest.get("members", {})) or {
            k for k in sums if sums[k] != manifest["members"].get(k)
        })
        raise BackupRefused(f"the backup does not match its manifest ({', '.join(wrong)[:200]})")
    return manifest


def _check_key_before_opening(header: dict[str, Any], key: KeySource) -> None:
    """A secret-key backup names its key's fingerprint: another key is said plainly."""
    made_with = header.get("key_fingerprint")
    if header.get("kdf") == "secret-key" and key.secret_key and made_with:
        given = key_fingerprint(key.secret_key)
        if given != made_with:
            raise BackupRefused(
                f"this backup was made with another PANAGER_SECRET_KEY (fingerprint "
                f"{made_with}, this one is {given}); restore with that key, or give it with "
                "--reseal OLD_KEY_FILE"
            )


def known_revisions() -> tuple[set[str], str]:
    """Every alembic revision this Panager ships, and its head."""
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused"))
    head = script.get_current_head()
    assert head is not None
    return {rev.revision for rev in script.walk_revisions()}, head


def check_schema(manifest: dict[str, Any]) -> None:
    """Refuse a backup from a newer Panager (a schema revision we do not know)."""
    revision = manifest.get("alembic_revision")
    known, head = known_revisions()
    if revision is not None and revision not in known:
        raise BackupRefused(
            f"this backup comes from a newer Panager ({manifest.get('panager_version')}, schema "
            f"{revision}; this one knows up to {head}); upgrade Panager, then restore"
        )


@dataclass(frozen=True)
class KeyPlan:
    """What the restore does about sealed secrets."""

    reseal_from: str | None = None  # the old key, when re-sealing
    write_secret: str | None = None  # the backup's own key, for an operator who has none


def plan_key(manifest: dict[str, Any], current: str | None, old_key: str | None) -> KeyPlan:
    """Whether the restored sealed secrets open with the key this instance will run with."""
    made_with = manifest.get("key_fingerprint")
    if made_with is None:
        return KeyPlan()
    if old_key is not None:
        if key_fingerprint(old_key) != made_with:
            raise BackupRefused(
                f"the key in --reseal is not the one this backup was made with (fingerprint "
                f"{made_with}); nothing was changed"
            )
        if not current:
            raise BackupRefused("--reseal needs the new PANAGER_SECRET_KEY set to re-seal with")
        return KeyPlan(reseal_from=old_key) if key_fingerprint(current) != made_with else KeyPlan()
    if current and key_fingerprint(current) == made_with:
        return KeyPlan()
    carried = manifest.get("secret_key")
    if not current and carried:
        return KeyPlan(write_secret=carried)
    if current:
        raise BackupRefused(
            f"this backup's secrets are sealed with another PANAGER_SECRET_KEY (fingerprint "
            f"{made_with}, this one is {key_fingerprint(current)}); give the old key with "
            "--reseal OLD_KEY_FILE"
            + (" or unset PANAGER_SECRET_KEY to use the backup's own key" if carried else "")
        )
    raise BackupRefused(
        f"set PANAGER_SECRET_KEY to the key this backup was made with (fingerprint {made_with})"
    )


def check_home_empty(settings: Settings, manifest: dict[str, Any], staging: Path) -> None:
    """Refuse to write over a home that already holds config, skills or sessions."""
    config = settings.config_path or settings.home / "config.yaml"
    staged_config = staging / FILES / "config.yaml"
    if config.exists() and staged_config.exists() and (
        config.read_bytes() != staged_config.read_bytes()
    ):
        raise BackupRefused(
            f"{config} already exists and differs from the backup's; move it away to restore"
        )
    for folder in ("skills", "sessions"):
        path = settings.home / folder
        if path.is_dir() and any(path.iterdir()):
            raise BackupRefused(
                f"{path} is not empty: restore into an empty PANAGER_HOME (nothing was changed)"
            )


def check_database_empty(url: str) -> None:
    """Refuse a database that already holds tables."""
    with psycopg.connect(url, connect_timeout=30) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
    if row and row[0]:
        raise BackupRefused(
            f"the database already holds {row[0]} table(s): restore into an empty database "
            "(nothing was changed)"
        )


def _clear_database(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def _restore_list(tools: PgTools, dump: Path) -> Path:
    """The dump's table of contents without comments on extensions: only an extension's
    owner may set those, and a role without superuser restores where `vector` already
    exists (created once by a superuser)."""
    listed = subprocess.run(
        [str(tools.pg_restore), "--list", str(dump)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        raise BackupRefused("pg_restore cannot read the database dump in this backup")
    kept = [
        line for line in listed.stdout.splitlines()
        if not (" COMMENT " in line and " EXTENSION " in line)
    ]  # fmt: skip
    path = dump.with_name("restore.list")
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return path


def pg_restore(url: str, tools: PgTools, dump: Path) -> None:
    """Load the dump in one transaction (nothing stays behind when it fails)."""
    target, env = libpq_target(url)
    listing = _restore_list(tools, dump)
    done = subprocess.run(
        [str(tools.pg_restore), "--no-owner", "--no-privileges", "--single-transaction",
         "--exit-on-error", f"--use-list={listing}", f"--dbname={target}", str(dump)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        lines = [x for x in done.stderr.splitlines() if "error" in x.lower()] or [
            done.stderr.strip() or "no message"
        ]
        raise BackupRefused(f"pg_restore failed, nothing was restored: {lines[0][:300]}")


def check_tables(url: str, manifest: dict[str, Any]) -> int:
    """Every table holds the rows (and the content digest) the manifest recorded; the total."""
    with psycopg.connect(url, connect_timeout=30) as conn:
        counts, digests = table_facts(conn)
    expected = manifest["tables"]
    wrong = sorted(t for t in set(counts) | set(expected) if counts.get(t) != expected.get(t))
    if wrong:
        raise BackupRefused(f"restored rows differ from the manifest in: {', '.join(wrong)[:200]}")
    wanted = manifest.get("digests") or {}
    changed = sorted(t for t in wanted if digests.get(t) != wanted[t])
    if changed:
        shown = ", ".join(changed)[:200]
        raise BackupRefused(f"restored content differs from the manifest in: {shown}")
    return sum(counts.values())


def _has_column(conn: psycopg.Connection, table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = %s AND column_name = %s", (table, column),
    ).fetchone()
    return row is not None


def reseal(url: str, old: str, new: str) -> int:
    """Re-seal every sealed value from the old key to the new one, in one transaction."""
    opener, sealer = Sealer(old), Sealer(new)
    count = 0
    with psycopg.connect(url, connect_timeout=30) as conn, conn.transaction():
        for table, key, column in SEALED:
            if not _has_column(conn, table, column):  # a backup from before it existed
                continue
            select = sql.SQL("SELECT {}, {} FROM {} WHERE {} IS NOT NULL").format(
                sql.Identifier(key), sql.Identifier(column), sql.Identifier(table),
                sql.Identifier(column),
            )
            rows = conn.execute(select).fetchall()
            for ident, value in rows:
                try:
                    fresh = sealer.seal(opener.open(value))
                except InvalidToken:
                    raise BackupRefused(
                        f"a sealed value in {table} does not open with the old key; nothing "
                        "was re-sealed"
                    ) from None
                update = sql.SQL("UPDATE {} SET {} = %s WHERE {} = %s").format(
                    sql.Identifier(table), sql.Identifier(column), sql.Identifier(key)
                )
                conn.execute(update, (fresh, ident))
                count += 1
    return count


def place_files(settings: Settings, staging: Path) -> int:
    """Move the staged home files into place (directories 0700); how many."""
    root = staging / FILES
    placed = 0
    if not root.is_dir():
        return 0
    config_target = settings.config_path or settings.home / "config.yaml"
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(root)
        target = config_target if relative.as_posix() == "config.yaml" else (
            settings.home / relative
        )
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not target.exists():
            shutil.move(str(path), target)
        placed += 1
    return placed


def write_secret(settings: Settings, secret: str) -> Path:
    """The backup's own PANAGER_SECRET_KEY, in a 0600 file for the operator to move."""
    path = settings.home / SECRET_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(secret + "\n")
    return path


def load(
    settings: Settings,
    url: str,
    backup: Path,
    key: KeySource,
    old_key: str | None,
    tools: PgTools | None,
) -> tuple[dict[str, Any], int, int, int, Path | None]:
    """Steps 1–4 but the migration: (manifest, rows, re-sealed, files, secret file)."""
    if not backup.is_file():
        raise BackupRefused(f"{backup} is not a file")
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=settings.home))
    try:
        manifest = unpack(backup, key, staging)
        check_schema(manifest)
        plan = plan_key(manifest, settings.secret_key, old_key)
        check_home_empty(settings, manifest, staging)
        check_database_empty(url)
        pg_restore(url, tools or tools_for(settings, url), staging / DATABASE)
        try:
            rows = check_tables(url, manifest)
            resealed = 0
            if plan.reseal_from is not None:
                assert settings.secret_key is not None
                resealed = reseal(url, plan.reseal_from, settings.secret_key)
        except BaseException:
            _clear_database(url)
            raise
        files = place_files(settings, staging)
        secret_file = write_secret(settings, plan.write_secret) if plan.write_secret else None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest, rows, resealed, files, secret_file


async def restore_backup(
    settings: Settings,
    url: str,
    backup: Path,
    key: KeySource,
    *,
    old_key: str | None = None,
    tools: PgTools | None = None,
) -> RestoreResult:
    """Restore `backup` into this (empty) home and (empty) database; see the module doc."""
    manifest, rows, resealed, files, secret_file = await asyncio.to_thread(
        load, settings, url, backup, key, old_key, tools
    )
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
        status = await migrate.schema_status(url, pool)
        async with pool.connection() as conn:  # the copy's claim belonged to the old machine
            await conn.execute("UPDATE backup_job SET claimed_by = NULL, claimed_until = NULL")
    finally:
        await pool.close()
    return RestoreResult(
        manifest.get("alembic_revision"), status.head, len(manifest["tables"]), rows, files,
        resealed, secret_file,
    )  # fmt: skip

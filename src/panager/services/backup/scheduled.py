"""Scheduled backups (`backup:` in the YAML config): one worker at a time, every `every`.

The job is the one row of `backup_job` (migration 0028). A worker claims it with one
UPDATE when it is due and no live claim holds it, so among many workers exactly one
makes each backup; a worker that dies mid-backup leaves a claim that ends with its lease.
After the run the row gets the result (shown by `panager doctor` and the admin page) and
the next due time. Retention deletes only this instance's own files: the dated name a
scheduled backup gets, a readable backup header, and this instance's key fingerprint
(or a passphrase backup). A failed backup tells the admins once, until one succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from panager.clock import Clock
from panager.config import BackupConfig, Settings
from panager.db.pool import Pool
from panager.db.queries import execute, fetch_one
from panager.services.backup.archive import NAME_PREFIX, SUFFIX, backup_name, make_backup
from panager.services.backup.crypto import BackupRefused, KeySource, key_fingerprint, read_header

log = logging.getLogger(__name__)

OWN_NAME = re.compile(rf"^{re.escape(NAME_PREFIX)}\d{{8}}T\d{{6}}Z{re.escape(SUFFIX)}$")
LEASE = timedelta(hours=6)
POLL_SECONDS = 60.0

ENSURE = """
INSERT INTO backup_job (id, next_run_at) VALUES (1, %(now)s) ON CONFLICT (id) DO NOTHING
"""
CLAIM = """
UPDATE backup_job
   SET claimed_by = %(owner)s, claimed_until = %(until)s, last_started_at = %(now)s
 WHERE id = 1 AND next_run_at <= %(now)s
   AND (claimed_until IS NULL OR claimed_until < %(now)s)
RETURNING failure_told
"""
FINISH = """
UPDATE backup_job
   SET claimed_by = NULL, claimed_until = NULL, last_finished_at = %(now)s,
       last_ok = %(ok)s, last_detail = %(detail)s, last_path = %(path)s, last_bytes = %(bytes)s,
       last_ok_at = CASE WHEN %(ok)s THEN %(now)s ELSE last_ok_at END,
       failure_told = CASE WHEN %(ok)s THEN false ELSE failure_told OR %(told)s END,
       next_run_at = %(next)s
 WHERE id = 1 AND claimed_by = %(owner)s
"""
STATUS = "SELECT * FROM backup_job WHERE id = 1"


@dataclass(frozen=True)
class BackupStatus:
    """The scheduled backup's last result and next due time."""

    next_run_at: datetime
    running: bool
    last_finished_at: datetime | None
    last_ok: bool | None
    last_detail: str | None
    last_path: str | None
    last_bytes: int | None
    last_ok_at: datetime | None


async def backup_status(pool: Pool) -> BackupStatus | None:
    """The row, or None when no scheduled backup ever started (or the table is missing)."""
    async with pool.connection() as conn:
        found = await (await conn.execute("SELECT to_regclass('backup_job') AS t")).fetchone()
        if found is None or found["t"] is None:
            return None
        row = await (await conn.execute(STATUS)).fetchone()
    if row is None:
        return None
    return BackupStatus(
        row["next_run_at"], row["claimed_by"] is not None, row["last_finished_at"],
        row["last_ok"], row["last_detail"], row["last_path"], row["last_bytes"],
        row["last_ok_at"],
    )  # fmt: skip


def same_filesystem(path: Path, home: Path) -> bool:
    """True when `path` (or its nearest existing parent) is on PANAGER_HOME's filesystem:
    a dead disk takes both."""
    def device(p: Path) -> int | None:
        for candidate in (p, *p.parents):
            try:
                return os.stat(candidate).st_dev
            except OSError:
                continue
        return None

    return device(path) is not None and device(path) == device(home)


def own_backups(folder: Path, fingerprint: str | None) -> list[Path]:
    """Scheduled backups of this instance in `folder`, oldest first (see the module doc)."""
    found = []
    for path in folder.iterdir() if folder.is_dir() else ():
        if not OWN_NAME.match(path.name) or not path.is_file():
            continue
        try:
            with path.open("rb") as stream:
                header = read_header(stream)
        except (OSError, BackupRefused):
            continue
        if header.get("kdf") == "passphrase" or header.get("key_fingerprint") == fingerprint:
            found.append(path)
    return sorted(found, key=lambda p: p.name)


def prune(folder: Path, keep: int, fingerprint: str | None) -> list[Path]:
    """Delete all but the newest `keep` of this instance's scheduled backups; the deleted."""
    mine = own_backups(folder, fingerprint)
    doomed = mine[:-keep] if len(mine) > keep else []
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


Notify = Callable[[str], Awaitable[None]]


class BackupJob:
    """Runs the scheduled backup when due; `run` loops until stopped (a worker's task)."""

    def __init__(
        self,
        pool: Pool,
        clock: Clock,
        settings: Settings,
        config: BackupConfig,
        url: str,
        notify: Notify | None = None,
        *,
        owner: str | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.pool = pool
        self.clock = clock
        self.settings = settings
        self.config = config
        self.url = url
        self.notify = notify
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.poll_seconds = poll_seconds

    def key(self) -> KeySource:
        """The passphrase from `passphrase_env` when named, else PANAGER_SECRET_KEY."""
        name = self.config.passphrase_env
        if name:
            value = os.environ.get(name, "")
            if not value:
                raise BackupRefused(f"backup.passphrase_env names {name}, which is not set")
            return KeySource(passphrase=value)
        return KeySource(secret_key=self.settings.secret_key)

    async def run_due(self) -> bool | None:
        """Make the backup when due and this worker claims it: True/False for its result,
        None when nothing was due (or another worker has it)."""
        now = self.clock.now()
        await execute(self.pool, ENSURE, {"now": now})
        claim = {"owner": self.owner, "now": now, "until": now + LEASE}
        claimed = await fetch_one(self.pool, CLAIM, claim)
        if claimed is None:
            return None
        path, size, told = None, None, False
        try:
            dest = self.config.path / backup_name(now)
            result = await asyncio.to_thread(
                make_backup, self.settings, self.url, dest, self.key(),
                sessions=self.config.sessions,
            )  # fmt: skip
            fingerprint = (
                key_fingerprint(self.settings.secret_key) if self.settings.secret_key else None
            )
            deleted = await asyncio.to_thread(
                prune, self.config.path, self.config.keep, fingerprint
            )
            path, size, ok = str(result.path), result.size, True
            detail = f"{result.size / 1e6:.1f} MB in {result.seconds:.1f}s" + (
                f"; {len(deleted)} older deleted" if deleted else ""
            )
        except Exception as exc:
            ok = False
            detail = str(exc) if isinstance(exc, BackupRefused) else (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )[:300]
            log.warning("scheduled backup failed: %s", detail)
            if not claimed["failure_told"] and self.notify is not None:
                try:
                    await self.notify(f"The scheduled backup failed: {detail}")
                    told = True
                except Exception:
                    log.exception("could not tell the admins about the failed backup")
        finished = self.clock.now()
        await execute(self.pool, FINISH, {
            "owner": self.owner, "now": finished, "ok": ok, "detail": detail, "path": path,
            "bytes": size, "told": told,
            "next": now + timedelta(minutes=self.config.interval_minutes),
        })  # fmt: skip
        return ok

    async def run(self, stop: asyncio.Event) -> None:
        """Check about once a minute until `stop` is set."""
        while not stop.is_set():
            try:
                await self.run_due()
            except Exception:  # the database away: the next round tries again
                log.warning("scheduled backup check failed", exc_info=True)
            sleeper = asyncio.ensure_future(self.clock.sleep(self.poll_seconds))
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in (sleeper, stopper):
                task.cancel()

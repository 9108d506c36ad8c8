"""Scheduled backups: one worker makes each, retention keeps only its own newest files,
a failure tells the admins once, and doctor and the admin page show the last result."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import pytest

from panager.config import ConfigError
from panager.doctor import check_backups, check_pg_dump
from panager.services.backup.archive import backup_name
from panager.services.backup.scheduled import OWN_NAME, BackupJob, own_backups
from tests.web_helpers import ADMIN, web_harness

pytestmark = pytest.mark.timeout(120)
KEY = "a-secret-key-for-scheduled-backups-0123456789"


def config_file(tmp_path, folder, **extra) -> str:
    lines = [f"  path: {folder}", "  every: 1d", "  keep: 2"] + [
        f"  {k}: {v}" for k, v in extra.items()]
    path = tmp_path / "config.yaml"
    path.write_text("backup:\n" + "\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(autouse=True)
def _no_pg_dump_override(monkeypatch):
    monkeypatch.delenv("PANAGER_PG_DUMP", raising=False)


async def test_each_backup_is_made_once_and_only_its_own_old_files_are_deleted(
    make_app, clock, tmp_path
):
    folder = tmp_path / "backups"
    folder.mkdir()
    settings = {"config_path": config_file(tmp_path, folder), "secret_key": KEY}
    first, second = await make_app(**settings), await make_app(**settings)
    assert first.backups is not None and second.backups is not None
    second.backups.owner = "the-other-worker"
    foreign = folder / backup_name(clock.now() - timedelta(days=30))
    foreign.write_bytes(b"not ours: same name pattern, no backup header")
    stranger = folder / "notes.txt"
    stranger.write_text("kept")

    made = []
    for _day in range(3):
        results = await asyncio.gather(first.backups.run_due(), second.backups.run_due())
        assert sorted(results, key=str) == [None, True]  # one worker made it
        made.append(folder / backup_name(clock.now()))
        assert await first.backups.run_due() is None  # not due again the same day
        clock.advance(days=1)
    assert own_backups(folder, None) == []  # another key's backups are not ours
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [foreign.name, stranger.name, made[1].name, made[2].name])
    ok, detail = await check_backups(first.settings, {"pool": first.pool})
    assert ok is True and made[2].name in detail and "same disk as PANAGER_HOME" in detail


async def test_a_failing_backup_tells_the_admins_once_and_shows_on_doctor_and_the_page(
    make_app, clock, tmp_path
):
    folder = tmp_path / "missing" / "backups"  # not there: every backup fails
    h = await web_harness(
        make_app, config_path=config_file(tmp_path, folder, passphrase_env="BACKUP_PASS"),
        secret_key=KEY)
    job: BackupJob = h.app.backups
    for _day in range(2):
        assert await job.run_due() is False
        clock.advance(days=1)
    told = [t for uid, t in h.recorder.sent if uid == ADMIN]
    assert told == ["The scheduled backup failed: backup.passphrase_env names BACKUP_PASS, "
                    "which is not set"]
    ok, detail = await check_backups(h.app.settings, {"pool": h.app.pool})
    assert ok is False and "BACKUP_PASS" in detail

    admin = await h.client(ADMIN)
    status, body = await admin.get("/admin/backups")
    assert status == 200 and "FAILED" in body and "BACKUP_PASS" in body
    assert "same filesystem as PANAGER_HOME" in body
    alice = await h.client(1001)
    assert (await alice.get("/admin/backups"))[0] == 403
    await admin.close()
    await alice.close()

    folder.mkdir(parents=True)
    os.environ["BACKUP_PASS"] = "a passphrase for the backups"
    try:
        assert await job.run_due() is True
        clock.advance(days=1)
        del os.environ["BACKUP_PASS"]
        assert await job.run_due() is False  # failing again after a success: told again
    finally:
        os.environ.pop("BACKUP_PASS", None)
    told = [t for uid, t in h.recorder.sent if uid == ADMIN]
    assert len(told) == 2


async def test_doctor_names_the_pg_dump_it_would_use(make_settings, db_url, monkeypatch, tmp_path):
    old = tmp_path / "pg_dump"  # a client too old for the server, as Debian's 15 is for 16
    old.write_text("#!/bin/sh\necho 'pg_dump (PostgreSQL) 15.8'\n")
    old.chmod(0o755)
    (tmp_path / "pg_restore").write_text("#!/bin/sh\nexit 1\n")
    # DATABASE_URL: PANAGER_PG_DUMP, the bundled one, then PATH
    settings = make_settings(pg_dump=str(old))
    ok, detail = await check_pg_dump(settings, {"pool": object(), "url": db_url})
    assert ok is True and detail.startswith("pg_dump 16 at ") and "pgserver" in detail

    monkeypatch.setattr("panager.services.backup.pgtools.bundled_bin", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    ok, detail = await check_pg_dump(settings, {"pool": object(), "url": db_url})
    assert ok is False and "\n" not in detail
    assert detail.startswith(
        f"no pg_dump for the PostgreSQL 16 server: found pg_dump 15 at {old} (PANAGER_PG_DUMP)")


def test_the_backup_config_is_checked(make_settings, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("backup:\n  path: /x\n  every: 5m\n")
    with pytest.raises(ConfigError, match="every 10 minutes at the most often"):
        _ = make_settings(config_path=str(bad)).runtime



async def test_the_worker_makes_the_scheduled_backup(make_app, clock, tmp_path):
    folder = tmp_path / "backups"
    folder.mkdir()
    app = await make_app(config_path=config_file(tmp_path, folder), secret_key=KEY)
    made, run_due = asyncio.Event(), app.backups.run_due

    async def observed():  # the job's own method, telling the test when a backup is done
        result = await run_due()
        if result:
            made.set()
        return result

    app.backups.run_due = observed
    stop = asyncio.Event()
    running = asyncio.create_task(app.run_worker(stop, listen_url=None))
    try:
        await asyncio.wait_for(made.wait(), 60)
    finally:
        stop.set()
        await running
    [made_file] = folder.iterdir()  # one backup, under the scheduled name, at most a poll late
    assert OWN_NAME.match(made_file.name) and made_file.name <= backup_name(clock.now())

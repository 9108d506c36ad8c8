"""`panager backup` / `panager restore` on real PostgreSQL, with the real pg_dump/pg_restore.

An instance is filled (three people, memories with history, a document, schedules of every
kind, a Google link with its sealed token, usage, a pending proposal, config, a skill and
sessions), backed up while turns and reminders run, and restored into a fresh home on a
new embedded PostgreSQL: every table and file compared, then the restored instance answers,
refreshes the Google token and fires a reminder due during the gap exactly once. The same
from a database at an older schema (migrated forward); damaged files and wrong keys refused
with one line and nothing changed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections import Counter
from datetime import time, timedelta
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from panager.db import migrate
from panager.db.pool import resolve_database_url
from panager.services.backup.archive import SESSION_FORMAT, TABLES, make_backup
from panager.services.backup.crypto import MAGIC, KeySource, key_fingerprint
from panager.services.backup.restore import restore_backup
from panager.services.google.sealing import Sealer
from panager.services.sessions import SessionStore
from tests.fakes.google_server import FakeGoogle
from tests.fakes.scripted_model import ScriptedChatModel
from tests.google_helpers import SECRET, endpoints_of, google_settings
from tests.scheduler_helpers import RecordingMessenger, worker

pytestmark = pytest.mark.timeout(120)
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _plain_http_oauth(monkeypatch):
    """oauthlib refuses http:// token endpoints unless told this is a test."""
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    monkeypatch.delenv("PANAGER_PG_DUMP", raising=False)


@pytest.fixture
async def fake():
    async with FakeGoogle() as server:
        yield server


@pytest.fixture
def new_home():
    """Factory: a fresh home for a new embedded PostgreSQL; each server stopped afterwards.

    Made with mkdtemp under /tmp (as the session's server is): pgserver runs PostgreSQL as
    its own account when the tests run as root, and pytest's tmp_path root is private."""
    homes: list[Path] = []

    def make() -> Path:
        homes.append(Path(tempfile.mkdtemp(prefix="panager-test-restore-")) / "home")
        return homes[-1]

    yield make
    from pgserver.postgres_server import PostgresServer

    for home in homes:
        server = PostgresServer._instances.get(home / "pgdata")
        if server is not None:
            server.cleanup()
        shutil.rmtree(home.parent, ignore_errors=True)


def rows_of(url: str) -> dict[str, Counter]:
    """Every row of every table as text (a multiset per table), rendered the same way."""
    with psycopg.connect(url) as conn:
        for statement in SESSION_FORMAT:
            conn.execute(statement)
        names = [r[0] for r in conn.execute(TABLES).fetchall()]
        return {
            name: Counter(r[0] for r in conn.execute(f'SELECT t::text FROM public."{name}" t'))
            for name in names
        }


def files_of(home: Path) -> dict[str, bytes]:
    """The home's files a backup holds (not the database nor its runtime directory)."""
    return {
        p.relative_to(home).as_posix(): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.relative_to(home).parts[0] in ("config.yaml", "skills", "sessions")
    }


async def fill(h, clock) -> dict:
    """Three people and something of everything; returns who they are."""
    app = h.app
    deps = app.deps
    ann = await deps.users.ensure(101, "ann")
    bob = await deps.users.ensure(102, "bob")
    cat = await deps.users.ensure(103, "cat")
    tea = await deps.memory.save(ann.id, "Ann drinks green tea", "preference")
    await deps.memory.update(ann.id, tea.memory.id, "Ann drinks jasmine tea now")
    await deps.memory.save(bob.id, "Bob's sister is called Eve", "people")
    await deps.media.documents.add(
        ann.id, "plan.txt", "text/plain", b"Garden plan", "Garden plan: roses by the fence."
    )
    await deps.scheduler.create(ann, "water the roses", "2026-11-21T14:00")
    await deps.scheduler.create(bob, "summarise my day", "2026-11-21T18:00", kind="agent",
                                repeat="FREQ=DAILY")
    await deps.system_jobs.set_heartbeat(bob, timedelta(minutes=30), time(8), time(22))
    await deps.system_jobs.set_briefing(bob, time(7))
    hook, _ = await deps.system_jobs.create_webhook(ann, "builds", "tell me when a build fails")
    await deps.system_jobs.accept_call(hook, "UTC", '{"build": "failed"}')
    await deps.system_jobs.ensure(ann, "tidy", "03:00", "FREQ=DAILY")
    await deps.usage.record(ann, "gpt-test", {"input_tokens": 10, "output_tokens": 5,
                                              "total_tokens": 15})
    await deps.proposals.create(bob.id, "prop1", "schedule_create",
                                {"message": "call Eve", "at": "2026-11-22T10:00"},
                                "Remind Bob to call Eve tomorrow at 10:00", clock.now())
    assert (await h.link(ann))[0] == 200
    for user in (ann, bob, cat):
        await app.assistant.run_turn(user, f"hello from {user.username}")
    SessionStore(app.settings.home).save(ann.id, "trip", '{"type": "session"}\n')
    return {"ann": ann, "bob": bob, "cat": cat}


def source_home(tmp_path: Path) -> Path:
    """A home with a config file and a skill, as an operator would have."""
    home = tmp_path / "home"
    (home / "skills" / "tea").mkdir(parents=True)
    (home / "skills" / "tea" / "SKILL.md").write_text("# Tea\nBrew at 80 degrees.\n")
    (home / "config.yaml").write_text("max_iterations: 8\nschedule_grace_seconds: 3600\n")
    return home


async def test_a_running_instance_backed_up_and_restored_on_a_new_server_is_the_same(
    make_app, make_settings, fake, clock, tmp_path, new_home
):
    from tests.google_helpers import start_harness

    home = source_home(tmp_path)
    model = ScriptedChatModel(default="fine, thanks")
    h = await start_harness(make_app, fake, model, embedding_model="local", home=home)
    people = await fill(h, clock)
    source_url = h.app.url
    before_rows, before_files = rows_of(source_url), files_of(home)

    # turns and reminders of cat keep running while the backup is taken
    cat = people["cat"]
    await h.app.deps.scheduler.create(cat, "stand up", "2026-11-21T12:01", repeat="FREQ=MINUTELY")
    cat_worker = worker(h.app, only_users=[cat.id])
    stop, rounds = asyncio.Event(), [0]

    async def activity() -> None:
        while not stop.is_set():
            clock.advance(minutes=1)
            await cat_worker.run_once()
            await h.app.assistant.run_turn(cat, f"turn {rounds[0]}")
            rounds[0] += 1

    running = asyncio.create_task(activity())
    settings = h.app.settings
    result = await asyncio.to_thread(
        make_backup, settings, source_url, tmp_path / "b.pbak", KeySource(secret_key=SECRET)
    )
    stop.set()
    await running
    assert rounds[0] >= 1  # at least one turn and one worker pass ran beside the backup
    after_rows, after_files = rows_of(source_url), files_of(home)
    await h.app.stop()
    backup = result.path
    assert backup.read_bytes().startswith(MAGIC)
    assert b"jasmine" not in backup.read_bytes() and SECRET.encode() not in backup.read_bytes()
    assert result.manifest["key_fingerprint"] == key_fingerprint(SECRET)
    assert result.revision == ScriptDirectory.from_config(
        migrate.alembic_config(source_url)).get_current_head()

    # restore into a fresh home on a new embedded PostgreSQL
    home_of_copy = new_home()
    overrides = {**google_settings(fake), "embedding_model": "local", "home": home_of_copy,
                 "database_url": None}
    target = make_settings(**overrides)
    url = await asyncio.to_thread(resolve_database_url, target)
    assert str(home_of_copy) in url and url != source_url
    done = await restore_backup(target, url, backup, KeySource(secret_key=SECRET))
    assert done.files == len(result.manifest["members"]) - 1 and done.resealed == 0

    restored = rows_of(url)
    assert set(restored) == set(before_rows)
    for table, rows in restored.items():
        assert sum(rows.values()) == result.tables[table], table
        if before_rows[table] == after_rows[table]:  # untouched while the backup ran
            assert rows == before_rows[table], table
        else:  # rows that stayed the same all along are in the copy
            assert not (before_rows[table] & after_rows[table]) - rows, table
    with psycopg.connect(url) as conn:
        kinds = {r[0] for r in conn.execute("SELECT DISTINCT kind FROM schedules")}
        tea = conn.execute(
            "SELECT m::text FROM memories m WHERE user_id = 101 AND content LIKE '%jasmine%'"
        ).fetchall()
        pending = conn.execute("SELECT count(*) FROM proposals").fetchone()
        sealed = conn.execute("SELECT token_ciphertext FROM google_accounts").fetchall()
    assert kinds == {"reminder", "agent", "heartbeat", "briefing", "webhook", "tidy"}
    assert len(tea) == 1 and "green tea" in tea[0][0]  # the memory and its history
    assert pending == (1,) and len(sealed) == 1
    assert json.loads(Sealer(SECRET).open(sealed[0][0]))["r"]  # opens with the key
    restored_files = files_of(home_of_copy)
    recording = f"sessions/{cat.id}.jsonl"
    assert set(restored_files) == set(after_files)
    for name, data in restored_files.items():
        if name == recording:  # written to while the backup ran: a prefix of the final one
            assert after_files[name].startswith(data) and data.startswith(
                before_files[name])
        else:
            assert data == after_files[name] == before_files[name], name

    # the restored instance answers, refreshes the Google token, and fires the gap reminder
    app = await make_app(model=ScriptedChatModel(default="restored and well"), **overrides)
    app.deps.google.endpoints = endpoints_of(fake)
    ann = await app.deps.users.get(people["ann"].id)
    assert (await app.assistant.run_turn(ann, "are you there?")).text == "restored and well"
    fake.expire_access_tokens()
    refreshes = len(fake.token_requests)
    from panager.agent.tools import build_tools
    from tests.google_helpers import Unframed

    tools = {t.name: Unframed(t) for t in build_tools(app.deps, ann)}
    assert (await tools["task_list"].ainvoke({}))["count"] == 0
    assert [r["grant_type"] for r in fake.token_requests[refreshes:]] == ["refresh_token"]

    recorder = RecordingMessenger()
    app.deps.messenger.add(recorder)
    clock.set(clock.now().replace(hour=14, minute=20))  # down 14:00–14:20, grace is 1 h
    restored_worker = worker(app)
    await restored_worker.run_once()
    await restored_worker.run_once()
    assert sum("water the roses" in t for t in recorder.texts(ann.id)) == 1

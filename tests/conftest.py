"""Shared fixtures: a real PostgreSQL + pgvector (embedded pgserver or DATABASE_URL).

One server per test session; the schema is migrated once into a template
database, and every test that needs the database gets its own copy
(`CREATE DATABASE … TEMPLATE`), so tests never see each other's rows.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from panager.clock import FakeClock
from panager.config import Settings

# hang_report: what a test about to time out waits for; caldav_servers: Radicale and Xandikos
pytest_plugins = ["tests.hang_report", "tests.caldav_servers"]

TEST_DATABASE_URL = os.environ.get("PANAGER_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
# one template per pytest-xdist worker: workers may share one server (DATABASE_URL)
TEMPLATE_DB = "panager_test_template_" + os.environ.get("PYTEST_XDIST_WORKER", "main")
CLEARED_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "PANAGER_MODEL",
    "OPENAI_API_TYPE",
    "PANAGER_EMBEDDING_MODEL",
    "DATABASE_URL",
    "PANAGER_HOME",
    "PANAGER_CONFIG",
    "DISCORD_TOKEN",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_API_URL",
    "PANAGER_ACCESS",
    "PANAGER_ADMIN_IDS",
    "PANAGER_TIMEZONE",
    "PANAGER_PUBLIC_URL",
    "PANAGER_HTTP_HOST",
    "PANAGER_HTTP_PORT",
    "PANAGER_SECRET_KEY",
    "GOOGLE_CLIENT_ID",
    "GOOGLE_CLIENT_SECRET",
    "PANAGER_AUTO_MIGRATE",
    "PANAGER_TRANSCRIPTION_MODEL",
    "PANAGER_TRANSCRIPTION_BASE_URL",
    "PANAGER_RERANK_BASE_URL",
    "PANAGER_RERANK_MODEL",
    "PANAGER_RERANK_API_KEY",
    "PANAGER_PG_DUMP",
)


def pytest_configure(config) -> None:
    """The embedded server's OS account (as root) exists before any worker starts a server:
    parallel workers on a new machine would otherwise race to create it."""
    if not TEST_DATABASE_URL and not os.environ.get("PYTEST_XDIST_WORKER"):
        from panager.db.embedded import ensure_server_user

        ensure_server_user()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker more than the cores. A test mostly waits (on its database, a
    child process, a fake server or a browser), so a third worker on two cores fills the
    gaps; `--maxprocesses` still caps it."""
    return (os.cpu_count() or 1) + 1


RELIABILITY_PROPERTY = "reliability numbers"  # a report's user_properties key (tests/reliability)


def pytest_terminal_summary(terminalreporter) -> None:
    """Print what the reliability tests measured (tests/reliability/conftest.py `report`),
    whatever the capture mode and whether or not the tests ran in pytest-xdist workers."""
    reports = [r for kind in ("passed", "failed") for r in terminalreporter.stats.get(kind, ())]
    numbers = [value for r in reports if getattr(r, "when", None) == "call"
               for key, value in getattr(r, "user_properties", ()) if key == RELIABILITY_PROPERTY]
    if not numbers:
        return
    terminalreporter.section("reliability numbers")
    for title, values in numbers:
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        terminalreporter.write_line(f"{title}: {shown}")


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at database `name`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


# Modules whose tests start processes or a browser, slowest first: run before the rest, so
# pytest-xdist hands them out among the workers at the start and the quick tests fill the
# gaps at the end (run last, one long test leaves the other workers idle while it runs).
SLOW_FIRST = (
    "tests/reliability/",
    "tests/cli/test_cli.py",
    "tests/frontends/test_attachments_terminal.py",
    "tests/cli/test_cli_run_telegram.py",
    "tests/cli/test_cli_run.py",
    "tests/frontends/test_terminal_pty.py",
    "tests/frontends/test_telegram_processes.py",
    "tests/frontends/test_confirm_frontends.py",
    "tests/services/test_mcp_operator.py",
    "tests/db/test_server_privileges.py",
    "tests/services/test_memory_store.py",
    "tests/services/test_memory.py",
    "tests/test_model_window.py",
    "tests/services/test_schedule_calendar.py",
    "tests/browser/test_web_browser.py",
    "tests/browser/test_trust_browser.py",
    "tests/frontends/test_attachments_web.py",
    "tests/services/test_mcp.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    """Slow modules first (each module's tests stay together, in their order). The
    reliability suite's processes run on real time (leases, outages): marked `timing`."""
    for item in items:
        if item.nodeid.startswith("tests/reliability/"):
            item.add_marker(pytest.mark.timing)

    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)),
                    len(SLOW_FIRST))

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch):
    """No developer or CI variable leaks into a test."""
    for name in CLEARED_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def pg_server_url():
    """URL of the session's PostgreSQL server (maintenance database)."""
    from tests.hang_report import SERVER_URL

    if TEST_DATABASE_URL:
        SERVER_URL.append(TEST_DATABASE_URL)
        yield TEST_DATABASE_URL
        return
    from panager.db.embedded import start_embedded

    data = Path(tempfile.mkdtemp(prefix="panager-test-pg-")) / "pgdata"  # as under a home
    SERVER_URL.append(start_embedded(data))
    yield SERVER_URL[-1]


@pytest.fixture(scope="session")
async def template_db(pg_server_url):
    """A database migrated to head, used as the template for per-test databases."""
    from panager.db import migrate
    from panager.db.pool import open_pool

    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE_DB}")
    url = with_database(pg_server_url, TEMPLATE_DB)
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
    finally:
        await pool.close()
    return TEMPLATE_DB


@pytest.fixture
def fresh_db(pg_server_url):
    """Factory: an empty database (no schema) for migration tests."""
    created: list[str] = []

    def make(template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            suffix = f" TEMPLATE {template}" if template else ""
            conn.execute(f"CREATE DATABASE {name}{suffix}")
        created.append(name)
        return with_database(pg_server_url, name)

    yield make
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for name in created:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(fresh_db, template_db):
    """A private, migrated database for this test."""
    return fresh_db(template_db)


@pytest.fixture
def clock():
    """A fake clock at Sat 2026-11-21 12:00 UTC."""
    return FakeClock()


@pytest.fixture
def make_settings(db_url, tmp_path):
    """Factory for Settings pointing at this test's database and a temp PANAGER_HOME."""

    def make(**overrides) -> Settings:
        values = {
            "database_url": db_url,
            "home": tmp_path / "home",
            "timezone": "UTC",
            "access": "open",
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)

    return make


@pytest.fixture
async def make_app(make_settings, clock):
    """Factory: a started App (real Postgres) with an injected model; stopped after the test."""
    from panager.app import App

    apps: list[App] = []

    async def make(model=None, **overrides) -> App:
        app = await App.start(make_settings(**overrides), clock=clock, model=model)
        apps.append(app)
        return app

    yield make
    for app in apps:
        await app.stop()


@pytest.fixture
async def openai():
    """The local fake model API (modules may define their own)."""
    from tests.fakes.openai_server import FakeOpenAI

    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def telegram():
    """The local fake Telegram Bot API; fails the test if the bot called unknown methods."""
    from tests.fakes.telegram_server import FakeTelegram

    async with FakeTelegram() as server:
        yield server
    assert server.unhandled == [], "the bot called methods the fake does not serve"

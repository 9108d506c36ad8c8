"""A role that may not create the vector extension, as on an operator's own PostgreSQL.

Real processes against the test's real PostgreSQL: a LOGIN role without
superuser owns a database whose `vector` extension does not exist yet.
`db upgrade` and the auto-migration of `ask` stop with one line naming the
fix; `doctor` says what to run; once a superuser created the extension, the
same role migrates and `doctor` reports the installed version.
"""

from __future__ import annotations

import logging
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from panager.cli.main import setup_logging
from panager.db.extension import supports_iterative_scan, version_tuple
from tests.cli.test_cli import cli_env, run_cli
from tests.conftest import with_database


def as_role(url: str, role: str) -> str:
    """The same server and database, connecting as `role` (no password: local trust)."""
    parts = urlsplit(url)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.fixture
def unprivileged(pg_server_url):
    """(url as the owner role, url as superuser) of a fresh database without `vector`."""
    role = f"app_{uuid.uuid4().hex[:8]}"
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        conn.execute(f"CREATE DATABASE {name} OWNER {role}")
    admin = with_database(pg_server_url, name)
    yield as_role(admin, role), admin
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"DROP ROLE IF EXISTS {role}")


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


async def test_upgrade_without_extension_privilege_is_one_line(unprivileged, tmp_path):
    url, admin = unprivileged
    env = cli_env(url, tmp_path)
    code, _, err = await run_cli(["db", "upgrade"], env)
    line = one_line(err)
    assert code != 0
    assert "CREATE EXTENSION vector;" in line and "superuser" in line, line
    code, _, err = await run_cli(["ask", "hi"], env)  # auto-migration on start
    assert code != 0 and "CREATE EXTENSION vector;" in one_line(err)
    code, out, _ = await run_cli(["doctor"], env)
    assert code == 1
    [pg] = [x for x in out.splitlines() if " pgvector " in x]
    assert pg.startswith("FAIL") and 'CREATE EXTENSION vector;" once, as a superuser' in pg, out
    [priv] = [x for x in out.splitlines() if " privileges " in x]
    assert priv.startswith("OK"), out  # the owner may create tables; only the extension lacks

    with psycopg.connect(admin, autocommit=True) as conn:  # what the operator is told to do
        conn.execute("CREATE EXTENSION vector")
        installed = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()[0]
    code, out, err = await run_cli(["db", "upgrade"], env)
    assert code == 0 and "(head)" in out, err
    code, out, _ = await run_cli(["doctor"], env)
    [pg] = [x for x in out.splitlines() if " pgvector " in x]
    assert pg.startswith("OK") and f"installed (version {installed}" in pg, out


async def test_doctor_names_a_missing_table_privilege(unprivileged, tmp_path, pg_server_url):
    url, admin = unprivileged
    role = urlsplit(url).netloc.split("@", 1)[0]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("ALTER SCHEMA public OWNER TO postgres")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(f"REVOKE CREATE ON SCHEMA public FROM {role}")
    code, out, _ = await run_cli(["doctor"], cli_env(url, tmp_path))
    [priv] = [x for x in out.splitlines() if " privileges " in x]
    assert code == 1 and priv.startswith("FAIL"), out
    assert f'GRANT CREATE ON SCHEMA public TO "{role}";' in priv
    code, _, err = await run_cli(["db", "upgrade"], cli_env(url, tmp_path))
    assert code != 0 and "permission denied" in one_line(err)


def test_log_lines_carry_a_timestamp(capsys):
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        setup_logging()
        logging.getLogger("panager.run").warning("panager is running: worker")
    finally:
        root.handlers[:] = saved
    err = capsys.readouterr().err.strip()
    stamp, rest = err[:23], err[24:]
    assert rest == "WARNING panager.run: panager is running: worker", err
    assert stamp[4] == "-" and stamp[10] == " " and stamp[19] == ".", err


def test_iterative_scan_needs_pgvector_0_8():
    assert version_tuple("0.8.1") == (0, 8, 1)
    assert supports_iterative_scan("0.8.0") and supports_iterative_scan("0.10.2")
    assert not supports_iterative_scan("0.6.2") and not supports_iterative_scan(None)
    assert not supports_iterative_scan("devel")

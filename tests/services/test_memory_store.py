"""The memory schema and its embedder: migration, binding the vector size, refusing a changed
embedder, re-embedding (service and CLI)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from panager.cli.memory import reembed_command, status_command
from panager.config import Settings
from panager.db import migrate
from panager.db.pool import open_pool
from panager.services.memory.binding import EmbedderMismatch, reembed, requested_model, store_status
from panager.services.memory.service import MemoryService
from tests.fakes.openai_server import FakeOpenAI

INDEXES = "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'"
COLUMN = """
SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute
WHERE attrelid = 'memories'::regclass AND attname = %s
"""


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=4)
    yield pool
    await pool.close()


@pytest.fixture
async def fake_openai():
    async with FakeOpenAI() as server:
        yield server


def settings(tmp_path, **values) -> Settings:
    return Settings(_env_file=None, home=tmp_path, **values)


async def column_type(pool, name: str = "embedding") -> str:
    async with pool.connection() as conn:
        return (await (await conn.execute(COLUMN, (name,))).fetchone())["type"]


async def test_migration_creates_vector_and_text_indexes_and_downgrades(fresh_db):
    url = fresh_db()
    db = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, db, "0002")
        async with db.connection() as conn:
            indexes = {r["indexname"]: r["indexdef"] for r in await (await conn.execute(INDEXES)).fetchall()}
            generated = await (await conn.execute(
                "SELECT generation_expression FROM information_schema.columns "
                "WHERE table_name = 'memories' AND column_name = 'content_tsv'"
            )).fetchone()
        assert "hnsw (embedding vector_cosine_ops)" in indexes["memories_embedding_hnsw"]
        assert "gin (content_tsv)" in indexes["memories_content_tsv_gin"]
        assert "(user_id, created_at DESC)" in indexes["memories_user_created_idx"]
        assert "'simple'" in generated["generation_expression"]
        assert await column_type(db) == "vector(384)"
        await migrate.downgrade(url, db, "0001")
        async with db.connection() as conn:
            left = await (await conn.execute(
                "SELECT to_regclass('memories') AS m, to_regclass('memory_meta') AS meta"
            )).fetchone()
        assert left == {"m": None, "meta": None}
    finally:
        await db.close()


def test_default_embedder_is_offline_without_an_endpoint(tmp_path):
    assert requested_model(settings(tmp_path)) == "local"
    assert requested_model(settings(tmp_path, openai_api_key="k")) == "text-embedding-3-small"
    assert requested_model(settings(tmp_path, openai_base_url="http://x/v1")) == "text-embedding-3-small"
    assert requested_model(settings(tmp_path, embedding_model="nomic-embed-text")) == "nomic-embed-text"


async def test_first_save_binds_size_and_a_changed_embedder_is_refused(pool, tmp_path, fake_openai):
    """The store follows the first embedder (retyping the empty column), then refuses another
    one until `reembed`, which converts every memory and retypes the column again."""
    remote = settings(tmp_path, openai_base_url=fake_openai.base_url, openai_api_key="t",
                      embedding_model="text-embedding-3-small")
    service = await MemoryService.create(pool, remote)
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me'), (2, 'you')")
    await service.save(1, "I live in Busan.")
    await service.save(2, "I live in Daejeon.")
    assert await column_type(pool) == "vector(64)"  # the fake endpoint's size
    meta, count, users = await store_status(pool)
    assert (meta.embedder, meta.dim, count, users) == ("openai:text-embedding-3-small", 64, 2, 2)

    local = settings(tmp_path, embedding_model="local")
    with pytest.raises(EmbedderMismatch, match="panager memory reembed"):
        await MemoryService.create(pool, local)
    # without an endpoint and without an explicit model the message says what to set
    with pytest.raises(EmbedderMismatch, match="OPENAI_API_KEY"):
        await MemoryService.create(pool, settings(tmp_path))

    report = await reembed(pool, (await _embedder(local)))
    assert (report.count, report.old, report.dim) == (2, "openai:text-embedding-3-small", 384)
    assert await column_type(pool) == "vector(384)"
    moved = await MemoryService.create(pool, local)
    assert [h.content for h in await moved.search(1, "which city is my home?", 5)] == ["I live in Busan."]
    async with pool.connection() as conn:
        indexes = {r["indexname"]: r["indexdef"] for r in await (await conn.execute(INDEXES)).fetchall()}
    # rebuilt after the retype with the options migration 0012 gives it
    assert "WITH (m='16', ef_construction='1000')" in indexes["memories_embedding_hnsw"]
    # an offline store stays offline when an API key appears later (no explicit model)
    keyed = await MemoryService.create(pool, settings(tmp_path, openai_api_key="k"))
    assert keyed.embedder.name == "local:multilingual-e5-small-q4/passage"


async def test_an_empty_store_switches_embedder_freely(pool, tmp_path, fake_openai):
    local = await MemoryService.create(pool, settings(tmp_path, embedding_model="local"))
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
    await local.save(1, "I live in Busan.")
    await local.clear(1)
    remote = settings(tmp_path, openai_base_url=fake_openai.base_url, openai_api_key="t",
                      embedding_model="text-embedding-3-small")
    service = await MemoryService.create(pool, remote)
    await service.save(1, "I live in Incheon.")
    meta, _, _ = await store_status(pool)
    assert meta.embedder == "openai:text-embedding-3-small"
    # the stale service (other process, old embedder) cannot write into the new space
    from panager.services.memory.service import MemoryUnavailable

    with pytest.raises(MemoryUnavailable, match="restart"):
        await local.save(1, "I like tea.")


async def _embedder(s: Settings):
    from panager.services.memory.binding import build_embedder

    return build_embedder(requested_model(s), s)


async def test_cli_status_and_reembed(db_url, tmp_path, fake_openai, capsys):
    pool = await open_pool(db_url, max_size=2)
    try:
        local = await MemoryService.create(pool, settings(tmp_path, embedding_model="local"))
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
        await local.save_many(1, ["I live in Busan.", "My cat is Nabi."], source="import")
    finally:
        await pool.close()
    remote = settings(tmp_path, openai_base_url=fake_openai.base_url, openai_api_key="t",
                      embedding_model="text-embedding-3-small", database_url=db_url)
    await status_command(remote)
    out = capsys.readouterr().out
    assert "memories: 2 of 1 user(s)" in out and "local:multilingual-e5-small-q4" in out
    assert "panager memory reembed" in out
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PANAGER_"))}
    env.update({"DATABASE_URL": db_url, "PANAGER_HOME": str(tmp_path),
                "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "t",
                "PANAGER_EMBEDDING_MODEL": "text-embedding-3-small"})
    code, out, err = await _cli(["ask", "hello"], env)
    assert code == 2 and "panager memory reembed" in err and "Traceback" not in err
    await reembed_command(remote, None)
    out = capsys.readouterr().out
    assert ("re-embedded 2 memories and 0 document passages with openai:text-embedding-3-small "
            "(64 dimensions") in out
    assert len(fake_openai.embedding_requests) == 1  # one batch


async def _cli(args: list[str], env: dict) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "panager.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_migration_0008_leaves_memories_untouched_and_counts_their_terms(fresh_db):
    """Existing memories keep text, vector and dates; BM25 statistics are computed for them and
    kept exact by the triggers afterwards (insert, update of the text, delete)."""
    url = fresh_db()
    db = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, db, "0007")
        async with db.connection() as conn:
            await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
            await conn.execute(
                "INSERT INTO memories (user_id, content, embedding, created_at, updated_at) VALUES "
                "(1, 'I live in Busan, Busan!', array_fill(0.5, ARRAY[384])::vector, "
                "'2025-01-02', '2025-03-04')"
            )
            before = await (await conn.execute("SELECT * FROM memories")).fetchone()
        await migrate.upgrade(url, db)
        async with db.connection() as conn:
            after = await (await conn.execute("SELECT * FROM memories")).fetchone()
            assert after.pop("history") == [] and after.pop("tainted") is False
            assert after.pop("superseded_by") is None and after.pop("superseded_at") is None
            assert after == before

            async def stats():
                terms = await (await conn.execute(
                    "SELECT lexeme, df FROM memory_terms WHERE user_id = 1 ORDER BY lexeme"
                )).fetchall()
                row = await (await conn.execute("SELECT n, total_len FROM memory_stats")).fetchone()
                return {t["lexeme"]: t["df"] for t in terms}, (row["n"], row["total_len"])

            assert await stats() == ({"busan": 1, "i": 1, "in": 1, "live": 1}, (1, 4))
            await conn.execute(
                "INSERT INTO memories (user_id, content, embedding) "
                "VALUES (1, 'Busan has beaches', array_fill(0.5, ARRAY[384])::vector)"
            )
            await conn.execute("UPDATE memories SET content = 'I live in Seoul' WHERE content LIKE 'I live%'")
            await conn.execute("UPDATE memories SET category = 'x'")  # text unchanged: no effect
            assert await stats() == (
                {"beaches": 1, "busan": 1, "has": 1, "i": 1, "in": 1, "live": 1, "seoul": 1}, (2, 7)
            )
            await conn.execute("DELETE FROM users WHERE id = 1")  # cascades to memories
            terms = await (await conn.execute("SELECT count(*) AS n FROM memory_terms")).fetchone()
            users = await (await conn.execute("SELECT count(*) AS n FROM memory_stats")).fetchone()
            assert (terms["n"], users["n"]) == (0, 0)
        await migrate.downgrade(url, db, "0007")
    finally:
        await db.close()


ROWS = (
    "SELECT id, user_id, content, category, source, embedding::text AS embedding, created_at, "
    "updated_at, history FROM memories ORDER BY content"
)


async def test_migration_0012_rebuilds_the_vector_index_and_leaves_memories_untouched(fresh_db):
    """The HNSW index is built again with ef_construction 1000 (and back with 256 on downgrade);
    the memories, their vectors and dates stay as they were, and the index still serves."""
    url = fresh_db()
    db = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, db, "0011")

        async def options() -> str:
            async with db.connection() as conn:
                rows = await (await conn.execute(INDEXES)).fetchall()
            return {r["indexname"]: r["indexdef"] for r in rows}["memories_embedding_hnsw"]

        assert "ef_construction='256'" in await options()
        async with db.connection() as conn:
            await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
            for i in range(1, 4):
                await conn.execute(
                    "INSERT INTO memories (user_id, content, embedding, created_at, updated_at) "
                    "VALUES (1, %s, array_fill(%s::real, ARRAY[384])::vector, '2025-01-02', '2025-03-04')",
                    (f"memory {i}", float(i)),
                )
            before = await (await conn.execute(ROWS)).fetchall()
        await migrate.upgrade(url, db)
        assert "WITH (m='16', ef_construction='1000')" in await options()
        async with db.connection() as conn:
            after = await (await conn.execute(ROWS)).fetchall()
            await conn.execute("SET enable_seqscan = off")
            plan = await (await conn.execute(
                "EXPLAIN SELECT id FROM memories ORDER BY embedding <=> %s::vector LIMIT 1",
                ("[" + ",".join(["1"] * 384) + "]",),
            )).fetchall()
        assert after == before
        assert "memories_embedding_hnsw" in " ".join(next(iter(r.values())) for r in plan)
        await migrate.downgrade(url, db, "0011")
        assert "ef_construction='256'" in await options()
    finally:
        await db.close()


async def test_the_older_e5_space_is_served_until_reembed(pool, tmp_path, caplog):
    """A store made before query/passage roles keeps being searched in its own space (never
    mixed with the new one), with a log line naming `panager memory reembed`, which moves it."""
    from panager.embeddings import DEFAULT_OFFLINE_MODEL, OfflineEmbedder

    older = OfflineEmbedder(DEFAULT_OFFLINE_MODEL, roles=False)
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
    await MemoryService(pool, older).save(1, "I live in Busan.")
    local = settings(tmp_path, embedding_model="local")
    service = await MemoryService.create(pool, local)
    assert service.embedder.name == f"local:{DEFAULT_OFFLINE_MODEL}"
    assert "panager memory reembed" in caplog.text
    await service.save(1, "My cat is called Nabi.")
    assert (await service.search(1, "which city do I live in?", 1))[0].content == "I live in Busan."
    report = await reembed(pool, await _embedder(local))
    assert (report.count, report.old, report.new) == (
        2, f"local:{DEFAULT_OFFLINE_MODEL}", f"local:{DEFAULT_OFFLINE_MODEL}/passage"
    )
    moved = await MemoryService.create(pool, local)
    assert moved.embedder.name.endswith("/passage")
    assert (await moved.search(1, "what is my pet's name?", 1))[0].content == "My cat is called Nabi."


PASSAGE_COLUMN = """
SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute
WHERE attrelid = 'document_chunks'::regclass AND attname = 'embedding'
"""
LEASE = "Clause 7: the heron nests beside the copper mill.\n\nClause 8: rent is due monthly."


async def passage_column(pool) -> tuple[str, str | None]:
    """(type of document_chunks.embedding, definition of its HNSW index or None)."""
    async with pool.connection() as conn:
        kind = (await (await conn.execute(PASSAGE_COLUMN)).fetchone())["type"]
        index = await (await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'document_chunks_embedding_hnsw'"
        )).fetchone()
    return kind, index["indexdef"] if index else None


async def test_documents_share_the_store_embedder_and_reembed_converts_them(
    pool, tmp_path, fake_openai, clock
):
    """A first document binds the store (passages typed and indexed like memories); another
    embedder is refused while only documents are stored; `reembed` converts the passages
    with the memories, and they are found with the new embedder."""
    from panager.services.media.documents import DocumentService

    remote = settings(tmp_path, openai_base_url=fake_openai.base_url, openai_api_key="t",
                      embedding_model="text-embedding-3-small")
    memory = await MemoryService.create(pool, remote)
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
    await DocumentService(pool, memory, clock, 10**7).add(
        1, "lease.txt", "text/plain", LEASE.encode(), LEASE)
    assert await passage_column(pool) == (
        "vector(64)",
        "CREATE INDEX document_chunks_embedding_hnsw ON public.document_chunks USING hnsw "
        "(embedding vector_cosine_ops) WITH (m='16', ef_construction='1000')",
    )
    meta, count, _ = await store_status(pool)
    assert (meta.embedder, meta.dim, count) == ("openai:text-embedding-3-small", 64, 0)

    local = settings(tmp_path, embedding_model="local")
    with pytest.raises(EmbedderMismatch, match="0 memories and 1 document passages"):
        await MemoryService.create(pool, local)

    report = await reembed(pool, await _embedder(local))
    assert (report.count, report.passages, report.dim) == (0, 1, 384)
    assert (await passage_column(pool))[0] == "vector(384)"
    moved = await MemoryService.create(pool, local)
    hits = await DocumentService(pool, moved, clock, 10**7).search(1, "where does the heron nest?")
    assert hits and "heron" in hits[0].content


async def test_passages_of_another_size_are_not_bound_over(pool, tmp_path, fake_openai, clock):
    """Passages stored before any embedder was recorded, by another model, stop a new binding
    (saving a memory or a document says to run reembed; so does searching documents) instead
    of being left unsearchable; reembed converts them."""
    from panager.services.media.documents import DocumentService
    from panager.services.memory.service import MemoryUnavailable

    async with pool.connection() as conn:
        await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
        doc = await (await conn.execute(
            "INSERT INTO documents (id, user_id, name, mime, size, text, original, created_at) "
            "VALUES (gen_random_uuid(), 1, 'old.txt', 'text/plain', 1, 'x', 'x', now()) "
            "RETURNING id")).fetchone()
        await conn.execute(
            "INSERT INTO document_chunks (user_id, document_id, seq, content, embedding) "
            "VALUES (1, %s, 0, 'an old passage', array_fill(0.1::real, ARRAY[8])::vector)",
            (doc["id"],))
    local = await MemoryService.create(pool, settings(tmp_path, embedding_model="local"))
    with pytest.raises(MemoryUnavailable, match=r"document passages come from another .*reembed"):
        await local.save(1, "I live in Busan.")
    assert await store_status(pool) == (None, 0, 0)
    assert (await passage_column(pool))[0] == "vector"
    documents = DocumentService(pool, local, clock, 10**7)
    with pytest.raises(MemoryUnavailable, match="another embedding model; run `panager memory"):
        await documents.search(1, "an old passage")
    with pytest.raises(MemoryUnavailable, match="document passages come from another"):
        await documents.add(1, "new.txt", "text/plain", b"x", "a new passage")
    await reembed(pool, local.embedder)
    assert await passage_column(pool) == (
        "vector(384)",
        "CREATE INDEX document_chunks_embedding_hnsw ON public.document_chunks USING hnsw "
        "(embedding vector_cosine_ops) WITH (m='16', ef_construction='1000')",
    )
    await local.save(1, "I live in Busan.")


async def test_migration_0023_types_and_indexes_passages_of_the_store_size(fresh_db):
    """Existing passages of the recorded size get the typed column and the index; a store
    holding passages of another size is left as it was (reembed fixes it)."""
    for sizes, typed in (([384, 384], True), ([384, 8], False)):
        url = fresh_db()
        db = await open_pool(url, max_size=2)
        try:
            await migrate.upgrade(url, db, "0022")
            async with db.connection() as conn:
                await conn.execute("INSERT INTO users (id, username) VALUES (1, 'me')")
                await conn.execute("INSERT INTO memory_meta (embedder, dim) VALUES ('m', 384)")
                doc = await (await conn.execute(
                    "INSERT INTO documents (id, user_id, name, mime, size, text, original, "
                    "created_at) VALUES (gen_random_uuid(), 1, 'a.txt', 'text/plain', 1, 'x', "
                    "'x', now()) RETURNING id")).fetchone()
                for seq, size in enumerate(sizes):
                    await conn.execute(
                        "INSERT INTO document_chunks (user_id, document_id, seq, content, "
                        "embedding) VALUES (1, %s, %s, 'p', array_fill(0.1::real, ARRAY[%s])"
                        "::vector)", (doc["id"], seq, size))
            await migrate.upgrade(url, db)
            kind, index = await passage_column(db)
            assert (kind == "vector(384)", index is not None) == (typed, typed)
            async with db.connection() as conn:
                left = await (await conn.execute(
                    "SELECT count(*) AS n FROM document_chunks")).fetchone()
            assert left["n"] == 2
            await migrate.downgrade(url, db, "0022")
            assert await passage_column(db) == ("vector", None)
        finally:
            await db.close()

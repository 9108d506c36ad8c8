"""Which embedder the memory store uses, and keeping its vectors consistent with it.

Vectors from two embedders live in different spaces (even at the same size), so
mixing them gives silent garbage. The store therefore records the embedder in
`memory_meta` (name + dimension) when the first memory is saved, and:

- on start, a configured embedder that differs from the recorded one is refused
  with one line naming `panager memory reembed` — unless no memory exists yet,
  in which case the new embedder simply takes over;
- with no `PANAGER_EMBEDDING_MODEL` set, the default follows the endpoint
  (`text-embedding-3-small` when `OPENAI_API_KEY`/`OPENAI_BASE_URL` is set, else
  the offline `local` model), but an offline store stays offline: adding an API
  key later does not lock the user out of their memories;
- a store recorded with an older space of the same offline model (e5 before
  query/passage roles, `local:multilingual-e5-small-q4`) keeps being served in
  that space, never mixed with the new one, and every start logs one line
  naming `panager memory reembed`, which moves it;
- `reembed` rewrites every vector with a new embedder in one transaction
  (vectors are computed first, outside it) and retypes the column and index
  when the size changes.

This module is the one place that issues DDL outside alembic: the vector size
is a run-time fact (the embedder), not a schema-version fact.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from panager.config import ConfigError, Settings
from panager.db.locks import BIND_LOCK_KEY
from panager.db.pool import DictConnection, Pool
from panager.db.queries import one
from panager.embeddings import ROLES_SUFFIX, Embedder, legacy_embedder, make_embedder

log = logging.getLogger(__name__)

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on `vector`
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 1000  # as migration 0012 builds it (BENCHMARKS.md, "Memory")
REEMBED_BATCH = 64

READ_META = "SELECT embedder, dim FROM memory_meta"
READ_META_SHARED = "SELECT embedder, dim FROM memory_meta FOR SHARE"
READ_META_LOCKED = "SELECT embedder, dim FROM memory_meta FOR UPDATE"
INSERT_META = "INSERT INTO memory_meta (embedder, dim) VALUES (%s, %s)"
UPSERT_META = """
INSERT INTO memory_meta (embedder, dim) VALUES (%s, %s)
ON CONFLICT (singleton) DO UPDATE SET embedder = EXCLUDED.embedder, dim = EXCLUDED.dim,
                                      updated_at = now()
"""
DELETE_META = "DELETE FROM memory_meta"
COUNT_ALL = "SELECT count(*) AS n FROM memories"
COUNT_USERS = "SELECT count(DISTINCT user_id) AS n FROM memories"
COLUMN_DIM = """
SELECT atttypmod AS dim FROM pg_attribute
WHERE attrelid = 'memories'::regclass AND attname = 'embedding'
"""
ALL_CONTENTS = "SELECT id, content FROM memories ORDER BY id"
DROP_INDEX = "DROP INDEX IF EXISTS memories_embedding_hnsw"
CREATE_INDEX = (
    "CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops) "
    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
)
UNTYPE_COLUMN = "ALTER TABLE memories ALTER COLUMN embedding TYPE vector"
RETYPE_COLUMN = "ALTER TABLE memories ALTER COLUMN embedding TYPE vector({dim})"
REEMBED_TEMP = "CREATE TEMP TABLE memory_reembed (id uuid, embedding vector) ON COMMIT DROP"
REEMBED_COPY = "COPY memory_reembed (id, embedding) FROM STDIN (FORMAT BINARY)"
REEMBED_APPLY = """
UPDATE memories m SET embedding = r.embedding FROM memory_reembed r WHERE m.id = r.id
"""


class EmbedderMismatch(ConfigError):
    """The configured embedder is not the one the stored memories were embedded with."""


class EmbedderChanged(RuntimeError):
    """The store was re-embedded by another process while this one was running."""


@dataclass(frozen=True)
class StoreMeta:
    """The embedder recorded for the stored vectors."""

    embedder: str
    dim: int


@dataclass(frozen=True)
class ReembedReport:
    """What `reembed` did."""

    count: int
    old: str | None
    new: str
    dim: int
    seconds: float


_OFFLINE_CACHE: dict[str, Embedder] = {}


def requested_model(settings: Settings) -> str:
    """PANAGER_EMBEDDING_MODEL when set; else the OpenAI default with an endpoint, else local."""
    if "embedding_model" in settings.model_fields_set:
        return settings.embedding_model
    return settings.embedding_model if settings.model_configured else "local"


def setting_for(name: str) -> str:
    """The PANAGER_EMBEDDING_MODEL value that selects the embedder called `name`."""
    return name.removeprefix("openai:")


def build_embedder(model: str, settings: Settings) -> Embedder:
    """The embedder for `model`; offline models are shared process-wide (they load once)."""
    model = model.strip()
    offline = model == "local" or model.startswith("local:")
    if offline and model in _OFFLINE_CACHE:
        return _OFFLINE_CACHE[model]
    try:
        embedder = make_embedder(
            model, api_key=settings.openai_api_key, base_url=settings.openai_base_url
        )
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"PANAGER_EMBEDDING_MODEL={model} cannot be used: {exc}.") from None
    if offline:
        _OFFLINE_CACHE[model] = embedder
    return embedder


async def read_meta(conn: DictConnection, sql: str = READ_META) -> StoreMeta | None:
    """The recorded embedder, or None before the first memory is saved."""
    row = await (await conn.execute(sql)).fetchone()
    return StoreMeta(row["embedder"], row["dim"]) if row else None


async def _scalar(conn: DictConnection, sql: str) -> int:
    return one(await (await conn.execute(sql)).fetchone())["n"]


async def choose_embedder(pool: Pool, settings: Settings) -> Embedder:
    """The embedder to use, checked against the stored vectors (EmbedderMismatch if unusable)."""
    embedder = build_embedder(requested_model(settings), settings)
    async with pool.connection() as conn:
        meta = await read_meta(conn)
        if meta is None or meta.embedder == embedder.name:
            return embedder
        explicit = "embedding_model" in settings.model_fields_set
        older = _older_space(meta, embedder, explicit)
        if older is not None:
            return older
        if not explicit and meta.embedder.startswith("local:"):
            return build_embedder(meta.embedder, settings)  # an offline store stays offline
        count = await _scalar(conn, COUNT_ALL)
        if count == 0:  # nothing to convert: the new embedder takes over on the next save
            await conn.execute(DELETE_META)
            return embedder
    raise EmbedderMismatch(_mismatch_message(settings, meta, embedder, count, explicit))


def _older_space(meta: StoreMeta, embedder: Embedder, explicit: bool) -> Embedder | None:
    """The embedder of the store's older space of the configured model (None if not that)."""
    if explicit and embedder.name != meta.embedder + ROLES_SUFFIX:
        return None
    key = meta.embedder + "#older"
    older = _OFFLINE_CACHE.get(key) or legacy_embedder(meta.embedder)
    if older is None:
        return None
    _OFFLINE_CACHE[key] = older
    log.warning(
        "memories are stored in the older %s space (saved texts embedded as questions); "
        "run `panager memory reembed` to re-embed them for better recall",
        meta.embedder,
    )
    return older


def _mismatch_message(
    settings: Settings, meta: StoreMeta, embedder: Embedder, count: int, explicit: bool
) -> str:
    keep = setting_for(meta.embedder)
    if explicit:
        return (
            f"PANAGER_EMBEDDING_MODEL={settings.embedding_model} is not the embedder your "
            f"{count} memories were stored with ({meta.embedder}); run `panager memory reembed` "
            f"to re-embed them with {embedder.name}, or set PANAGER_EMBEDDING_MODEL={keep}."
        )
    return (
        f"your {count} memories were embedded with {meta.embedder}, but OPENAI_API_KEY / "
        "OPENAI_BASE_URL is not set; set it again, or run `panager memory reembed` to move "
        "them to the offline embedder (PANAGER_EMBEDDING_MODEL=local)."
    )


async def ensure_bound(conn: DictConnection, name: str, dim: int) -> None:
    """Inside a write transaction: check (or record, on first use) the store's embedder.

    Holds a share lock on the meta row until the transaction ends, so a concurrent
    re-embed waits for in-flight saves and they never mix spaces.
    """
    meta = await read_meta(conn, READ_META_SHARED)
    if meta is None:
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (BIND_LOCK_KEY,))
        meta = await read_meta(conn, READ_META_SHARED)
    if meta is None:
        await _bind(conn, name, dim)
        return
    if meta.embedder != name or meta.dim != dim:
        raise EmbedderChanged(
            f"the memory store now uses {meta.embedder}, not {name}; restart Panager"
        )


async def _bind(conn: DictConnection, name: str, dim: int) -> None:
    current = one(await (await conn.execute(COLUMN_DIM)).fetchone())["dim"]
    if current != dim:
        if await _scalar(conn, COUNT_ALL):
            raise EmbedderChanged(
                f"stored memories have {current}-d vectors but {name} makes {dim}-d ones; "
                "run `panager memory reembed`"
            )
        await _retype(conn, dim)
    await conn.execute(INSERT_META, (name, dim))
    log.info("memory store bound to %s (%d dimensions)", name, dim)


async def _retype(conn: DictConnection, dim: int) -> None:
    """Make the column vector(dim) and rebuild the HNSW index (if pgvector can index it)."""
    await conn.execute(DROP_INDEX)
    await conn.execute(RETYPE_COLUMN.format(dim=int(dim)))
    if dim <= HNSW_MAX_DIM:
        await conn.execute(CREATE_INDEX)
    else:
        log.warning("%d-d vectors are too large for an HNSW index; searches scan exactly", dim)


async def store_status(pool: Pool) -> tuple[StoreMeta | None, int, int]:
    """(recorded embedder, memories, users with memories)."""
    async with pool.connection() as conn:
        return (
            await read_meta(conn),
            await _scalar(conn, COUNT_ALL),
            await _scalar(conn, COUNT_USERS),
        )


async def _embed_all(
    embedder: Embedder, rows: Sequence[dict], progress: Callable[[int, int], None] | None
) -> dict:
    vectors: dict = {}
    for start in range(0, len(rows), REEMBED_BATCH):
        batch = rows[start : start + REEMBED_BATCH]
        embedded = await embedder.embed([r["content"] for r in batch])
        vectors.update(
            {(r["id"], r["content"]): v for r, v in zip(batch, embedded, strict=True)}
        )
        if progress:
            progress(min(start + REEMBED_BATCH, len(rows)), len(rows))
    return vectors


async def reembed(
    pool: Pool,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Re-embed every memory (all users) with `embedder` and record it as the store's embedder.

    Vectors are computed before the transaction; inside it, writes are locked out and any
    memory added or edited meanwhile is embedded too, so the result is never mixed.
    """
    started = time.perf_counter()
    async with pool.connection() as conn:
        rows = await (await conn.execute(ALL_CONTENTS)).fetchall()
    vectors = await _embed_all(embedder, rows, progress)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (BIND_LOCK_KEY,))
        old = await read_meta(conn, READ_META_LOCKED)
        await conn.execute("LOCK TABLE memories IN SHARE ROW EXCLUSIVE MODE")
        rows = await (await conn.execute(ALL_CONTENTS)).fetchall()
        missing = [r for r in rows if (r["id"], r["content"]) not in vectors]
        vectors.update(await _embed_all(embedder, missing, None))
        dim = await _apply(conn, rows, vectors, embedder)
        await conn.execute(UPSERT_META, (embedder.name, dim))
    return ReembedReport(
        len(rows), old.embedder if old else None, embedder.name, dim,
        time.perf_counter() - started,
    )


async def _apply(
    conn: DictConnection, rows: Sequence[dict], vectors: dict, embedder: Embedder
) -> int:
    """Write the new vectors and retype the column; returns the new dimension."""
    if rows:
        dim = len(vectors[(rows[0]["id"], rows[0]["content"])])
    else:
        dim = len((await embedder.embed(["dimension probe"]))[0])
    await conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
    await conn.execute(DROP_INDEX)
    await conn.execute(UNTYPE_COLUMN)
    await conn.execute(REEMBED_TEMP)
    async with conn.cursor().copy(REEMBED_COPY) as copy:
        copy.set_types(["uuid", "vector"])
        for r in rows:
            vec = np.asarray(vectors[(r["id"], r["content"])], dtype=np.float32)
            await copy.write_row((r["id"], vec))
    await conn.execute(REEMBED_APPLY)
    await _retype(conn, dim)
    return dim

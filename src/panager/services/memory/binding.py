"""Which embedder the memory store uses, and keeping its vectors consistent with it.

Vectors from two embedders live in different spaces (even at the same size), so
mixing them gives silent garbage. The store — memories and the passages of
documents (services/media/documents.py), which share its embedder — therefore
records the embedder in `memory_meta` (name + dimension) when the first memory
or document is saved, and:

- on start, a configured embedder that differs from the recorded one is refused
  with one line naming `panager memory reembed` — unless no memory and no
  passage exists yet, in which case the new embedder simply takes over;
- with no `PANAGER_EMBEDDING_MODEL` set, the default follows the endpoint
  (`text-embedding-3-small` when `OPENAI_API_KEY`/`OPENAI_BASE_URL` is set, else
  the offline `local` model), but an offline store stays offline: adding an API
  key later does not lock the user out of their memories;
- a store recorded with an older space of the same offline model (e5 before
  query/passage roles, `local:multilingual-e5-small-q4`) keeps being served in
  that space, never mixed with the new one, and every start logs one line
  naming `panager memory reembed`, which moves it;
- `reembed` rewrites every vector (memories and passages) with a new embedder
  in one transaction (vectors are computed first, outside it) and retypes both
  columns and rebuilds both indexes.

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
from panager.endpoints import model_endpoints

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
COUNT_PASSAGES = "SELECT count(*) AS n FROM document_chunks"


@dataclass(frozen=True)
class VectorTable:
    """A table whose `embedding` column holds the store embedder's vectors."""

    table: str
    index: str

    @property
    def column_dim(self) -> str:
        return f"""
        SELECT atttypmod AS dim FROM pg_attribute
        WHERE attrelid = '{self.table}'::regclass AND attname = 'embedding'
        """

    def other_dims(self, dim: int) -> str:
        """Counts rows whose vectors are not `dim`-d (another embedder's)."""
        return f"SELECT count(*) AS n FROM {self.table} WHERE vector_dims(embedding) <> {int(dim)}"

    @property
    def drop_index(self) -> str:
        return f"DROP INDEX IF EXISTS {self.index}"

    @property
    def create_index(self) -> str:
        return (f"CREATE INDEX {self.index} ON {self.table} USING hnsw "
                f"(embedding vector_cosine_ops) WITH (m = {HNSW_M}, "
                f"ef_construction = {HNSW_EF_CONSTRUCTION})")

    @property
    def untype(self) -> str:
        return f"ALTER TABLE {self.table} ALTER COLUMN embedding TYPE vector"

    def retype(self, dim: int) -> str:
        return f"ALTER TABLE {self.table} ALTER COLUMN embedding TYPE vector({int(dim)})"

    @property
    def contents(self) -> str:
        return f"SELECT id, content FROM {self.table} ORDER BY id"

    @property
    def apply(self) -> str:
        return (f"UPDATE {self.table} m SET embedding = r.embedding FROM memory_reembed r "
                "WHERE m.id = r.id")


# Memories and document passages share the embedder (documents.py searches them with the
# memory search): they are bound, retyped, indexed and re-embedded together.
MEMORIES = VectorTable("memories", "memories_embedding_hnsw")
PASSAGES = VectorTable("document_chunks", "document_chunks_embedding_hnsw")
VECTOR_TABLES = (MEMORIES, PASSAGES)
REEMBED_TEMP = "CREATE TEMP TABLE memory_reembed (id uuid, embedding vector) ON COMMIT DROP"
REEMBED_COPY = "COPY memory_reembed (id, embedding) FROM STDIN (FORMAT BINARY)"


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
    passages: int = 0  # document passages re-embedded with the memories


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
    base_url, api_key = model_endpoints(settings).embedding  # `embedding_endpoint`, else the env's
    try:
        embedder = make_embedder(model, api_key=api_key, base_url=base_url)
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
        passages = await _scalar(conn, COUNT_PASSAGES)
        if count == passages == 0:  # nothing to convert: the new embedder takes over
            await conn.execute(DELETE_META)
            return embedder
    stored = _stored(count, passages)
    raise EmbedderMismatch(_mismatch_message(settings, meta, embedder, stored, explicit))


def _stored(memories: int, passages: int) -> str:
    """"3 memories", "3 memories and 70 document passages"."""
    return f"{memories} memories" + (f" and {passages} document passages" if passages else "")


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
    settings: Settings, meta: StoreMeta, embedder: Embedder, stored: str, explicit: bool
) -> str:
    keep = setting_for(meta.embedder)
    if explicit:
        return (
            f"PANAGER_EMBEDDING_MODEL={settings.embedding_model} is not the embedder your "
            f"{stored} were stored with ({meta.embedder}); run `panager memory reembed` "
            f"to re-embed them with {embedder.name}, or set PANAGER_EMBEDDING_MODEL={keep}."
        )
    return (
        f"your {stored} were embedded with {meta.embedder}, but OPENAI_API_KEY / "
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
    for table in VECTOR_TABLES:
        current = one(await (await conn.execute(table.column_dim)).fetchone())["dim"]
        if current == dim:
            continue
        # rows of another size come from another embedder (documents kept from before the
        # store was bound, or memories of a replaced one): only reembed may convert them
        if await _scalar(conn, table.other_dims(dim)):
            what = "memories" if table is MEMORIES else "document passages"
            raise EmbedderChanged(
                f"stored {what} come from another embedding model than {name} ({dim}-d); "
                "run `panager memory reembed`"
            )
        await _retype(conn, table, dim)
    await conn.execute(INSERT_META, (name, dim))
    log.info("memory store bound to %s (%d dimensions)", name, dim)


async def _retype(conn: DictConnection, table: VectorTable, dim: int) -> None:
    """Make the column vector(dim) and rebuild the HNSW index (if pgvector can index it)."""
    await conn.execute(table.drop_index)
    await conn.execute(table.retype(dim))
    if dim <= HNSW_MAX_DIM:
        await conn.execute(table.create_index)
    else:
        log.warning("%d-d vectors are too large for an HNSW index; %s are scanned exactly",
                    dim, table.table)


async def stored_passages(pool: Pool) -> int:
    """How many document passages hold the store embedder's vectors."""
    async with pool.connection() as conn:
        return await _scalar(conn, COUNT_PASSAGES)


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
        vectors.update({_key(r): v for r, v in zip(batch, embedded, strict=True)})
        if progress:
            progress(min(start + REEMBED_BATCH, len(rows)), len(rows))
    return vectors


def _key(row: dict) -> tuple:
    """A row's text where it is stored (an edited text needs a new vector)."""
    return row["table"], row["id"], row["content"]


async def _all_rows(conn: DictConnection) -> list[dict]:
    """Every memory and document passage (all users), each tagged with its table."""
    rows = []
    for table in VECTOR_TABLES:
        found = await (await conn.execute(table.contents)).fetchall()
        rows += [{**r, "table": table.table} for r in found]
    return rows


async def reembed(
    pool: Pool,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Re-embed every memory and document passage (all users) with `embedder` and record it
    as the store's embedder.

    Vectors are computed before the transaction; inside it, writes are locked out and any
    memory or passage added or edited meanwhile is embedded too, so the result is never mixed.
    """
    started = time.perf_counter()
    async with pool.connection() as conn:
        rows = await _all_rows(conn)
    vectors = await _embed_all(embedder, rows, progress)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (BIND_LOCK_KEY,))
        old = await read_meta(conn, READ_META_LOCKED)
        for table in VECTOR_TABLES:
            await conn.execute(f"LOCK TABLE {table.table} IN SHARE ROW EXCLUSIVE MODE")
        rows = await _all_rows(conn)
        missing = [r for r in rows if _key(r) not in vectors]
        vectors.update(await _embed_all(embedder, missing, None))
        dim = await _apply(conn, rows, vectors, embedder)
        await conn.execute(UPSERT_META, (embedder.name, dim))
    passages = sum(r["table"] == PASSAGES.table for r in rows)
    return ReembedReport(
        len(rows) - passages, old.embedder if old else None, embedder.name, dim,
        time.perf_counter() - started, passages,
    )


async def _apply(
    conn: DictConnection, rows: Sequence[dict], vectors: dict, embedder: Embedder
) -> int:
    """Write the new vectors and retype the columns; returns the new dimension."""
    if rows:
        dim = len(vectors[_key(rows[0])])
    else:
        dim = len((await embedder.embed(["dimension probe"]))[0])
    await conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
    await conn.execute(REEMBED_TEMP)
    for table in VECTOR_TABLES:
        await conn.execute(table.drop_index)
        await conn.execute(table.untype)
        await conn.execute("TRUNCATE memory_reembed")
        async with conn.cursor().copy(REEMBED_COPY) as copy:
            copy.set_types(["uuid", "vector"])
            for r in rows:
                if r["table"] == table.table:
                    vec = np.asarray(vectors[_key(r)], dtype=np.float32)
                    await copy.write_row((r["id"], vec))
        await conn.execute(table.apply)
        await _retype(conn, table, dim)
    return dim

"""Per-user long-term memory on pgvector: save, hybrid search, list, forget, clear.

Retrieval is hybrid. One query finds the nearest vectors (HNSW, cosine), one
finds memories containing every meaningful word of the query ('simple'
tsvector, so Korean works; see memory_text), and the two rankings are fused
with reciprocal rank fusion (RRF): a memory found by both rises, a memory found
by either still appears. Both queries go out in one pipelined round trip.
Every statement is filtered by `user_id`; nothing here can return another
user's rows.

A user with up to EXACT_MAX memories is searched by an exact scan of their
own rows: at that size it is as fast as the index and never misses. Larger
users go through the HNSW index. The index is shared by all users, so pgvector
filters by user after the index scan; when that leaves fewer candidates than
asked (a large user among even larger ones), the query is repeated as an exact
scan, so results never go missing because of other users' rows. On pgvector
≥ 0.8 the index scan itself can go on until enough of the user's rows are
found (`hnsw.iterative_scan`, the `iterative_scan` argument); measured, it is
left off by default (ITERATIVE_SCAN_AUTO).

Saving a near-duplicate (cosine similarity at or above the threshold, or the
same text) updates the existing memory instead of adding another. The default
threshold depends on the embedder, whose similarity scales differ; the
`memory_dedupe_threshold` config key overrides it.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import psycopg

from panager.clock import Clock, SystemClock
from panager.db.extension import supports_iterative_scan
from panager.db.pool import DictConnection, Pool
from panager.db.queries import one
from panager.embeddings import Embedder
from panager.services.memory.binding import (
    EmbedderChanged,
    choose_embedder,
    ensure_bound,
    read_meta,
)
from panager.services.memory.text import (
    MAX_CONTENT_CHARS,
    MemoryInputError,
    check_source,
    clean_category,
    clean_content,
    fit_content,
    fts_query,
    parse_memory_id,
    same_text,
)

log = logging.getLogger(__name__)

MAX_SEARCH_LIMIT = 20
CANDIDATES = 20  # per retriever, before fusion
RRF_K = 60
EF_SEARCH = 200  # hnsw.ef_search: index candidates kept (recall@5 0.97 at 100k, BENCHMARKS.md)
EXACT_MAX = 3_000  # users with at most this many memories are scanned exactly (~2 ms)
SIZE_TTL = 60.0  # seconds a user's memory count is trusted for choosing the plan
SAVE_LOCK_NAMESPACE = 7_260_004
QUERY_CACHE_SIZE = 256
DEDUPE_THRESHOLDS = {  # measured: paraphrases vs. different facts of the same shape
    "local:multilingual-e5-small-q4": 0.97,
    "local:all-minilm-l6-v2-int8": 0.93,
}
DEFAULT_DEDUPE_THRESHOLD = 0.92
SearchMode = Literal["hybrid", "vector", "text"]
Strategy = Literal["auto", "exact", "hnsw"]
IterativeScan = Literal["auto", "off", "strict_order", "relaxed_order"]
# pgvector >= 0.8 can continue an HNSW scan until LIMIT rows pass the user filter, instead
# of returning too few and leaving us a second, exact query. Measured (bench/filtered_search.py,
# BENCHMARKS.md): it removes that query at equal recall but shows no consistent latency win
# on our 2-core machine, so "auto" keeps today's plan; pass a mode to use it.
ITERATIVE_SCAN_AUTO = ""

COLUMNS = "id, content, category, source, created_at, updated_at"
SEARCH_ANN = f"""
SELECT {COLUMNS}, 1 - (embedding <=> %(v)s) AS similarity
FROM memories WHERE user_id = %(user)s
ORDER BY embedding <=> %(v)s LIMIT %(k)s
"""
SEARCH_EXACT = f"""
SELECT {COLUMNS}, 1 - (embedding <=> %(v)s) AS similarity
FROM memories WHERE user_id = %(user)s
ORDER BY (embedding <=> %(v)s) + 0 LIMIT %(k)s
"""  # "+ 0": not the indexed expression, so the planner scans the user's rows exactly
SEARCH_TEXT = f"""
SELECT {COLUMNS}, ts_rank_cd(content_tsv, q) AS rank
FROM memories, to_tsquery('simple', %(q)s) AS q
WHERE user_id = %(user)s AND content_tsv @@ q
ORDER BY rank DESC, updated_at DESC LIMIT %(k)s
"""
SAVE_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
SET_EF_SEARCH = "SELECT set_config('hnsw.ef_search', %s, true)"
SET_ITERATIVE_SCAN = "SELECT set_config('hnsw.iterative_scan', %s, true)"
VECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
BOUNDED_COUNT = (
    "SELECT count(*) AS n FROM (SELECT 1 FROM memories WHERE user_id = %s LIMIT %s) AS mine"
)
HAS_ANY = "SELECT EXISTS (SELECT 1 FROM memories WHERE user_id = %s) AS any"
INSERT = f"""
INSERT INTO memories (user_id, content, category, source, embedding, created_at, updated_at)
VALUES (%(user)s, %(content)s, %(category)s, %(source)s, %(v)s, %(now)s, %(now)s)
RETURNING {COLUMNS}
"""
UPDATE = f"""
UPDATE memories SET content = %(content)s, category = %(category)s, embedding = %(v)s,
                    updated_at = %(now)s
WHERE id = %(id)s AND user_id = %(user)s
RETURNING {COLUMNS}
"""
LIST = f"""
SELECT {COLUMNS} FROM memories WHERE user_id = %s
ORDER BY created_at DESC, id LIMIT %s OFFSET %s
"""
COUNT = "SELECT count(*) AS n FROM memories WHERE user_id = %s"
GET = f"SELECT {COLUMNS} FROM memories WHERE user_id = %s AND id = %s"
BY_PREFIX = f"""
SELECT {COLUMNS} FROM memories WHERE user_id = %s AND id::text LIKE %s ORDER BY id LIMIT 2
"""
DELETE = f"DELETE FROM memories WHERE user_id = %s AND id = %s RETURNING {COLUMNS}"
CLEAR = "DELETE FROM memories WHERE user_id = %s"


class MemoryUnavailable(RuntimeError):
    """Memory cannot be used right now (embedder unreachable, store re-embedded)."""


@dataclass(frozen=True)
class MemoryHit:
    """One stored memory, with its retrieval score (0 when not from a search)."""

    id: str
    content: str
    category: str
    created_at: datetime
    updated_at: datetime
    score: float = 0.0
    source: str = "tool"


@dataclass(frozen=True)
class SaveResult:
    """A saved memory; `updated` when it replaced a near-duplicate (`previous` text)."""

    memory: MemoryHit
    updated: bool = False
    previous: str | None = None


def _hit(row: dict, score: float = 0.0) -> MemoryHit:
    return MemoryHit(
        id=str(row["id"]),
        content=row["content"],
        category=row["category"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=float(score),
        source=row["source"],
    )


def _by_similarity(rows: list[dict]) -> list[dict]:
    """Nearest first (a relaxed-order iterative scan may return rows slightly out of order)."""
    return sorted(rows, key=lambda r: -r["similarity"])


class MemoryService:
    """Long-term memories; every method takes the owner's user id and touches only their rows."""

    def __init__(
        self,
        pool: Pool,
        embedder: Embedder,
        *,
        clock: Clock | None = None,
        dedupe_threshold: float | None = None,
        ef_search: int = EF_SEARCH,
        strategy: Strategy = "auto",
        iterative_scan: IterativeScan = "auto",
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.clock = clock or SystemClock()
        if dedupe_threshold is None:
            dedupe_threshold = DEDUPE_THRESHOLDS.get(embedder.name, DEFAULT_DEDUPE_THRESHOLD)
        self.dedupe_threshold = dedupe_threshold
        self.ef_search = ef_search
        self.strategy = strategy  # "auto": exact scan for small users, HNSW for large ones
        self.exact_fallbacks = 0  # HNSW scans starved by the user filter (then scanned exactly)
        self.iterative_scan = iterative_scan  # a mode is used only if the server's pgvector has it
        self._scan_mode: str | None = None  # resolved once: "" (none) or the mode to set
        self._sizes: dict[int, tuple[int, float]] = {}
        self._bound = False  # the store is known to hold this embedder's vectors
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @classmethod
    async def create(cls, pool: Pool, settings: Any, **kwargs: Any) -> MemoryService:
        """A service with the configured embedder, checked against the stored vectors."""
        config = settings.runtime
        if "memory_dedupe_threshold" in config.model_fields_set:
            kwargs.setdefault("dedupe_threshold", config.memory_dedupe_threshold)
        service = cls(pool, await choose_embedder(pool, settings), **kwargs)
        await service.check_bound()
        return service

    async def check_bound(self) -> bool:
        """Whether the store records this service's embedder (then searches skip a check)."""
        async with self.pool.connection() as conn:
            meta = await read_meta(conn)
        self._bound = meta is not None and meta.embedder == self.embedder.name
        return self._bound

    # -- embedding ---------------------------------------------------------------------------

    async def _embed(self, texts: list[str]) -> list[np.ndarray]:
        try:
            vectors = await self.embedder.embed(texts)
        except Exception as exc:
            log.warning("embedding with %s failed: %s", self.embedder.name, type(exc).__name__)
            raise MemoryUnavailable(
                f"the embedding model ({self.embedder.name}) failed ({type(exc).__name__}); "
                "try again later."
            ) from exc
        return [np.asarray(v, dtype=np.float32) for v in vectors]

    async def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (recently used queries are cached: one embedding per text)."""
        cached = self._query_cache.get(text)
        if cached is not None:
            self._query_cache.move_to_end(text)
            return cached
        vector = (await self._embed([text]))[0]
        self._query_cache[text] = vector
        if len(self._query_cache) > QUERY_CACHE_SIZE:
            self._query_cache.popitem(last=False)
        return vector

    # -- saving ------------------------------------------------------------------------------

    async def save(
        self, user_id: int, content: str, category: str = "general", source: str = "tool"
    ) -> SaveResult:
        """Store a memory, or update the user's near-duplicate of it."""
        content, category = clean_content(content), clean_category(category)
        check_source(source)
        vector = (await self._embed([content]))[0]
        async with self._write(user_id, len(vector)) as conn:
            result = await self._store(conn, user_id, content, category, source, vector)
        self._bound = True
        return result

    async def save_many(
        self,
        user_id: int,
        contents: Sequence[str],
        source: str = "compaction",
        category: str = "general",
    ) -> list[SaveResult]:
        """Store several memories with one batched embedding call (e.g. facts from compaction).

        Blank entries are skipped and over-long ones cut to MAX_CONTENT_CHARS; duplicates
        (of stored memories or of each other) update instead of inserting.
        """
        check_source(source)
        texts = [fit_content(t) for t in contents if isinstance(t, str) and t.strip()]
        if not texts:
            return []
        vectors = await self._embed(texts)
        category = clean_category(category)
        async with self._write(user_id, len(vectors[0])) as conn:
            results = [
                await self._store(conn, user_id, text, category, source, vector)
                for text, vector in zip(texts, vectors, strict=True)
            ]
        self._bound = True
        return results

    @asynccontextmanager
    async def _write(self, user_id: int, dim: int | None = None) -> AsyncIterator[DictConnection]:
        """A transaction for one user's writes: a per-user lock (no racing duplicates) and,
        when saving `dim`-d vectors, a check that the store uses this embedder."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(SAVE_LOCK, (SAVE_LOCK_NAMESPACE, user_id & 0x7FFFFFFF))
            if dim is not None:
                try:
                    await ensure_bound(conn, self.embedder.name, dim)
                except EmbedderChanged as exc:
                    raise MemoryUnavailable(str(exc)) from exc
            yield conn

    async def _store(
        self, conn: DictConnection, user_id: int, content: str, category: str, source: str,
        vector: np.ndarray,
    ) -> SaveResult:
        params = {"user": user_id, "content": content, "category": category, "source": source,
                  "v": vector, "now": self.clock.now()}
        nearest = await self._nearest(conn, user_id, vector, 1)
        if nearest and (
            nearest[0]["similarity"] >= self.dedupe_threshold
            or same_text(nearest[0]["content"], content)
        ):
            old = nearest[0]
            row = one(await (await conn.execute(UPDATE, {**params, "id": old["id"]})).fetchone())
            return SaveResult(_hit(row, old["similarity"]), updated=True, previous=old["content"])
        row = one(await (await conn.execute(INSERT, params)).fetchone())
        return SaveResult(_hit(row))

    # -- searching ---------------------------------------------------------------------------

    async def search(
        self,
        user_id: int,
        query: str,
        limit: int = 5,
        *,
        mode: SearchMode = "hybrid",
        vector: np.ndarray | None = None,
    ) -> list[MemoryHit]:
        """The user's memories most relevant to `query`, best first."""
        query = (query or "").strip()
        if not query:
            raise MemoryInputError("query is empty; say what to look for.")
        limit = max(1, min(int(limit), MAX_SEARCH_LIMIT))
        if not self._bound and not await self._has_any(user_id):
            return []  # nothing stored yet: the column may not have this embedder's size
        if mode != "text" and vector is None:
            vector = await self.embed_query(query)
        try:
            return await self._search(user_id, query, limit, mode, vector)
        except psycopg.errors.DataException as exc:
            log.warning("memory search failed: %s", exc)
            raise MemoryUnavailable(
                "the stored memories use another embedding model (re-embedded since this "
                "process started); restart Panager."
            ) from exc

    async def _has_any(self, user_id: int) -> bool:
        async with self.pool.connection() as conn:
            return one(await (await conn.execute(HAS_ANY, (user_id,))).fetchone())["any"]

    async def _search(
        self, user_id: int, query: str, limit: int, mode: SearchMode, vector: np.ndarray | None
    ) -> list[MemoryHit]:
        """Both legs go out in one pipeline (one round trip); results are fused with RRF."""
        k = max(CANDIDATES, limit)
        terms = fts_query(query) if mode != "vector" else None
        params = {"user": user_id, "v": vector, "k": k, "q": terms}
        vec_cur = text_cur = None
        async with self.pool.connection() as conn:
            use_index = mode != "text" and await self._use_index(conn, user_id)
            scan = await self._iterative(conn) if use_index else ""
            async with conn.pipeline(), conn.transaction():
                if use_index:
                    await self._set_index_scan(conn, k, scan)
                if mode != "text":
                    vec_cur = await conn.execute(SEARCH_ANN if use_index else SEARCH_EXACT, params)
                if terms:
                    text_cur = await conn.execute(SEARCH_TEXT, params)
            vec_rows = _by_similarity(await vec_cur.fetchall()) if vec_cur else []
            if use_index and len(vec_rows) < k:
                vec_rows = await self._starved(conn, params)
            text_rows = await text_cur.fetchall() if text_cur else []
        if mode == "vector":
            return [_hit(r, r["similarity"]) for r in vec_rows[:limit]]
        if mode == "text":
            return [_hit(r, r["rank"]) for r in text_rows[:limit]]
        return rrf_fuse([vec_rows, text_rows], limit)

    async def _use_index(self, conn: DictConnection, user_id: int) -> bool:
        """HNSW for users with many memories; an exact scan (faster and exact) for the rest.

        The count is cached per process for SIZE_TTL: a stale count only picks the slower
        plan for a while, never wrong results.
        """
        if self.strategy != "auto":
            return self.strategy == "hnsw"
        now = time.monotonic()
        size, at = self._sizes.get(user_id, (0, -SIZE_TTL))
        if now - at >= SIZE_TTL:
            cur = await conn.execute(BOUNDED_COUNT, (user_id, EXACT_MAX + 1))
            size = one(await cur.fetchone())["n"]
            self._sizes[user_id] = (size, now)
        return size > EXACT_MAX

    async def _iterative(self, conn: DictConnection) -> str:
        """The hnsw.iterative_scan mode to use ("" for none), checked once per process."""
        if self._scan_mode is None:
            mode = ""
            if self.iterative_scan != "off":
                row = await (await conn.execute(VECTOR_VERSION)).fetchone()
                if supports_iterative_scan(row["extversion"] if row else None):
                    auto = self.iterative_scan == "auto"
                    mode = ITERATIVE_SCAN_AUTO if auto else self.iterative_scan
            self._scan_mode = mode
        return self._scan_mode

    async def _set_index_scan(self, conn: DictConnection, k: int, scan: str) -> None:
        await conn.execute(SET_EF_SEARCH, (str(max(self.ef_search, k)),))
        if scan:
            await conn.execute(SET_ITERATIVE_SCAN, (scan,))

    async def _starved(self, conn: DictConnection, params: dict) -> list[dict]:
        """The shared index returned too few of this user's rows: scan theirs exactly."""
        self.exact_fallbacks += 1
        return await (await conn.execute(SEARCH_EXACT, params)).fetchall()

    async def _nearest(
        self, conn: DictConnection, user_id: int, vector: np.ndarray, k: int
    ) -> list[dict]:
        """The user's k nearest memories (inside a transaction): exact or HNSW, as in search."""
        params = {"user": user_id, "v": vector, "k": k}
        if not await self._use_index(conn, user_id):
            return await (await conn.execute(SEARCH_EXACT, params)).fetchall()
        await self._set_index_scan(conn, k, await self._iterative(conn))
        rows = _by_similarity(await (await conn.execute(SEARCH_ANN, params)).fetchall())
        return rows if len(rows) >= k else await self._starved(conn, params)

    async def recall(self, user_id: int, query: str, limit: int = 5) -> list[MemoryHit]:
        """Memories to inject for this message (one embedding call; none if the user has none)."""
        if limit <= 0 or not (query or "").strip() or not await self._has_any(user_id):
            return []
        return await self.search(user_id, query[:MAX_CONTENT_CHARS], limit)

    # -- listing and forgetting --------------------------------------------------------------

    async def list(self, user_id: int, limit: int = 20, offset: int = 0) -> list[MemoryHit]:
        """The user's memories, newest first."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(LIST, (user_id, limit, offset))).fetchall()
        return [_hit(r) for r in rows]

    async def count(self, user_id: int) -> int:
        """How many memories the user has."""
        async with self.pool.connection() as conn:
            return one(await (await conn.execute(COUNT, (user_id,))).fetchone())["n"]

    async def get(self, user_id: int, memory_id: str) -> MemoryHit | None:
        """The user's memory with this id (None for unknown ids and other users' ids)."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET, (user_id, parse_memory_id(memory_id)))).fetchone()
        return _hit(row) if row else None

    async def find(self, user_id: int, ref: str) -> MemoryHit | None:
        """A memory by full id or by a unique prefix of at least 6 characters (as /memory shows)."""
        ref = (ref or "").strip().lower()
        if re.fullmatch(r"[0-9a-f]{6,35}", ref):
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(BY_PREFIX, (user_id, ref + "%"))).fetchall()
            if len(rows) > 1:
                raise MemoryInputError(f"{ref!r} matches several memories; give more characters.")
            return _hit(rows[0]) if rows else None
        return await self.get(user_id, ref)

    async def edit(
        self, user_id: int, memory_id: str, content: str, category: str | None = None
    ) -> MemoryHit | None:
        """Replace a memory's text (re-embedded) and category; None when it is not theirs."""
        old = await self.get(user_id, memory_id)
        if old is None:
            return None
        content = clean_content(content)
        category = clean_category(category if category is not None else old.category)
        vector = (await self._embed([content]))[0]
        params = {"id": parse_memory_id(memory_id), "user": user_id, "content": content,
                  "category": category, "v": vector, "now": self.clock.now()}
        async with self._write(user_id, len(vector)) as conn:
            row = await (await conn.execute(UPDATE, params)).fetchone()
        return _hit(row) if row else None

    async def forget(self, user_id: int, memory_id: str) -> MemoryHit | None:
        """Delete the user's memory; None when no such memory is theirs."""
        async with self._write(user_id) as conn:
            row = await (
                await conn.execute(DELETE, (user_id, parse_memory_id(memory_id)))
            ).fetchone()
        return _hit(row) if row else None

    async def clear(self, user_id: int) -> int:
        """Delete all of the user's memories; returns how many."""
        async with self._write(user_id) as conn:
            return (await conn.execute(CLEAR, (user_id,))).rowcount


def rrf_fuse(rankings: Sequence[Sequence[dict]], limit: int, k: int = RRF_K) -> list[MemoryHit]:
    """Reciprocal rank fusion: score = Σ 1/(k + rank) over the rankings a memory appears in."""
    scores: dict[Any, float] = {}
    rows: dict[Any, dict] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            scores[row["id"]] = scores.get(row["id"], 0.0) + 1.0 / (k + rank)
            rows.setdefault(row["id"], row)
    best = sorted(scores, key=lambda key: (-scores[key], str(key)))[:limit]
    return [_hit(rows[key], scores[key]) for key in best]

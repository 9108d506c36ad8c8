"""How a memory search reaches PostgreSQL: the plan per user, the two legs, the fusion.

A user with up to EXACT_MAX memories is searched by an exact scan of their own
rows: at that size it is as fast as the index and never misses; both legs (the
vector one and BM25) go out in one pipelined round trip. Larger users go
through the HNSW index, and their two legs run at the same time on two
connections. The index is shared by all users, so pgvector filters by user
after the index scan; when that leaves fewer candidates than asked (a large
user among even larger ones), the query is repeated as an exact scan, so
results never go missing because of other users' rows. On pgvector >= 0.8 the
index scan itself can go on until enough of the user's rows are found
(`hnsw.iterative_scan`); measured, it is left off by default
(ITERATIVE_SCAN_AUTO). The index scan's settings (`hnsw.ef_search`, the scan
mode) are set on a pooled connection's session when it does not hold them yet
and remembered per connection (_SESSION_SCAN), so an index search is a single
statement. Every statement is filtered by `user_id`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Literal

import numpy as np

from panager.db.extension import supports_iterative_scan
from panager.db.pool import DictConnection, Pool
from panager.db.queries import one
from panager.services.memory.fusion import DEFAULT_FUSION, Fusion, fuse
from panager.services.memory.queries import (
    MEMORY_SQL,
    SET_EF_SEARCH,
    SET_ITERATIVE_SCAN,
    SET_SESSION_EF_SEARCH,
    SET_SESSION_ITERATIVE_SCAN,
    VECTOR_VERSION,
    MemoryHit,
    SearchSQL,
    hit,
)
from panager.services.memory.rerank import EndpointReranker, rerank_hits
from panager.services.memory.text import query_terms

CANDIDATES = 30  # per retriever, before fusion
EF_SEARCH = 200  # hnsw.ef_search: index candidates kept (recall@5 at 100k, index built by
# binding.VectorTable.create_index: 0.965 people's messages, 0.963-0.968 generated;
# BENCHMARKS.md "Memory")
EXACT_MAX = 3_000  # users with at most this many memories are scanned exactly (~2 ms)
SIZE_TTL = 60.0  # seconds a user's memory count is trusted for choosing the plan
SearchMode = Literal["hybrid", "vector", "text"]
Strategy = Literal["auto", "exact", "hnsw"]
IterativeScan = Literal["auto", "off", "strict_order", "relaxed_order"]
# pgvector >= 0.8 can continue an HNSW scan until LIMIT rows pass the user filter, instead
# of returning too few and leaving us a second, exact query. Measured (bench/filtered_search.py,
# BENCHMARKS.md): it removes that query at equal recall but shows no consistent latency win
# on our 2-core machine, so "auto" keeps today's plan; pass a mode to use it.
ITERATIVE_SCAN_AUTO = ""
# What each pooled connection's session holds for the index scan (hnsw.ef_search,
# hnsw.iterative_scan; "" = the server's default), as `_index_leg` set it: a search that finds
# its settings already there is one statement, not BEGIN, SET LOCAL, the query and COMMIT
# (~1 ms of the two processes' time per search at 100,000 memories, BENCHMARKS.md).
_SESSION_SCAN: weakref.WeakKeyDictionary[DictConnection, tuple[str, str]] = (
    weakref.WeakKeyDictionary()
)


def _by_similarity(rows: list[dict]) -> list[dict]:
    """Nearest first (a relaxed-order iterative scan may return rows slightly out of order)."""
    return sorted(rows, key=lambda r: -r["similarity"])


class Retrieval:
    """Searches one store; keeps per-process plan state (user sizes, the scan mode)."""

    def _exact_sql(self, params: dict) -> str:
        """The exact scan, with each hit's crowding when the search is hybrid."""
        return self.sql.search_exact_crowd if params.get("crowd") else self.sql.search_exact

    def __init__(
        self,
        pool: Pool,
        *,
        ef_search: int = EF_SEARCH,
        strategy: Strategy = "auto",
        iterative_scan: IterativeScan = "auto",
        sql: SearchSQL = MEMORY_SQL,
        fusion: Fusion = DEFAULT_FUSION,
        reranker: EndpointReranker | None = None,
    ) -> None:
        self.pool = pool
        self.reranker = reranker  # reorders a hybrid search's fused candidates (rerank.py)
        self.sql = sql  # the store searched: memories, or documents' chunks
        self.fusion = fusion  # how hybrid searches merge the legs (fusion.py)
        self.ef_search = ef_search
        self.strategy = strategy  # "auto": exact scan for small users, HNSW for large ones
        self.exact_fallbacks = 0  # HNSW scans starved by the user filter (then scanned exactly)
        self.iterative_scan = iterative_scan  # a mode is used only if the server's pgvector has it
        self._scan_mode: str | None = None  # resolved once: "" (none) or the mode to set
        self._sizes: dict[int, tuple[int, float]] = {}

    async def search(
        self, user_id: int, query: str, limit: int, mode: SearchMode, vector: np.ndarray | None
    ) -> list[MemoryHit]:
        """Run the legs (see `_legs`); hybrid results are fused as `self.fusion` says, then
        reranked when a reranker is set (its failure leaves the fused order)."""
        if mode == "text":
            params = self._params(user_id, query, limit, None, lexical=True, crowd=False)
            text_sql = self.sql.search_text_only
            rows = await self._lexical_leg(params, text_sql) if params["terms"] else []
            return [hit(r, r["rank"]) for r in rows[:limit]]
        if mode == "vector":
            params = self._params(user_id, query, limit, vector, lexical=False, crowd=False)
            vec_rows, _ = await self._legs(user_id, params, False)
            return [hit(r, r["similarity"]) for r in vec_rows[:limit]]
        vec_rows, text_rows = await self.candidates(
            user_id, query, vector, limit, crowd=self.fusion.crowd_weight > 0
        )
        if self.reranker is None:
            return fuse(vec_rows, text_rows, limit, self.fusion)
        fused = fuse(vec_rows, text_rows, len(vec_rows) + len(text_rows), self.fusion)
        return await rerank_hits(self.reranker, query, fused, limit)

    async def candidates(
        self, user_id: int, query: str, vector: np.ndarray | None, limit: int = CANDIDATES,
        *, crowd: bool = True,
    ) -> tuple[list[dict], list[dict]]:
        """Both legs' rows, best first (each at least CANDIDATES deep): the vector leg with
        `similarity` (and `crowd` when asked), the lexical one with `rank`, `coverage` and
        `similarity`. What a hybrid search fuses; benchmarks fuse them other ways."""
        params = self._params(user_id, query, limit, vector, lexical=True, crowd=crowd)
        return await self._legs(user_id, params, bool(params["terms"]))

    @staticmethod
    def _params(user_id: int, query: str, limit: int, vector: np.ndarray | None, *,
                lexical: bool, crowd: bool) -> dict:
        terms = query_terms(query) if lexical else []
        return {"user": user_id, "v": vector, "k": max(CANDIDATES, limit), "crowd": crowd,
                "terms": [t.text for t in terms], "pre": [t.prefix for t in terms]}

    async def _legs(self, user_id: int, params: dict, lexical: bool) -> tuple[list, list]:
        """(vector rows, BM25 rows). A user scanned exactly gets both queries in one pipelined
        round trip; for a user on the HNSW index (many memories, where each leg takes
        milliseconds) the legs run at the same time on two connections, each taken when its
        leg starts (no connection is held while waiting for another; when the plan is
        already known to be the index, no connection is taken just to look at it)."""
        if not self._known_to_use_index(user_id):
            async with self.pool.connection() as conn:
                if not await self._use_index(conn, user_id):
                    async with conn.pipeline():
                        vec_cur = await conn.execute(self._exact_sql(params), params)
                        text_sql = self.sql.search_text
                        text_cur = await conn.execute(text_sql, params) if lexical else None
                    return (await vec_cur.fetchall(),
                            await text_cur.fetchall() if text_cur else [])
                if not lexical:
                    return await self._index_leg(conn, params), []
        elif not lexical:
            return await self._index_leg(None, params), []
        vec_rows, text_rows = await asyncio.gather(
            self._index_leg(None, params), self._lexical_leg(params, self.sql.search_text)
        )
        return vec_rows, text_rows

    async def _index_leg(self, conn: DictConnection | None, params: dict) -> list[dict]:
        """The user's k nearest memories through the HNSW index (exact when it starves), on
        `conn` or a connection of its own."""
        if conn is None:
            async with self.pool.connection() as own:
                return await self._index_leg(own, params)
        wanted = (str(max(self.ef_search, params["k"])), await self._iterative(conn))
        had = _SESSION_SCAN.get(conn, ("", ""))
        sql = self.sql.search_ann_crowd if params.get("crowd") else self.sql.search_ann
        async with conn.pipeline():
            if had[0] != wanted[0]:
                await conn.execute(SET_SESSION_EF_SEARCH, (wanted[0],))
            if had[1] != wanted[1]:
                await conn.execute(SET_SESSION_ITERATIVE_SCAN, (wanted[1] or "off",))
            cur = await conn.execute(sql, params)
        _SESSION_SCAN[conn] = wanted  # only once all of it went through
        rows = _by_similarity(await cur.fetchall())
        return rows if len(rows) >= params["k"] else await self._starved(conn, params)

    async def _lexical_leg(self, params: dict, sql: str) -> list[dict]:
        """The BM25 ranking (queries.py), on a connection of its own."""
        async with self.pool.connection() as conn:
            return await (await conn.execute(sql, params)).fetchall()

    def _known_to_use_index(self, user_id: int) -> bool:
        """Whether the user is searched through the index, by the cached count alone (False
        when the count is missing or stale: `_use_index` then asks the database)."""
        if self.strategy != "auto":
            return self.strategy == "hnsw"
        size, at = self._sizes.get(user_id, (0, -SIZE_TTL))
        return time.monotonic() - at < SIZE_TTL and size > EXACT_MAX

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
            cur = await conn.execute(self.sql.bounded_count, (user_id, EXACT_MAX + 1))
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
        return await (await conn.execute(self._exact_sql(params), params)).fetchall()

    async def nearest(
        self, conn: DictConnection, user_id: int, vector: np.ndarray, k: int
    ) -> list[dict]:
        """The user's k nearest memories (inside a transaction): exact or HNSW, as in search."""
        params = {"user": user_id, "v": vector, "k": k}
        if not await self._use_index(conn, user_id):
            return await (await conn.execute(self.sql.search_exact, params)).fetchall()
        await self._set_index_scan(conn, k, await self._iterative(conn))
        rows = _by_similarity(await (await conn.execute(self.sql.search_ann, params)).fetchall())
        return rows if len(rows) >= k else await self._starved(conn, params)

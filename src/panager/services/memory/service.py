# Over 400 lines, kept whole: `MemoryService` (save, update, recall, history); retrieval, fusion,
# rerank and queries are already apart.
"""Per-user long-term memory on pgvector: save, update, hybrid search, list, forget, clear.

Retrieval is hybrid: nearest vectors (HNSW or an exact scan, cosine) and a
BM25 ranking over the memories' words ('simple' tsvector, so Korean works; see
text.py and queries.py), merged by fusion.py; retrieval.py runs the two legs
and picks the plan per user. Every statement is filtered by `user_id`; nothing
here can return another user's rows.

Saving never silently replaces a different fact. Only a true duplicate (the
same words in the same order, up to case, punctuation and spacing) is merged.
Anything else is stored, and memories whose similarity reaches the related
threshold (per embedder; `memory_dedupe_threshold` overrides it) come back with
the result, so the model can `update` or `forget` the old one when the user
was correcting it. `update` keeps the replaced text in `memories.history`.

Recall (the memories injected into a turn) keeps only hits whose similarity to
the message reaches the recall threshold and, for e5, stands a margin above the
median of the search's candidates; both measured per embedder on
bench/memory_recall.py; `memory_recall_threshold` overrides the threshold.
"""

from __future__ import annotations

import hashlib
import logging
import re
import statistics
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg

from panager.clock import Clock, SystemClock
from panager.db.locks import SAVE_LOCK_NAMESPACE
from panager.db.pool import DictConnection, Pool
from panager.db.queries import one
from panager.embeddings import Embedder
from panager.services.memory.binding import (
    EmbedderChanged,
    choose_embedder,
    ensure_bound,
    read_meta,
)
from panager.services.memory.fusion import fuse
from panager.services.memory.gate import GATES, Gate, features
from panager.services.memory.neighbours import with_neighbours
from panager.services.memory.queries import (
    BY_PREFIX,
    CLEAR,
    COUNT,
    DELETE,
    GET,
    HAS_ANY,
    HISTORY,
    INSERT,
    LIST,
    REPLACE,
    SAVE_LOCK,
    TOUCH,
    MemoryHit,
    hit,
)
from panager.services.memory.rerank import EndpointReranker, reranker_from_settings
from panager.services.memory.retrieval import (
    CANDIDATES,
    EF_SEARCH,
    IterativeScan,
    Retrieval,
    SearchMode,
    Strategy,
)
from panager.services.memory.text import (
    MAX_CONTENT_CHARS,
    MemoryInputError,
    check_source,
    clean_category,
    clean_content,
    fit_content,
    parse_memory_id,
    same_text,
)

__all__ = ["MemoryHit", "MemoryInputError", "MemoryService", "SaveResult"]

log = logging.getLogger(__name__)

MAX_SEARCH_LIMIT = 50
QUERY_CACHE_SIZE = 256
MAX_RELATED = 3  # related memories named in a save's result
RELATED_THRESHOLDS = {  # similarity at which an existing memory is "related" to a save:
    # facts of the same shape ("…March 3" / "…March 13", sister/brother) score 0.95–0.98 with
    # e5 and 0.84–0.98 with MiniLM; unrelated memories at most 0.87 and 0.37 (docs/memory.md).
    # e5: the highest bar still listing ≥ 95% of the generated dialogues' corrections
    # (0.970 listed at 0.95); at 0.92, 39% of saves of people's chat turns listed some.
    "local:multilingual-e5-small-q4/passage": 0.95,
    "local:multilingual-e5-small-q4": 0.92,
    "local:all-minilm-l6-v2-int8": 0.80,
}
DEFAULT_RELATED_THRESHOLD = 0.80
RECALL_THRESHOLDS = {  # similarity to the message a memory needs to be injected (measured)
    "local:multilingual-e5-small-q4/passage": 0.795,  # with the margin and RECALL_LIMIT: the
    # highest recall at precision ≥ 0.35 keeping ≥ 75% of unrelated messages quiet (held out)
    "local:multilingual-e5-small-q4": 0.86,
    "local:all-minilm-l6-v2-int8": 0.40,
}
DEFAULT_RECALL_THRESHOLD = 0.35
# ...and how far above the median similarity of the search's candidates it must stand.
# The more memories a user has, the closer the nearest one is to any message: with ~2,000
# chat turns per user, 71% of unrelated messages found one above e5's bar of 0.83. Standing
# out from the user's own candidates does not grow with the store (bench/memory_recall.py).
RECALL_MARGINS = {"local:multilingual-e5-small-q4/passage": 0.03}
MARGIN_MIN_CANDIDATES = 10  # fewer candidates than this: the bar alone decides
RECALL_LIMIT = 2  # memories injected at most per turn (memory_inject_limit's default)

class MemoryUnavailable(RuntimeError):
    """Memory cannot be used right now (embedder unreachable, store re-embedded)."""


def seen_digest(text: str) -> str:
    """What an edit form carries to say which stored text it showed in full."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SaveResult:
    """A saved memory; `merged` when it was a duplicate of one already stored (that one is
    returned); `related` lists existing memories close to it (best first)."""

    memory: MemoryHit
    merged: bool = False
    related: tuple[MemoryHit, ...] = field(default_factory=tuple)


class MemoryService:
    """Long-term memories; every method takes the owner's user id and touches only their rows."""

    def __init__(
        self,
        pool: Pool,
        embedder: Embedder,
        *,
        clock: Clock | None = None,
        dedupe_threshold: float | None = None,
        recall_threshold: float | None = None,
        ef_search: int = EF_SEARCH,
        strategy: Strategy = "auto",
        iterative_scan: IterativeScan = "auto",
        reranker: EndpointReranker | None = None,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.clock = clock or SystemClock()
        if dedupe_threshold is None:
            dedupe_threshold = RELATED_THRESHOLDS.get(embedder.name, DEFAULT_RELATED_THRESHOLD)
        explicit_bar = recall_threshold is not None
        if recall_threshold is None:
            recall_threshold = RECALL_THRESHOLDS.get(embedder.name, DEFAULT_RECALL_THRESHOLD)
        self.dedupe_threshold = dedupe_threshold  # the related threshold (config name kept)
        self.recall_threshold = recall_threshold
        self.recall_margin = RECALL_MARGINS.get(embedder.name, 0.0)
        # the learned gate fitted for this embedder, unless the operator set a bar
        self.gate = None if explicit_bar else GATES.get(embedder.name)
        self.retrieval = Retrieval(
            pool, ef_search=ef_search, strategy=strategy, iterative_scan=iterative_scan,
            reranker=reranker,
        )
        self._bound = False  # the store is known to hold this embedder's vectors
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @classmethod
    async def create(cls, pool: Pool, settings: Any, **kwargs: Any) -> MemoryService:
        """A service with the configured embedder, checked against the stored vectors."""
        config = settings.runtime
        if "memory_dedupe_threshold" in config.model_fields_set:
            kwargs.setdefault("dedupe_threshold", config.memory_dedupe_threshold)
        if config.memory_recall_threshold is not None:
            kwargs.setdefault("recall_threshold", config.memory_recall_threshold)
        kwargs.setdefault("reranker", reranker_from_settings(settings))
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

    async def _embed(self, texts: list[str], query: bool = False) -> list[np.ndarray]:
        embed = self.embedder.embed
        if query:  # embedders without roles (e.g. test doubles) embed queries as passages
            embed = getattr(self.embedder, "embed_queries", embed)
        try:
            vectors = await embed(texts)
        except Exception as exc:
            log.warning("embedding with %s failed: %s", self.embedder.name, type(exc).__name__)
            raise MemoryUnavailable(
                f"the embedding model ({self.embedder.name}) failed ({type(exc).__name__}); "
                "try again later."
            ) from exc
        return [np.asarray(v, dtype=np.float32) for v in vectors]

    async def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Passage vectors of `texts` with the store's embedder (MemoryUnavailable on failure)."""
        return await self._embed(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        """The query's vector (recently used queries are cached: one embedding per text)."""
        cached = self._query_cache.get(text)
        if cached is not None:
            self._query_cache.move_to_end(text)
            return cached
        vector = (await self._embed([text], query=True))[0]
        self._query_cache[text] = vector
        if len(self._query_cache) > QUERY_CACHE_SIZE:
            self._query_cache.popitem(last=False)
        return vector

    # -- saving ------------------------------------------------------------------------------

    async def save(
        self,
        user_id: int,
        content: str,
        category: str = "general",
        source: str = "tool",
        *,
        tainted: bool = False,
    ) -> SaveResult:
        """Store a memory (a true duplicate merges into the stored one); see SaveResult.

        `tainted`: written in a model call that had read outside content (a merge keeps
        the stored memory's flag only when both are tainted)."""
        content, category = clean_content(content), clean_category(category)
        check_source(source)
        vector = (await self._embed([content]))[0]
        async with self._write(user_id, len(vector)) as conn:
            result = await self._store(
                conn, user_id, content, category, source, vector, tainted=tainted
            )
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

        Blank entries are skipped and over-long ones cut to MAX_CONTENT_CHARS; true duplicates
        (of stored memories or of each other) merge, everything else is stored.
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
        vector: np.ndarray, *, tainted: bool = False,
    ) -> SaveResult:
        params = {"user": user_id, "content": content, "category": category, "source": source,
                  "v": vector, "now": self.clock.now(), "tainted": tainted}
        nearest = await self.retrieval.nearest(conn, user_id, vector, MAX_RELATED + 2)
        same = next((r for r in nearest if same_text(r["content"], content)), None)
        if same is not None:
            row = one(await (await conn.execute(TOUCH, {**params, "id": same["id"]})).fetchone())
            return SaveResult(hit(row, same["similarity"]), merged=True)
        related = tuple(
            hit(r, r["similarity"]) for r in nearest if r["similarity"] >= self.dedupe_threshold
        )[:MAX_RELATED]
        row = one(await (await conn.execute(INSERT, params)).fetchone())
        return SaveResult(hit(row), related=related)

    async def update(
        self,
        user_id: int,
        memory_id: str,
        content: str,
        category: str | None = None,
        *,
        tainted: bool = False,
    ) -> SaveResult | None:
        """Replace the text of the user's memory (re-embedded; the old text kept in its
        history); None when no such memory is theirs. `tainted` as in `save`."""
        memory_uuid, content = parse_memory_id(memory_id), clean_content(content)
        vector = (await self._embed([content]))[0]
        async with self._write(user_id, len(vector)) as conn:
            params = {"user": user_id, "id": memory_uuid, "content": content, "v": vector,
                      "now": self.clock.now(), "tainted": tainted,
                      "category": clean_category(category) if category is not None else None}
            row = await (await conn.execute(REPLACE, params)).fetchone()
        return SaveResult(hit(row)) if row else None

    async def history(self, user_id: int, memory_id: str) -> list[dict] | None:
        """The texts updates replaced, oldest first (None when no such memory is theirs)."""
        async with self.pool.connection() as conn:
            row = await (
                await conn.execute(HISTORY, (user_id, parse_memory_id(memory_id)))
            ).fetchone()
        return None if row is None else list(row["history"])

    # -- searching ---------------------------------------------------------------------------

    async def search(
        self,
        user_id: int,
        query: str,
        limit: int = 5,
        *,
        mode: SearchMode = "hybrid",
        vector: np.ndarray | None = None,
        neighbours: bool = False,
    ) -> list[MemoryHit]:
        """The user's memories most relevant to `query`, best first; with `neighbours`, each
        hit followed by the memories saved right before and after it in the same
        conversation (neighbours.py), all within `limit`."""
        query = (query or "").strip()
        if not query:
            raise MemoryInputError("query is empty; say what to look for.")
        limit = max(1, min(int(limit), MAX_SEARCH_LIMIT))
        if not self._bound and not await self._has_any(user_id):
            return []  # nothing stored yet: the column may not have this embedder's size
        if mode != "text" and vector is None:
            vector = await self.embed_query(query)
        try:
            hits = await self.retrieval.search(user_id, query, limit, mode, vector)
        except psycopg.errors.DataException as exc:
            log.warning("memory search failed: %s", exc)
            raise MemoryUnavailable(
                "the stored memories use another embedding model (re-embedded since this "
                "process started); restart Panager."
            ) from exc
        if neighbours and hits:
            async with self.pool.connection() as conn:
                hits = await with_neighbours(conn, user_id, hits, limit)
        return hits

    async def _has_any(self, user_id: int) -> bool:
        async with self.pool.connection() as conn:
            return one(await (await conn.execute(HAS_ANY, (user_id,))).fetchone())["any"]

    async def recall(
        self, user_id: int, query: str, limit: int | None = None
    ) -> list[MemoryHit]:
        """Memories relevant enough to inject for this message (one embedding call; none
        when the user has no memories or nothing is relevant): of the best hits, those the
        learned gate (gate.py) passes for an embedder it was fitted for, at most `limit`
        (None: the gate's own); else, of the best `limit` (None: RECALL_LIMIT), those whose
        similarity reaches the recall threshold and stands `recall_margin` above the median
        similarity of the search's candidates."""
        if limit is not None and limit <= 0:
            return []
        if not (query or "").strip() or not await self._has_any(user_id):
            return []
        if self.gate is not None:
            return await self._gated(user_id, query[:MAX_CONTENT_CHARS], self.gate, limit)
        limit = RECALL_LIMIT if limit is None else limit
        # The same SQL as a search for `limit` (each leg takes CANDIDATES rows either way).
        hits = await self.search(user_id, query[:MAX_CONTENT_CHARS], max(limit, CANDIDATES))
        floor = self.recall_threshold
        if self.recall_margin and len(hits) >= MARGIN_MIN_CANDIDATES:
            median = statistics.median(h.similarity or 0.0 for h in hits)
            floor = max(floor, median + self.recall_margin)
        return [h for h in hits[:limit] if (h.similarity or 0.0) >= floor]

    async def _gated(
        self, user_id: int, query: str, gate: Gate, limit: int | None
    ) -> list[MemoryHit]:
        """The gate over the fused candidates, as it was fitted (no reranking); under
        MARGIN_MIN_CANDIDATES candidates the bar, as without a gate."""
        vector = await self.embed_query(query)
        vec_rows, text_rows = await self.retrieval.candidates(user_id, query, vector)
        hits = fuse(vec_rows, text_rows, CANDIDATES, self.retrieval.fusion)
        if len(hits) < MARGIN_MIN_CANDIDATES:  # a small store: the gate was fitted on large
            cap = RECALL_LIMIT if limit is None else limit  # ones; the bar alone decides
            return [h for h in hits[:cap] if (h.similarity or 0.0) >= self.recall_threshold]
        look = gate.limit if limit is None else min(limit, gate.limit)
        rows = features(hits, vec_rows, text_rows, look)
        return [h for h, x in zip(hits, rows, strict=False) if gate.score(x) >= gate.threshold]

    # -- listing and forgetting --------------------------------------------------------------

    async def list(self, user_id: int, limit: int = 20, offset: int = 0) -> list[MemoryHit]:
        """The user's memories, newest first."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(LIST, (user_id, limit, offset))).fetchall()
        return [hit(r) for r in rows]

    async def count(self, user_id: int) -> int:
        """How many memories the user has."""
        async with self.pool.connection() as conn:
            return one(await (await conn.execute(COUNT, (user_id,))).fetchone())["n"]

    async def get(self, user_id: int, memory_id: str) -> MemoryHit | None:
        """The user's memory with this id (None for unknown ids and other users' ids)."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET, (user_id, parse_memory_id(memory_id)))).fetchone()
        return hit(row) if row else None

    async def find(self, user_id: int, ref: str) -> MemoryHit | None:
        """A memory by full id or by a unique prefix of at least 6 characters (as /memory shows)."""
        ref = (ref or "").strip().lower()
        if re.fullmatch(r"[0-9a-f]{6,35}", ref):
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(BY_PREFIX, (user_id, ref + "%"))).fetchall()
            if len(rows) > 1:
                raise MemoryInputError(f"{ref!r} matches several memories; give more characters.")
            return hit(rows[0]) if rows else None
        return await self.get(user_id, ref)

    async def edit(
        self,
        user_id: int,
        memory_id: str,
        content: str,
        category: str | None = None,
        *,
        seen: str | None = None,
    ) -> MemoryHit | None:
        """Replace a memory's text (re-embedded, the old text kept in its history) and
        category, as `update` does (the web page); None when it is not theirs.

        An outside-content mark is cleared only when the person changed the text having seen
        the stored text in full (`seen`: `seen_digest` of the text their form showed, equal
        to what is stored); a category-only edit, or an edit of a text they did not see,
        keeps it."""
        current = await self.get(user_id, memory_id)
        if current is None:
            return None
        saw_it = seen == seen_digest(current.content)
        rewritten = saw_it and clean_content(content) != current.content
        result = await self.update(
            user_id, memory_id, content, category, tainted=current.tainted and not rewritten
        )
        return result.memory if result is not None else None

    async def forget(self, user_id: int, memory_id: str) -> MemoryHit | None:
        """Delete the user's memory; None when no such memory is theirs."""
        async with self._write(user_id) as conn:
            row = await (
                await conn.execute(DELETE, (user_id, parse_memory_id(memory_id)))
            ).fetchone()
        return hit(row) if row else None

    async def clear(self, user_id: int) -> int:
        """Delete all of the user's memories; returns how many."""
        async with self._write(user_id) as conn:
            return (await conn.execute(CLEAR, (user_id,))).rowcount



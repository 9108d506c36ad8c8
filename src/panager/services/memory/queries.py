"""The memory store's SQL, the hit type, and rank fusion.

## The lexical leg: BM25 in PostgreSQL

A memory is a candidate when its `content_tsv` holds any query term (the GIN
index finds them); candidates are scored with Okapi BM25 (k1 = 1.2, b = 0.75):

    score = Σ idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))
    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))

N, df and avgdl are the user's own (tables `memory_stats` and `memory_terms`,
kept exact by triggers, see migration 0008); dl is the number of distinct
lexemes of the memory. A prefix term ('renew':*) counts every lexeme it starts
(its df is the sum of theirs, at most N). Candidates come from the rarest
terms first (always the rarest), adding terms while their document
frequencies sum to at most CANDIDATE_ROWS; the other terms still score the
candidates. Scoring costs ~15 µs per candidate, so when even the rarest term
is in more than CANDIDATE_ROWS memories (only for users with very many), the
newest CANDIDATE_ROWS of its memories are scored. This keeps the lexical leg at
a few milliseconds for a user with 100,000 memories, where a common word such
as "work" would otherwise make thousands of rows candidates. Every query is filtered by `user_id`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

RRF_K = 60
BM25_K1, BM25_B = 1.2, 0.75
CANDIDATE_ROWS = 300

COLUMNS = (
    "id, content, category, source, created_at, updated_at, "
    "history -> -1 ->> 'content' AS previous"
)
M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in COLUMNS.split(", "))
SEARCH_ANN = f"""
SELECT {COLUMNS}, 1 - (embedding <=> %(v)s) AS similarity
FROM memories WHERE user_id = %(user)s
ORDER BY embedding <=> %(v)s LIMIT %(k)s
"""  # only the indexed expression: any tie-break column would stop pgvector using the index
SEARCH_EXACT = f"""
SELECT {COLUMNS}, 1 - (embedding <=> %(v)s) AS similarity
FROM memories WHERE user_id = %(user)s
ORDER BY (embedding <=> %(v)s) + 0, updated_at DESC, id LIMIT %(k)s
"""  # "+ 0": not the indexed expression, so the planner scans the user's rows exactly
_BM25 = f"""
WITH q AS (
    SELECT term COLLATE "C" AS term, pre
    FROM unnest(%(terms)s::text[], %(pre)s::bool[]) AS t(term, pre)
), st AS (
    SELECT n, total_len::float8 / greatest(n, 1) AS avgdl
    FROM memory_stats WHERE user_id = %(user)s AND n > 0
), w AS (
    SELECT q.term, q.pre, least(sum(d.df), st.n) AS df,
           ln(1 + (st.n - least(sum(d.df), st.n) + 0.5)::float8
                  / (least(sum(d.df), st.n) + 0.5)) AS idf
    FROM q CROSS JOIN st
    JOIN memory_terms d ON d.user_id = %(user)s AND d.lexeme >= q.term
         AND d.lexeme <= CASE WHEN q.pre THEN q.term || chr(1114111) ELSE q.term END
    GROUP BY q.term, q.pre, st.n
), pick AS (
    SELECT term, pre, df, sum(df) OVER (ORDER BY df, term) - df AS before FROM w
), tq AS (
    SELECT to_tsquery('simple', string_agg(
               quote_literal(term) || CASE WHEN pre THEN ':*' ELSE '' END, ' | ')) AS tsq
    FROM pick WHERE before = 0 OR before + df <= {CANDIDATE_ROWS}
), scored AS (
    SELECT m.id, w.idf, length(m.content_tsv) AS dl,
           sum(coalesce(array_length(u.positions, 1), 1)) AS tf
    FROM (SELECT c.id, c.content_tsv FROM tq, memories c
          WHERE c.user_id = %(user)s AND c.content_tsv @@ tq.tsq
          ORDER BY c.updated_at DESC, c.id LIMIT {CANDIDATE_ROWS}) AS m,
         unnest(m.content_tsv) AS u, w
    WHERE u.lexeme = w.term OR (w.pre AND starts_with(u.lexeme, w.term))
    GROUP BY m.id, w.term, w.idf, m.content_tsv
), ranked AS (
    SELECT s.id, sum(s.idf * s.tf * {BM25_K1 + 1}
                     / (s.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * s.dl / st.avgdl))) AS rank,
           sum(s.idf) / (SELECT sum(idf) FROM w) AS coverage
    FROM scored s CROSS JOIN st GROUP BY s.id
)
SELECT {M_COLUMNS}, r.rank, r.coverage, {{similarity}} AS similarity
FROM ranked r JOIN memories m ON m.id = r.id
ORDER BY r.rank DESC, m.updated_at DESC, m.id LIMIT %(k)s
"""
SEARCH_TEXT = _BM25.format(similarity="1 - (m.embedding <=> %(v)s)")
SEARCH_TEXT_ONLY = _BM25.format(similarity="NULL::float8")
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
TOUCH = f"""
UPDATE memories SET updated_at = %(now)s WHERE id = %(id)s AND user_id = %(user)s
RETURNING {COLUMNS}
"""
REPLACE = f"""
UPDATE memories SET content = %(content)s, embedding = %(v)s, updated_at = %(now)s,
       category = COALESCE(%(category)s, category),
       history = history || jsonb_build_array(jsonb_build_object(
           'content', content, 'category', category, 'replaced_at', %(now)s))
WHERE id = %(id)s AND user_id = %(user)s
RETURNING {COLUMNS}
"""
LIST = f"""
SELECT {COLUMNS} FROM memories WHERE user_id = %s
ORDER BY created_at DESC, id LIMIT %s OFFSET %s
"""
COUNT = "SELECT count(*) AS n FROM memories WHERE user_id = %s"
GET = f"SELECT {COLUMNS} FROM memories WHERE user_id = %s AND id = %s"
HISTORY = "SELECT history FROM memories WHERE user_id = %s AND id = %s"
BY_PREFIX = f"""
SELECT {COLUMNS} FROM memories WHERE user_id = %s AND id::text LIKE %s ORDER BY id LIMIT 2
"""
DELETE = f"DELETE FROM memories WHERE user_id = %s AND id = %s RETURNING {COLUMNS}"
CLEAR = "DELETE FROM memories WHERE user_id = %s"


@dataclass(frozen=True)
class MemoryHit:
    """One stored memory, with its retrieval score (0 when not from a search).

    `similarity` is the cosine similarity to the query (None when not searched by
    meaning); `previous` is the text the last update replaced.
    """

    id: str
    content: str
    category: str
    created_at: datetime
    updated_at: datetime
    score: float = 0.0
    source: str = "tool"
    similarity: float | None = None
    previous: str | None = None


def hit(row: dict, score: float = 0.0) -> MemoryHit:
    """A MemoryHit from a row of COLUMNS (plus `similarity` when the query computed it)."""
    similarity = row.get("similarity")
    return MemoryHit(
        id=str(row["id"]),
        content=row["content"],
        category=row["category"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        score=float(score),
        source=row["source"],
        similarity=None if similarity is None else float(similarity),
        previous=row.get("previous"),
    )


def _tie_key(row: dict) -> tuple:
    """Deterministic order among equal scores: newer first, then by text, then by id."""
    updated = row.get("updated_at")
    stamp = -updated.timestamp() if isinstance(updated, datetime) else 0.0
    return (stamp, str(row.get("content", "")), str(row["id"]))


def rrf_fuse(rankings: Sequence[Sequence[dict]], limit: int, k: int = RRF_K) -> list[MemoryHit]:
    """Reciprocal rank fusion: score = Σ w/(k + rank) over the rankings a memory appears in.

    w is 1, except for a lexical hit (a row with `coverage`: the share of the query's
    idf its words match), where it is coverage²: a memory that matches only a common
    word of the query ("Caroline: Thanks!" for "What medication is Caroline on?")
    barely counts. On bench/memory_recall.py this lifted hybrid recall@10 from 0.63 to
    0.74 over plain RRF (BENCHMARKS.md). Ties go to the memory with the better best
    rank, then as `_tie_key` says (never to a random id alone, so a search returns the
    same order every time).
    """
    scores: dict[Any, float] = {}
    best: dict[Any, int] = {}
    rows: dict[Any, dict] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, start=1):
            key = row["id"]
            weight = 1.0 if row.get("coverage") is None else float(row["coverage"]) ** 2
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            best[key] = min(best.get(key, rank), rank)
            if rows.get(key, {}).get("similarity") is None:
                rows[key] = row
    order = sorted(scores, key=lambda key: (-scores[key], best[key], _tie_key(rows[key])))
    return [hit(rows[key], scores[key]) for key in order[:limit]]

"""The memory store's SQL and the hit type (fusion of the two legs: fusion.py).

## The lexical leg: BM25 in PostgreSQL

A memory is a candidate when its `content_tsv` holds any query term (the GIN
index finds them); candidates are scored with Okapi BM25 (k1 = 1.2, b = 0.75):

    score = Σ idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·dl/avgdl))
    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))

N, df and avgdl are the user's own (tables `memory_stats` and `memory_terms`,
kept exact by triggers, see migration 0008); dl is the number of distinct
lexemes of the memory. A prefix term ('renew':*) counts every lexeme it starts
(its df is the sum of theirs, at most N).

Candidates: scoring costs ~15 µs per candidate, and reading a candidate's row
a few more (rows are wide: they hold the vector), so at most CANDIDATE_ROWS
rows are read, chosen so that the best-scoring memories are among them:

- usually: memories holding any of the rarest terms, taken rarest first while
  their document frequencies sum to at most CANDIDATE_ROWS (always the
  rarest); the newest CANDIDATE_ROWS of them;
- when even the rarest term is in more than CANDIDATE_ROWS memories (only
  users with very many: a name said thousands of times): memories holding
  both of the two rarest terms (the GIN index intersects their posting lists
  without reading rows; the one term of a one-term query), the first
  CANDIDATE_ROWS the index returns, unsorted. Sorting all of the rarest term's
  rows by date cost ~9 ms at 100,000 memories (BENCHMARKS.md); a memory with
  only one of the two terms is left to the vector leg there.

The other terms still score the candidates. The ranking is cut to k before
the full rows are read. Every query is filtered by `user_id`.

## What a search reads (BENCHMARKS.md, "memory_search at 1,000 memories")

- The exact vector leg sorts only ids and distances of the user's rows; the k
  best rows are read whole afterwards. Its crowding term (hybrid searches)
  compares the k hits' vectors with each other, copied once out of their TOAST
  storage: a vector stored out of line would otherwise be fetched again for
  each of the 2·k·(k − 1) comparisons. The HNSW leg reads its k rows in the
  index scan itself (the scan fetches each returned row anyway); joining back
  by id, as the exact leg does, cost ~1 ms more at 100,000 memories.
- The lexical leg looks each query term up in the user's lexicon once (`hits`:
  an index range scan per term, forced by LATERAL … OFFSET 0, so a table whose
  statistics are not gathered yet cannot turn it into a scan of the whole
  lexicon). The GIN index is then asked for those lexemes themselves, not for
  the prefix, when a term starts at most EXPAND_MAX of them: a prefix
  (partial-match) scan reads every entry it starts into a bitmap before it can
  intersect, 3.0 ms against 0.4 ms for 'colleague':* & 'live':* at 100,000
  memories; beyond ~10 lexemes the lookups cost more than the scan. Each
  candidate keeps only its lexemes that matched (setweight + ts_filter), and
  those are matched to the terms with one hash join (an OR of equality and
  prefix tests cannot be hashed: it compared every lexeme of every candidate
  with every term). Together: the leg's execution 5.7 → 3.3 ms p50 there
  (BENCHMARKS.md, "The lexical leg's prefix lookups, its scoring, and the index
  leg's settings").
- Sums are taken in term order, so the same memories give the same floats
  whichever plan runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

BM25_K1, BM25_B = 1.2, 0.75
CANDIDATE_ROWS = 300
EXPAND_MAX = 8  # a prefix term starting at most this many of the user's lexemes: looked up as them
CROWD_K = 5  # crowding: mean similarity to this many nearest fellow candidates (fusion.py)

COLUMNS = (
    "id, content, category, source, created_at, updated_at, tainted, "
    "history -> -1 ->> 'content' AS previous, history -> -1 -> 'tainted' AS previous_mark"
)


@dataclass(frozen=True)
class StoreTables:
    """Where a searchable store lives: its rows, its BM25 statistics, the columns a hit reads
    (`id, content, category, source, created_at, updated_at, tainted, previous,
    previous_mark`)."""

    table: str
    stats: str
    terms: str
    columns: str
    m_columns: str  # the same, each prefixed with the row alias `m.`
    # rows left out of every search while this column is set (memories: superseded ones)
    hidden_by: str | None = None


@dataclass(frozen=True)
class SearchSQL:
    """The search statements of one store (the same plan and ranking for every store)."""

    search_ann: str
    search_exact: str
    search_ann_crowd: str
    search_exact_crowd: str
    search_text: str
    search_text_only: str
    bounded_count: str


def _quoted(column: str) -> str:
    """SQL for `column` as one quoted tsquery operand, taken as it is (to_tsquery would parse
    it again; the lexicon's lexemes are already what the index holds)."""
    return f"'''' || replace(replace({column}, chr(92), chr(92) || chr(92)), '''', '''''') || ''''"


def search_sql(store: StoreTables) -> SearchSQL:
    """The search statements for `store` (memories, or a document's chunks)."""
    table, stats, terms = store.table, store.stats, store.terms
    columns, m_columns = store.columns, store.m_columns
    live = f" AND {store.hidden_by} IS NULL" if store.hidden_by else ""
    live_c = f" AND c.{store.hidden_by} IS NULL" if store.hidden_by else ""
    SEARCH_ANN = f"""
    SELECT {columns}, 1 - (embedding <=> %(v)s) AS similarity
    FROM {table} WHERE user_id = %(user)s{live}
    ORDER BY embedding <=> %(v)s LIMIT %(k)s
    """  # only the indexed expression: any tie-break column would stop pgvector using the index
    SEARCH_EXACT = f"""
    WITH top AS MATERIALIZED (
        SELECT id, (embedding <=> %(v)s) + 0 AS d FROM {table}
        WHERE user_id = %(user)s{live}
        ORDER BY d, updated_at DESC, id LIMIT %(k)s
    )
    SELECT {m_columns}, 1 - t.d AS similarity
    FROM top t JOIN {table} m ON m.id = t.id
    ORDER BY t.d, m.updated_at DESC, m.id
    """  # "+ 0": not the indexed expression, so the planner scans the user's rows exactly;
    # only ids and distances are sorted, the k rows are read whole after
    _CROWD = f"""
    SELECT n.id, n.content, n.category, n.source, n.created_at, n.updated_at, n.tainted,
           n.previous, n.previous_mark, n.similarity, coalesce((
               SELECT avg(s) FROM (
                   SELECT 1 - (n.e <=> o.e) AS s FROM near o
                   WHERE o.id <> n.id ORDER BY s DESC LIMIT {CROWD_K}) AS nearest), 0) AS crowd
    FROM near n ORDER BY n.similarity DESC, n.updated_at DESC, n.id
    """  # each hit's crowding (fusion.py) over `near`, whose `e` is the vector copied once out
    # of TOAST storage (see the module docstring)
    SEARCH_ANN_CROWD = f"""
    WITH near AS MATERIALIZED (
        SELECT {columns}, embedding::real[]::vector AS e, 1 - (embedding <=> %(v)s) AS similarity
        FROM {table} WHERE user_id = %(user)s{live}
        ORDER BY embedding <=> %(v)s LIMIT %(k)s
    )""" + _CROWD  # the index scan reads the k rows it returns whole anyway: no join back
    SEARCH_EXACT_CROWD = f"""
    WITH top AS MATERIALIZED (
        SELECT id, (embedding <=> %(v)s) + 0 AS d FROM {table} WHERE user_id = %(user)s{live}
        ORDER BY d, updated_at DESC, id LIMIT %(k)s
    ), near AS MATERIALIZED (
        SELECT {m_columns}, m.embedding::real[]::vector AS e, 1 - t.d AS similarity
        FROM top t JOIN {table} m ON m.id = t.id
    )""" + _CROWD  # only ids and distances are sorted, the k rows are read whole after
    _BM25 = f"""
    WITH q AS (
        SELECT term COLLATE "C" AS term, pre
        FROM unnest(%(terms)s::text[], %(pre)s::bool[]) AS t(term, pre)
    ), st AS (
        SELECT n, total_len::float8 / greatest(n, 1) AS avgdl
        FROM {stats} WHERE user_id = %(user)s AND n > 0
    ), hits AS MATERIALIZED (
        SELECT q.term, q.pre, d.lexeme, d.df
        FROM q CROSS JOIN LATERAL (
            SELECT d.lexeme, d.df FROM {terms} d
            WHERE d.user_id = %(user)s AND d.lexeme >= q.term
              AND d.lexeme <= CASE WHEN q.pre THEN q.term || chr(1114111) ELSE q.term END
            OFFSET 0
        ) AS d
    ), w AS (
        SELECT h.term, h.pre, least(sum(h.df), st.n) AS df,
               ln(1 + (st.n - least(sum(h.df), st.n) + 0.5)::float8
                      / (least(sum(h.df), st.n) + 0.5)) AS idf,
               count(*) AS lexemes,
               string_agg({_quoted('h.lexeme')}, ' | ' ORDER BY h.lexeme) AS alternatives
        FROM hits h CROSS JOIN st
        GROUP BY h.term, h.pre, st.n
    ), pick AS (
        SELECT term, pre, df, sum(df) OVER (ORDER BY df, term) - df AS before,
               row_number() OVER (ORDER BY df, term) AS nth,
               CASE WHEN lexemes <= {EXPAND_MAX} THEN '(' || alternatives || ')'
                    ELSE {_quoted('term')} || ':*' END AS lit
        FROM w
    ), tq AS (
        SELECT (string_agg(lit, ' | ') FILTER (
                   WHERE before = 0 OR before + df <= {CANDIDATE_ROWS}))::tsquery AS rare,
               (string_agg(lit, ' & ') FILTER (WHERE nth <= 2))::tsquery AS rarest_two,
               min(df) > {CANDIDATE_ROWS} AS common
        FROM pick
    ), cand AS (
        (SELECT c.id, c.updated_at, c.content_tsv, length(c.content_tsv) AS dl
         FROM tq, {table} c
         WHERE NOT (SELECT common FROM tq) AND c.user_id = %(user)s AND c.content_tsv @@ tq.rare
           {live_c}
         ORDER BY c.updated_at DESC, c.id LIMIT {CANDIDATE_ROWS})
        UNION ALL
        (SELECT c.id, c.updated_at, c.content_tsv, length(c.content_tsv) AS dl
         FROM tq, {table} c
         WHERE (SELECT common FROM tq) AND c.user_id = %(user)s{live_c}
           AND c.content_tsv @@ tq.rarest_two
         LIMIT {CANDIDATE_ROWS})
    ), lex AS MATERIALIZED (
        SELECT h.lexeme, w.term, w.pre, w.idf
        FROM hits h JOIN w ON w.term = h.term AND w.pre = h.pre
    ), scored AS (
        SELECT m.id, m.updated_at, l.term, l.pre, l.idf, m.dl,
               sum(coalesce(array_length(u.positions, 1), 1)) AS tf
        FROM cand AS m, lex AS l,
             unnest(ts_filter(setweight(m.content_tsv, 'A', (SELECT array_agg(lexeme) FROM lex)),
                              '{{{{a}}}}')) AS u
        WHERE u.lexeme = l.lexeme
        GROUP BY m.id, m.updated_at, l.term, l.pre, l.idf, m.dl
    ), ranked AS (
        SELECT s.id, sum(s.idf * s.tf * {BM25_K1 + 1}
                         / (s.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * s.dl / st.avgdl))
                         ORDER BY s.term, s.pre) AS rank,
               sum(s.idf ORDER BY s.term, s.pre)
                   / (SELECT sum(idf ORDER BY term, pre) FROM w) AS coverage
        FROM scored s CROSS JOIN st GROUP BY s.id, s.updated_at
        ORDER BY rank DESC, s.updated_at DESC, s.id LIMIT %(k)s
    )
    SELECT {m_columns}, r.rank, r.coverage, {{similarity}} AS similarity
    FROM ranked r JOIN {table} m ON m.id = r.id
    ORDER BY r.rank DESC, m.updated_at DESC, m.id
    """  # ranked and cut to k before the join: only the k returned rows are read whole
    SEARCH_TEXT = _BM25.format(similarity="1 - (m.embedding <=> %(v)s)")
    SEARCH_TEXT_ONLY = _BM25.format(similarity="NULL::float8")
    return SearchSQL(
        search_ann=SEARCH_ANN,
        search_exact=SEARCH_EXACT,
        search_ann_crowd=SEARCH_ANN_CROWD,
        search_exact_crowd=SEARCH_EXACT_CROWD,
        search_text=SEARCH_TEXT,
        search_text_only=SEARCH_TEXT_ONLY,
        bounded_count=(
            f"SELECT count(*) AS n FROM (SELECT 1 FROM {table} WHERE user_id = %s LIMIT %s) AS mine"
        ),
    )


MEMORY_TABLES = StoreTables(
    "memories", "memory_stats", "memory_terms", COLUMNS,
    ", ".join(f"m.{c.strip()}" for c in COLUMNS.split(", ")),
    hidden_by="superseded_by",  # the nightly tidy-up's marks (services/memory/tidy.py)
)
MEMORY_SQL = search_sql(MEMORY_TABLES)
M_COLUMNS = MEMORY_TABLES.m_columns
SEARCH_ANN = MEMORY_SQL.search_ann
SEARCH_EXACT = MEMORY_SQL.search_exact
SEARCH_ANN_CROWD = MEMORY_SQL.search_ann_crowd
SEARCH_EXACT_CROWD = MEMORY_SQL.search_exact_crowd
SEARCH_TEXT = MEMORY_SQL.search_text
SEARCH_TEXT_ONLY = MEMORY_SQL.search_text_only
SAVE_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
SET_EF_SEARCH = "SELECT set_config('hnsw.ef_search', %s, true)"
SET_ITERATIVE_SCAN = "SELECT set_config('hnsw.iterative_scan', %s, true)"
# the same for the connection's session (an index search outside a transaction)
SET_SESSION_EF_SEARCH = "SELECT set_config('hnsw.ef_search', %s, false)"
SET_SESSION_ITERATIVE_SCAN = "SELECT set_config('hnsw.iterative_scan', %s, false)"
VECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
BOUNDED_COUNT = MEMORY_SQL.bounded_count
HAS_ANY = "SELECT EXISTS (SELECT 1 FROM memories WHERE user_id = %s) AS any"
INSERT = f"""
INSERT INTO memories (user_id, content, category, source, embedding, created_at, updated_at,
                      tainted)
VALUES (%(user)s, %(content)s, %(category)s, %(source)s, %(v)s, %(now)s, %(now)s, %(tainted)s)
RETURNING {COLUMNS}
"""
TOUCH = f"""
UPDATE memories SET updated_at = %(now)s, tainted = tainted AND %(tainted)s
WHERE id = %(id)s AND user_id = %(user)s
RETURNING {COLUMNS}
"""
REPLACE = f"""
UPDATE memories SET content = %(content)s, embedding = %(v)s, updated_at = %(now)s,
       tainted = %(tainted)s, category = COALESCE(%(category)s, category),
       history = history || jsonb_build_array(jsonb_build_object(
           'content', content, 'category', category, 'replaced_at', %(now)s,
           'tainted', tainted))
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
    meaning); `previous` is the text the last update replaced, `previous_tainted` its own
    mark (written in a call that had read outside content).
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
    tainted: bool = False  # written in a model call that had read outside content
    previous_tainted: bool = False
    neighbour_of: str | None = None  # listed as saved right before/after this hit (neighbours.py)


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
        tainted=bool(row.get("tainted")),
        previous_tainted=_previous_mark(row),
    )


def _previous_mark(row: dict) -> bool:
    """The replaced text's own mark; an entry without one (none are written since migration
    0030 stamped the old ones) counts as tainted when the memory is."""
    if row.get("previous") is None:
        return False
    mark = row.get("previous_mark")
    return bool(row.get("tainted")) if mark is None else bool(mark)


def tie_key(row: dict) -> tuple:
    """Deterministic order among equal scores: newer first, then by text, then by id."""
    updated = row.get("updated_at")
    stamp = -updated.timestamp() if isinstance(updated, datetime) else 0.0
    return (stamp, str(row.get("content", "")), str(row["id"]))

"""The nightly tidy-up's storage side: exact duplicates, supersede marks, what changed.

Nothing here deletes a fact: an exact duplicate is merged into the copy kept
(the untainted one when there is one, else the oldest), and a memory a later
one replaced is *marked* (`superseded_by`, `superseded_at`) — kept, shown with
its successor, and left out of search and recall (services/memory/queries.py).
Every statement is scoped by user id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one

# The copy kept is the untainted one when there is one (ordered first), else the oldest.
MERGE_DUPLICATES = """
WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY lower(btrim(content))
                                  ORDER BY tainted, created_at, id) AS n
      FROM memories WHERE user_id = %(user)s AND superseded_by IS NULL
)
DELETE FROM memories m USING ranked r
 WHERE m.id = r.id AND r.n > 1 AND m.user_id = %(user)s
RETURNING m.id
"""
# Pairs (newer, older) among the person's live memories, the newer one changed since
# `since`, the older one among its nearest neighbours and at least `bar` similar; a memory
# saved in a tainted call is never offered as replacing one the person stated.
NEIGHBOUR_PAIRS = """
SELECT n.id AS new_id, n.content AS new_content, n.updated_at AS new_at,
       o.id AS old_id, o.content AS old_content, o.updated_at AS old_at, o.similarity
  FROM memories n
  CROSS JOIN LATERAL (
      SELECT c.id, c.content, c.updated_at, 1 - (c.embedding <=> n.embedding) AS similarity
        FROM memories c
       WHERE c.user_id = n.user_id AND c.id <> n.id AND c.superseded_by IS NULL
         AND c.updated_at < n.updated_at
         AND (c.tainted OR NOT n.tainted)  -- outside text never replaces the person's own
       ORDER BY c.embedding <=> n.embedding
       LIMIT 3
  ) AS o
 WHERE n.user_id = %(user)s AND n.superseded_by IS NULL AND n.updated_at >= %(since)s
   AND o.similarity >= %(bar)s
 ORDER BY o.similarity DESC
 LIMIT %(limit)s
"""
SUPERSEDE = """
UPDATE memories SET superseded_by = %(new)s, superseded_at = %(now)s
 WHERE user_id = %(user)s AND id = %(old)s AND superseded_by IS NULL
   AND EXISTS (SELECT 1 FROM memories n WHERE n.user_id = %(user)s AND n.id = %(new)s
                                          AND n.superseded_by IS NULL)
RETURNING id
"""
# Memories the person stated themselves (saved in calls that read no outside content).
UNTAINTED_SINCE = """
SELECT id, content, category, updated_at FROM memories
 WHERE user_id = %(user)s AND NOT tainted AND superseded_by IS NULL AND updated_at >= %(since)s
 ORDER BY updated_at DESC LIMIT %(limit)s
"""
CHANGED_SINCE = """
SELECT EXISTS (SELECT 1 FROM memories WHERE user_id = %(user)s AND updated_at >= %(since)s) AS any
"""


@dataclass(frozen=True)
class Pair:
    """A newer memory and an older, similar one it may replace."""

    new_id: str
    new_content: str
    old_id: str
    old_content: str
    similarity: float


@dataclass(frozen=True)
class Stated:
    """A memory saved in an untainted call: a source a profile change may be drawn from."""

    id: str
    content: str
    category: str


class MemoryTidy:
    """The SQL of the tidy-up, per user."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def merge_duplicates(self, user_id: int) -> int:
        """Merge exact duplicates (case and outer spaces ignored); returns how many went."""
        return len(await fetch_all(self.pool, MERGE_DUPLICATES, {"user": user_id}))

    async def pairs(self, user_id: int, since: datetime, bar: float, limit: int) -> list[Pair]:
        """Newer/older pairs of similar live memories, most similar first."""
        params = {"user": user_id, "since": since, "bar": bar, "limit": limit}
        rows = await fetch_all(self.pool, NEIGHBOUR_PAIRS, params)
        return [
            Pair(str(r["new_id"]), r["new_content"], str(r["old_id"]), r["old_content"],
                 float(r["similarity"]))
            for r in rows
        ]

    async def supersede(self, user_id: int, old_id: str, new_id: str, now: datetime) -> bool:
        """Mark `old_id` as replaced by `new_id` (both the person's, both live)."""
        params = {"user": user_id, "old": old_id, "new": new_id, "now": now}
        return await fetch_one(self.pool, SUPERSEDE, params) is not None

    async def stated(self, user_id: int, since: datetime, limit: int) -> list[Stated]:
        """Recent memories saved in untainted calls."""
        params = {"user": user_id, "since": since, "limit": limit}
        rows = await fetch_all(self.pool, UNTAINTED_SINCE, params)
        return [Stated(str(r["id"]), r["content"], r["category"]) for r in rows]

    async def changed_since(self, user_id: int, since: datetime) -> bool:
        """Whether any memory was saved or changed since `since`."""
        row = await fetch_one(self.pool, CHANGED_SINCE, {"user": user_id, "since": since})
        return bool(row and row["any"])

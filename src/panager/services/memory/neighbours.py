"""Neighbours of a search hit: the memories saved right before and after it (small-to-big).

An answer is often spread over adjacent turns ("what did she say after…"): the hit holds
the words of the question, the turn beside it the answer. A neighbour is the memory saved
immediately before or after the hit

- by the same person (every statement is filtered by `user_id`),
- in the same conversation: the same `source` (the person's own chat, memories kept by
  compaction, a linked person's summaries, an import), saved within NEIGHBOUR_GAP of the
  hit (a later session is another conversation),
- and not superseded by the nightly tidy-up.

`with_neighbours` puts each hit's neighbours right after it, before the next hit, and
counts them within the search's limit; a memory is listed once (as a hit when it is one).
Each neighbour keeps its own date and taint mark and names the hit it came with
(`MemoryHit.neighbour_of`); its score is the hit's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from panager.db.pool import DictConnection
from panager.services.memory.queries import M_COLUMNS, MemoryHit, hit

NEIGHBOUR_GAP = timedelta(minutes=30)

_SIDE = """
    SELECT {side} AS side, {columns} FROM memories m
    WHERE m.user_id = %(user)s AND m.source = h.source AND m.superseded_by IS NULL
      AND (m.created_at, m.id) {op} (h.created_at, h.id)
      AND m.created_at {bound_op} h.created_at {sign} %(gap)s
    ORDER BY m.created_at {order}, m.id {order} LIMIT 1
"""
NEIGHBOURS = f"""
SELECT h.id AS of, n.* FROM memories h
CROSS JOIN LATERAL (
    ({_SIDE.format(side="-1", columns=M_COLUMNS, op="<", bound_op=">=", sign="-",
                   order="DESC")})
    UNION ALL
    ({_SIDE.format(side="1", columns=M_COLUMNS, op=">", bound_op="<=", sign="+",
                   order="ASC")})
) AS n
WHERE h.user_id = %(user)s AND h.id = ANY(%(ids)s::uuid[])
"""  # the (user_id, created_at) index finds each side; every table is filtered by user


async def neighbours_of(
    conn: DictConnection, user_id: int, ids: Sequence[str], gap: timedelta = NEIGHBOUR_GAP
) -> dict[str, tuple[dict | None, dict | None]]:
    """{hit id: (the row saved right before it, the row right after)} of the user's memories."""
    out: dict[str, list[dict | None]] = {str(i): [None, None] for i in ids}
    if not ids:
        return {}
    params = {"user": user_id, "ids": list(ids), "gap": gap}
    for row in await (await conn.execute(NEIGHBOURS, params)).fetchall():
        out[str(row["of"])][0 if row["side"] < 0 else 1] = row
    return {key: (pair[0], pair[1]) for key, pair in out.items()}


async def with_neighbours(
    conn: DictConnection, user_id: int, hits: Sequence[MemoryHit], limit: int
) -> list[MemoryHit]:
    """The hits in order, each followed by its neighbours (before, then after) not listed
    yet, cut at `limit` entries in all. A neighbour that is itself a hit is listed there,
    as the hit (its own score, no `neighbour_of`)."""
    if not hits:
        return []
    found = await neighbours_of(conn, user_id, [h.id for h in hits])
    as_hit = {h.id: h for h in hits}
    out: list[MemoryHit] = []
    seen: set[str] = set()
    for h in hits:
        for item in (h, *found.get(h.id, (None, None))):
            if len(out) >= limit:
                return out
            if item is None:
                continue
            if isinstance(item, MemoryHit):
                entry = item
            else:
                key = str(item["id"])
                entry = as_hit.get(key) or replace(hit(item, h.score), neighbour_of=h.id)
            if entry.id not in seen:
                seen.add(entry.id)
                out.append(entry)
    return out

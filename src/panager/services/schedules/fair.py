"""Fair claiming: interleave users, at most `per_user` runs of one user in flight per worker.

Ranking every due row on each claim (the first version) cost O(due rows) per
claim: 8–10 ms per claim against 10,000 due rows, ~2 ms for this one (see
BENCHMARKS.md, "Scheduler"). `CLAIM_FAIR` looks at a bounded slice instead: the oldest `candidates`
claimable rows (in `schedules_due_idx` order), leaving out users this worker
already runs `per_user` of, ranked per user and taken round-robin (every user's
first row, then every user's second, …).

When one user's backlog fills the slice, the claim takes that user's room and
comes up short; `claim_fair_rows` then repeats the statement with the users it
just capped left out, until the claim is full or a round caps nobody new (the
slice then held everything claimable). So a user with 500 due rows costs a
second statement that steps over their rows in the index (no sorting or
ranking of them), and others' rows are claimed in the same call, interleaved
as ranking every row would (ties in due time in index order).

Rows are locked with `FOR UPDATE SKIP LOCKED` one at a time in claim order up
to `limit`, re-checking claimability on the locked row, so concurrent workers
never claim a row twice and never wait on each other.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from psycopg import AsyncConnection

# A row a worker may take: active, due, and not leased (or its lease ran out).
CLAIMABLE = """s.status = 'active' AND s.next_run_at <= %(now)s
       AND (s.lease_until IS NULL OR s.lease_until <= %(now)s)"""
_USERS = """AND (%(only)s::bigint[] IS NULL OR s.user_id = ANY(%(only)s::bigint[]))
       AND NOT (s.user_id = ANY(%(skip)s::bigint[]))"""
_BUSY = """busy AS (
    SELECT * FROM unnest(%(busy_ids)s::bigint[], %(busy_counts)s::int[]) AS b (user_id, n)
)"""
# `picked` (id, ord) in claim order → lock each unless another worker holds it → lease.
_LOCK_AND_LEASE = f""", due AS (
    SELECT l.id FROM picked p CROSS JOIN LATERAL (
        SELECT s.id FROM schedules s WHERE s.id = p.id AND {CLAIMABLE}
           FOR UPDATE SKIP LOCKED
    ) l
     ORDER BY p.ord
     LIMIT %(limit)s
)
UPDATE schedules AS s
   SET claimed_by = %(worker)s, lease_until = %(lease_until)s
 WHERE s.id = ANY(ARRAY(SELECT id FROM due))
RETURNING s.*
"""
CLAIM_FAIR = f"""
WITH {_BUSY}, slice AS (
    SELECT s.id, s.user_id, s.next_run_at FROM schedules s
     WHERE {CLAIMABLE} {_USERS}
     ORDER BY s.next_run_at
     LIMIT %(candidates)s
), numbered AS (  -- pos: the slice's order (oldest first; ties as the index returns them)
    SELECT id, user_id, row_number() OVER () AS pos FROM slice
), ranked AS (
    SELECT sl.id, sl.pos, COALESCE(b.n, 0) AS busy,
           row_number() OVER (PARTITION BY sl.user_id ORDER BY sl.pos) AS rn
      FROM numbered sl LEFT JOIN busy b ON b.user_id = sl.user_id
), picked AS (
    SELECT id, row_number() OVER (ORDER BY rn, pos) AS ord FROM ranked
     WHERE rn + busy <= %(per_user)s
     ORDER BY ord
){_LOCK_AND_LEASE}"""


def _busy(counts: Counter[int] | dict[int, int]) -> dict[str, list[int]]:
    return {"busy_ids": list(counts), "busy_counts": list(counts.values())}


async def claim_fair_rows(
    conn: AsyncConnection[Any],
    params: dict[str, Any],
    *,
    limit: int,
    per_user: int,
    busy: dict[int, int],
) -> list[dict]:
    """Claim up to `limit` rows fairly (see the module doc); `params` carries now, worker,
    lease_until, only and skip. Returns the claimed schedule rows."""
    taken: Counter[int] = Counter(busy)
    rows: list[dict] = []
    while len(rows) < limit:
        want = limit - len(rows)
        capped = [uid for uid, n in taken.items() if n >= per_user]
        round_params = {
            **params,
            **_busy(taken),
            "skip": [*params["skip"], *capped],
            "limit": want,
            "per_user": per_user,
            "candidates": want * 4 + 16,  # rows another worker locks are skipped, not waited
        }
        got = await (await conn.execute(CLAIM_FAIR, round_params)).fetchall()
        rows += got
        taken.update(row["user_id"] for row in got)
        if not any(taken[row["user_id"]] >= per_user for row in got):
            break  # nobody newly capped: the slice held everything this worker may claim
    return rows

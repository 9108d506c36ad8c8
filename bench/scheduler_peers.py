"""Claim statements the scheduler benchmark compares in the same run (`--claims`).

- `fair`: today's `ScheduleClaims.claim_fair` (a bounded slice, services/schedules/fair.py).
- `rank-all`: the first fair claim, which ranked every due row on each claim
  (kept here verbatim as the peer it replaced).
- `oldest`: the claim before fairness — oldest first, no per-user limit
  (`CLAIM_DUE`, still used by `claim_due`).

A worker process calls `use_claims(name)` before it starts; `CLAIM_STATS` then counts
its claims and the wall time they took.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

VARIANTS = ("fair", "rank-all", "oldest")
CLAIM_STATS = {"calls": 0, "rows": 0, "seconds": 0.0}  # this process's claims (wall time)

_USER_FILTER = """
   AND (%(only)s::bigint[] IS NULL OR user_id = ANY(%(only)s::bigint[]))
   AND NOT (user_id = ANY(%(skip)s::bigint[]))
"""
RANK_ALL_FAIR = f"""
WITH busy AS (
    SELECT * FROM unnest(%(busy_ids)s::bigint[], %(busy_counts)s::int[]) AS b (user_id, n)
), ranked AS (
    SELECT s.id, s.next_run_at, COALESCE(b.n, 0) AS busy,
           row_number() OVER (PARTITION BY s.user_id ORDER BY s.next_run_at, s.id) AS rn
      FROM schedules s LEFT JOIN busy b ON b.user_id = s.user_id
     WHERE s.status = 'active' AND s.next_run_at <= %(now)s
       AND (s.lease_until IS NULL OR s.lease_until <= %(now)s)
       {_USER_FILTER.replace("user_id", "s.user_id")}
), picked AS (
    SELECT id, row_number() OVER (ORDER BY rn, next_run_at, id) AS ord FROM ranked
     WHERE rn + busy <= %(per_user)s
     ORDER BY rn, next_run_at, id
     LIMIT %(candidates)s
), due AS (
    SELECT s.id FROM schedules s JOIN picked p ON p.id = s.id
     WHERE s.status = 'active' AND (s.lease_until IS NULL OR s.lease_until <= %(now)s)
     ORDER BY p.ord
     LIMIT %(limit)s
     FOR UPDATE OF s SKIP LOCKED
)
UPDATE schedules AS s
   SET claimed_by = %(worker)s, lease_until = %(lease_until)s
  FROM due
 WHERE s.id = due.id
RETURNING s.*
"""


def use_claims(name: str) -> None:
    """Make every worker in this process claim with the statement `name` (see VARIANTS)."""
    from panager.services.schedules.claims import ScheduleClaims

    if name not in VARIANTS:
        raise ValueError(f"unknown claim variant {name!r}; choose from {', '.join(VARIANTS)}")
    claim = {"fair": ScheduleClaims.claim_fair, "oldest": _oldest, "rank-all": _rank_all}[name]

    async def timed(self, *args, **kwargs):
        started = time.perf_counter()
        claimed, users = await claim(self, *args, **kwargs)
        CLAIM_STATS["calls"] += 1
        CLAIM_STATS["rows"] += len(claimed)
        CLAIM_STATS["seconds"] += time.perf_counter() - started
        return claimed, users

    ScheduleClaims.claim_fair = timed  # type: ignore[method-assign]


async def _oldest(
    self,
    worker: str,
    now: datetime,
    *,
    lease: timedelta,
    limit: int,
    per_user: int,
    busy: dict[int, int],
    only_users=None,
    skip_users=(),
):
    return await self.claim_due_with_users(
        worker, now, lease=lease, limit=limit, only_users=only_users, skip_users=skip_users
    )


async def _rank_all(
    self,
    worker: str,
    now: datetime,
    *,
    lease: timedelta,
    limit: int,
    per_user: int,
    busy: dict[int, int],
    only_users=None,
    skip_users=(),
):
    from panager.services.schedules.types import schedule_from_row, user_from_row

    params = {
        "now": now,
        "worker": worker,
        "lease_until": now + lease,
        "limit": limit,
        "candidates": limit * 4 + 16,
        "per_user": per_user,
        "busy_ids": list(busy),
        "busy_counts": list(busy.values()),
        "only": list(only_users) if only_users is not None else None,
        "skip": list(skip_users),
    }
    async with self.pool.connection() as conn:
        cur = await conn.execute(RANK_ALL_FAIR, params)
        claimed = [schedule_from_row(r) for r in await cur.fetchall()]
        if not claimed:
            return [], {}
        cur = await conn.execute(
            "SELECT * FROM users WHERE id = ANY(%s)", (list({s.user_id for s in claimed}),)
        )
        return claimed, {r["id"]: user_from_row(r) for r in await cur.fetchall()}

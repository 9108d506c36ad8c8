# Over 400 lines, kept whole: the claim and fence statements of the scheduler, which must agree with
# each other, kept side by side.
"""The claim protocol workers use: claim with a lease, fence, record, report.

Delivery of one occurrence goes through these steps, each one short
autocommit statement:

1. `claim_due` — `FOR UPDATE SKIP LOCKED` picks due rows nobody holds and gives
   them to this worker with a lease (`claimed_by`, `lease_until`). A worker that
   dies simply lets its lease run out; another worker then claims the row.
2. `begin_runs` — the fence. While still holding the lease, insert the
   occurrence's `schedule_runs` row (UNIQUE (schedule_id, scheduled_for)) in
   state `sending`. Only the worker whose insert (or takeover of a `retry` row)
   succeeds may send, so one occurrence is never sent by two workers. A run
   still `sending` when the lease holder comes to it was cut off (a dead
   worker, a send that timed out, a worker that lost track of it): `take_over`
   hands it to the lease holder as interrupted, and the message says it is
   sent again.
3. `complete_runs` / `settle` — record the outcome (delivered, retry, failed,
   missed) and move the schedule to its next occurrence, releasing the lease.

Every time comparison uses the `now` the caller passes (its injected clock),
never the database's `now()`, so tests drive time with a fake clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from panager.db.pool import Pool
from panager.db.queries import execute, fetch_all, fetch_one
from panager.services.proposals import Offer, offers_from, offers_json
from panager.services.schedules.fair import claim_fair_rows
from panager.services.schedules.types import (
    MissedRun,
    RunRecord,
    RunRequest,
    RunTicket,
    Schedule,
    Settlement,
    schedule_from_row,
    user_from_row,
)
from panager.services.users import User

_USER_FILTER = """
   AND (%(only)s::bigint[] IS NULL OR user_id = ANY(%(only)s::bigint[]))
   AND NOT (user_id = ANY(%(skip)s::bigint[]))
"""
CLAIM_DUE = f"""
WITH due AS (
    SELECT id FROM schedules
     WHERE status = 'active' AND next_run_at <= %(now)s
       AND (lease_until IS NULL OR lease_until <= %(now)s)
       {_USER_FILTER}
     ORDER BY next_run_at
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED
)
UPDATE schedules AS s
   SET claimed_by = %(worker)s, lease_until = %(lease_until)s
  FROM due
 WHERE s.id = due.id
RETURNING s.*
"""
NEXT_DUE = f"""
SELECT min(next_run_at) AS due FROM schedules
 WHERE status = 'active' AND lease_until IS NULL {_USER_FILTER}
"""
RENEW_LEASE = """
UPDATE schedules SET lease_until = %(lease_until)s
 WHERE id = %(id)s AND claimed_by = %(worker)s AND status = 'active'
RETURNING id
"""
# The fence: only the current lease holder may insert an occurrence's run (or take over a
# `retry` run); a conflicting `sending` or finished run means "not yours". Batched: one
# statement (one commit) for every occurrence a worker is about to send.
BEGIN_RUNS = """
WITH req AS (
    SELECT * FROM unnest(%(ids)s::text[], %(fors)s::timestamptz[], %(lates)s::boolean[],
                         %(outputs)s::text[], %(offers)s::text[])
           AS req (schedule_id, scheduled_for, late, output, offers)
), held AS (
    UPDATE schedules AS s SET lease_until = %(lease_until)s
      FROM req
     WHERE s.id = req.schedule_id AND s.claimed_by = %(worker)s AND s.status = 'active'
    RETURNING s.id, s.user_id
)
INSERT INTO schedule_runs AS r (schedule_id, user_id, scheduled_for, status, late, attempts,
                                claimed_by, output, offers, created_at, updated_at)
SELECT held.id, held.user_id, req.scheduled_for, 'sending', req.late, 1, %(worker)s,
       req.output, req.offers::jsonb, %(now)s, %(now)s
  FROM held JOIN req ON req.schedule_id = held.id
ON CONFLICT (schedule_id, scheduled_for) DO UPDATE
   SET status = 'sending', claimed_by = EXCLUDED.claimed_by, late = EXCLUDED.late,
       attempts = r.attempts + 1, output = COALESCE(r.output, EXCLUDED.output),
       offers = CASE WHEN r.output IS NULL THEN EXCLUDED.offers ELSE r.offers END,
       updated_at = EXCLUDED.updated_at
 WHERE r.status = 'retry'
RETURNING id, schedule_id, output, offers
"""
GET_RUN = """
SELECT r.*, s.claimed_by = %(worker)s AS lease_is_mine
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
 WHERE r.schedule_id = %(schedule_id)s AND r.scheduled_for = %(scheduled_for)s
"""
TAKE_OVER_RUN = """
UPDATE schedule_runs
   SET claimed_by = %(worker)s, attempts = attempts + 1, late = %(late)s, updated_at = %(now)s
 WHERE id = %(id)s AND status = 'sending' AND claimed_by IS NOT DISTINCT FROM %(previous)s
RETURNING id, output, offers
"""
_SETTLE = """
UPDATE schedules
   SET next_run_at = %(next_run_at)s, status = %(status)s, attempts = %(attempts)s,
       last_error = %(last_error)s, last_run_at = COALESCE(%(last_run_at)s, last_run_at),
       claimed_by = NULL, lease_until = %(lease_until)s, updated_at = %(now)s
 WHERE id = %(schedule_id)s AND claimed_by = %(worker)s AND status = 'active'
RETURNING id
"""
# Delivered: mark the runs and move their schedules on, many in one statement.
COMPLETE_RUNS = """
WITH req AS (
    SELECT * FROM unnest(%(run_ids)s::bigint[], %(ids)s::text[], %(nexts)s::timestamptz[],
                         %(statuses)s::text[]) AS req (run_id, schedule_id, next_run_at, status)
), run AS (
    UPDATE schedule_runs AS r
       SET status = 'delivered', delivered_at = %(now)s, error = NULL, output = NULL,
           offers = NULL, updated_at = %(now)s
      FROM req
     WHERE r.id = req.run_id AND r.claimed_by = %(worker)s AND r.status = 'sending'
)
UPDATE schedules AS s
   SET next_run_at = req.next_run_at, status = req.status, attempts = 0, last_error = NULL,
       last_run_at = %(now)s, claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
  FROM req
 WHERE s.id = req.schedule_id AND s.claimed_by = %(worker)s AND s.status = 'active'
"""
_UPSERT_RUN = """
INSERT INTO schedule_runs AS r (schedule_id, user_id, scheduled_for, status, late, attempts,
                                missed_count, claimed_by, output, error, created_at, updated_at)
VALUES (%(schedule_id)s, %(user_id)s, %(run_for)s, %(run_status)s, %(late)s, %(attempts)s,
        %(missed_count)s, %(worker)s, %(output)s, %(error)s, %(now)s, %(now)s)
ON CONFLICT (schedule_id, scheduled_for) DO UPDATE
   SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, error = EXCLUDED.error,
       missed_count = EXCLUDED.missed_count, claimed_by = EXCLUDED.claimed_by,
       output = COALESCE(EXCLUDED.output, r.output), updated_at = EXCLUDED.updated_at
 WHERE r.status IN ('sending', 'retry')
"""
RECORD_RUN = _UPSERT_RUN
SETTLE_WITH_RUN = f"WITH run AS ({_UPSERT_RUN} RETURNING id)\n{_SETTLE}"
SETTLE = _SETTLE
CLAIM_UNREPORTED = f"""
WITH todo AS (
    SELECT id FROM schedule_runs
     WHERE status = 'missed' AND reported_at IS NULL {_USER_FILTER}
       AND NOT EXISTS (SELECT 1 FROM schedules h  -- a missed heartbeat is not news
                        WHERE h.id = schedule_runs.schedule_id AND h.kind = 'heartbeat')
     ORDER BY user_id, scheduled_for
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED
)
UPDATE schedule_runs AS r SET reported_at = %(now)s
  FROM todo, schedules s
 WHERE r.id = todo.id AND s.id = r.schedule_id
RETURNING r.id, r.user_id, r.scheduled_for, r.missed_count, s.kind, s.message, s.timezone,
          s.rrule
"""
UNMARK_REPORTED = "UPDATE schedule_runs SET reported_at = NULL WHERE id = ANY(%s)"
RELEASE_CLAIMS = """
UPDATE schedules SET claimed_by = NULL, lease_until = NULL
 WHERE claimed_by = %(worker)s AND status = 'active'
"""
GET_USERS = "SELECT * FROM users WHERE id = ANY(%s)"

def _filter(only: list[int] | None, skip: list[int] | tuple[int, ...]) -> dict[str, Any]:
    return {"only": list(only) if only is not None else None, "skip": list(skip)}


class ScheduleClaims:
    """Worker-side statements over the shared pool (`ScheduleService.claims`)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def _one(self, sql: str, params: Any) -> dict | None:
        return await fetch_one(self.pool, sql, params)

    async def _exec(self, sql: str, params: Any) -> None:
        await execute(self.pool, sql, params)

    async def _all(self, sql: str, params: Any) -> list[dict]:
        return await fetch_all(self.pool, sql, params)

    async def claim_due(
        self,
        worker: str,
        now: datetime,
        *,
        lease: timedelta,
        limit: int = 100,
        only_users: list[int] | None = None,
        skip_users: list[int] | tuple[int, ...] = (),
    ) -> list[Schedule]:
        """Lease up to `limit` due schedules nobody holds to `worker` (SKIP LOCKED)."""
        claimed, _ = await self.claim_due_with_users(
            worker, now, lease=lease, limit=limit, only_users=only_users, skip_users=skip_users
        )
        return claimed

    async def claim_due_with_users(
        self,
        worker: str,
        now: datetime,
        *,
        lease: timedelta,
        limit: int = 100,
        only_users: list[int] | None = None,
        skip_users: list[int] | tuple[int, ...] = (),
    ) -> tuple[list[Schedule], dict[int, User]]:
        """`claim_due` plus the owners of the claimed schedules, on one connection."""
        params = {"now": now, "worker": worker, "lease_until": now + lease, "limit": limit}
        async with self.pool.connection() as conn:
            cur = await conn.execute(CLAIM_DUE, {**params, **_filter(only_users, skip_users)})
            claimed = [schedule_from_row(r) for r in await cur.fetchall()]
            if not claimed:
                return [], {}
            cur = await conn.execute(GET_USERS, (list({s.user_id for s in claimed}),))
            return claimed, {r["id"]: user_from_row(r) for r in await cur.fetchall()}

    async def claim_fair(
        self,
        worker: str,
        now: datetime,
        *,
        lease: timedelta,
        limit: int,
        per_user: int,
        busy: dict[int, int],
        only_users: list[int] | None = None,
        skip_users: list[int] | tuple[int, ...] = (),
    ) -> tuple[list[Schedule], dict[int, User]]:
        """Like `claim_due_with_users`, interleaving users, at most `per_user` in flight each."""
        params = {
            "now": now,
            "worker": worker,
            "lease_until": now + lease,
            **_filter(only_users, skip_users),
        }
        async with self.pool.connection() as conn:
            rows = await claim_fair_rows(conn, params, limit=limit, per_user=per_user, busy=busy)
            claimed = [schedule_from_row(r) for r in rows]
            if not claimed:
                return [], {}
            cur = await conn.execute(GET_USERS, (list({s.user_id for s in claimed}),))
            return claimed, {r["id"]: user_from_row(r) for r in await cur.fetchall()}

    async def next_due(
        self, *, only_users: list[int] | None = None, skip_users: list[int] | tuple[int, ...] = ()
    ) -> datetime | None:
        """The earliest next run among unleased active schedules (for the worker's wait)."""
        row = await self._one(NEXT_DUE, _filter(only_users, skip_users))
        return row["due"] if row else None

    async def renew(self, schedule: Schedule, worker: str, lease_until: datetime) -> bool:
        """Extend the lease while a long delivery (an agent run) is in progress."""
        params = {"id": schedule.id, "worker": worker, "lease_until": lease_until}
        return await self._one(RENEW_LEASE, params) is not None

    async def begin_runs(
        self, requests: list[RunRequest], *, worker: str, now: datetime, lease: timedelta
    ) -> list[RunTicket | None]:
        """Take the right to send each occurrence (one statement); None where it is not ours.

        A None may still be a run cut off mid-send by a dead worker: see `take_over`."""
        if not requests:
            return []
        params = {
            "ids": [r.schedule.id for r in requests],
            "fors": [r.scheduled_for for r in requests],
            "lates": [r.late for r in requests],
            "outputs": [r.output for r in requests],
            "offers": [offers_json(r.offers) for r in requests],
            "worker": worker,
            "now": now,
            "lease_until": now + lease,
        }
        rows = {row["schedule_id"]: row for row in await self._all(BEGIN_RUNS, params)}
        return [
            RunTicket(rows[r.schedule.id]["id"], rows[r.schedule.id]["output"],
                      offers=offers_from(rows[r.schedule.id]["offers"]))
            if r.schedule.id in rows
            else None
            for r in requests
        ]

    async def begin_run(
        self,
        schedule: Schedule,
        scheduled_for: datetime,
        *,
        worker: str,
        now: datetime,
        lease: timedelta,
        late: bool = False,
        output: str | None = None,
    ) -> RunTicket | None:
        """`begin_runs` for one occurrence, including the takeover of a cut-off send."""
        request = RunRequest(schedule, scheduled_for, late, output)
        [ticket] = await self.begin_runs([request], worker=worker, now=now, lease=lease)
        return ticket or await self.take_over(request, worker=worker, now=now)

    async def take_over(
        self, request: RunRequest, *, worker: str, now: datetime
    ) -> RunTicket | None:
        """A `sending` run under a lease we now hold was cut off: send it again, flagged.

        Its sender may be a dead worker or `worker` itself, which calls this only for an
        occurrence it is not handling any more (it lost track of it after a failure)."""
        params = {
            "schedule_id": request.schedule.id,
            "scheduled_for": request.scheduled_for,
            "worker": worker,
            "now": now,
            "late": request.late,
        }
        run = await self._one(GET_RUN, params)
        if run is None or run["status"] != "sending" or not run["lease_is_mine"]:
            return None
        taken = await self._one(
            TAKE_OVER_RUN, {**params, "id": run["id"], "previous": run["claimed_by"]}
        )
        if not taken:
            return None
        return RunTicket(taken["id"], taken["output"], interrupted=True,
                         offers=offers_from(taken["offers"]))

    async def run_status(self, schedule: Schedule, scheduled_for: datetime) -> str | None:
        """Status of the occurrence's run row, or None when there is none."""
        params = {"schedule_id": schedule.id, "scheduled_for": scheduled_for, "worker": ""}
        run = await self._one(GET_RUN, params)
        return run["status"] if run else None

    async def stored_output(
        self, schedule: Schedule, scheduled_for: datetime
    ) -> tuple[str, tuple[Offer, ...]] | None:
        """An agent answer (and the held calls it offers) produced by an earlier attempt
        whose delivery failed or was cut off."""
        params = {"schedule_id": schedule.id, "scheduled_for": scheduled_for, "worker": ""}
        run = await self._one(GET_RUN, params)
        if not run or run["status"] not in ("retry", "sending") or run["output"] is None:
            return None
        return run["output"], offers_from(run["offers"])

    async def complete_runs(
        self, items: list[tuple[Schedule, RunTicket, Settlement]], *, worker: str, now: datetime
    ) -> None:
        """Mark runs delivered and move their schedules on, all in one statement."""
        if not items:
            return
        params = {
            "run_ids": [ticket.id for _, ticket, _ in items],
            "ids": [schedule.id for schedule, _, _ in items],
            "nexts": [s.next_run_at for _, _, s in items],
            "statuses": [s.status for _, _, s in items],
            "worker": worker,
            "now": now,
        }
        await self._exec(COMPLETE_RUNS, params)

    async def settle(
        self,
        schedule: Schedule,
        settlement: Settlement,
        *,
        worker: str,
        now: datetime,
        run: RunRecord | None = None,
    ) -> bool:
        """Record a run outcome (retry, failed, missed) and/or move the schedule; release it."""
        params = _settle_params(schedule, settlement, worker, now)
        if run is None:
            return await self._one(SETTLE, params) is not None
        return await self._one(SETTLE_WITH_RUN, {**params, **_run_params(run)}) is not None

    async def record_run(
        self, schedule: Schedule, run: RunRecord, *, worker: str, now: datetime
    ) -> None:
        """Write a run row (e.g. skipped occurrences as `missed`) without touching the schedule."""
        base = {"schedule_id": schedule.id, "user_id": schedule.user_id, "worker": worker}
        await self._exec(RECORD_RUN, {**base, "now": now, **_run_params(run)})

    async def claim_unreported_missed(
        self,
        now: datetime,
        *,
        only_users: list[int] | None = None,
        skip_users: list[int] | tuple[int, ...] = (),
        limit: int = 500,
    ) -> list[MissedRun]:
        """Mark unreported missed runs as reported and return them (so one worker reports)."""
        params = {"now": now, "limit": limit, **_filter(only_users, skip_users)}
        rows = await self._all(CLAIM_UNREPORTED, params)
        return [
            MissedRun(
                r["id"], r["user_id"], r["scheduled_for"], r["missed_count"], r["kind"],
                r["message"], r["timezone"], r["rrule"],
            )
            for r in rows
        ]

    async def unmark_reported(self, run_ids: list[int]) -> None:
        """Undo `claim_unreported_missed` for runs whose report could not be delivered."""
        if run_ids:
            await self._exec(UNMARK_REPORTED, (run_ids,))

    async def release_claims(self, worker: str) -> int:
        """Give up every claim `worker` holds (a clean shutdown); returns how many.

        A run it left `sending` is taken over by the next worker, as after a crash."""
        async with self.pool.connection() as conn:
            return (await conn.execute(RELEASE_CLAIMS, {"worker": worker})).rowcount

    async def users(self, user_ids: list[int]) -> dict[int, User]:
        """Users by id, in one query."""
        rows = await self._all(GET_USERS, (list(set(user_ids)),))
        return {r["id"]: user_from_row(r) for r in rows}



def _settle_params(schedule: Schedule, s: Settlement, worker: str, now: datetime) -> dict:
    return {
        "schedule_id": schedule.id,
        "user_id": schedule.user_id,
        "worker": worker,
        "now": now,
        "next_run_at": s.next_run_at,
        "status": s.status,
        "attempts": s.attempts,
        "last_error": s.last_error,
        "last_run_at": s.last_run_at,
        "lease_until": s.retry_at,
    }


def _run_params(run: RunRecord) -> dict:
    return {
        "run_for": run.scheduled_for,
        "run_status": run.status,
        "late": run.late,
        "attempts": run.attempts,
        "missed_count": run.missed_count,
        "output": run.output,
        "error": run.error,
    }

"""Scheduler health for the admin page: what is due, late, missed and failed, per worker.

Read-only aggregate queries over all users (an admin view); times compare
against the caller's `now` (its injected clock), like the workers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from panager.db.pool import Pool
from panager.db.queries import one

WINDOW = timedelta(days=7)
OVERDUE_AFTER = timedelta(minutes=1)

DUE = """
SELECT count(*) FILTER (WHERE next_run_at <= %(now)s) AS due_now,
       count(*) FILTER (WHERE next_run_at <= %(overdue)s) AS overdue,
       count(*) FILTER (WHERE claimed_by IS NOT NULL AND lease_until > %(now)s) AS sending,
       count(*) AS active
  FROM schedules WHERE status = 'active'
"""
RUNS = """
SELECT COALESCE(claimed_by, '(none)') AS worker,
       count(*) FILTER (WHERE status = 'delivered') AS delivered,
       count(*) FILTER (WHERE status = 'delivered' AND late) AS late,
       count(*) FILTER (WHERE status = 'missed') AS missed,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status IN ('retry', 'sending')) AS pending,
       max(updated_at) AS last_seen
  FROM schedule_runs WHERE scheduled_for > %(since)s
 GROUP BY COALESCE(claimed_by, '(none)') ORDER BY max(updated_at) DESC
"""
RECENT_PROBLEMS = """
SELECT r.schedule_id, r.user_id, r.scheduled_for, r.status, r.late, r.error, r.claimed_by
  FROM schedule_runs r
 WHERE r.scheduled_for > %(since)s AND (r.status IN ('missed', 'failed') OR r.late)
 ORDER BY r.scheduled_for DESC LIMIT 50
"""


@dataclass(frozen=True)
class WorkerStats:
    """Occurrences one worker handled in the window."""

    worker: str
    delivered: int
    late: int
    missed: int
    failed: int
    pending: int
    last_seen: datetime | None


@dataclass(frozen=True)
class SchedulerHealth:
    """The whole picture: due counts now, per-worker stats and recent problems."""

    active: int
    due_now: int
    overdue: int
    sending: int
    workers: list[WorkerStats]
    problems: list[dict]

    def total(self, name: str) -> int:
        """Sum of one WorkerStats field over all workers."""
        return sum(getattr(w, name) for w in self.workers)


async def scheduler_health(pool: Pool, now: datetime) -> SchedulerHealth:
    """Read the scheduler's state for the last WINDOW."""
    params = {"now": now, "overdue": now - OVERDUE_AFTER, "since": now - WINDOW}
    async with pool.connection() as conn:
        due = one(await (await conn.execute(DUE, params)).fetchone())
        workers = await (await conn.execute(RUNS, params)).fetchall()
        problems = await (await conn.execute(RECENT_PROBLEMS, params)).fetchall()
    return SchedulerHealth(
        active=due["active"], due_now=due["due_now"], overdue=due["overdue"],
        sending=due["sending"], workers=[WorkerStats(**w) for w in workers], problems=problems,
    )

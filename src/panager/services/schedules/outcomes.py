"""What the database records after each outcome of one claimed occurrence.

The scheduler worker (`services/schedules/worker.py`) decides what happened —
missed, not ours, handed back, no route, failed — and `Outcomes` writes it: the
schedule's next state (`Settlement`) and, where there is one, the occurrence's
`schedule_runs` row. A failed delivery is retried after `RETRY_DELAYS`; the last
failure marks the run `failed` and shows in /schedules.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from panager.clock import Clock
from panager.services.schedules.claims import ScheduleClaims
from panager.services.schedules.occurrences import Occurrence, due_of, local_label, next_after
from panager.services.schedules.types import RunRecord, Schedule, Settlement

log = logging.getLogger(__name__)

RETRY_DELAYS = (30, 120, 600, 1800)  # seconds before attempts 2..5; then the run is failed
NO_ROUTE_DELAY = timedelta(seconds=60)  # nobody can reach the user now: look again later


class Outcomes:
    """Records one worker's outcomes, as that worker (`worker`) at the clock's time."""

    def __init__(self, claims: ScheduleClaims, worker: str, clock: Clock) -> None:
        self.claims = claims
        self.worker = worker
        self.clock = clock

    async def missed(self, schedule: Schedule, occurrence: Occurrence) -> None:
        """Older occurrences were skipped on the way to the one delivered: record the miss."""
        assert occurrence.missed_from is not None  # set whenever `missed` is
        missed = RunRecord(occurrence.missed_from, "missed", missed_count=occurrence.missed)
        await self.claims.record_run(schedule, missed, worker=self.worker, now=self.clock.now())

    async def skip(self, schedule: Schedule, occurrence: Occurrence) -> str:
        """Nothing within the grace window: record the miss and move on."""
        nxt = occurrence.next_run
        settlement = Settlement(
            next_run_at=nxt or schedule.next_run_at,
            status="active" if nxt else "missed",
            last_error=schedule.last_error,
        )
        assert occurrence.missed_from is not None  # nothing delivered: something was missed
        missed = RunRecord(occurrence.missed_from, "missed", missed_count=occurrence.missed)
        await self.claims.settle(
            schedule, settlement, worker=self.worker, now=self.clock.now(), run=missed
        )
        return "missed"

    def after(self, schedule: Schedule, delivered: datetime) -> Settlement:
        """The schedule's next state after delivering the occurrence at `delivered`."""
        nxt = next_after(schedule, delivered)
        return Settlement(
            next_run_at=nxt or delivered,
            status="active" if nxt else "done",
            last_run_at=self.clock.now(),
        )

    async def not_ours(self, schedule: Schedule, when: datetime) -> str:
        """The fence refused: another worker sends it, or it was already finished."""
        status = await self.claims.run_status(schedule, when)
        if status in ("delivered", "failed", "missed"):  # finished, but not moved on yet
            settlement = self.after(schedule, when)
            await self.claims.settle(schedule, settlement, worker=self.worker, now=self.clock.now())
        return "skipped"

    async def hand_back(self, schedule: Schedule, occ: Occurrence) -> str:
        """The user's turn is running: hand the agent run back, slot freed (worker.BUSY_DELAY)."""
        settlement = Settlement(
            next_run_at=occ.deliver,
            attempts=schedule.attempts,
            last_error=schedule.last_error,
            retry_at=None,  # claimable at once; the worker pauses the user (_turn_busy)
        )
        await self.claims.settle(schedule, settlement, worker=self.worker, now=self.clock.now())
        return "busy"

    async def no_route(self, schedule: Schedule, occ: Occurrence) -> str:
        """No front end can reach the user: keep it due; the grace rules apply next time."""
        now = self.clock.now()
        error = "no front end could reach the user"
        settlement = Settlement(
            next_run_at=occ.deliver, last_error=error, retry_at=now + NO_ROUTE_DELAY
        )
        run = RunRecord(due_of(occ), "retry", late=occ.late, error=error)
        await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
        return "no_route"

    async def failed(
        self, schedule: Schedule, occ: Occurrence, error: str, *, permanent: bool = False
    ) -> str:
        """Retry with backoff, or record the final failure (visible in /schedules)."""
        now = self.clock.now()
        due = due_of(occ)
        attempts = schedule.attempts + 1
        if not permanent and attempts <= len(RETRY_DELAYS):
            retry_at = now + timedelta(seconds=RETRY_DELAYS[attempts - 1])
            settlement = Settlement(
                next_run_at=due, attempts=attempts, last_error=error, retry_at=retry_at
            )
            run = RunRecord(due, "retry", late=occ.late, attempts=attempts, error=error)
            await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
            log.warning("scheduler: %s attempt %d failed (%s)", schedule.id, attempts, error)
            return "retry"
        nxt = next_after(schedule, due)
        label = local_label(due, schedule.timezone)
        settlement = Settlement(
            next_run_at=nxt or due,
            status="active" if nxt else "failed",
            last_error=f"delivery of {label} failed after {attempts} attempt(s): {error}",
        )
        run = RunRecord(due, "failed", late=occ.late, attempts=attempts, error=error)
        await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
        log.error("scheduler: %s failed permanently (%s)", schedule.id, error)
        return "failed"

"""What the database records after each outcome of one claimed occurrence.

The scheduler worker (`services/schedules/worker.py`) decides what happened —
missed, not ours, handed back, no route, failed — and `Outcomes` writes it: the
schedule's next state (`Settlement`) and, where there is one, the occurrence's
`schedule_runs` row, from the occurrence's `Plan` (occurrences.py: decided once,
read here, never decided again). A failed delivery is retried after `RETRY_DELAYS`; the last
failure marks the run `failed` and shows in /schedules.

An attempt that may have reached the person (`unsure`: a send that timed out
after the channel took it, or any attempt after such a send) leaves its run
`sending` instead of `retry`: the next attempt then takes the run over as
interrupted and says it is sent again (`claims.take_over`).
"""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta

from panager.clock import Clock
from panager.services.schedules.claims import ScheduleClaims
from panager.services.schedules.coalesce import Coalescer
from panager.services.schedules.delivery import DeliveryFailed, PermanentFailure
from panager.services.schedules.occurrences import UNEXPECTED_ERROR, Plan
from panager.services.schedules.types import RunRecord, RunTicket, Schedule, Settlement

log = logging.getLogger(__name__)

RETRY_DELAYS = (30, 120, 600, 1800)  # seconds before attempts 2..5; then the run is failed
NO_ROUTE_DELAY = timedelta(seconds=60)  # nobody can reach the user now: look again later
# Seconds between attempts to record a delivery that happened (the last one repeats): the
# message is out, so the worker keeps trying while it lives rather than send it again.
RECORD_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Outcomes:
    """Records one worker's outcomes, as that worker (`worker`) at the clock's time."""

    def __init__(self, claims: ScheduleClaims, worker: str, clock: Clock) -> None:
        self.claims = claims
        self.worker = worker
        self.clock = clock
        # Deliveries are recorded in one statement per batch (see coalesce.py).
        self._complete = Coalescer(self._complete_batch)

    async def delivered(self, schedule: Schedule, ticket: RunTicket, plan: Plan) -> None:
        """Record a delivery that happened, retrying until the database answers.

        Turning the run into a retry would send the message again. If the process ends
        first, the run stays `sending` and the next attempt carries the "sent again" note."""
        for attempt in itertools.count():
            try:
                await self._complete.submit((schedule, ticket, self.after(plan)))
                return
            except Exception as exc:
                delay = RECORD_BACKOFF[min(attempt, len(RECORD_BACKOFF) - 1)]
                log.warning(
                    "scheduler: %s was delivered but recording it failed (%s); again in %.1f s",
                    schedule.id, type(exc).__name__, delay, exc_info=attempt == 0,
                )
                await self.clock.sleep(delay)

    async def _complete_batch(self, items: list) -> list[None]:
        await self.claims.complete_runs(items, worker=self.worker, now=self.clock.now())
        return [None] * len(items)

    async def missed(self, schedule: Schedule, plan: Plan) -> None:
        """Older occurrences were skipped on the way to the one delivered: record the miss."""
        occurrence = plan.occurrence
        assert occurrence.missed_from is not None  # set whenever `missed` is
        missed = RunRecord(occurrence.missed_from, "missed", missed_count=occurrence.missed)
        await self.claims.record_run(schedule, missed, worker=self.worker, now=self.clock.now())

    async def skip(self, schedule: Schedule, plan: Plan) -> str:
        """Nothing within the grace window: record the miss and move on."""
        occurrence = plan.occurrence
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

    def after(self, plan: Plan) -> Settlement:
        """The schedule's next state after delivering the planned occurrence."""
        return Settlement(
            next_run_at=plan.following or plan.due,
            status="active" if plan.following else "done",
            last_run_at=self.clock.now(),
        )

    async def not_ours(self, schedule: Schedule, plan: Plan) -> str:
        """The fence refused: another worker sends it, or it was already finished."""
        status = await self.claims.run_status(schedule, plan.due)
        if status in ("delivered", "failed", "missed"):  # finished, but not moved on yet
            settlement = self.after(plan)
            await self.claims.settle(schedule, settlement, worker=self.worker, now=self.clock.now())
        return "skipped"

    async def hand_back(self, schedule: Schedule, plan: Plan) -> str:
        """The user's turn is running: hand the agent run back, slot freed (worker.BUSY_DELAY)."""
        settlement = Settlement(
            next_run_at=plan.due,
            attempts=schedule.attempts,
            last_error=schedule.last_error,
            retry_at=None,  # claimable at once; the worker pauses the user (_turn_busy)
        )
        await self.claims.settle(schedule, settlement, worker=self.worker, now=self.clock.now())
        return "busy"

    async def no_route(self, schedule: Schedule, plan: Plan, *, unsure: bool = False) -> str:
        """No front end can reach the user: keep it due; the grace rules apply next time."""
        now = self.clock.now()
        error = "no front end could reach the user"
        settlement = Settlement(
            next_run_at=plan.due, last_error=error, retry_at=now + NO_ROUTE_DELAY
        )
        run = RunRecord(plan.due, _pending(unsure), late=plan.late, error=error)
        await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
        return "no_route"

    async def attempt_failed(
        self, schedule: Schedule, plan: Plan, exc: Exception, ticket: RunTicket | None
    ) -> str:
        """An attempt raised: record it with a plain sentence, never the exception's text.

        `ticket` is the run's fence when it was taken (None before the send)."""
        if isinstance(exc, DeliveryFailed):
            error = str(exc)  # our own plain sentence
        elif isinstance(exc, TimeoutError):
            error = "timed out"
        else:
            log.warning("scheduler: delivery of %s raised", schedule.id, exc_info=exc)
            error = UNEXPECTED_ERROR
        # Fenced and timed out: handed to the channel without an answer. Taken over: an
        # earlier send may have arrived. Either way the next attempt carries the note.
        unsure = ticket is not None and (ticket.interrupted or isinstance(exc, TimeoutError))
        permanent = isinstance(exc, PermanentFailure)
        return await self.failed(schedule, plan, error, permanent=permanent, unsure=unsure)

    async def failed(
        self,
        schedule: Schedule,
        plan: Plan,
        error: str,
        *,
        permanent: bool = False,
        unsure: bool = False,
    ) -> str:
        """Retry with backoff, or record the final failure (visible in /schedules).

        `unsure`: the message may have arrived, so the retry is flagged as sent again."""
        now = self.clock.now()
        due = plan.due
        attempts = schedule.attempts + 1
        if not permanent and attempts <= len(RETRY_DELAYS):
            retry_at = now + timedelta(seconds=RETRY_DELAYS[attempts - 1])
            settlement = Settlement(
                next_run_at=due, attempts=attempts, last_error=error, retry_at=retry_at
            )
            run = RunRecord(due, _pending(unsure), late=plan.late, attempts=attempts, error=error)
            await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
            log.warning("scheduler: %s attempt %d failed (%s)", schedule.id, attempts, error)
            return "retry"
        settlement = Settlement(
            next_run_at=plan.following or due,
            status="active" if plan.following else "failed",
            last_error=f"delivery of {plan.label} failed after {attempts} attempt(s): {error}",
        )
        run = RunRecord(due, "failed", late=plan.late, attempts=attempts, error=error)
        await self.claims.settle(schedule, settlement, worker=self.worker, now=now, run=run)
        log.error("scheduler: %s failed permanently (%s)", schedule.id, error)
        return "failed"


def _pending(unsure: bool) -> str:
    """The run state an attempt to come starts from: `sending` is taken over with the note."""
    return "sending" if unsure else "retry"

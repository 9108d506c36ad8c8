"""The scheduler worker: claim due schedules, deliver them, record what happened.

Any number of workers, in any number of processes or machines, can run
against one database: rows are claimed with `FOR UPDATE SKIP LOCKED` and a
lease, and the occurrence's `schedule_runs` row is the fence that lets only
one worker send it (see `services/schedules/service.py`).

Crash recovery: a worker holds a presence lock while it lives, and live workers
take back a dead worker's claims within about a second (see
`services/schedules/liveness.py`); the lease remains the fallback.

Time: every decision reads the injected `Clock` (a `FakeClock` in tests).
The run loop paces itself with real waits — at most `poll_seconds`, less when
the next schedule is sooner — and wakes at once on `LISTEN/NOTIFY` when a
schedule is created. Tests call `run_once()` instead and never sleep.

Missed runs: an occurrence found more than the grace window after its due
time is recorded as `missed` (reported to the user once) instead of being
sent; a recurring schedule skips forward to its newest due occurrence and
never replays the backlog. A failed delivery is retried with backoff; the
last failure marks the run `failed` and shows in /schedules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, TypedDict

import psycopg

from panager.clock import Clock
from panager.errors import UserBusy
from panager.services.schedules.coalesce import Coalescer
from panager.services.schedules.liveness import worker_liveness
from panager.services.schedules.occurrences import (
    Occurrence,
    compose,
    error_text,
    local_label,
    missed_report,
    next_after,
    plan_occurrence,
    short,
)
from panager.services.schedules.service import (
    NOTIFY_CHANNEL,
    MissedRun,
    RunRecord,
    RunRequest,
    RunTicket,
    Schedule,
    ScheduleService,
    Settlement,
)
from panager.services.users import User
from panager.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SYSTEM_KINDS = frozenset({"heartbeat", "briefing", "webhook", "tidy"})  # system jobs
RETRY_DELAYS = (30, 120, 600, 1800)  # seconds before attempts 2..5; then the run is failed
NO_ROUTE_DELAY = timedelta(seconds=60)  # nobody can reach the user now: look again later
# The user's turn is running: the agent run is handed back (claimable at once) and this
# worker leaves that user's rows alone until its own run of the user ends, or this long.
BUSY_DELAY = timedelta(seconds=2)
MIN_WAIT = 0.005
STOP_TIMEOUT = 5.0


class Delivery(Protocol):
    """How a worker reaches users: the app's messenger and assistant."""

    async def send(self, user: User, text: str, key: str | None = None) -> bool:
        """Deliver text; False when no front end can reach the user now.

        `key` is the same for every attempt at one occurrence, so a channel that can
        (Discord's message nonce) shows a re-send after a crash only once."""
        ...

    async def run_agent(
        self, user: User, instruction: str, *, tainted: bool = False
    ) -> AgentAnswer:
        """Run the graph as a system trigger in the user's thread; return the answer.

        `tainted`: the instruction was written in a model call that had read outside
        content (the run is tainted from its start)."""
        ...

    async def run_system(self, user: User, schedule: Schedule, due: datetime) -> AgentAnswer:
        """Run a system job (heartbeat, briefing, webhook call); empty text: nothing to say."""
        ...


@dataclass(frozen=True)
class AgentAnswer:
    """The result of a scheduled agent run."""

    text: str
    ok: bool = True


class DeliveryFailed(Exception):
    """A delivery attempt failed; it is retried with backoff."""


class PermanentFailure(DeliveryFailed):
    """A delivery that must not be retried (e.g. the user is blocked)."""


def default_worker_id() -> str:
    """host:pid:random — unique per worker, readable in the database."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class WorkerOptions(TypedDict, total=False):
    """Tuning a worker; the app fills these from the YAML runtime config."""

    grace_seconds: float
    poll_seconds: float
    lease_seconds: float
    concurrency: int
    user_in_flight: int  # runs of one user at once in this worker (fairness)
    listen_url: str | None  # LISTEN for new schedules (None: poll only)
    worker_id: str | None
def _due(occ: Occurrence) -> datetime:
    """The time of an occurrence being delivered (process() hands on only those)."""
    assert occ.deliver is not None
    return occ.deliver


class _UsersFilter(TypedDict):
    """Which users a worker serves (the keyword arguments of the claim queries)."""

    only_users: list[int] | None
    skip_users: list[int]


class SchedulerWorker:
    """Claims and delivers due schedules; `run(stop)` for production, `run_once()` in tests."""

    def __init__(
        self,
        service: ScheduleService,
        delivery: Delivery,
        *,
        clock: Clock,
        grace_seconds: float = 3600,
        poll_seconds: float = 5.0,
        lease_seconds: float = 60,
        concurrency: int = 64,
        user_in_flight: int = 2,
        listen_url: str | None = None,
        only_users: Sequence[int] | None = None,
        skip_users: Sequence[int] = (),
        worker_id: str | None = None,
    ) -> None:
        self.service = service
        self.claims = service.claims
        self.delivery = delivery
        self.clock = clock
        self.grace = timedelta(seconds=grace_seconds)
        self.poll = poll_seconds
        self.lease = timedelta(seconds=lease_seconds)
        self.concurrency = concurrency
        self.user_in_flight = user_in_flight
        self._in_flight: defaultdict[int, int] = defaultdict(int)  # runs per user, this worker
        self._turn_busy: dict[int, datetime] = {}  # user → until when their turn blocks runs
        self.listen_url = listen_url
        self.users_filter: _UsersFilter = {
            "only_users": list(only_users) if only_users is not None else None,
            "skip_users": list(skip_users),
        }
        self.id = worker_id or default_worker_id()
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._saturated = False
        self._missed_pending = False
        # One statement per batch for the fence and for completions (see
        # services/schedules/coalesce.py).
        self._begin = Coalescer(self._begin_batch)
        self._complete = Coalescer(self._complete_batch)

    # -- loops -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver due schedules until `stop` is set (polling + LISTEN/NOTIFY wake-ups)."""
        if not self.listen_url:
            return await self._run(stop)
        async with worker_liveness(
            self.listen_url, self.id, self.service.pool, lambda _: self._wake.set()
        ):
            await self._run(stop)

    async def _run(self, stop: asyncio.Event) -> None:
        listener = asyncio.create_task(self._listen(self.listen_url)) if self.listen_url else None
        log.info("scheduler worker %s started", self.id)
        try:
            await self._guarded(self.report_missed)
            while not stop.is_set():
                self._wake.clear()
                await self._guarded(self.tick)
                if self._missed_pending:
                    await self._guarded(self.report_missed)
                await self._idle(stop)
        finally:
            if listener is not None:
                await cancel_and_wait([listener])
            await self._finish_in_flight()
            await self._guarded(self._release)
            log.info("scheduler worker %s stopped", self.id)

    async def run_once(self) -> int:
        """Deliver everything due now and wait for it; returns how many schedules were handled."""
        handled = 0
        while True:
            handled += await self.tick()
            if not self._tasks:
                break
            await asyncio.wait(set(self._tasks))
        if self._missed_pending:
            await self.report_missed()
        return handled

    async def tick(self) -> int:
        """Claim what is due now (up to the free concurrency) and start delivering it."""
        claimed_total = 0
        while (free := self.concurrency - len(self._tasks)) > 0:
            claimed, users = await self.claims.claim_fair(
                self.id,
                self.clock.now(),
                lease=self.lease,
                limit=free,
                per_user=self.user_in_flight,
                busy=self._busy(),
                **self.users_filter,
            )
            for schedule in claimed:
                self._spawn(schedule, users.get(schedule.user_id))
            claimed_total += len(claimed)
            if len(claimed) < free:
                self._saturated = False
                return claimed_total
        self._saturated = True
        return claimed_total

    def _spawn(self, schedule: Schedule, user: User | None) -> None:
        self._in_flight[schedule.user_id] += 1
        task = asyncio.create_task(self._process_logged(schedule, user))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._task_done(done, schedule.user_id))

    def _busy(self) -> dict[int, int]:
        """Runs in flight per user; a user whose turn blocked a run counts as full."""
        now = self.clock.now()
        for uid in [uid for uid, until in self._turn_busy.items() if until <= now]:
            del self._turn_busy[uid]
        return {**self._in_flight, **dict.fromkeys(self._turn_busy, self.user_in_flight)}

    def _capped_users(self) -> list[int]:
        """Users with `user_in_flight` runs in flight here: their due rows wait for a slot."""
        return [uid for uid, n in self._busy().items() if n >= self.user_in_flight]

    def _task_done(self, task: asyncio.Task, user_id: int) -> None:
        self._tasks.discard(task)
        left = self._in_flight[user_id] - 1
        if left > 0:
            self._in_flight[user_id] = left
        else:
            self._in_flight.pop(user_id, None)
        if left + 1 >= self.user_in_flight:
            self._wake.set()  # that user's waiting rows may be claimed now
        # Refill in bulk once half the slots are free: fewer, larger claims.
        if self._saturated and len(self._tasks) <= self.concurrency // 2:
            self._wake.set()

    async def _process_logged(self, schedule: Schedule, user: User | None) -> None:
        try:
            outcome = await self.process(schedule, user)
        except Exception:  # the lease runs out and another attempt follows
            log.exception("scheduler: handling schedule %s failed", schedule.id)
            return
        if outcome == "busy":
            self._turn_busy[schedule.user_id] = self.clock.now() + BUSY_DELAY
        elif self._turn_busy.pop(schedule.user_id, None) is not None:
            self._wake.set()  # this worker's run of the user ended: the handed-back run next

    async def _guarded(self, step: Callable[[], Awaitable[object]]) -> None:
        try:
            await step()
        except Exception:
            log.exception("scheduler worker %s: %s failed", self.id, step.__name__)

    async def _idle(self, stop: asyncio.Event) -> None:
        """Wait for the next due time (≤ poll), a NOTIFY, a freed slot or stop."""
        if self._wake.is_set() or stop.is_set():
            return
        timeout = self.poll
        if len(self._tasks) < self.concurrency:
            skip = [*self.users_filter["skip_users"], *self._capped_users()]
            only = self.users_filter["only_users"]
            try:
                due = await self.claims.next_due(only_users=only, skip_users=skip)
            except Exception:
                log.warning("scheduler: cannot read the next due time; polling", exc_info=True)
                due = None
            if self._turn_busy:  # look again when a busy user's pause ends
                pause_end = min(self._turn_busy.values())
                due = pause_end if due is None else min(due, pause_end)
            if due is not None:
                until = (due - self.clock.now()).total_seconds()
                timeout = min(timeout, max(until, MIN_WAIT))
        waiters = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _listen(self, url: str) -> None:
        """LISTEN on a dedicated connection; any notification wakes the loop."""
        delay = 1.0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._wake.set()  # catch up on anything created while not listening
                    delay = 1.0
                    async for _ in conn.notifies():
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("scheduler: LISTEN connection lost (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)

    async def _release(self) -> None:
        """Hand back what this worker still holds, so others need not wait for the lease."""
        released = await self.claims.release_claims(self.id)
        if released:
            log.info("scheduler worker %s released %d claimed schedule(s)", self.id, released)

    async def _finish_in_flight(self) -> None:
        """Let running deliveries finish briefly; cancelled ones are retried after the lease."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_TIMEOUT)
        await cancel_and_wait(pending)

    # -- one schedule ------------------------------------------------------------------------

    async def process(self, schedule: Schedule, user: User | None) -> str:
        """Handle one claimed schedule; returns what happened (for logs and tests)."""
        occurrence = plan_occurrence(schedule, self.clock.now(), self.grace)
        if occurrence.missed:
            self._missed_pending = True
            self._wake.set()  # report it soon, not at the next due time
        if occurrence.deliver is None:
            return await self._skip(schedule, occurrence)
        if occurrence.missed:
            assert occurrence.missed_from is not None  # set whenever `missed` is
            missed = RunRecord(occurrence.missed_from, "missed", missed_count=occurrence.missed)
            await self.claims.record_run(
                schedule, missed, worker=self.id, now=self.clock.now()
            )
        try:
            return await self._deliver(schedule, user, occurrence)
        except UserBusy:
            return await self._hand_back(schedule, occurrence)
        except PermanentFailure as exc:
            return await self._failed(schedule, occurrence, str(exc), permanent=True)
        except (DeliveryFailed, TimeoutError) as exc:
            return await self._failed(schedule, occurrence, str(exc) or "timed out")
        except Exception as exc:
            log.warning("scheduler: delivery of %s raised", schedule.id, exc_info=True)
            return await self._failed(schedule, occurrence, error_text(exc))

    async def _skip(self, schedule: Schedule, occurrence: Occurrence) -> str:
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
            schedule, settlement, worker=self.id, now=self.clock.now(), run=missed
        )
        return "missed"

    async def _deliver(self, schedule: Schedule, user: User | None, occ: Occurrence) -> str:
        if user is None or user.status == "blocked":
            raise PermanentFailure("the user is blocked or no longer exists")
        due = _due(occ)
        output = None
        if schedule.kind != "reminder":
            output = await self.claims.stored_output(schedule, due)
            if output is None:
                output = await self._run_agent(schedule, user, due)
        request = RunRequest(schedule, due, occ.late, output)
        ticket = await self._begin.submit(request)
        if ticket is None:
            ticket = await self.claims.take_over(request, worker=self.id, now=self.clock.now())
        if ticket is None:
            return await self._not_ours(schedule, due)
        if schedule.kind in SYSTEM_KINDS and not (ticket.output or output):
            # a system job with nothing to say (a quiet heartbeat): done, nothing sent
            await self._complete.submit((schedule, ticket, self._after(schedule, due)))
            return "quiet"
        text = ticket.output or output or schedule.message
        text = compose(schedule, text, due, late=occ.late, resent=ticket.interrupted)
        timeout = self.lease.total_seconds() / 2  # a send never outlives the lease
        send = self.delivery.send(user, text, key=f"run{ticket.id}")
        if not await asyncio.wait_for(send, timeout):
            return await self._no_route(schedule, occ)
        await self._complete.submit((schedule, ticket, self._after(schedule, due)))
        return "delivered"

    async def _begin_batch(self, requests: list[RunRequest]) -> list[RunTicket | None]:
        return await self.claims.begin_runs(
            requests, worker=self.id, now=self.clock.now(), lease=self.lease
        )

    async def _complete_batch(self, items: list) -> list[None]:
        await self.claims.complete_runs(items, worker=self.id, now=self.clock.now())
        return [None] * len(items)

    async def _run_agent(self, schedule: Schedule, user: User, due: datetime) -> str:
        async with self._keep_lease(schedule):
            if schedule.kind in SYSTEM_KINDS:
                answer = await self.delivery.run_system(user, schedule, due)
            else:
                answer = await self.delivery.run_agent(
                    user, schedule.message, tainted=schedule.tainted
                )
        if not answer.ok:
            raise DeliveryFailed(f"the scheduled run failed: {short(answer.text, 200)}")
        return answer.text

    @contextlib.asynccontextmanager
    async def _keep_lease(self, schedule: Schedule) -> AsyncIterator[None]:
        """Renew the lease while a long agent run is in progress."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lease.total_seconds() / 3)
                await self.claims.renew(schedule, self.id, self.clock.now() + self.lease)

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            await cancel_and_wait([task])

    def _after(self, schedule: Schedule, delivered: datetime) -> Settlement:
        """The schedule's next state after delivering the occurrence at `delivered`."""
        nxt = next_after(schedule, delivered)
        return Settlement(
            next_run_at=nxt or delivered,
            status="active" if nxt else "done",
            last_run_at=self.clock.now(),
        )

    async def _not_ours(self, schedule: Schedule, when: datetime) -> str:
        """The fence refused: another worker sends it, or it was already finished."""
        status = await self.claims.run_status(schedule, when)
        if status in ("delivered", "failed", "missed"):  # finished, but not moved on yet
            settlement = self._after(schedule, when)
            await self.claims.settle(schedule, settlement, worker=self.id, now=self.clock.now())
        return "skipped"

    async def _hand_back(self, schedule: Schedule, occ: Occurrence) -> str:
        """The user's turn is running: hand the agent run back, slot freed (see BUSY_DELAY)."""
        settlement = Settlement(
            next_run_at=occ.deliver,
            attempts=schedule.attempts,
            last_error=schedule.last_error,
            retry_at=None,  # claimable at once; this worker pauses the user (_turn_busy)
        )
        await self.claims.settle(schedule, settlement, worker=self.id, now=self.clock.now())
        return "busy"

    async def _no_route(self, schedule: Schedule, occ: Occurrence) -> str:
        """No front end can reach the user: keep it due; the grace rules apply next time."""
        now = self.clock.now()
        error = "no front end could reach the user"
        settlement = Settlement(
            next_run_at=occ.deliver, last_error=error, retry_at=now + NO_ROUTE_DELAY
        )
        run = RunRecord(_due(occ), "retry", late=occ.late, error=error)
        await self.claims.settle(schedule, settlement, worker=self.id, now=now, run=run)
        return "no_route"

    async def _failed(
        self, schedule: Schedule, occ: Occurrence, error: str, *, permanent: bool = False
    ) -> str:
        """Retry with backoff, or record the final failure (visible in /schedules)."""
        now = self.clock.now()
        due = _due(occ)
        attempts = schedule.attempts + 1
        if not permanent and attempts <= len(RETRY_DELAYS):
            retry_at = now + timedelta(seconds=RETRY_DELAYS[attempts - 1])
            settlement = Settlement(
                next_run_at=due, attempts=attempts, last_error=error, retry_at=retry_at
            )
            run = RunRecord(due, "retry", late=occ.late, attempts=attempts, error=error)
            await self.claims.settle(schedule, settlement, worker=self.id, now=now, run=run)
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
        await self.claims.settle(schedule, settlement, worker=self.id, now=now, run=run)
        log.error("scheduler: %s failed permanently (%s)", schedule.id, error)
        return "failed"

    # -- missed-run reports ------------------------------------------------------------------

    async def report_missed(self) -> int:
        """Tell each user once about runs recorded as missed; returns how many were reported."""
        self._missed_pending = False
        missed = await self.claims.claim_unreported_missed(
            self.clock.now(), **self.users_filter
        )
        by_user: dict[int, list[MissedRun]] = defaultdict(list)
        for run in missed:
            by_user[run.user_id].append(run)
        users = await self.claims.users(list(by_user)) if by_user else {}
        reported = 0
        for user_id, runs in by_user.items():
            if await self._send_report(users.get(user_id), runs):
                reported += len(runs)
            else:
                await self.claims.unmark_reported([r.id for r in runs])
        return reported

    async def _send_report(self, user: User | None, runs: list[MissedRun]) -> bool:
        if user is None or user.status == "blocked":
            return True  # nobody to tell; do not keep retrying
        try:
            text = missed_report(runs, self.grace)
            timeout = self.lease.total_seconds() / 2
            return await asyncio.wait_for(self.delivery.send(user, text), timeout)
        except Exception:
            log.warning("scheduler: could not report missed runs to %s", user.id, exc_info=True)
            return False

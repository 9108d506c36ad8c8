# Over 400 lines, kept whole: one claim loop and the path of one claimed schedule; its decisions
# (occurrences.py), records (outcomes.py), reports and wake-ups already sit beside it.
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

A message that went out is never sent again silently. Once the channel has
accepted it, recording the delivery is retried (`outcomes.RECORD_BACKOFF`) until the
database answers, instead of turning the run into a retry. A send whose outcome
is unknown (it timed out after being handed to the channel, or it follows such
a send) leaves its run `sending`, and whoever sends it next takes the run over
and adds the "sent again" note — this worker too, once it no longer handles it.

Beside it: the `Delivery` protocol it calls (`delivery.py`), what each outcome
writes to the database (`outcomes.py`), the missed-run reports (`reports.py`)
and the LISTEN wake-up line (`wakeups.py`).
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
from datetime import datetime, timedelta
from typing import TypedDict

from panager.clock import Clock
from panager.errors import UserBusy
from panager.services.proposals import Offer
from panager.services.schedules.coalesce import Coalescer
from panager.services.schedules.delivery import (
    AgentAnswer,
    Delivery,
    DeliveryFailed,
    PermanentFailure,
)
from panager.services.schedules.liveness import worker_liveness
from panager.services.schedules.occurrences import Plan, plan, short
from panager.services.schedules.outcomes import Outcomes
from panager.services.schedules.reports import MissedReports
from panager.services.schedules.service import (
    RunRequest,
    RunTicket,
    Schedule,
    ScheduleService,
)
from panager.services.schedules.wakeups import listen_for_wakeups
from panager.services.users import User
from panager.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SYSTEM_KINDS = frozenset({"heartbeat", "briefing", "webhook", "tidy"})  # system jobs
# The user's turn is running: the agent run is handed back (claimable at once) and this
# worker leaves that user's rows alone until its own run of the user ends, or this long.
BUSY_DELAY = timedelta(seconds=2)
MIN_WAIT = 0.005
STOP_TIMEOUT = 5.0


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
        # Schedules this worker is handling now → their run's ticket once fenced. A `sending`
        # run of ours outside it was lost track of (a failure) and is taken over, with the note.
        self._handling: dict[str, RunTicket | None] = {}
        self.listen_url = listen_url
        self.users_filter: _UsersFilter = {
            "only_users": list(only_users) if only_users is not None else None,
            "skip_users": list(skip_users),
        }
        self.id = worker_id or default_worker_id()
        self.outcomes = Outcomes(self.claims, self.id, clock)  # what each outcome records
        self.reports = MissedReports(self.claims, delivery, grace=self.grace, lease=self.lease)
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._saturated = False
        self._missed_pending = False
        # One statement per batch for the fence (services/schedules/coalesce.py); the
        # completions are batched the same way in `Outcomes.delivered`.
        self._begin = Coalescer(self._begin_batch)

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
        listener = (
            asyncio.create_task(listen_for_wakeups(self.listen_url, self._wake.set))
            if self.listen_url
            else None
        )
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
        if schedule.id in self._handling:
            # Claimed again after its lease ran out while this worker still records its
            # delivery (the database was away): that attempt finishes it.
            return "skipped"
        self._handling[schedule.id] = None
        try:
            return await self._process(schedule, user)
        finally:
            del self._handling[schedule.id]

    async def _process(self, schedule: Schedule, user: User | None) -> str:
        planned = plan(schedule, self.clock.now(), self.grace)  # every decision, once
        if planned.occurrence.missed:
            self._missed_pending = True
            self._wake.set()  # report it soon, not at the next due time
        if planned.occurrence.deliver is None:
            return await self.outcomes.skip(schedule, planned)
        if planned.occurrence.missed:
            await self.outcomes.missed(schedule, planned)
        try:
            return await self._deliver(schedule, user, planned)
        except UserBusy:
            return await self.outcomes.hand_back(schedule, planned)
        except Exception as exc:  # the run's ticket tells whether it may have arrived
            ticket = self._handling.get(schedule.id)
            return await self.outcomes.attempt_failed(schedule, planned, exc, ticket)

    async def _deliver(self, schedule: Schedule, user: User | None, planned: Plan) -> str:
        if user is None or user.status == "blocked":
            raise PermanentFailure("the user is blocked or no longer exists")
        due = planned.due
        output: str | None = None
        offers: tuple[Offer, ...] = ()
        if schedule.kind != "reminder":
            stored = await self.claims.stored_output(schedule, due)
            if stored is None:
                answer = await self._run_agent(schedule, user, due)
                output, offers = answer.text, answer.offers
            else:
                output, offers = stored
        request = RunRequest(schedule, due, planned.late, output, offers)
        ticket = await self._begin.submit(request)
        if ticket is None:
            ticket = await self.claims.take_over(request, worker=self.id, now=self.clock.now())
        if ticket is None:
            return await self.outcomes.not_ours(schedule, planned)
        self._handling[schedule.id] = ticket
        if schedule.kind in SYSTEM_KINDS and not (ticket.output or output):
            # a system job with nothing to say (a quiet heartbeat): done, nothing sent
            await self.outcomes.delivered(schedule, ticket, planned)
            return "quiet"
        if ticket.output:  # an earlier attempt's answer: exactly its offers
            text, offers = ticket.output, ticket.offers
        else:
            text = output or planned.reminder
        text = planned.words(text, resent=ticket.interrupted)
        timeout = self.lease.total_seconds() / 2  # a send never outlives the lease
        send = self.delivery.send(user, text, key=f"run{ticket.id}", offers=offers)
        if not await asyncio.wait_for(send, timeout):
            return await self.outcomes.no_route(schedule, planned, unsure=ticket.interrupted)
        await self.outcomes.delivered(schedule, ticket, planned)  # patiently: it went out
        return "delivered"

    async def _begin_batch(self, requests: list[RunRequest]) -> list[RunTicket | None]:
        return await self.claims.begin_runs(
            requests, worker=self.id, now=self.clock.now(), lease=self.lease
        )

    async def _run_agent(self, schedule: Schedule, user: User, due: datetime) -> AgentAnswer:
        async with self._keep_lease(schedule):
            if schedule.kind in SYSTEM_KINDS:
                answer = await self.delivery.run_system(user, schedule, due)
            else:
                answer = await self.delivery.run_agent(
                    user, schedule.message, tainted=schedule.tainted,
                    model=(schedule.params or {}).get("model"),
                )
        if not answer.ok:
            raise DeliveryFailed(f"the scheduled run failed: {short(answer.text, 200)}")
        return answer

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

    # -- missed-run reports ------------------------------------------------------------------

    async def report_missed(self) -> int:
        """Tell each user once about runs recorded as missed; returns how many were reported."""
        self._missed_pending = False
        missed = await self.claims.claim_unreported_missed(
            self.clock.now(), **self.users_filter
        )
        return await self.reports.send(missed)

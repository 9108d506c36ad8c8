"""Shared pieces for the scheduler tests: a recording messenger and app/worker set-up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import psycopg

from panager.services.schedules.claims import ScheduleClaims


class RecordingMessenger:
    """Records every delivery; can be told to fail or to refuse (no route)."""

    def __init__(self, *, fail: bool = False, accept: bool = True) -> None:
        self.sent: list[tuple[int, str]] = []
        self.offers: list[tuple] = []  # the offers of each delivery, as sent
        self.fail = fail
        self.accept = accept

    async def send(self, user, text: str, *, link: dict | None = None, key=None,
                   offers=()) -> bool:
        """Record (user id, text); raise when failing; False when refusing."""
        if self.fail:
            raise ConnectionError("discord is down")
        if not self.accept:
            return False
        self.sent.append((user.id, text))
        self.offers.append(tuple(offers))
        return True

    def texts(self, user_id: int | None = None) -> list[str]:
        """Texts delivered (to one user, or to everyone)."""
        return [t for uid, t in self.sent if user_id is None or uid == user_id]


class FlakyClaims(ScheduleClaims):
    """A worker's claims on the real database, with chosen writes failing as in a restart.

    `failing` maps a method (`complete_runs`, `settle`) to how many of its next calls
    raise OperationalError before reaching PostgreSQL; every other statement runs.
    `while_down(name, failures)` runs before each such failure."""

    def __init__(
        self,
        claims: ScheduleClaims,
        while_down: Callable[[str, int], Awaitable[None]] | None = None,
        **failing: int,
    ) -> None:
        super().__init__(claims.pool)
        self.failing = dict(failing)
        self.failures: Counter[str] = Counter()
        self.while_down = while_down

    def install(self, worker) -> FlakyClaims:
        """Make `worker` (and what it records outcomes with) use these claims."""
        worker.claims = worker.outcomes.claims = self
        return self

    async def _maybe_fail(self, name: str) -> None:
        if self.failing.get(name, 0) <= 0:
            return
        self.failing[name] -= 1
        self.failures[name] += 1
        if self.while_down is not None:
            await self.while_down(name, self.failures[name])
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    async def complete_runs(self, *args, **kwargs):
        await self._maybe_fail("complete_runs")
        return await super().complete_runs(*args, **kwargs)

    async def settle(self, *args, **kwargs):
        await self._maybe_fail("settle")
        return await super().settle(*args, **kwargs)


async def scheduler_app(make_app, model=None, **overrides):
    """A started app whose messenger is a RecordingMessenger."""
    app = await make_app(model=model, **overrides)
    recorder = RecordingMessenger()
    app.deps.messenger.add(recorder)
    return app, recorder


def worker(app, **options):
    """A worker for tests: no LISTEN connection unless asked, all users."""
    options.setdefault("listen_url", None)
    return app.make_worker(**options)


def utc(*args: int) -> datetime:
    """An aware UTC datetime."""
    return datetime(*args, tzinfo=UTC)


async def runs(app, schedule_id: str) -> list[dict]:
    """The schedule_runs rows of one schedule, oldest occurrence first."""
    async with app.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM schedule_runs WHERE schedule_id = %s ORDER BY scheduled_for",
            (schedule_id,),
        )
        return await cur.fetchall()

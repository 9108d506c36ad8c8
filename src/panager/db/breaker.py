"""A circuit breaker per model endpoint, kept in PostgreSQL (`model_breakers`).

An endpoint whose calls failed `failures` times in a row (each a call that used up
its retries there: 429, 5xx, timeout, refused connection) is *open* for
`cooldown` seconds: callers skip it for the fallbacks it names. After the cool-down
the next call tries it again; a success closes it, a failure opens it for another
cool-down. The rows are shared, so every process — workers, web, `panager doctor`
— sees the same state. Time comes from the injectable Clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from panager.clock import Clock
from panager.db.pool import Pool

READ = "SELECT failures, open_until FROM model_breakers WHERE endpoint = %(e)s"
FAILED = """
INSERT INTO model_breakers (endpoint, failures, open_until, last_error, updated_at)
VALUES (%(e)s, 1, CASE WHEN %(n)s <= 1 THEN %(until)s END, %(why)s, %(now)s)
ON CONFLICT (endpoint) DO UPDATE SET
    failures = model_breakers.failures + 1,
    open_until = CASE WHEN model_breakers.failures + 1 >= %(n)s THEN %(until)s
                      ELSE model_breakers.open_until END,
    last_error = %(why)s, updated_at = %(now)s
RETURNING failures, open_until
"""
SUCCEEDED = """
UPDATE model_breakers SET failures = 0, open_until = NULL, updated_at = %(now)s
WHERE endpoint = %(e)s AND (failures > 0 OR open_until IS NOT NULL)
"""
ALL = "SELECT endpoint, failures, open_until, last_error FROM model_breakers ORDER BY endpoint"


@dataclass(frozen=True)
class BreakerState:
    """One endpoint's breaker as `panager doctor` shows it."""

    endpoint: str
    failures: int
    open_until: datetime | None
    last_error: str | None

    def open_at(self, now: datetime) -> bool:
        """Whether callers skip the endpoint at `now`."""
        return self.open_until is not None and self.open_until > now


class CircuitBreakers:
    """The breakers of every endpoint (see the module doc)."""

    def __init__(
        self, pool: Pool, clock: Clock, *, failures: int = 3, cooldown: float = 60.0
    ) -> None:
        self.pool = pool
        self.clock = clock
        self.failures = failures
        self.cooldown = timedelta(seconds=cooldown)
        self._troubled: set[str] = set()  # endpoints whose row last showed failures

    async def is_open(self, endpoint: str) -> bool:
        """Whether calls should skip `endpoint` now (its cool-down has not ended)."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(READ, {"e": endpoint})).fetchone()
        if row is None or (not row["failures"] and row["open_until"] is None):
            self._troubled.discard(endpoint)
            return False
        self._troubled.add(endpoint)
        return row["open_until"] is not None and row["open_until"] > self.clock.now()

    async def failed(self, endpoint: str, reason: str) -> bool:
        """Count a failed call; True when the breaker is open now."""
        now = self.clock.now()
        params = {"e": endpoint, "n": self.failures, "until": now + self.cooldown,
                  "why": reason[:200], "now": now}
        async with self.pool.connection() as conn:
            row = await (await conn.execute(FAILED, params)).fetchone()
        self._troubled.add(endpoint)
        assert row is not None  # INSERT … RETURNING
        return row["open_until"] is not None and row["open_until"] > now

    async def succeeded(self, endpoint: str) -> None:
        """A call answered: close the breaker (a write only when it had failures)."""
        if endpoint not in self._troubled:
            return
        async with self.pool.connection() as conn:
            await conn.execute(SUCCEEDED, {"e": endpoint, "now": self.clock.now()})
        self._troubled.discard(endpoint)

    async def states(self) -> list[BreakerState]:
        """Every endpoint that has a breaker row."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(ALL)).fetchall()
        return [BreakerState(r["endpoint"], r["failures"], r["open_until"], r["last_error"])
                for r in rows]

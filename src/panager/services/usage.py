"""Token usage per user, per day, per model (table `token_usage`).

Every model call adds its prompt/completion tokens with one upsert (committed
without waiting for the disk flush: it is on every turn's path). Days are UTC
dates, the same for everyone and not moved by a time zone: were "today" the
person's local date, changing zone (`set_timezone` is a tool) would start a
fresh day — and a fresh daily budget — at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.queries import one
from panager.services.users import User

# Usage rows are counters, not user data: their commits need not wait for the WAL flush
# (a crash can lose the last fraction of a second of counts, never corrupt them). The setting
# is made for this statement's own transaction, in the same round trip (was BEGIN, SET LOCAL,
# INSERT, COMMIT: four).
RECORD = """
WITH async_commit AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO token_usage (user_id, day, model, prompt_tokens, completion_tokens, total_tokens, calls)
SELECT %(user_id)s, %(day)s, %(model)s, %(prompt)s, %(completion)s, %(total)s, 1
  FROM async_commit
ON CONFLICT (user_id, day, model) DO UPDATE
   SET prompt_tokens = token_usage.prompt_tokens + EXCLUDED.prompt_tokens,
       completion_tokens = token_usage.completion_tokens + EXCLUDED.completion_tokens,
       total_tokens = token_usage.total_tokens + EXCLUDED.total_tokens,
       calls = token_usage.calls + 1,
       updated_at = now()
"""
DAY_TOTAL = """
SELECT COALESCE(sum(total_tokens), 0) AS total FROM token_usage WHERE user_id = %s AND day = %s
"""
BY_MODEL_SINCE = """
SELECT model, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion,
       sum(total_tokens) AS total, sum(calls) AS calls
  FROM token_usage
 WHERE user_id = %s AND day >= %s
 GROUP BY model ORDER BY sum(total_tokens) DESC, model
"""
DAILY_SINCE = """
SELECT day, model, sum(total_tokens) AS total FROM token_usage
 WHERE user_id = %s AND day >= %s GROUP BY day, model ORDER BY day, model
"""
PER_USER_SINCE = """
SELECT user_id, sum(total_tokens) AS total, sum(calls) AS calls, max(updated_at) AS last_used
  FROM token_usage WHERE day >= %s GROUP BY user_id ORDER BY sum(total_tokens) DESC
"""
LAST_USED = "SELECT user_id, max(updated_at) AS last_used FROM token_usage GROUP BY user_id"


@dataclass(frozen=True)
class ModelUsage:
    """Tokens used with one model over a period."""

    model: str
    prompt: int
    completion: int
    total: int
    calls: int


@dataclass(frozen=True)
class UsageReport:
    """Usage of one user: today, this month and all time, per model."""

    today: list[ModelUsage]
    month: list[ModelUsage]
    all_time: list[ModelUsage]

    @staticmethod
    def total(rows: list[ModelUsage]) -> int:
        """Total tokens over `rows`."""
        return sum(r.total for r in rows)


def tokens_of(usage: dict[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, completion, total) from LangChain's usage_metadata (missing → 0)."""
    usage = usage or {}
    prompt = int(usage.get("input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    total = int(usage.get("total_tokens") or prompt + completion)
    return prompt, completion, total


class UsageService:
    """Records and reports token usage; every query is keyed by user id."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    def today(self) -> date:
        """The current usage day: today's UTC date."""
        return self.clock.now().astimezone(UTC).date()

    def resets_at(self) -> datetime:
        """When the usage day (and the daily budget) next starts afresh: UTC midnight."""
        return datetime.combine(self.today() + timedelta(days=1), time(), tzinfo=UTC)

    async def record(self, user: User, model: str, usage: dict[str, Any] | None) -> None:
        """Add one model call's tokens to today's row for (user, model)."""
        prompt, completion, total = tokens_of(usage)
        params = {
            "user_id": user.id,
            "day": self.today(),
            "model": model,
            "prompt": prompt,
            "completion": completion,
            "total": total,
        }
        async with self.pool.connection() as conn:
            await conn.execute(RECORD, params)

    async def today_total(self, user: User) -> int:
        """Tokens the user has used today (all models)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(DAY_TOTAL, (user.id, self.today()))
            return int(one(await cur.fetchone())["total"])

    async def report(self, user: User) -> UsageReport:
        """Per-model usage today, this month and all time."""
        today = self.today()
        periods = (today, today.replace(day=1), date(1970, 1, 1))
        async with self.pool.connection() as conn:
            results = []
            for since in periods:
                rows = await (await conn.execute(BY_MODEL_SINCE, (user.id, since))).fetchall()
                results.append([_usage(r) for r in rows])
        return UsageReport(*results)


def _usage(row: dict) -> ModelUsage:
    return ModelUsage(
        row["model"], int(row["prompt"]), int(row["completion"]), int(row["total"]),
        int(row["calls"]),
    )


@dataclass(frozen=True)
class DayUsage:
    """Tokens of one usage day (UTC), per model."""

    day: date
    by_model: dict[str, int]

    @property
    def total(self) -> int:
        """All models together."""
        return sum(self.by_model.values())


@dataclass(frozen=True)
class UserUsage:
    """One user's tokens over a period (the admin's view)."""

    user_id: int
    total: int
    calls: int
    last_used: Any


async def daily(service: UsageService, user: User, days: int = 30) -> list[DayUsage]:
    """The last `days` usage days (oldest first, empty days included), tokens per model."""
    today = service.today()
    first = today - timedelta(days=days - 1)
    async with service.pool.connection() as conn:
        rows = await (await conn.execute(DAILY_SINCE, (user.id, first))).fetchall()
    found: dict[date, dict[str, int]] = {first + timedelta(days=i): {} for i in range(days)}
    for row in rows:
        found.setdefault(row["day"], {})[row["model"]] = int(row["total"])
    return [DayUsage(day, models) for day, models in sorted(found.items())]


async def per_user(service: UsageService, since: date) -> list[UserUsage]:
    """Every user's tokens since `since` (days are UTC dates), most first."""
    async with service.pool.connection() as conn:
        rows = await (await conn.execute(PER_USER_SINCE, (since,))).fetchall()
    return [UserUsage(r["user_id"], int(r["total"]), int(r["calls"]), r["last_used"])
            for r in rows]


async def last_used(service: UsageService) -> dict[int, Any]:
    """When each user last made a model call."""
    async with service.pool.connection() as conn:
        rows = await (await conn.execute(LAST_USED)).fetchall()
    return {r["user_id"]: r["last_used"] for r in rows}

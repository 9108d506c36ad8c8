"""An injectable clock, so the scheduler, prompts and tests agree on "now".

Production code reads time only through a `Clock`; tests pass a `FakeClock`
and move it forward instead of sleeping.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Source of the current time and of waiting."""

    def now(self) -> datetime:
        """The current instant, timezone-aware (UTC)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait for `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current instant in UTC."""
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """Sleep on the event loop."""
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; `sleep` yields without waiting."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")

    def now(self) -> datetime:
        """The fake current instant."""
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to `when` (aware)."""
        self._now = when

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        """Move forward by seconds (or timedelta keywords) and return the new now."""
        self._now += timedelta(seconds=seconds, **delta)
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Advance by `seconds` and let other tasks run."""
        self.advance(seconds)
        await asyncio.sleep(0)

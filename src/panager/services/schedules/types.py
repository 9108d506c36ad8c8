"""What the scheduler stores and passes around: schedules, run tickets, settlements.

Plain frozen dataclasses plus the row mappers; no I/O.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import overload
from zoneinfo import ZoneInfo

from panager.services.proposals import Offer
from panager.services.schedules.recurrence import describe_schedule
from panager.services.users import User

_ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # no 0/1/i/l/o: easy to read and type


@dataclass(frozen=True)
class Schedule:
    """One reminder or scheduled agent task, as stored."""

    id: str
    user_id: int
    kind: str
    message: str
    timezone: str
    rrule: str | None
    anchor_local: datetime
    next_run_at: datetime | None
    status: str
    attempts: int
    last_error: str | None
    last_run_at: datetime | None
    claimed_by: str | None
    lease_until: datetime | None
    created_at: datetime
    updated_at: datetime
    params: dict | None = None  # a system job's settings (services/schedules/system.py)
    tainted: bool = False  # written in a model call that had read outside content

    @property
    def zone(self) -> ZoneInfo:
        """The zone the schedule's wall-clock times are in."""
        return ZoneInfo(self.timezone)

    @property
    def recurring(self) -> bool:
        """True when the schedule has a repeat rule."""
        return bool(self.rrule)

    def describe(self, now: datetime) -> str:
        """'Tue 25 Nov 2026 09:00 Asia/Seoul, in 3 days; repeats every Monday'."""
        if self.next_run_at is None:
            return f"no further runs ({self.status})"
        if now - self.next_run_at > timedelta(minutes=1) and self.status == "active":
            due = self.next_run_at.astimezone(self.zone).strftime("%a %d %b %Y %H:%M")
            return f"overdue since {due} {self.timezone}: sends as soon as a worker runs"
        return describe_schedule(self.next_run_at, self.zone, now, self.rrule)


@dataclass(frozen=True)
class RunTicket:
    """Permission to send one occurrence; `interrupted` when a previous send was cut off."""

    id: int
    output: str | None
    interrupted: bool = False
    offers: tuple[Offer, ...] = ()  # the held calls the stored output offers


@dataclass(frozen=True)
class RunRequest:
    """An occurrence a worker is about to send (`late` and an agent's `output` are stored)."""

    schedule: Schedule
    scheduled_for: datetime
    late: bool = False
    output: str | None = None
    offers: tuple[Offer, ...] = ()  # the held calls the output offers (kept with the run)


@dataclass(frozen=True)
class MissedRun:
    """An occurrence (or a run of `count` occurrences) that was not delivered in time."""

    id: int
    user_id: int
    scheduled_for: datetime
    count: int
    kind: str
    message: str
    timezone: str
    rrule: str | None


@dataclass(frozen=True)
class Settlement:
    """How to leave a schedule after handling its occurrence (see `ScheduleService.settle`)."""

    next_run_at: datetime | None
    status: str = "active"
    attempts: int = 0
    last_error: str | None = None
    last_run_at: datetime | None = None
    retry_at: datetime | None = None  # keeps the row unclaimable until then (backoff)


@dataclass(frozen=True)
class RunRecord:
    """A `schedule_runs` row to write without the fence (retry, failed, missed)."""

    scheduled_for: datetime
    status: str
    late: bool = False
    attempts: int = 0
    missed_count: int = 0
    output: str | None = None
    error: str | None = None


@overload
def schedule_from_row(row: dict) -> Schedule: ...
@overload
def schedule_from_row(row: None) -> None: ...
@overload
def schedule_from_row(row: dict | None) -> Schedule | None: ...
def schedule_from_row(row: dict | None) -> Schedule | None:
    if row is None:
        return None
    return Schedule(**{f.name: row[f.name] for f in fields(Schedule) if f.name in row})


def user_from_row(row: dict) -> User:
    return User(**{f.name: row[f.name] for f in fields(User)})


def new_schedule_id() -> str:
    """A short random id that is easy to read and type (8 chars, ~40 bits)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))

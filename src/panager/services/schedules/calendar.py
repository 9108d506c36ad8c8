"""Occurrences for people to look at: a preview before saving, and week/month grids.

Pure (no I/O): expands stored schedules and draft ones with the same
recurrence code the workers use, so what a page shows is what will be sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from panager.services.schedules.recurrence import (
    describe_schedule,
    localize,
    next_occurrence,
    occurrences_between,
    plan_schedule,
)
from panager.services.schedules.types import Schedule

PREVIEW_COUNT = 5
MAX_PER_SCHEDULE = 62  # occurrences of one schedule drawn in one view (then "and more")


@dataclass(frozen=True)
class Preview:
    """A draft schedule as it would be saved: described in words, with its next firings."""

    description: str
    upcoming: list[datetime]
    rule: str | None


@dataclass(frozen=True)
class Slot:
    """One occurrence placed on a local day."""

    when: datetime  # aware, in the viewer's zone
    schedule: Schedule


def preview(at: str, repeat: str | None, zone: ZoneInfo, now: datetime,
            count: int = PREVIEW_COUNT) -> Preview:
    """Validate like `create` (raises ScheduleInputError) and list the first `count` firings."""
    plan = plan_schedule(at, repeat, zone, now)
    upcoming = [plan.first_utc]
    while plan.rule and len(upcoming) < count:
        found = next_occurrence(plan.rule, zone, plan.anchor_local, upcoming[-1])
        if found is None:
            break
        upcoming.append(found)
    text = describe_schedule(plan.first_utc, zone, now, plan.rule)
    return Preview(text, [u.astimezone(zone) for u in upcoming], plan.rule)


def occurrences(schedule: Schedule, start: datetime, end: datetime,
                limit: int = MAX_PER_SCHEDULE) -> list[datetime]:
    """The schedule's firings in [start, end) (UTC instants), at most `limit`."""
    when = schedule.next_run_at
    if when is None or schedule.status not in ("active", "paused") or when >= end:
        return []
    if not schedule.rrule:
        return [when] if when >= start else []
    # never before the stored next run: earlier ones were sent (or skipped) already
    return occurrences_between(schedule.rrule, schedule.zone, schedule.anchor_local,
                               max(start, when), end, limit)


def day_bounds(first: date, days: int, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The instants where local day `first` starts and `days` later ends."""
    start = localize(datetime.combine(first, time()), zone)
    return start, localize(datetime.combine(first + timedelta(days=days), time()), zone)


def grid(
    schedules: list[Schedule], first: date, days: int, zone: ZoneInfo
) -> dict[date, list[Slot]]:
    """Occurrences of all schedules on each local day from `first`, in time order."""
    start, end = day_bounds(first, days, zone)
    by_day: dict[date, list[Slot]] = {first + timedelta(days=i): [] for i in range(days)}
    for schedule in schedules:
        for when in occurrences(schedule, start, end):
            local = when.astimezone(zone)
            by_day.setdefault(local.date(), []).append(Slot(local, schedule))
    for slots in by_day.values():
        slots.sort(key=lambda s: s.when)
    return by_day

"""Calendar views and previews: the same instants the workers will fire at."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from panager.services.schedules.calendar import grid, occurrences, preview
from panager.services.schedules.recurrence import (
    ScheduleInputError,
    next_occurrence,
    occurrences_between,
    plan_schedule,
)
from panager.services.schedules.types import Schedule

RULES = ["FREQ=DAILY", "FREQ=HOURLY;INTERVAL=6", "FREQ=WEEKLY;BYDAY=MO,WE",
         "FREQ=MONTHLY;BYMONTHDAY=31", "FREQ=DAILY;COUNT=5", "FREQ=MINUTELY;INTERVAL=90",
         "FREQ=DAILY;UNTIL=20270510", "FREQ=MONTHLY;BYDAY=-1FR"]
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "Asia/Seoul"]
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def stepped(rule, zone, anchor, first, start, end, limit=62):
    found, when = [], first
    while when is not None and when < end and len(found) < limit:
        if when >= start:
            found.append(when)
        when = next_occurrence(rule, zone, anchor, when)
    return found


def test_window_expansion_equals_stepping_through_next_occurrence():
    rng = random.Random(1)
    for _ in range(300):  # across DST changes (incl. Lord Howe's 30-minute one)
        rule, zone = rng.choice(RULES), ZoneInfo(rng.choice(ZONES))
        at = (f"2027-{rng.randint(1, 3):02d}-{rng.randint(1, 28):02d}T"
              f"{rng.choice([1, 2, 3, 9, 23]):02d}:{rng.choice([0, 30]):02d}")
        plan = plan_schedule(at, rule, zone, NOW)
        start = plan.first_utc + timedelta(days=rng.randint(-3, 40))
        end = start + timedelta(days=rng.randint(1, 45))
        got = occurrences_between(plan.rule, zone, plan.anchor_local,
                                  max(start, plan.first_utc), end, 62)
        assert got == stepped(plan.rule, zone, plan.anchor_local, plan.first_utc, start, end)


def schedule(rule, at, zone="Europe/Berlin", status="active") -> Schedule:
    plan = plan_schedule(at, rule, ZoneInfo(zone), NOW)
    return Schedule("s1", 1, "reminder", "x", zone, plan.rule, plan.anchor_local,
                    plan.first_utc, status, 0, None, None, None, None, NOW, NOW)


def test_grid_places_occurrences_on_local_days():
    berlin = ZoneInfo("Europe/Berlin")
    weekly = schedule("FREQ=WEEKLY;BYDAY=MO,WE", "2026-12-07T00:30")  # 23:30 UTC the day before
    days = grid([weekly, schedule(None, "2026-12-09T10:00", status="cancelled")],
                date(2026, 12, 7), 7, berlin)
    placed = {d: [s.when.strftime("%H:%M") for s in slots] for d, slots in days.items() if slots}
    assert placed == {date(2026, 12, 7): ["00:30"], date(2026, 12, 9): ["00:30"]}
    assert occurrences(weekly, NOW, NOW + timedelta(days=2)) == []


def test_preview_describes_and_lists_the_next_five():
    shown = preview("2026-12-07T09:00", "FREQ=WEEKLY;BYDAY=MO", ZoneInfo("Asia/Seoul"), NOW)
    assert shown.description.endswith("repeats every Monday")
    assert [d.strftime("%d %H:%M") for d in shown.upcoming] == [
        "07 09:00", "14 09:00", "21 09:00", "28 09:00", "04 09:00"]
    with pytest.raises(ScheduleInputError, match="FREQ"):
        preview("2026-12-07T09:00", "FREQ=FORTNIGHTLY", ZoneInfo("UTC"), NOW)

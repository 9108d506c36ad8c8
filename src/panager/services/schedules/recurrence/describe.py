"""Descriptions: a schedule in words ("every Monday at 09:00, next in 2 days")."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

from panager.services.schedules.recurrence.rules import _DAY_CODES, _Rule, _spec, _until_utc
from panager.services.schedules.recurrence.zones import _WEEKDAY_NAMES, _render, _utc, wall_time

_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", -1: "last"}
_SIMPLE_TEXT = {
    "YEARLY": "yearly",
    "DAILY": "daily",
    "HOURLY": "hourly",
    "MINUTELY": "every minute",
}


_UNIT_NAMES = {"YEARLY": "year", "DAILY": "day", "HOURLY": "hour", "MINUTELY": "minute"}


def describe_schedule(
    when_utc: datetime, zone: ZoneInfo, now: datetime, rule: str | None, relative: bool = True
) -> str:
    """Confirmation like 'Tue 25 Nov 2026 09:00 Asia/Seoul, in 3 days; repeats every Monday'
    (without 'in 3 days' when not `relative`: a question's words stay the same over time)."""
    when = _utc(when_utc)
    text = f"{_render(when, zone)} {zone.key}"
    if relative:
        text += f", {_relative(when, zone, _utc(now))}"
    spec = _spec(rule)
    if spec is None:
        return text
    return f"{text}; {_repeat_text(spec, wall_time(when, zone), zone)}"


def _plural(number: int, unit: str) -> str:
    return f"{number} {unit}" if number == 1 else f"{number} {unit}s"


def _relative(when: datetime, zone: ZoneInfo, now: datetime) -> str:
    minutes = round((when - now).total_seconds() / 60)
    if minutes < 0:
        return "in the past"
    if minutes == 0:
        return "in under a minute"
    if minutes < 60:
        return f"in {_plural(minutes, 'minute')}"
    days = (wall_time(when, zone).date() - wall_time(now, zone).date()).days
    if days == 0 or minutes < 6 * 60:
        hours, rest = divmod(minutes, 60)
        return f"in {_plural(hours, 'hour')}" + (f" {_plural(rest, 'minute')}" if rest else "")
    return "tomorrow" if days == 1 else f"in {days} days"


def _repeat_text(spec: _Rule, local: datetime, zone: ZoneInfo) -> str:
    common = _common_text(spec, local)
    if common is None:
        return f"repeats (RRULE: {spec.text})"
    if spec.count:
        return f"repeats {common}, {_plural(spec.count, 'time')} in total"
    if spec.until:
        moment = _until_utc(spec, zone)
        assert moment is not None  # spec.until is set
        return f"repeats {common}, until {_render(moment, zone, with_time='T' in spec.until)}"
    return f"repeats {common}"


def _common_text(spec: _Rule, local: datetime) -> str | None:
    extras = {key: value for key, value in spec.extras if key != "WKST"}
    if spec.freq == "WEEKLY" or (spec.freq == "DAILY" and spec.interval == 1 and extras):
        return _weekly_text(extras, spec.interval, local)
    if spec.freq == "MONTHLY":
        return _monthly_text(extras, spec.interval, local)
    if extras:
        return None
    if spec.interval == 1:
        return _SIMPLE_TEXT[spec.freq]
    return f"every {spec.interval} {_UNIT_NAMES[spec.freq]}s"


def _weekly_text(extras: dict[str, str], interval: int, local: datetime) -> str | None:
    if set(extras) - {"BYDAY"}:
        return None
    codes = extras.get("BYDAY", _DAY_CODES[local.weekday()]).split(",")
    if any(code not in _DAY_CODES for code in codes):
        return None
    days = sorted({_DAY_CODES.index(code) for code in codes})
    if interval == 1 and days in ([0, 1, 2, 3, 4], [5, 6], list(range(7))):
        return {5: "on weekdays", 2: "on weekends", 7: "daily"}[len(days)]
    names = [_WEEKDAY_NAMES[day] for day in days]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"every {listed}" if interval == 1 else f"every {interval} weeks on {listed}"


def _monthly_text(extras: dict[str, str], interval: int, local: datetime) -> str | None:
    every = "monthly" if interval == 1 else f"every {interval} months"
    if not extras:
        return f"{every} on day {local.day}"
    if set(extras) == {"BYMONTHDAY"} and re.fullmatch(r"\d+|-1", extras["BYMONTHDAY"]):
        day = int(extras["BYMONTHDAY"])
        return f"{every} on the last day" if day == -1 else f"{every} on day {day}"
    match = re.fullmatch(r"(-?\d)(\w\w)", extras.get("BYDAY", ""))
    if set(extras) == {"BYDAY"} and match and int(match[1]) in _ORDINALS:
        weekday = _WEEKDAY_NAMES[_DAY_CODES.index(match[2])]
        return f"{every} on the {_ORDINALS[int(match[1])]} {weekday}"
    return None

"""Zones and times: IANA zone names, wall time ↔ instants across DST, parsing `at`."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

_BARE_DATE_TIME = time(9, 0)
_MAX_YEAR = 9000
_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_ABBRS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_TIME_ONLY = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")


class ScheduleInputError(ValueError):
    """Message is user-facing: says what was wrong and what is valid."""


@lru_cache(maxsize=1)
def _zone_names() -> dict[str, str]:
    return {name.casefold(): name for name in available_timezones()}


def parse_zone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA zone name (case-insensitive), else ScheduleInputError."""
    key = _zone_names().get(name.strip().casefold()) if isinstance(name, str) else None
    if key is None:
        raise ScheduleInputError(
            f"Unknown time zone '{name}'. Use an IANA name like 'Europe/Berlin' or 'Asia/Seoul'."
        )
    return ZoneInfo(key)


def localize(local: datetime, zone: ZoneInfo) -> datetime:
    """UTC instant of a naive wall time: gap times shift forward, overlap times take fold=0."""
    return local.replace(tzinfo=zone, fold=0).astimezone(UTC)


def passes(local: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    """UTC instants of a naive wall time, in order: two in a fall-back overlap, else one."""
    first = localize(local, zone)
    # fold=1 takes the post-transition offset: later in an overlap, earlier in a gap
    second = local.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return (first, second) if second > first else (first,)


def wall_time(when: datetime, zone: ZoneInfo) -> datetime:
    """Naive wall time in `zone` of an aware instant; a naive value is returned unchanged."""
    if when.tzinfo is None:
        return when
    return when.astimezone(zone).replace(tzinfo=None, fold=0)


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def parse_local(at: str, zone: ZoneInfo, now: datetime) -> datetime:
    """Naive wall time in `zone` named by `at` (an offset time is converted into `zone`)."""
    return parse_at(at, zone, now)[0]


def parse_when(at: str, zone: ZoneInfo, now: datetime) -> datetime:
    """Aware UTC instant for an ISO 8601 time; no offset means the user's zone."""
    return parse_at(at, zone, now)[1]


def parse_at(
    at: str, zone: ZoneInfo, now: datetime, *, tolerance: timedelta = timedelta(0)
) -> tuple[datetime, datetime]:
    """(naive wall time in `zone`, UTC instant) named by `at`.

    An explicit offset names one instant, kept as given (in a repeated hour it may be the
    second pass). A wall time that happens twice is its first pass, unless that one is
    already behind `now` (less `tolerance`) and the second is not: typed during the
    repeated hour, it means the pass still ahead."""
    text = at.strip().upper() if isinstance(at, str) else ""
    try:
        read = _read_time(text, zone, _utc(now))
        local = wall_time(read, zone).replace(microsecond=0)
    except (ValueError, OverflowError):
        raise ScheduleInputError(_bad_time_message(at, zone)) from None
    if local.year > _MAX_YEAR:
        raise ScheduleInputError(f"'{at}' is too far ahead; use a year up to {_MAX_YEAR}.")
    try:
        options = (_utc(read).replace(microsecond=0),) if read.tzinfo else passes(local, zone)
    except OverflowError:  # year 1 east of UTC has no UTC instant
        raise ScheduleInputError(_bad_time_message(at, zone)) from None
    earliest = _utc(now) - tolerance
    return local, next((p for p in options if p >= earliest), options[0])


def _read_time(text: str, zone: ZoneInfo, now: datetime) -> datetime:
    """A naive wall time, or an aware instant when `text` carries an offset."""
    match = _TIME_ONLY.fullmatch(text)
    if match:
        hour, minute, second = (int(part or 0) for part in match.groups())
        return _next_wall_time(time(hour, minute, second), zone, now)
    try:
        return datetime.combine(date.fromisoformat(text), _BARE_DATE_TIME)
    except ValueError:
        pass
    return datetime.fromisoformat(text)


def _next_wall_time(clock: time, zone: ZoneInfo, now: datetime) -> datetime:
    today = wall_time(now, zone).date()
    local = datetime.combine(today, clock)
    # during a repeated hour, today's second pass may still be ahead
    return local if passes(local, zone)[-1] > now else local + timedelta(days=1)


def _bad_time_message(at: object, zone: ZoneInfo) -> str:
    return (
        f"Could not read '{at}' as a date and time. Use ISO 8601: '2026-11-25T09:00' "
        f"(local time in {zone.key}), '2026-11-25T09:00+09:00' or '2026-11-25T00:00Z' "
        "(explicit offset), '2026-11-25' (09:00 local) or '09:00' (the next 09:00)."
    )


def _render(when: datetime, zone: ZoneInfo, *, with_time: bool = True) -> str:
    local = wall_time(when, zone)
    day = f"{_WEEKDAY_NAMES[local.weekday()][:3]} {local.day} "
    day += f"{_MONTH_ABBRS[local.month - 1]} {local.year}"
    if not with_time:
        return day
    if when.tzinfo is not None and len(passes(local, zone)) > 1:  # say which pass is meant
        return f"{day} {local:%H:%M} ({_offset_text(when, zone)})"
    return f"{day} {local:%H:%M}"


def _offset_text(when: datetime, zone: ZoneInfo) -> str:
    offset = when.astimezone(zone).utcoffset() or timedelta(0)
    hours, minutes = divmod(abs(int(offset.total_seconds())) // 60, 60)
    return f"UTC{'-' if offset < timedelta(0) else '+'}{hours:02d}:{minutes:02d}"

"""Expansion: the next occurrence of a series on wall-clock time, feasibility, the schedule plan."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from panager.services.schedules.recurrence.rules import (
    _ensure_feasible,
    _parse_rule,
    _rrule,
    _Rule,
    _spec,
    _until_utc,
    validate_rrule,
)
from panager.services.schedules.recurrence.zones import (
    ScheduleInputError,
    _render,
    _utc,
    localize,
    parse_at,
    wall_time,
)

# Larger than the biggest UTC-offset change any zone ever made (24 h: Samoa 2011).
_MARGIN = timedelta(days=2)
_FIXED_STEPS = {
    "WEEKLY": timedelta(weeks=1),
    "DAILY": timedelta(days=1),
    "HOURLY": timedelta(hours=1),
    "MINUTELY": timedelta(minutes=1),
}


@dataclass(frozen=True)
class SchedulePlan:
    """What to store for a new schedule: first fire instant, wall-time anchor, rule."""

    first_utc: datetime
    anchor_local: datetime
    rule: str | None


def _fast_forward(spec: _Rule, anchor: datetime, start: datetime) -> datetime:
    """A later dtstart giving the same occurrences from `start` on (whole intervals, no COUNT)."""
    unit = _FIXED_STEPS.get(spec.freq)
    if unit is None or spec.count is not None or start <= anchor:
        return anchor
    step = unit * spec.interval
    return anchor + step * ((start - anchor) // step)


def _next_local(
    spec: _Rule, zone: ZoneInfo, anchor: datetime, after: datetime
) -> tuple[datetime, datetime] | None:
    """(wall time, UTC instant) of the first occurrence strictly after `after`, or None."""
    _ensure_feasible(spec, anchor, tuple(sorted({1, spec.interval})))
    start = wall_time(after, zone) - _MARGIN
    until = _until_utc(spec, zone)
    loose_until = wall_time(until, zone) + _MARGIN if until else None
    dtstart = _fast_forward(spec, anchor, start)
    candidates = _rrule(spec, dtstart, until=loose_until).xafter(start, inc=True)
    for local in candidates:
        when = localize(local, zone)
        if when > after:
            best = _earliest(local, when, candidates, zone, after)
            return best if until is None or best[1] <= until else None
    return None


def _earliest(
    local: datetime,
    when: datetime,
    candidates: Iterator[datetime],
    zone: ZoneInfo,
    after: datetime,
) -> tuple[datetime, datetime]:
    """Only a gap-shifted occurrence can be overtaken: check the ones up to its new time."""
    best = (local, when)
    horizon = wall_time(when, zone)
    for later in candidates:
        if later > horizon:
            break
        moment = localize(later, zone)
        if after < moment < best[1]:
            best = (later, moment)
    return best


def _first(
    spec: _Rule, zone: ZoneInfo, anchor: datetime, at: datetime
) -> tuple[datetime, datetime]:
    found = _next_local(spec, zone, anchor, at - timedelta(microseconds=1))
    if found is None:
        raise ScheduleInputError(
            f"The repeat rule '{spec.text}' ends before its first time "
            f"({_render(at, zone)} {zone.key}), so it would never fire. Check COUNT/UNTIL."
        )
    return found


def _first_from(
    spec: _Rule, zone: ZoneInfo, local: datetime, instant: datetime
) -> tuple[datetime, datetime]:
    """First occurrence at or after `instant`, the time `at` named (wall time `local`)."""
    early = localize(local, zone)
    if instant == early:
        return _first(spec, zone, local, instant)
    # `instant` is the second pass of a repeated hour: the series expands with fold=0, so
    # it starts with that very instant if the rule matches `local`, else the next match
    until = _until_utc(spec, zone)
    if _first(spec, zone, local, early)[0] == local and (until is None or instant <= until):
        return local, instant
    return _first(spec, zone, local, instant)


def first_occurrence(at_utc: datetime, rule: str | None, zone: ZoneInfo) -> datetime:
    """First fire instant: `at` for one-shots, else the first rule instance at or after `at`."""
    at = _utc(at_utc).replace(microsecond=0)
    spec = _spec(rule)
    if spec is None:
        return at
    return _first_from(spec, zone, wall_time(at, zone), at)[1]


def next_occurrence(
    rule: str, zone: ZoneInfo, anchor_local: datetime, after: datetime
) -> datetime | None:
    """Next fire instant strictly after `after` of the series anchored at `anchor_local`."""
    spec = _spec(rule)
    if spec is None:
        return None
    anchor = wall_time(anchor_local, zone).replace(microsecond=0)
    found = _next_local(spec, zone, anchor, _utc(after))
    return found[1] if found else None


def occurrences_between(
    rule: str, zone: ZoneInfo, anchor_local: datetime, start: datetime, end: datetime,
    limit: int,
) -> list[datetime]:
    """Fire instants in [start, end) of the series, at most `limit`, from one rule expansion.

    The same instants `next_occurrence` steps through one by one, found in a single pass
    (for calendar views: hundreds of occurrences in one call)."""
    spec = _spec(rule)
    if spec is None:
        return []
    anchor = wall_time(anchor_local, zone).replace(microsecond=0)
    _ensure_feasible(spec, anchor, tuple(sorted({1, spec.interval})))
    begin = wall_time(_utc(start), zone) - _MARGIN
    until = _until_utc(spec, zone)
    last = wall_time(_utc(end), zone) + _MARGIN
    stop = min(last, wall_time(until, zone) + _MARGIN) if until else last
    found: set[datetime] = set()
    bounded = stop if spec.count is None else None  # dateutil refuses COUNT with UNTIL
    for local in _rrule(spec, _fast_forward(spec, anchor, begin), until=bounded).xafter(
        begin, inc=True
    ):
        if local > stop:
            break
        when = localize(local, zone)
        if start <= when < end and (until is None or when <= until):
            found.add(when)
            if len(found) >= limit + 2:  # a gap shift can reorder neighbours: keep a spare
                break
    return sorted(found)[:limit]


def plan_schedule(
    at: str,
    repeat: str | None,
    zone: ZoneInfo,
    now: datetime,
    *,
    tolerance: timedelta = timedelta(seconds=30),
) -> SchedulePlan:
    """Parse and check a new schedule; keeps the wall-time anchor even if `at` is in a DST gap.

    `at` with an explicit offset is the first fire instant as given, even in the second
    pass of a repeated hour (which the wall-clock expansion alone would never name)."""
    local, instant = parse_at(at, zone, now, tolerance=tolerance)
    rule = validate_rrule(repeat)
    anchor, first = local, instant
    if rule is not None:
        anchor, first = _first_from(_parse_rule(rule), zone, local, instant)
    validate_future(first, now, tolerance=tolerance, zone=zone)
    return SchedulePlan(first_utc=first, anchor_local=anchor, rule=rule)


def validate_future(
    when_utc: datetime,
    now: datetime,
    *,
    tolerance: timedelta = timedelta(seconds=30),
    zone: ZoneInfo | None = None,
) -> None:
    """Raise ScheduleInputError if `when_utc` is before `now` minus `tolerance`."""
    when, current = _utc(when_utc), _utc(now)
    if when >= current - tolerance:
        return
    zone = zone or ZoneInfo("UTC")
    raise ScheduleInputError(
        f"That time ({_render(when, zone)}) is in the past; it is now "
        f"{_render(current, zone)} in {zone.key}. Give a later time."
    )

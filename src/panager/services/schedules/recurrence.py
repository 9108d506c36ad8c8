"""Pure time logic for schedules: zones, times, RRULEs, next fire times, confirmations.

No I/O and no database: every function takes what it needs (including "now").

Design — recurrence runs on wall-clock time
-------------------------------------------
A reminder "every Monday at 09:00" in Europe/Berlin must fire at 09:00 Berlin time
in winter (08:00 UTC) and in summer (07:00 UTC). So a series is evaluated the way
RFC 5545 describes for local times:

1. The series has an *anchor*: the naive local wall time of its first occurrence
   (e.g. ``2026-03-23 09:00``), stored next to the rule and the zone.
2. ``dateutil.rrule`` expands the RRULE on naive wall times with ``dtstart`` = anchor,
   so DST never enters the arithmetic ("+1 week" is always 09:00 -> 09:00).
3. Each naive occurrence is localised with :func:`localize` and converted to UTC:

   * a time in a spring-forward gap (02:30 when clocks jump 02:00 -> 03:00) does not
     exist; it is shifted forward by the gap length (02:30 -> 03:30, RFC 5545 and
     PEP 495 ``fold=0`` behaviour);
   * a time in a fall-back overlap (01:30 happens twice) takes the first of the two
     instants (``fold=0``, the pre-transition offset), so it fires once, not twice.

All returned instants are aware UTC datetimes. Consequences worth knowing:

* Sub-daily rules are wall-clock too: ``FREQ=HOURLY`` skips the repeated hour on
  fall-back day and fires once at 03:xx on spring-forward day (02:xx and 03:xx
  coincide; "strictly after" collapses the duplicate).
* ``FREQ=MONTHLY;BYMONTHDAY=31`` (or a monthly series anchored on the 31st) skips
  months without a 31st, as dateutil and RFC 5545 do; use ``BYMONTHDAY=-1`` for
  "last day of the month".
* The anchor is the *wall time*, not the UTC instant: if the first time falls in a
  gap, the anchor stays 02:30 while the first instant is 03:30. :func:`plan_schedule`
  returns both; :func:`first_occurrence` only sees the instant.
* Rules are checked for feasibility before any expansion, so a rule that can never
  match (``BYMONTH=2;BYMONTHDAY=30``) is rejected instead of making dateutil scan
  to the year 9999.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from math import gcd
from zoneinfo import ZoneInfo, available_timezones

from dateutil.rrule import rrule, rrulestr

# Larger than the biggest UTC-offset change any zone ever made (24 h: Samoa 2011).
_MARGIN = timedelta(days=2)
_BARE_DATE_TIME = time(9, 0)
_MAX_YEAR = 9000
_MAX_COUNT = 10_000
_MAX_INTERVAL = 10_000
_NEUTRAL_ANCHOR = datetime(2000, 1, 1)  # day 1 of month 1: the defaults it implies always exist

_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_ABBRS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAY_CODES = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", -1: "last"}

_FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY")
# key: (lowest, highest, negative values allowed)
_INT_RANGES = {
    "BYMONTH": (1, 12, False),
    "BYMONTHDAY": (1, 31, True),
    "BYYEARDAY": (1, 366, True),
    "BYWEEKNO": (1, 53, True),
    "BYSETPOS": (1, 366, True),
    "BYHOUR": (0, 23, False),
    "BYMINUTE": (0, 59, False),
    "BYSECOND": (0, 59, False),
}
_KEYS = ("FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "WKST", *_INT_RANGES)
_CORE_KEYS = {"FREQ", "INTERVAL", "COUNT", "UNTIL"}
_DAY_FILTERS = {"BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO"}
# RFC 5545 §3.3.10 restrictions.
_ALLOWED_FREQS = {
    "BYWEEKNO": {"YEARLY"},
    "BYYEARDAY": {"YEARLY", "HOURLY", "MINUTELY"},
    "BYMONTHDAY": set(_FREQS) - {"WEEKLY"},
}
# How many periods of each FREQ fit in 400 Gregorian years (the calendar's full cycle,
# which is also a whole number of weeks).
_UNITS_PER_400Y = {
    "YEARLY": 400,
    "MONTHLY": 4800,
    "WEEKLY": 20_871,
    "DAILY": 146_097,
    "HOURLY": 146_097 * 24,
    "MINUTELY": 146_097 * 1440,
}
_FIXED_STEPS = {
    "WEEKLY": timedelta(weeks=1),
    "DAILY": timedelta(days=1),
    "HOURLY": timedelta(hours=1),
    "MINUTELY": timedelta(minutes=1),
}
_SIMPLE_TEXT = {
    "YEARLY": "yearly",
    "DAILY": "daily",
    "HOURLY": "hourly",
    "MINUTELY": "every minute",
}
_UNIT_NAMES = {"YEARLY": "year", "DAILY": "day", "HOURLY": "hour", "MINUTELY": "minute"}

_TIME_ONLY = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_BYDAY_ITEM = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_INT_ITEM = re.compile(r"[+-]?\d{1,3}")
_UNTIL_FORM = re.compile(r"\d{8}(T\d{6}Z?)?")
_RULE_EXAMPLE = "e.g. 'FREQ=WEEKLY;BYDAY=MO' or 'FREQ=DAILY;COUNT=5'"


class ScheduleInputError(ValueError):
    """Message is user-facing: says what was wrong and what is valid."""


@dataclass(frozen=True)
class SchedulePlan:
    """What to store for a new schedule: first fire instant, wall-time anchor, rule."""

    first_utc: datetime
    anchor_local: datetime
    rule: str | None


@dataclass(frozen=True)
class _Rule:
    text: str
    freq: str
    interval: int
    count: int | None
    until: str | None
    extras: tuple[tuple[str, str], ...]


# --- zones and instants --------------------------------------------------------------


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


def wall_time(when: datetime, zone: ZoneInfo) -> datetime:
    """Naive wall time in `zone` of an aware instant; a naive value is returned unchanged."""
    if when.tzinfo is None:
        return when
    return when.astimezone(zone).replace(tzinfo=None, fold=0)


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


# --- parsing times -------------------------------------------------------------------


def parse_local(at: str, zone: ZoneInfo, now: datetime) -> datetime:
    """Naive wall time in `zone` named by `at` (an offset time is converted into `zone`)."""
    text = at.strip().upper() if isinstance(at, str) else ""
    try:
        local = _read_time(text, zone, _utc(now))
    except (ValueError, OverflowError):
        local = None
    if local is None:
        raise ScheduleInputError(_bad_time_message(at, zone))
    if local.year > _MAX_YEAR:
        raise ScheduleInputError(f"'{at}' is too far ahead; use a year up to {_MAX_YEAR}.")
    return local.replace(microsecond=0)


def parse_when(at: str, zone: ZoneInfo, now: datetime) -> datetime:
    """Aware UTC instant for an ISO 8601 time; no offset means the user's zone."""
    return localize(parse_local(at, zone, now), zone)


def _read_time(text: str, zone: ZoneInfo, now: datetime) -> datetime | None:
    match = _TIME_ONLY.fullmatch(text)
    if match:
        hour, minute, second = (int(part or 0) for part in match.groups())
        return _next_wall_time(time(hour, minute, second), zone, now)
    try:
        return datetime.combine(date.fromisoformat(text), _BARE_DATE_TIME)
    except ValueError:
        pass
    return wall_time(datetime.fromisoformat(text), zone)


def _next_wall_time(clock: time, zone: ZoneInfo, now: datetime) -> datetime:
    today = wall_time(now, zone).date()
    local = datetime.combine(today, clock)
    return local if localize(local, zone) > now else local + timedelta(days=1)


def _bad_time_message(at: object, zone: ZoneInfo) -> str:
    return (
        f"Could not read '{at}' as a date and time. Use ISO 8601: '2026-11-25T09:00' "
        f"(local time in {zone.key}), '2026-11-25T09:00+09:00' or '2026-11-25T00:00Z' "
        "(explicit offset), '2026-11-25' (09:00 local) or '09:00' (the next 09:00)."
    )


# --- validating rules ----------------------------------------------------------------


def validate_rrule(rule: str | None) -> str | None:
    """Normalised RRULE without 'RRULE:', None for no repeat; raises ScheduleInputError if bad."""
    if rule is not None and not isinstance(rule, str):
        raise ScheduleInputError(f"The repeat rule must be text, {_RULE_EXAMPLE}.")
    spec = _spec(rule)
    if spec is None:
        return None
    _ensure_feasible(spec, _NEUTRAL_ANCHOR, (1,))
    return spec.text


def _spec(rule: str | None) -> _Rule | None:
    if rule is None or not rule.strip():
        return None
    return _parse_rule(rule)


@lru_cache(maxsize=1024)
def _parse_rule(rule: str) -> _Rule:
    text = rule.strip().upper()
    if "DTSTART" in text:
        raise ScheduleInputError(
            f"Leave DTSTART out of the repeat rule: the start is the 'at' time; {_RULE_EXAMPLE}."
        )
    text = text.removeprefix("RRULE:").strip()
    if "\n" in text or re.match(r"(EXDATE|RDATE|EXRULE)\b", text):
        raise ScheduleInputError(f"Give one RRULE only (no EXDATE/RDATE lines), {_RULE_EXAMPLE}.")
    return _make_rule(_split_parts(text))


def _split_parts(text: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for chunk in filter(None, (piece.strip() for piece in text.split(";"))):
        key, sep, value = (piece.strip() for piece in chunk.partition("="))
        if not sep or not value:
            raise ScheduleInputError(f"'{chunk}' is not KEY=VALUE; {_RULE_EXAMPLE}.")
        if key not in _KEYS:
            raise ScheduleInputError(
                f"Unknown RRULE part '{key}'. Valid parts: {', '.join(_KEYS)}; {_RULE_EXAMPLE}."
            )
        if key in parts:
            raise ScheduleInputError(f"{key} appears twice in the repeat rule.")
        parts[key] = value
    return parts


def _make_rule(parts: dict[str, str]) -> _Rule:
    freq = _check_freq(parts.pop("FREQ", None))
    clean = {key: _check_part(key, value, freq) for key, value in parts.items()}
    if "COUNT" in clean and "UNTIL" in clean:
        raise ScheduleInputError("Use COUNT or UNTIL in a repeat rule, not both.")
    text = ";".join(f"{key}={value}" for key, value in {"FREQ": freq, **clean}.items())
    count = clean.get("COUNT")
    return _Rule(
        text=text,
        freq=freq,
        interval=int(clean.get("INTERVAL", 1)),
        count=int(count) if count else None,
        until=clean.get("UNTIL"),
        extras=tuple((k, v) for k, v in clean.items() if k not in _CORE_KEYS),
    )


def _check_freq(value: str | None) -> str:
    if value is None:
        raise ScheduleInputError(f"The repeat rule needs FREQ, {_RULE_EXAMPLE}.")
    if value == "SECONDLY":
        raise ScheduleInputError(
            "FREQ=SECONDLY is not allowed: a schedule fires at most once a minute. "
            "Use FREQ=MINUTELY (e.g. 'FREQ=MINUTELY;INTERVAL=15') or slower."
        )
    if value not in _FREQS:
        raise ScheduleInputError(
            f"FREQ={value} is not valid. Use one of {', '.join(_FREQS)}; {_RULE_EXAMPLE}."
        )
    return value


def _check_part(key: str, value: str, freq: str) -> str:
    if freq not in _ALLOWED_FREQS.get(key, _FREQS):
        allowed = ", ".join(f for f in _FREQS if f in _ALLOWED_FREQS[key])
        raise ScheduleInputError(f"{key} cannot be used with FREQ={freq}; only with {allowed}.")
    if key == "INTERVAL":
        return _check_positive(key, value, _MAX_INTERVAL)
    if key == "COUNT":
        return _check_positive(key, value, _MAX_COUNT)
    if key == "UNTIL":
        return _check_until(value)
    if key == "WKST":
        if value not in _DAY_CODES:
            raise ScheduleInputError(
                f"WKST={value} is not valid; use one of {','.join(_DAY_CODES)}."
            )
        return value
    if key == "BYDAY":
        return ",".join(_check_byday(item.strip(), freq) for item in value.split(","))
    return _check_ints(key, value)


def _check_positive(key: str, value: str, maximum: int) -> str:
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= maximum):
        raise ScheduleInputError(
            f"{key}={value} is not valid; use a whole number from 1 to {maximum}."
        )
    return str(int(value))


def _check_until(value: str) -> str:
    try:
        moment = datetime.strptime(value.rstrip("Z"), "%Y%m%dT%H%M%S" if "T" in value else "%Y%m%d")
    except ValueError:
        moment = None
    if moment is None or not _UNTIL_FORM.fullmatch(value) or moment.year > _MAX_YEAR:
        raise ScheduleInputError(
            f"UNTIL={value} is not valid. Use a date like 20261231 (that whole local day), "
            "a local time like 20261231T090000, or UTC like 20261231T080000Z."
        )
    return value


def _check_byday(item: str, freq: str) -> str:
    match = _BYDAY_ITEM.fullmatch(item)
    if not match or (match[1] and not 1 <= abs(int(match[1])) <= 53):
        raise ScheduleInputError(
            f"BYDAY value '{item}' is not valid. Use MO, TU, WE, TH, FR, SA, SU, optionally with "
            "a position in the month or year like 1MO (first Monday) or -1FR (last Friday)."
        )
    if match[1] and freq not in ("MONTHLY", "YEARLY"):
        raise ScheduleInputError(
            f"BYDAY position '{item}' needs FREQ=MONTHLY or FREQ=YEARLY; "
            f"with FREQ={freq} use plain days like MO,TH."
        )
    return f"{int(match[1])}{match[2]}" if match[1] else match[2]


def _check_ints(key: str, value: str) -> str:
    low, high, signed = _INT_RANGES[key]
    numbers = []
    for item in value.split(","):
        item = item.strip()
        number = int(item) if _INT_ITEM.fullmatch(item) else None
        if number is None or not (low <= number <= high or (signed and -high <= number <= -low)):
            allowed = f"{low} to {high}" + (f" or -{high} to -{low}" if signed else "")
            raise ScheduleInputError(f"{key} value '{item}' is not valid; use {allowed}.")
        numbers.append(number)
    if key == "BYSECOND" and len(numbers) > 1:
        raise ScheduleInputError(
            "BYSECOND may list only one second: a schedule fires at most once a minute."
        )
    return ",".join(map(str, numbers))


# --- expanding rules -----------------------------------------------------------------


def _rrule(
    spec: _Rule,
    dtstart: datetime,
    *,
    interval: int | None = None,
    count: bool = True,
    until: datetime | None = None,
) -> rrule:
    parts = [f"FREQ={spec.freq}", f"INTERVAL={interval or spec.interval}"]
    parts += [f"{key}={value}" for key, value in spec.extras]
    if count and spec.count:
        parts.append(f"COUNT={spec.count}")
    try:
        built = rrulestr(";".join(parts), dtstart=dtstart)
        return built.replace(until=until) if until else built
    except ValueError as exc:  # e.g. INTERVAL=2;BYHOUR=9 from an even hour never matches
        raise ScheduleInputError(
            f"The repeat rule '{spec.text}' can never match from this start time ({exc}). "
            "Check INTERVAL against BYHOUR/BYMINUTE."
        ) from exc


def _probe_start(anchor: datetime, freq: str, interval: int) -> datetime:
    """Same calendar and interval phase as `anchor`, one to two full cycles before 9999."""
    years = 400 * (interval // gcd(interval, _UNITS_PER_400Y[freq]))
    blocks = (9999 - years - anchor.year) // years
    return anchor.replace(year=anchor.year + years * blocks) if blocks > 0 else anchor


def _day_probe(spec: _Rule) -> _Rule | None:
    """A cheaper rule matching some day iff `spec` (interval 1) does; None if any day would."""
    keys = {key for key, _ in spec.extras}
    if spec.freq in ("YEARLY", "MONTHLY") or "BYSETPOS" in keys:
        return spec
    if not keys & _DAY_FILTERS:
        return None  # only BYMONTH and times: always matches
    return replace(spec, freq="YEARLY")  # same day filters, one step per year instead of day


@lru_cache(maxsize=4096)
def _ensure_feasible(spec: _Rule, anchor: datetime, intervals: tuple[int, ...]) -> None:
    """Reject rules that never match, with bounded work (dateutil would scan to 9999)."""
    for interval in intervals:
        probe = _day_probe(spec) if interval == 1 else spec
        if probe is None:
            continue
        start = _probe_start(anchor, probe.freq, interval)
        if _rrule(probe, start, interval=interval, count=False).after(start, inc=True) is None:
            raise ScheduleInputError(
                f"The repeat rule '{spec.text}' never matches any date: its BY... parts "
                "contradict each other (like BYMONTH=2;BYMONTHDAY=30) or the start's month, "
                "day or time, which fill in the parts left out."
            )


def _until_utc(spec: _Rule, zone: ZoneInfo) -> datetime | None:
    value = spec.until
    if value is None:
        return None
    if value.endswith("Z"):
        return datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    if "T" in value:
        return localize(datetime.strptime(value, "%Y%m%dT%H%M%S"), zone)
    next_day = datetime.strptime(value, "%Y%m%d") + timedelta(days=1)
    return localize(next_day, zone) - timedelta(microseconds=1)  # the whole local day


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


def first_occurrence(at_utc: datetime, rule: str | None, zone: ZoneInfo) -> datetime:
    """First fire instant: `at` for one-shots, else the first rule instance at or after `at`."""
    at = _utc(at_utc).replace(microsecond=0)
    spec = _spec(rule)
    if spec is None:
        return at
    return _first(spec, zone, wall_time(at, zone), at)[1]


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
    """Parse and check a new schedule; keeps the wall-time anchor even if `at` is in a DST gap."""
    local = parse_local(at, zone, now)
    rule = validate_rrule(repeat)
    anchor, first = local, localize(local, zone)
    if rule is not None:
        anchor, first = _first(_parse_rule(rule), zone, local, first)
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


# --- describing ----------------------------------------------------------------------


def describe_schedule(when_utc: datetime, zone: ZoneInfo, now: datetime, rule: str | None) -> str:
    """Confirmation like 'Tue 25 Nov 2026 09:00 Asia/Seoul, in 3 days; repeats every Monday'."""
    when = _utc(when_utc)
    text = f"{_render(when, zone)} {zone.key}, {_relative(when, zone, _utc(now))}"
    spec = _spec(rule)
    if spec is None:
        return text
    return f"{text}; {_repeat_text(spec, wall_time(when, zone), zone)}"


def _render(when: datetime, zone: ZoneInfo, *, with_time: bool = True) -> str:
    local = wall_time(when, zone)
    day = f"{_WEEKDAY_NAMES[local.weekday()][:3]} {local.day} "
    day += f"{_MONTH_ABBRS[local.month - 1]} {local.year}"
    return f"{day} {local:%H:%M}" if with_time else day


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

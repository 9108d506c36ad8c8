"""RRULE validation: each part checked against RFC 5545 (messages say what is valid), a
feasibility probe so a rule that can never fire is refused, and the dateutil expansion."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from math import gcd
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

from panager.services.schedules.recurrence.zones import _MAX_YEAR, ScheduleInputError, localize

_MAX_COUNT = 10_000
_MAX_INTERVAL = 10_000
_NEUTRAL_ANCHOR = datetime(2000, 1, 1)  # day 1 of month 1: the defaults it implies always exist
_DAY_CODES = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
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


_BYDAY_ITEM = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_INT_ITEM = re.compile(r"[+-]?\d{1,3}")
_UNTIL_FORM = re.compile(r"\d{8}(T\d{6}Z?)?")
_RULE_EXAMPLE = "e.g. 'FREQ=WEEKLY;BYDAY=MO' or 'FREQ=DAILY;COUNT=5'"


@dataclass(frozen=True)
class _Rule:
    text: str
    freq: str
    interval: int
    count: int | None
    until: str | None
    extras: tuple[tuple[str, str], ...]


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
        assert isinstance(built, rrule)  # one RRULE line, no RDATE/EXDATE: never an rruleset
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

"""Tests for the pure schedule time logic (wall-clock recurrence across DST)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from dateutil.rrule import rrulestr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from panager.services.schedules.recurrence import (
    ScheduleInputError,
    describe_schedule,
    first_occurrence,
    localize,
    next_occurrence,
    parse_local,
    parse_when,
    parse_zone,
    plan_schedule,
    validate_future,
    validate_rrule,
    wall_time,
)

BERLIN = parse_zone("Europe/Berlin")
NEW_YORK = parse_zone("America/New_York")
SEOUL = parse_zone("Asia/Seoul")
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def series(rule, zone, anchor, after, limit=500, stop=None):
    """Fire instants of a series from `after` on (the scheduler's loop)."""
    found = []
    when = next_occurrence(rule, zone, anchor, after)
    while when is not None and len(found) < limit and (stop is None or when < stop):
        found.append(when)
        when = next_occurrence(rule, zone, anchor, when)
    return found


# --- DST: wall-clock recurrence ------------------------------------------------------


def test_weekly_berlin_stays_0900_local_across_both_dst_changes():
    plan = plan_schedule("2026-03-16T09:00", "FREQ=WEEKLY;BYDAY=MO", BERLIN, NOW)
    fires = [plan.first_utc, *series(plan.rule, BERLIN, plan.anchor_local, plan.first_utc, 40)]
    assert all(wall_time(f, BERLIN).time().isoformat() == "09:00:00" for f in fires)
    assert utc(2026, 3, 23, 8) in fires  # CET, UTC+1
    assert utc(2026, 3, 30, 7) in fires  # CEST from 29 March
    assert utc(2026, 10, 19, 7) in fires  # still CEST
    assert utc(2026, 10, 26, 8) in fires  # CET again from 25 October
    assert [f.weekday() for f in fires] == [0] * len(fires)


def test_daily_new_york_across_march_and_november_changes():
    anchor = datetime(2026, 3, 6, 9, 0)
    spring = series("FREQ=DAILY", NEW_YORK, anchor, utc(2026, 3, 6), stop=utc(2026, 3, 11))
    assert [f.hour for f in spring] == [14, 14, 13, 13, 13]  # 6..10 March; EDT from the 8th
    autumn = series("FREQ=DAILY", NEW_YORK, anchor, utc(2026, 10, 30), stop=utc(2026, 11, 4))
    assert [f.day for f in autumn] == [30, 31, 1, 2, 3]
    assert [f.hour for f in autumn] == [13, 13, 14, 14, 14]  # EST from 1 November
    assert all(wall_time(f, NEW_YORK).hour == 9 for f in spring + autumn)


def test_seoul_has_no_dst_so_utc_hour_never_moves():
    fires = series("FREQ=WEEKLY", SEOUL, datetime(2026, 1, 5, 9), utc(2026, 1, 1), limit=52)
    assert {f.hour for f in fires} == {0}
    assert len(fires) == 52


def test_spring_forward_gap_time_shifts_forward_deterministically():
    # 2026-03-08 02:30 does not exist in New York (02:00 -> 03:00).
    assert parse_when("2026-03-08T02:30", NEW_YORK, NOW) == utc(2026, 3, 8, 7, 30)  # 03:30 EDT
    assert localize(datetime(2026, 3, 8, 2, 30), NEW_YORK) == utc(2026, 3, 8, 7, 30)
    plan = plan_schedule("2026-03-07T02:30", "FREQ=DAILY", NEW_YORK, NOW)
    fires = [plan.first_utc, *series(plan.rule, NEW_YORK, plan.anchor_local, plan.first_utc, 2)]
    assert fires == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]
    assert [wall_time(f, NEW_YORK).strftime("%H:%M") for f in fires] == ["02:30", "03:30", "02:30"]


def test_plan_keeps_the_wall_time_anchor_when_the_first_time_is_in_the_gap():
    plan = plan_schedule("2026-03-08T02:30", "FREQ=DAILY", NEW_YORK, NOW)
    assert plan.first_utc == utc(2026, 3, 8, 7, 30)
    assert plan.anchor_local == datetime(2026, 3, 8, 2, 30)
    nxt = next_occurrence(plan.rule, NEW_YORK, plan.anchor_local, plan.first_utc)
    assert wall_time(nxt, NEW_YORK) == datetime(2026, 3, 9, 2, 30)


def test_fall_back_ambiguous_time_fires_once_at_the_first_instant():
    # 2026-11-01 01:30 happens twice in New York (EDT then EST); we take the first.
    assert parse_when("2026-11-01T01:30", NEW_YORK, NOW) == utc(2026, 11, 1, 5, 30)
    fires = series(
        "FREQ=DAILY",
        NEW_YORK,
        datetime(2026, 10, 30, 1, 30),
        utc(2026, 10, 31),
        stop=utc(2026, 11, 3),
    )
    assert fires == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    on_the_day = [f for f in fires if wall_time(f, NEW_YORK).date().isoformat() == "2026-11-01"]
    assert len(on_the_day) == 1


# 2026-10-25 in Berlin: 02:00-03:00 happens twice, first CEST (00:00-01:00Z), then CET
# (01:00-02:00Z). An explicit offset names one of the two passes.
BEFORE_FALL_BACK = utc(2026, 10, 24, 12)


@pytest.mark.parametrize("at", ["2026-10-25T01:30:00Z", "2026-10-25T02:30+01:00"])
def test_explicit_offset_in_the_second_pass_of_a_repeated_hour_is_kept(at):
    plan = plan_schedule(at, None, BERLIN, BEFORE_FALL_BACK)
    assert plan.first_utc == utc(2026, 10, 25, 1, 30)  # not 00:30Z, the first pass
    assert plan.anchor_local == datetime(2026, 10, 25, 2, 30)
    assert parse_when(at, BERLIN, BEFORE_FALL_BACK) == utc(2026, 10, 25, 1, 30)
    text = describe_schedule(plan.first_utc, BERLIN, BEFORE_FALL_BACK, None)
    assert text.startswith("Sun 25 Oct 2026 02:30 (UTC+01:00) Europe/Berlin")


def test_explicit_offset_in_the_first_pass_stays_the_first_pass():
    plan = plan_schedule("2026-10-25T02:30+02:00", None, BERLIN, BEFORE_FALL_BACK)
    assert plan.first_utc == utc(2026, 10, 25, 0, 30)
    text = describe_schedule(plan.first_utc, BERLIN, BEFORE_FALL_BACK, None)
    assert text.startswith("Sun 25 Oct 2026 02:30 (UTC+02:00) Europe/Berlin")


def test_second_pass_start_of_a_daily_series_fires_then_and_at_0230_afterwards():
    plan = plan_schedule("2026-10-25T01:30Z", "FREQ=DAILY", BERLIN, BEFORE_FALL_BACK)
    assert plan.first_utc == utc(2026, 10, 25, 1, 30)
    assert plan.anchor_local == datetime(2026, 10, 25, 2, 30)
    later = series(plan.rule, BERLIN, plan.anchor_local, plan.first_utc, limit=2)
    assert later == [utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]  # 02:30 CET
    assert first_occurrence(utc(2026, 10, 25, 1, 30), "FREQ=DAILY", BERLIN) == plan.first_utc


def test_second_pass_start_of_an_hourly_series_goes_on_without_repeating_the_hour():
    plan = plan_schedule("2026-10-25T02:30+01:00", "FREQ=HOURLY", BERLIN, BEFORE_FALL_BACK)
    assert plan.first_utc == utc(2026, 10, 25, 1, 30)
    later = series(plan.rule, BERLIN, plan.anchor_local, plan.first_utc, limit=2)
    assert later == [utc(2026, 10, 25, 2, 30), utc(2026, 10, 25, 3, 30)]  # 03:30, 04:30 CET


def test_second_pass_start_that_the_rule_does_not_match_takes_the_next_match():
    plan = plan_schedule(
        "2026-10-25T02:30+01:00", "FREQ=WEEKLY;BYDAY=MO", BERLIN, BEFORE_FALL_BACK
    )
    assert plan.first_utc == utc(2026, 10, 26, 1, 30)  # Monday 02:30 CET
    # and a rule ending between the two passes cannot start at the second
    with pytest.raises(ScheduleInputError, match="never fire"):
        plan_schedule(
            "2026-10-25T02:30+01:00", "FREQ=DAILY;UNTIL=20261025T010000Z", BERLIN,
            BEFORE_FALL_BACK,
        )


@pytest.mark.parametrize(
    ("now", "at", "expected"),
    [
        # "in 30 minutes" at 02:10 CET, the second pass (01:10Z): the model adds 30 minutes
        # to the shown time and offset, or to the wall time alone
        (utc(2026, 10, 25, 1, 10), "2026-10-25T02:40+01:00", utc(2026, 10, 25, 1, 40)),
        (utc(2026, 10, 25, 1, 10), "2026-10-25T02:40", utc(2026, 10, 25, 1, 40)),
        (utc(2026, 10, 25, 1, 10), "02:40", utc(2026, 10, 25, 1, 40)),  # today, not tomorrow
        (utc(2026, 10, 25, 1, 10), "2026-10-25T01:40Z", utc(2026, 10, 25, 1, 40)),
        # the same at 02:10 CEST, the first pass (00:10Z)
        (utc(2026, 10, 25, 0, 10), "2026-10-25T02:40+02:00", utc(2026, 10, 25, 0, 40)),
        (utc(2026, 10, 25, 0, 10), "2026-10-25T02:40", utc(2026, 10, 25, 0, 40)),
        (utc(2026, 10, 25, 0, 10), "02:40", utc(2026, 10, 25, 0, 40)),
    ],
)
def test_in_30_minutes_typed_during_the_repeated_hour(now, at, expected):
    plan = plan_schedule(at, None, BERLIN, now)
    assert plan.first_utc == expected
    assert describe_schedule(plan.first_utc, BERLIN, now, None).endswith("in 30 minutes")


def test_a_time_both_passes_of_which_are_behind_is_refused_as_past():
    now = utc(2026, 10, 25, 1, 10)  # 02:10 CET, second pass
    with pytest.raises(ScheduleInputError) as err:
        plan_schedule("2026-10-25T02:05", None, BERLIN, now)
    assert "in the past; it is now Sun 25 Oct 2026 02:10 (UTC+01:00)" in str(err.value)
    with pytest.raises(ScheduleInputError, match="in the past"):
        plan_schedule("2026-10-25T02:40+02:00", None, BERLIN, now)  # the first pass, gone


def test_year_one_is_refused_with_a_message_not_an_overflow():
    with pytest.raises(ScheduleInputError, match="Could not read"):
        plan_schedule("0001-01-01T00:30", None, BERLIN, NOW)


@pytest.mark.parametrize(
    ("day", "zone"),
    [("2026-03-08", NEW_YORK), ("2026-11-01", NEW_YORK), ("2026-03-29", BERLIN)],
)
def test_hourly_across_a_change_never_fires_twice_or_goes_backwards(day, zone):
    start = localize(datetime.fromisoformat(day), zone)
    fires = series("FREQ=HOURLY", zone, datetime(2026, 1, 1, 0, 30), start, limit=30)
    assert fires == sorted(set(fires))
    assert all(wall_time(f, zone).minute == 30 for f in fires)


def test_sub_hourly_series_through_the_gap_stays_in_time_order():
    # 45-minute steps from 01:30: 02:15 does not exist and becomes 03:15 EDT,
    # which is *after* the real 03:00 EDT occurrence: fire 03:00 first, then 03:15.
    fires = series(
        "FREQ=MINUTELY;INTERVAL=45",
        NEW_YORK,
        datetime(2026, 3, 8, 1, 30),
        utc(2026, 3, 8, 6),
        limit=4,
    )
    assert fires == [
        utc(2026, 3, 8, 6, 30),  # 01:30 EST
        utc(2026, 3, 8, 7, 0),  # 03:00 EDT
        utc(2026, 3, 8, 7, 15),  # 02:15 shifted to 03:15 EDT
        utc(2026, 3, 8, 7, 45),  # 03:45 EDT
    ]


def test_apia_skipped_day_2011_fires_once_on_the_next_day():
    apia = parse_zone("Pacific/Apia")  # 30 December 2011 did not exist there
    fires = series("FREQ=DAILY", apia, datetime(2011, 12, 28, 9), utc(2011, 12, 28), limit=3)
    assert [wall_time(f, apia).date().day for f in fires] == [28, 29, 31]


# --- parsing -------------------------------------------------------------------------


def test_naive_time_is_in_the_users_zone_and_offsets_are_respected():
    assert parse_when("2026-11-25T09:00", SEOUL, NOW) == utc(2026, 11, 25, 0)
    assert parse_when("2026-11-25 09:00", BERLIN, NOW) == utc(2026, 11, 25, 8)
    assert parse_when("2026-11-25T09:00+09:00", BERLIN, NOW) == utc(2026, 11, 25, 0)
    assert parse_when("2026-11-25T09:00Z", SEOUL, NOW) == utc(2026, 11, 25, 9)
    assert parse_when("2026-11-25t09:00z", SEOUL, NOW) == utc(2026, 11, 25, 9)
    assert parse_when("2026-11-25T09:00:00.123456Z", SEOUL, NOW) == utc(2026, 11, 25, 9)
    assert parse_when("2026-11-25T09:00+09:00", BERLIN, NOW).tzinfo is UTC
    # An offset time is converted into the user's zone for the wall-time anchor.
    assert parse_local("2026-11-25T09:00+09:00", BERLIN, NOW) == datetime(2026, 11, 25, 1)


def test_bare_date_means_0900_local_and_bare_time_means_the_next_one():
    assert parse_when("2026-11-25", SEOUL, NOW) == utc(2026, 11, 25, 0)
    now = utc(2026, 11, 25, 5)  # 14:00 in Seoul
    assert parse_when("15:30", SEOUL, now) == utc(2026, 11, 25, 6, 30)
    assert parse_when("09:00", SEOUL, now) == utc(2026, 11, 26, 0)


@pytest.mark.parametrize(
    "garbage", ["next tuesday", "", "  ", "2026-13-01", "2026-11-25T25:00", "2026", "tomorrow 9am"]
)
def test_garbage_time_is_refused_with_an_example(garbage):
    with pytest.raises(ScheduleInputError) as err:
        parse_when(garbage, BERLIN, NOW)
    assert "2026-11-25T09:00" in str(err.value)
    assert "Europe/Berlin" in str(err.value)


def test_non_string_time_and_far_future_are_refused():
    with pytest.raises(ScheduleInputError):
        parse_when(None, BERLIN, NOW)  # type: ignore[arg-type]
    with pytest.raises(ScheduleInputError, match="too far"):
        parse_when("9500-01-01T09:00", BERLIN, NOW)


def test_zone_names():
    assert parse_zone("Asia/Seoul").key == "Asia/Seoul"
    assert parse_zone(" europe/berlin ").key == "Europe/Berlin"
    assert parse_zone("UTC").key == "UTC"


@pytest.mark.parametrize("bad", ["Mars/Olympus", "", "America", "../etc/passwd", "CET+1", None])
def test_unknown_zone_message(bad):
    with pytest.raises(ScheduleInputError) as err:
        parse_zone(bad)  # type: ignore[arg-type]
    assert str(err.value) == (
        f"Unknown time zone '{bad}'. Use an IANA name like 'Europe/Berlin' or 'Asia/Seoul'."
    )


# --- rule validation -----------------------------------------------------------------


def test_rules_are_normalised():
    assert validate_rrule(None) is None
    assert validate_rrule("  ") is None
    assert validate_rrule("RRULE:freq=weekly;byday=mo") == "FREQ=WEEKLY;BYDAY=MO"
    assert validate_rrule("BYDAY=+1MO ;FREQ=MONTHLY;") == "FREQ=MONTHLY;BYDAY=1MO"
    assert validate_rrule("FREQ=MONTHLY;BYMONTHDAY=01,-1") == "FREQ=MONTHLY;BYMONTHDAY=1,-1"
    assert (
        validate_rrule("FREQ=DAILY;UNTIL=20261231T080000Z") == "FREQ=DAILY;UNTIL=20261231T080000Z"
    )


@pytest.mark.parametrize(
    ("rule", "hint"),
    [
        ("FREQ=SOMETIMES", "Use one of YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY"),
        ("FREQ=WEEKLY;BYDAY=XX", "BYDAY value 'XX' is not valid. Use MO, TU"),
        ("FREQ=SECONDLY", "at most once a minute"),
        ("FREQ=MINUTELY;BYSECOND=0,30", "at most once a minute"),
        ("DTSTART:20260101T090000\nRRULE:FREQ=DAILY", "Leave DTSTART out"),
        ("FREQ=DAILY;DTSTART=20260101T090000", "Leave DTSTART out"),
        ("FREQ=DAILY;COUNT=0", "COUNT=0 is not valid; use a whole number from 1"),
        ("FREQ=DAILY;INTERVAL=-2", "INTERVAL=-2 is not valid"),
        ("FREQ=DAILY;COUNT=3;UNTIL=20261231", "COUNT or UNTIL"),
        ("FREQ=DAILY;UNTIL=2026-12-31", "UNTIL=2026-12-31 is not valid. Use a date like 20261231"),
        ("BYDAY=MO", "needs FREQ"),
        ("FREQ=WEEKLY;BYDAY=1MO", "needs FREQ=MONTHLY or FREQ=YEARLY"),
        ("FREQ=WEEKLY;BYMONTHDAY=3", "BYMONTHDAY cannot be used with FREQ=WEEKLY"),
        ("FREQ=MONTHLY;BYMONTHDAY=32", "use 1 to 31 or -31 to -1"),
        ("FREQ=DAILY;BYHOUR=24", "use 0 to 23"),
        ("FREQ=DAILY;COLOR=RED", "Unknown RRULE part 'COLOR'"),
        ("FREQ=DAILY;FREQ=WEEKLY", "FREQ appears twice"),
        ("FREQ", "not KEY=VALUE"),
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "never matches any date"),
        ("FREQ=DAILY;BYMONTH=4;BYMONTHDAY=31", "never matches any date"),
        ("FREQ=MONTHLY;BYDAY=MO;BYSETPOS=6", "never matches any date"),
    ],
)
def test_bad_rules_are_refused_with_a_helpful_message(rule, hint):
    with pytest.raises(ScheduleInputError, match=None) as err:
        validate_rrule(rule)
    assert hint in str(err.value)


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29",  # leap days only
        "FREQ=DAILY;BYDAY=FR;BYMONTHDAY=13",
        "FREQ=WEEKLY;BYDAY=FR;BYMONTH=2",
        "FREQ=HOURLY;BYYEARDAY=-1",
        "FREQ=MINUTELY;INTERVAL=30;BYDAY=MO;BYHOUR=9",
        "FREQ=MONTHLY;BYDAY=5MO",
        "FREQ=YEARLY;BYWEEKNO=53;BYDAY=TH",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        "FREQ=DAILY;BYMONTH=6",
    ],
)
def test_rare_but_possible_rules_are_accepted(rule):
    assert validate_rrule(rule) == rule
    plan = plan_schedule("2026-01-31T09:00", rule, BERLIN, NOW)
    assert next_occurrence(plan.rule, BERLIN, plan.anchor_local, plan.first_utc) > plan.first_utc


@pytest.mark.timing
def test_impossible_rules_are_refused_quickly():
    started = time.perf_counter()
    with pytest.raises(ScheduleInputError):
        validate_rrule("FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=31")  # dateutil alone: ~6 s
    assert time.perf_counter() - started < 1


def test_rule_impossible_only_from_its_start_is_refused_at_plan_time():
    # YEARLY;BYMONTH=2 takes its day from the start: 30 February never exists.
    assert validate_rrule("FREQ=YEARLY;BYMONTH=2") == "FREQ=YEARLY;BYMONTH=2"
    with pytest.raises(ScheduleInputError, match="never matches"):
        plan_schedule("2026-01-30T09:00", "FREQ=YEARLY;BYMONTH=2", BERLIN, NOW)
    with pytest.raises(ScheduleInputError, match="never matches"):  # 2026 + 4k is never leap
        plan_schedule("2026-02-01", "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29", BERLIN, NOW)
    with pytest.raises(ScheduleInputError, match="can never match"):
        plan_schedule("2026-02-01T10:00", "FREQ=HOURLY;INTERVAL=2;BYHOUR=9", BERLIN, NOW)


def test_past_time_is_refused_with_the_current_local_time():
    now = utc(2026, 11, 22, 9)
    with pytest.raises(ScheduleInputError) as err:
        plan_schedule("2026-11-20T09:00", None, SEOUL, now)
    assert str(err.value) == (
        "That time (Fri 20 Nov 2026 09:00) is in the past; it is now Sun 22 Nov 2026 18:00 "
        "in Asia/Seoul. Give a later time."
    )
    validate_future(now - timedelta(seconds=20), now)  # within tolerance
    with pytest.raises(ScheduleInputError, match=r"\(Sun 22 Nov 2026 08:59\).*UTC"):
        validate_future(now - timedelta(seconds=31), now)


# --- series: first, next, COUNT, UNTIL, months ----------------------------------------


def test_first_occurrence_is_at_for_one_shots_and_first_match_for_rules():
    wednesday = utc(2026, 11, 25, 0)  # 09:00 Seoul
    assert first_occurrence(wednesday, None, SEOUL) == wednesday
    assert first_occurrence(wednesday, "FREQ=DAILY", SEOUL) == wednesday
    assert first_occurrence(wednesday, "FREQ=WEEKLY;BYDAY=MO", SEOUL) == utc(2026, 11, 30, 0)
    assert first_occurrence(wednesday, "FREQ=DAILY;BYHOUR=8", SEOUL) == utc(2026, 11, 25, 23)


def test_next_occurrence_before_the_start_gives_the_first_and_one_shot_gives_none():
    anchor = datetime(2026, 11, 30, 9)
    assert next_occurrence("FREQ=WEEKLY", SEOUL, anchor, utc(2020, 1, 1)) == utc(2026, 11, 30, 0)
    assert next_occurrence(None, SEOUL, anchor, utc(2020, 1, 1)) is None  # type: ignore[arg-type]


def test_count_three_is_exhausted_after_three():
    plan = plan_schedule("2026-11-25T09:00", "FREQ=DAILY;COUNT=3", SEOUL, NOW)
    rest = series(plan.rule, SEOUL, plan.anchor_local, plan.first_utc)
    assert [plan.first_utc, *rest] == [
        utc(2026, 11, 25, 0),
        utc(2026, 11, 26, 0),
        utc(2026, 11, 27, 0),
    ]
    assert next_occurrence(plan.rule, SEOUL, plan.anchor_local, rest[-1]) is None


@pytest.mark.parametrize(
    ("until", "last_day"),
    [
        ("20261130", 30),  # a date: that whole local day is included
        ("20261130T085959", 29),  # local wall time
        ("20261130T000000Z", 30),  # UTC: 09:00 Seoul on the 30th is exactly 00:00Z
        ("20261129T235959Z", 29),
    ],
)
def test_until_is_respected(until, last_day):
    rule = f"FREQ=DAILY;UNTIL={until}"
    fires = series(rule, SEOUL, datetime(2026, 11, 25, 9), utc(2026, 11, 1))
    assert wall_time(fires[-1], SEOUL).day == last_day
    assert len(fires) == last_day - 24


def test_until_before_start_is_refused():
    with pytest.raises(ScheduleInputError, match="ends before its first time"):
        plan_schedule("2026-11-25T09:00", "FREQ=DAILY;UNTIL=20261124", SEOUL, NOW)


def test_monthly_on_the_31st_skips_short_months():
    # dateutil/RFC 5545 behaviour: months without a 31st are skipped, not clamped.
    fires = series("FREQ=MONTHLY", BERLIN, datetime(2026, 1, 31, 9), utc(2026, 1, 1), limit=7)
    assert [wall_time(f, BERLIN).month for f in fires] == [1, 3, 5, 7, 8, 10, 12]
    last_days = series(
        "FREQ=MONTHLY;BYMONTHDAY=-1", BERLIN, datetime(2026, 1, 31, 9), utc(2026, 1, 1), limit=3
    )
    assert [wall_time(f, BERLIN).day for f in last_days] == [31, 28, 31]


@pytest.mark.timing
def test_old_minutely_series_is_still_fast():
    started = time.perf_counter()
    anchor = datetime(2016, 1, 1, 9, 0, 0)
    after = utc(2026, 11, 25, 10, 7, 30)
    assert next_occurrence("FREQ=MINUTELY;INTERVAL=15", BERLIN, anchor, after) == utc(
        2026, 11, 25, 10, 15
    )
    assert time.perf_counter() - started < 1


# --- descriptions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "relative"),
    [
        (utc(2026, 11, 21, 22), "in 2 hours"),  # 07:00 Seoul on the 22nd
        (utc(2026, 11, 21, 23, 55), "in 5 minutes"),
        (utc(2026, 11, 21, 22, 15), "in 1 hour 45 minutes"),
        (utc(2026, 11, 21, 12), "tomorrow"),  # 21:00 Seoul on the 21st
        (utc(2026, 11, 19, 0), "in 3 days"),
        (utc(2026, 11, 22, 0), "in under a minute"),
    ],
)
def test_describe_relative_times(now, relative):
    when = utc(2026, 11, 22, 0)  # Sun 09:00 Seoul
    assert describe_schedule(when, SEOUL, now, None) == (
        f"Sun 22 Nov 2026 09:00 Asia/Seoul, {relative}"
    )


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ("FREQ=DAILY", "repeats daily"),
        ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "repeats on weekdays"),
        ("FREQ=DAILY;BYDAY=MO,TU,WE,TH,FR", "repeats on weekdays"),
        ("FREQ=WEEKLY;BYDAY=SA,SU", "repeats on weekends"),
        ("FREQ=WEEKLY;BYDAY=MO", "repeats every Monday"),
        ("FREQ=WEEKLY", "repeats every Wednesday"),  # the start's weekday
        ("FREQ=WEEKLY;INTERVAL=2;BYDAY=TH,MO", "repeats every 2 weeks on Monday and Thursday"),
        ("FREQ=WEEKLY;BYDAY=MO,WE,FR", "repeats every Monday, Wednesday and Friday"),
        ("FREQ=MONTHLY;BYMONTHDAY=1", "repeats monthly on day 1"),
        ("FREQ=MONTHLY", "repeats monthly on day 25"),
        ("FREQ=MONTHLY;INTERVAL=3;BYMONTHDAY=-1", "repeats every 3 months on the last day"),
        ("FREQ=MONTHLY;BYDAY=1MO", "repeats monthly on the first Monday"),
        ("FREQ=YEARLY", "repeats yearly"),
        ("FREQ=HOURLY", "repeats hourly"),
        ("FREQ=HOURLY;INTERVAL=4", "repeats every 4 hours"),
        ("FREQ=MINUTELY;INTERVAL=15", "repeats every 15 minutes"),
        ("FREQ=DAILY;COUNT=3", "repeats daily, 3 times in total"),
        ("FREQ=DAILY;UNTIL=20261231", "repeats daily, until Thu 31 Dec 2026"),
        ("FREQ=DAILY;UNTIL=20261231T000000Z", "repeats daily, until Thu 31 Dec 2026 09:00"),
        ("FREQ=YEARLY;BYMONTH=1,7", "repeats (RRULE: FREQ=YEARLY;BYMONTH=1,7)"),
        ("FREQ=DAILY;BYHOUR=9,18", "repeats (RRULE: FREQ=DAILY;BYHOUR=9,18)"),
    ],
)
def test_describe_repeats(rule, text):
    when = utc(2026, 11, 25, 0)  # Wed 25 Nov 09:00 Seoul
    assert describe_schedule(when, SEOUL, utc(2026, 11, 22, 0), rule) == (
        f"Wed 25 Nov 2026 09:00 Asia/Seoul, in 3 days; {text}"
    )


def test_describe_uses_the_local_wall_time_in_summer_and_winter():
    now = utc(2026, 3, 20)
    assert describe_schedule(utc(2026, 3, 23, 8), BERLIN, now, None).startswith(
        "Mon 23 Mar 2026 09:00 Europe/Berlin"
    )
    assert describe_schedule(utc(2026, 3, 30, 7), BERLIN, now, None).startswith(
        "Mon 30 Mar 2026 09:00 Europe/Berlin"
    )


# --- property: the fast path equals a brute-force expansion ---------------------------

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Asia/Seoul",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute DST
    "America/Santiago",  # changes at midnight
    "Pacific/Chatham",  # +12:45
]
RULES = [
    "FREQ=DAILY",
    "FREQ=WEEKLY;BYDAY=MO,TH",
    "FREQ=WEEKLY;INTERVAL=2;BYDAY=SU",
    "FREQ=HOURLY;INTERVAL=3",
    "FREQ=MINUTELY;INTERVAL=45",
    "FREQ=MONTHLY;BYDAY=-1SU",
    "FREQ=DAILY;BYHOUR=0,2,3;BYMINUTE=0,30",
]


def brute_next(rule, zone, anchor, after):
    """Every naive occurrence from the anchor, localised; the earliest instant after `after`."""
    naive = rrulestr(rule, dtstart=anchor)
    around = wall_time(after, zone)
    window = naive.between(around - timedelta(days=3), around + timedelta(days=70), inc=True)
    instants = [localize(o, zone) for o in window]
    later = [i for i in instants if i > after]
    return min(later) if later else None


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    zone_name=st.sampled_from(ZONES),
    rule=st.sampled_from(RULES),
    anchor=st.datetimes(datetime(2024, 1, 1), datetime(2026, 6, 1)).map(
        lambda d: d.replace(second=0, microsecond=0)
    ),
    offset=st.timedeltas(timedelta(0), timedelta(days=400)),
)
def test_next_occurrence_matches_brute_force(zone_name, rule, anchor, offset):
    zone = parse_zone(zone_name)
    after = localize(anchor, zone) + offset
    assert next_occurrence(rule, zone, anchor, after) == brute_next(rule, zone, anchor, after)

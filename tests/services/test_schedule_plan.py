"""One `Plan` per claimed occurrence: every decision the worker and its records need, made
once (services/schedules/occurrences.py), agreeing with the rules it is made from."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from panager.services.schedules.occurrences import (
    TAINTED_REMINDER,
    local_label,
    next_after,
    plan,
)
from panager.services.schedules.types import Schedule

DUE = datetime(2026, 11, 21, 12, tzinfo=UTC)


def schedule(**changes) -> Schedule:
    base = Schedule(
        id="x", user_id=1, kind="reminder", message="stretch", timezone="Europe/Berlin",
        rrule="FREQ=DAILY", anchor_local=datetime(2026, 11, 21, 13), next_run_at=DUE,
        status="active", attempts=0, last_error=None, last_run_at=None, claimed_by=None,
        lease_until=None, created_at=DUE, updated_at=DUE,
    )
    return replace(base, **changes)


def test_a_plan_to_send_carries_the_next_run_the_label_and_the_words():
    s = schedule()
    planned = plan(s, DUE + timedelta(minutes=5), timedelta(hours=1))
    assert planned.due == DUE and planned.late  # five minutes behind: marked late
    assert planned.following == next_after(s, DUE) == DUE + timedelta(days=1)
    assert planned.label == local_label(DUE, "Europe/Berlin") == "Sat 21 Nov 13:00"
    assert planned.reminder == "stretch"
    assert planned.words("stretch", resent=True) == (
        "stretch\n⏰ Late: this was due Sat 21 Nov 13:00.\n"
        "(Sent again after an interruption — you may already have received it.)"
    )
    assert plan(s, DUE, timedelta(0)).words("stretch", resent=False) == "stretch"


def test_a_plan_without_a_send_records_the_miss_and_where_to_go_next():
    s = schedule()
    planned = plan(s, DUE + timedelta(days=2, hours=3), timedelta(hours=1))
    assert planned.occurrence.deliver is None and planned.occurrence.missed == 3
    assert planned.occurrence.next_run == DUE + timedelta(days=3)
    assert planned.following is None and planned.label == "" and planned.reminder == ""


def test_the_last_occurrence_has_no_next_and_tainted_words_stay_quoted():
    s = schedule(rrule=None, tainted=True, message="call +1 555 0100")
    planned = plan(s, DUE, timedelta(0))
    assert planned.following is None  # not recurring: the record marks it done
    assert planned.reminder.startswith(TAINTED_REMINDER) and "555 0100" in planned.reminder

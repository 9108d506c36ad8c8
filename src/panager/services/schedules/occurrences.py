"""Pure decisions about one claimed schedule: which occurrence to send, and the words.

No I/O. `plan_occurrence` applies the missed-run rules: an occurrence is sent
on time, sent late within the grace window (and marked late), or recorded as
missed; a recurring schedule jumps to its newest due occurrence and never
replays a backlog. `plan` makes every decision about one claimed schedule at
once — the occurrence, the schedule's next occurrence after it, its label in
the schedule's zone — so the worker and what it records (outcomes.py) read one
`Plan` instead of asking these rules again at each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from panager.framing import quoted_for_person
from panager.services.schedules.recurrence import next_occurrence
from panager.services.schedules.service import MissedRun, Schedule

LATE_AFTER = timedelta(seconds=60)  # delivered later than this after the due time → marked late
MAX_SCAN = 1000  # occurrences walked when skipping a backlog


@dataclass(frozen=True)
class Occurrence:
    """What to do with a claimed schedule now."""

    deliver: datetime | None  # the occurrence to send now, or None
    late: bool = False
    missed_from: datetime | None = None  # first skipped occurrence, recorded as missed
    missed: int = 0  # how many occurrences were skipped
    next_run: datetime | None = None  # where to go when nothing is delivered


def next_after(schedule: Schedule, when: datetime) -> datetime | None:
    """The schedule's next occurrence strictly after `when` (None: no more)."""
    if not schedule.rrule:  # not recurring
        return None
    return next_occurrence(schedule.rrule, schedule.zone, schedule.anchor_local, when)


def plan_occurrence(
    schedule: Schedule, now: datetime, grace: timedelta, late_after: timedelta = LATE_AFTER
) -> Occurrence:
    """Deliver on time, deliver late within the grace window, or record as missed.

    Less than `late_after` behind is on time whatever the grace window (even 0)."""
    grace = max(grace, late_after)
    due = schedule.next_run_at
    assert due is not None  # only claimed schedules are planned, and claims are due
    if schedule.attempts > 0:  # a retry: the occurrence was first tried in time
        return Occurrence(due, late=now - due > late_after)
    if not schedule.recurring:
        if now - due <= grace:
            return Occurrence(due, late=now - due > late_after)
        return Occurrence(None, missed_from=due, missed=1)
    newest, older = newest_due(schedule, now, grace)
    if now - newest <= grace:
        return Occurrence(
            newest,
            late=now - newest > late_after,
            missed_from=due if older else None,
            missed=older,
        )
    return Occurrence(None, missed_from=due, missed=older + 1, next_run=next_after(schedule, now))


@dataclass(frozen=True)
class Plan:
    """Everything decided about one claimed schedule, once (see the module doc)."""

    occurrence: Occurrence
    due: datetime  # the occurrence sent now (nothing sent: the claimed due time)
    late: bool = False  # sent later than LATE_AFTER after `due`
    following: datetime | None = None  # the schedule's next occurrence after `due`
    label: str = ""  # `due` in the schedule's zone ('Tue 25 Nov 09:00')
    reminder: str = ""  # a reminder's words (reminder_text), used when a run wrote none

    def words(self, text: str, *, resent: bool) -> str:
        """The delivered text: as written, plus a late or re-sent note when needed."""
        notes = []
        if self.late:
            notes.append(f"⏰ Late: this was due {self.label}.")
        if resent:
            notes.append("(Sent again after an interruption — you may already have received it.)")
        return "\n".join([text, *notes]) if notes else text


def plan(schedule: Schedule, now: datetime, grace: timedelta) -> Plan:
    """The occurrence to send now (or the miss to record) and, for one to send, the next
    occurrence after it and its label."""
    occurrence = plan_occurrence(schedule, now, grace)
    if occurrence.deliver is None:
        assert schedule.next_run_at is not None  # a claimed schedule is due
        return Plan(occurrence, schedule.next_run_at)
    due = occurrence.deliver
    return Plan(occurrence, due, occurrence.late, next_after(schedule, due),
                local_label(due, schedule.timezone), reminder_text(schedule))


def newest_due(schedule: Schedule, now: datetime, grace: timedelta) -> tuple[datetime, int]:
    """(newest occurrence at or before now, how many older ones it supersedes)."""
    latest, older = schedule.next_run_at, 0
    assert latest is not None  # a claimed schedule, due (see plan_occurrence)
    while older < MAX_SCAN:
        following = next_after(schedule, latest)
        if following is None or following > now:
            return latest, older
        latest, older = following, older + 1
    # A fast rule after a long outage: jump into the grace window instead of walking it all.
    jump = next_after(schedule, now - grace)
    if jump is None or jump > now:
        return latest, older
    latest = jump
    for _ in range(MAX_SCAN):
        following = next_after(schedule, latest)
        if following is None or following > now:
            break
        latest = following
    return latest, older


def local_label(when: datetime, timezone: str) -> str:
    """'Tue 25 Nov 09:00' in the schedule's zone."""
    return when.astimezone(ZoneInfo(timezone)).strftime("%a %d %b %H:%M")


TAINTED_REMINDER = (
    "⏰ A reminder written while reading outside content (its words, not Panager's):"
)


def reminder_text(schedule: Schedule) -> str:
    """A reminder's delivered words: as written, or — written in a tainted model call —
    quoted like a relayed message with its origin (no links, no formatting, no buttons),
    also after it was approved: approval does not launder the text."""
    if schedule.tainted:
        return quoted_for_person(TAINTED_REMINDER, schedule.message)
    return schedule.message


def missed_report(runs: Sequence[MissedRun], grace: timedelta) -> str:
    """One message telling a user what was missed and not sent late."""
    lines = [
        "While Panager was not running, these came due and were not sent (more than "
        f"{_duration(grace)} late, or replaced by a newer time that was sent):"
    ]
    for run in runs:
        what = "Reminder" if run.kind == "reminder" else "Scheduled task"
        more = run.count - 1
        extra = f", and {more}{'+' if run.count >= MAX_SCAN else ''} later time(s)" if more else ""
        lines.append(
            f"• {what} “{short(run.message)}” — due {local_label(run.scheduled_for, run.timezone)}"
            f" ({run.timezone}){extra}"
        )
    lines.append("Repeating schedules carry on as usual; /schedules lists them.")
    return "\n".join(lines)


# What /schedules shows for an unexpected delivery error: never the exception's own text,
# which can be a library's message or an HTML error page (the worker logs the exception).
UNEXPECTED_ERROR = "something unexpected went wrong (the worker's log has the details)"


def short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0 and seconds >= 3600:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60} minutes"
    return f"{seconds} seconds"

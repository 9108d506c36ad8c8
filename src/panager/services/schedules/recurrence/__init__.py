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
* ``fold=0`` is for times the series computes. A time given with an explicit offset
  names one instant and keeps it (:func:`parse_at`): ``02:30+01:00`` on Berlin's
  fall-back day is the *second* 02:30, and a series starting there fires at that
  instant first, then at 02:30 by the wall clock. An offset-less time typed during
  the repeated hour whose first pass is over means the pass still ahead.
* Rules are checked for feasibility before any expansion, so a rule that can never
  match (``BYMONTH=2;BYMONTHDAY=30``) is rejected instead of making dateutil scan
  to the year 9999.
"""

from __future__ import annotations

from panager.services.schedules.recurrence.describe import describe_schedule
from panager.services.schedules.recurrence.expand import (
    SchedulePlan,
    first_occurrence,
    next_occurrence,
    occurrences_between,
    plan_schedule,
    validate_future,
)
from panager.services.schedules.recurrence.rules import validate_rrule
from panager.services.schedules.recurrence.zones import (
    ScheduleInputError,
    localize,
    parse_at,
    parse_local,
    parse_when,
    parse_zone,
    wall_time,
)

__all__ = [
    "ScheduleInputError",
    "SchedulePlan",
    "describe_schedule",
    "first_occurrence",
    "localize",
    "next_occurrence",
    "occurrences_between",
    "parse_at",
    "parse_local",
    "parse_when",
    "parse_zone",
    "plan_schedule",
    "validate_future",
    "validate_rrule",
    "wall_time",
]

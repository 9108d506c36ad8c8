"""Schedules in PostgreSQL: create, list, edit, pause and cancel per user (plus workers' protocol).

The database is the source of truth; nothing about a schedule lives only in a
worker's memory. User-facing methods are scoped by user id; the claim protocol
workers use (`claim_due`, `begin_runs`, `complete_runs`, `settle`, …) is
`self.claims`, a `ScheduleClaims` (services/schedules/claims.py). A new schedule sends
`NOTIFY panager_schedules` in the same statement, so idle workers wake at once.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from psycopg.types.json import Jsonb

from panager.clock import Clock
from panager.config import RuntimeConfig
from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one, one
from panager.services.schedules.claims import ScheduleClaims
from panager.services.schedules.recurrence import (
    ScheduleInputError,
    SchedulePlan,
    describe_schedule,
    next_occurrence,
    parse_zone,
    plan_schedule,
)
from panager.services.schedules.types import (
    MissedRun,
    RunRecord,
    RunRequest,
    RunTicket,
    Schedule,
    Settlement,
    new_schedule_id,
    schedule_from_row,
)
from panager.services.users import User

__all__ = [
    "NOTIFY_CHANNEL",
    "MissedRun",
    "RunRecord",
    "RunRequest",
    "RunTicket",
    "Schedule",
    "ScheduleInputError",
    "ScheduleService",
    "Settlement",
    "new_schedule_id",
]

NOTIFY_CHANNEL = "panager_schedules"
KINDS = ("reminder", "agent")
MAX_ACTIVE_PER_USER = 100
INTERVAL_PROBES = 8  # gaps between the first occurrences checked against the minimum


@dataclass(frozen=True)
class ScheduleLimits:
    """Per-user limits on new schedules (YAML: schedule_min_interval_*, _max_active_*)."""

    max_active: int = MAX_ACTIVE_PER_USER
    min_interval_agent: timedelta = timedelta(minutes=15)
    min_interval_reminder: timedelta = timedelta(minutes=1)

    @classmethod
    def from_config(cls, config: RuntimeConfig) -> ScheduleLimits:
        """The limits of a RuntimeConfig."""
        return cls(
            max_active=config.schedule_max_active_per_user,
            min_interval_agent=timedelta(minutes=config.schedule_min_interval_agent_minutes),
            min_interval_reminder=timedelta(
                minutes=config.schedule_min_interval_reminder_minutes
            ),
        )

    def min_interval(self, kind: str) -> timedelta:
        """The shortest repeat interval allowed for `kind`."""
        return self.min_interval_agent if kind == "agent" else self.min_interval_reminder


def shortest_gap(plan: SchedulePlan, zone: ZoneInfo) -> timedelta | None:
    """The shortest gap between the first few occurrences of a repeating plan."""
    if plan.rule is None:
        return None
    gaps, current = [], plan.first_utc
    for _ in range(INTERVAL_PROBES):
        nxt = next_occurrence(plan.rule, zone, plan.anchor_local, current)
        if nxt is None:
            break
        gaps.append(nxt - current)
        current = nxt
    return min(gaps) if gaps else None
LIST_FINISHED_FOR = timedelta(days=7)  # failed/missed schedules stay listed this long

INSERT_SCHEDULE = f"""
WITH created AS (
    INSERT INTO schedules (id, user_id, kind, message, timezone, rrule, anchor_local,
                           next_run_at, created_at, updated_at, tainted, params)
    VALUES (%(id)s, %(user_id)s, %(kind)s, %(message)s, %(timezone)s, %(rrule)s,
            %(anchor_local)s, %(next_run_at)s, %(now)s, %(now)s, %(tainted)s, %(params)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING *
)
SELECT created.*,
       pg_notify('{NOTIFY_CHANNEL}', extract(epoch FROM created.next_run_at)::text) AS notified
  FROM created
"""
COUNT_ACTIVE = (
    "SELECT count(*) AS n FROM schedules WHERE user_id = %s AND status = 'active' "
    "AND kind IN ('reminder', 'agent')"
)
# A person's own schedules; system jobs (heartbeat, briefing, webhook runs) are not theirs
# to edit here and are never listed with them.
GET_SCHEDULE = (
    "SELECT * FROM schedules WHERE id = %(id)s AND user_id = %(user_id)s "
    "AND kind IN ('reminder', 'agent')"
)
LIST_SCHEDULES = """
SELECT * FROM schedules
 WHERE user_id = %(user_id)s AND kind IN ('reminder', 'agent')
   AND (status = 'active' OR (status IN ('failed', 'missed') AND updated_at > %(since)s))
 ORDER BY status <> 'active', next_run_at NULLS LAST, created_at
"""
CANCEL_SCHEDULE = """
UPDATE schedules
   SET status = 'cancelled', claimed_by = NULL, lease_until = NULL, updated_at = %(now)s
 WHERE id = %(id)s AND user_id = %(user_id)s AND kind IN ('reminder', 'agent')
   AND status IN ('active', 'paused', 'failed', 'missed')
RETURNING *
"""

# Edits leave a schedule a worker is sending right now alone (its lease is live); a
# backoff lease without a holder (a retry waiting) is cleared, so the new time counts.
_NOT_SENDING = "(claimed_by IS NULL OR lease_until IS NULL OR lease_until <= %(now)s)"
_NOTIFY_CHANGED = f"""
SELECT changed.*,
       pg_notify('{NOTIFY_CHANNEL}', extract(epoch FROM changed.next_run_at)::text) AS notified
  FROM changed
"""
UPDATE_SCHEDULE = f"""
WITH changed AS (
    UPDATE schedules
       SET message = %(message)s, kind = %(kind)s, timezone = %(timezone)s, rrule = %(rrule)s,
           anchor_local = %(anchor_local)s, next_run_at = %(next_run_at)s,
           status = CASE WHEN status = 'paused' THEN 'paused' ELSE 'active' END,
           attempts = 0, last_error = NULL, claimed_by = NULL, lease_until = NULL,
           updated_at = %(now)s
     WHERE id = %(id)s AND user_id = %(user_id)s AND kind IN ('reminder', 'agent')
       AND status IN ('active', 'paused', 'failed', 'missed') AND {_NOT_SENDING}
    RETURNING *
){_NOTIFY_CHANGED}"""
PAUSE_SCHEDULE = f"""
UPDATE schedules SET status = 'paused', claimed_by = NULL, lease_until = NULL,
                     updated_at = %(now)s
 WHERE id = %(id)s AND user_id = %(user_id)s AND kind IN ('reminder', 'agent')
   AND status = 'active' AND {_NOT_SENDING}
RETURNING *
"""
RESUME_SCHEDULE = f"""
WITH changed AS (
    UPDATE schedules SET status = 'active', next_run_at = %(next_run_at)s, attempts = 0,
                         updated_at = %(now)s
     WHERE id = %(id)s AND user_id = %(user_id)s AND kind IN ('reminder', 'agent')
       AND status = 'paused'
    RETURNING *
){_NOTIFY_CHANGED}"""
LIST_WITH_PAUSED = LIST_SCHEDULES.replace(
    "status = 'active' OR", "status IN ('active', 'paused') OR"
)


class ScheduleService:
    """Reads and writes schedules; user-facing methods are scoped by user id.

    `claims` holds the workers' side (claim, fence, record, report)."""

    def __init__(
        self,
        pool: Pool,
        clock: Clock,
        max_message_chars: int = 8000,
        limits: ScheduleLimits | None = None,
    ) -> None:
        self.pool = pool
        self.claims = ScheduleClaims(pool)
        self.clock = clock
        self.max_message_chars = max_message_chars
        self.limits = limits or ScheduleLimits()

    # -- user-facing -----------------------------------------------------------------------

    async def create(
        self,
        user: User,
        message: str,
        at: str,
        *,
        kind: str = "reminder",
        repeat: str | None = None,
        timezone: str | None = None,
        tainted: bool = False,
        model: str | None = None,
    ) -> Schedule:
        """Validate and store a schedule; raises ScheduleInputError saying what to fix.

        `tainted`: written in a model call that had read outside content (its agent runs
        are then tainted too). `model`: the model the person used then (an agent task
        keeps it; it is checked against what they may use at every run)."""
        message = self._check_message(message)
        if kind not in KINDS:
            raise ScheduleInputError(f"kind must be 'reminder' or 'agent', not {kind!r}.")
        zone = _user_zone(timezone or user.timezone, at)
        now = self.clock.now()
        plan = plan_schedule(at, repeat, zone, now)
        self._check_interval(kind, plan, zone)
        await self._check_room(user.id)
        params = {
            "user_id": user.id,
            "kind": kind,
            "message": message,
            "timezone": zone.key,
            "rrule": plan.rule,
            "anchor_local": plan.anchor_local,
            "next_run_at": plan.first_utc,
            "now": now,
            "tainted": tainted,
            "params": Jsonb({"model": model}) if model and kind == "agent" else None,
        }
        while True:  # an id collision is astronomically rare; just draw again
            row = {**params, "id": new_schedule_id()}
            created = await fetch_one(self.pool, INSERT_SCHEDULE, row)
            if created is not None:
                return schedule_from_row(created)

    async def _check_room(self, user_id: int) -> None:
        """Raise when one more active schedule would pass schedule_max_active_per_user."""
        row = one(await fetch_one(self.pool, COUNT_ACTIVE, (user_id,)))
        if row["n"] >= self.limits.max_active:
            raise ScheduleInputError(
                f"Limit reached: at most {self.limits.max_active} active schedules per user "
                "(schedule_max_active_per_user); cancel some first."
            )

    def _check_interval(self, kind: str, plan: SchedulePlan, zone: ZoneInfo) -> None:
        minimum = self.limits.min_interval(kind)
        gap = shortest_gap(plan, zone)
        if gap is not None and gap < minimum:
            minutes = int(minimum.total_seconds() // 60)
            key = f"schedule_min_interval_{kind}_minutes"
            raise ScheduleInputError(
                f"Limit: a repeating {kind} may run at most every {minutes} minute(s) ({key}); "
                "choose a longer interval."
            )

    def _check_message(self, message: str) -> str:
        text = (message or "").strip()
        if not text:
            raise ScheduleInputError("The message is empty; say what to remind about or do.")
        if len(text) > self.max_message_chars:
            raise ScheduleInputError(
                f"The message is {len(text):,} characters; the limit is "
                f"{self.max_message_chars:,}."
            )
        return text

    def preview(self, user: User, at: str, repeat: str | None) -> list[str]:
        """How a new schedule would run, for a question: its first time in words (with the
        repetition) and its next three times, in the person's zone. Raises
        ScheduleInputError as `create` would."""
        zone = _user_zone(user.timezone, at)
        now = self.clock.now()
        plan = plan_schedule(at, repeat, zone, now)
        times, current = [plan.first_utc], plan.first_utc
        while plan.rule is not None and len(times) < 3:
            nxt = next_occurrence(plan.rule, zone, plan.anchor_local, current)
            if nxt is None:
                break
            times.append(nxt)
            current = nxt
        return [describe_schedule(plan.first_utc, zone, now, plan.rule, relative=False),
                *(t.astimezone(zone).strftime("%a %d %b %Y %H:%M") for t in times)]

    async def get(self, user_id: int, schedule_id: str) -> Schedule | None:
        """The user's schedule with this id, or None (also for other users' ids)."""
        params = {"id": _clean_id(schedule_id), "user_id": user_id}
        return schedule_from_row(await fetch_one(self.pool, GET_SCHEDULE, params))

    async def list(self, user_id: int) -> list[Schedule]:
        """Active schedules, then recently failed or missed ones, soonest first."""
        since = self.clock.now() - LIST_FINISHED_FOR
        rows = await fetch_all(self.pool, LIST_SCHEDULES, {"user_id": user_id, "since": since})
        return [schedule_from_row(r) for r in rows]

    async def list_all(self, user_id: int) -> builtins.list[Schedule]:
        """Like `list`, with paused schedules too (the web page shows them)."""
        since = self.clock.now() - LIST_FINISHED_FOR
        rows = await fetch_all(self.pool, LIST_WITH_PAUSED, {"user_id": user_id, "since": since})
        return [schedule_from_row(r) for r in rows]

    async def update(
        self, user: User, schedule_id: str, message: str, at: str, *, kind: str = "reminder",
        repeat: str | None = None, timezone: str | None = None,
    ) -> Schedule | None:
        """Change text, time, rule and kind (validated like `create`: the minimum interval,
        and the active cap when a failed or missed one becomes active); None if not theirs.

        Raises ScheduleInputError for bad input or while a worker is sending it."""
        message = self._check_message(message)
        if kind not in KINDS:
            raise ScheduleInputError(f"kind must be 'reminder' or 'agent', not {kind!r}.")
        now = self.clock.now()
        zone = _user_zone(timezone or user.timezone, at)
        plan = plan_schedule(at, repeat, zone, now)
        self._check_interval(kind, plan, zone)
        current = await self.get(user.id, schedule_id)
        if current is not None and current.status in ("failed", "missed"):
            await self._check_room(user.id)
        params = {"id": _clean_id(schedule_id), "user_id": user.id, "message": message,
                  "kind": kind, "timezone": zone.key,
                  "rrule": plan.rule, "anchor_local": plan.anchor_local,
                  "next_run_at": plan.first_utc, "now": now}
        return await self._change(UPDATE_SCHEDULE, params)

    async def pause(self, user_id: int, schedule_id: str) -> Schedule | None:
        """Stop an active schedule from firing until resumed; None if not theirs."""
        params = {"id": _clean_id(schedule_id), "user_id": user_id, "now": self.clock.now()}
        return await self._change(PAUSE_SCHEDULE, params)

    async def resume(self, user_id: int, schedule_id: str) -> Schedule | None:
        """Let a paused schedule fire again from its next occurrence after now (within the
        active cap)."""
        schedule = await self.get(user_id, schedule_id)
        if schedule is None:
            return None
        if schedule.status == "paused":
            await self._check_room(user_id)
        now = self.clock.now()
        due = schedule.next_run_at
        if schedule.status == "paused" and (due is None or due < now):
            due = self._resumed_at(schedule, now)
        params = {"id": schedule.id, "user_id": user_id, "now": now, "next_run_at": due}
        return await self._change(RESUME_SCHEDULE, params)

    @staticmethod
    def _resumed_at(schedule: Schedule, now: datetime) -> datetime:
        if schedule.rrule:
            found = next_occurrence(schedule.rrule, schedule.zone, schedule.anchor_local, now)
            if found is not None:
                return found
            raise ScheduleInputError("Its repeat rule has no occurrences left; cancel it instead.")
        raise ScheduleInputError(
            "Its time passed while it was paused; edit it to give a new time."
        )

    async def _change(self, sql: str, params: dict) -> Schedule | None:
        changed = schedule_from_row(await fetch_one(self.pool, sql, params))
        if changed is not None:
            return changed
        current = await self.get(params["user_id"], params["id"])
        if current is None:
            return None
        if current.claimed_by is not None:
            raise ScheduleInputError("It is being delivered right now; try again in a moment.")
        raise ScheduleInputError(f"That schedule is {current.status}; nothing to change.")

    async def cancel(self, user_id: int, schedule_id: str) -> Schedule | None:
        """Cancel (or dismiss a failed/missed) schedule of this user; None if not theirs/open."""
        params = {"id": _clean_id(schedule_id), "user_id": user_id, "now": self.clock.now()}
        return schedule_from_row(await fetch_one(self.pool, CANCEL_SCHEDULE, params))


def _clean_id(schedule_id: str) -> str:
    return (schedule_id or "").strip().strip("`'\"").lower()


def _user_zone(name: str, at: str) -> ZoneInfo:
    """The user's zone; a time with an explicit offset still works when the zone is unknown."""
    try:
        return parse_zone(name)
    except ScheduleInputError:
        if _has_offset(at):
            return ZoneInfo("UTC")
        raise ScheduleInputError(
            f"Your time zone ({name!r}) is not known, so a time without an offset cannot be "
            "placed; set it first (set_timezone, e.g. 'Europe/Berlin'), or give an explicit "
            "offset like '2026-11-25T09:00+09:00'."
        ) from None


def _has_offset(at: str) -> bool:
    try:
        return datetime.fromisoformat((at or "").strip()).tzinfo is not None
    except ValueError:
        return False

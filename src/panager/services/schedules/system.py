# Over 400 lines, kept whole: the system jobs (heartbeat, briefing, webhooks) share their schedule
# rows, limits and budget rules.
"""System jobs: schedules Panager runs for a person — heartbeat, briefing, webhook calls.

They live in `schedules` like the person's own reminders, so the same workers claim
and deliver them exactly once, across restarts and machines; they differ in what the
person sees: never listed by `/schedules`, outside the person's cap and minimum
interval, and (for a heartbeat) silent when there is nothing new.

- **heartbeat**: one per person, `FREQ=MINUTELY;INTERVAL=N` (N ≥ 15) in their zone with
  active hours in `params`; `heartbeat_seen` remembers what was already announced.
- **briefing**: one per person, daily at a local time.
- **webhook**: each accepted call is a one-shot job due now, its payload in `params`;
  hooks (`webhooks`) store only the SHA-256 of their token, and a signed hook's signing
  secret sealed with PANAGER_SECRET_KEY (a signed hook needs the key).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from psycopg.types.json import Jsonb

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.queries import execute, fetch_all, fetch_one, one
from panager.services.accounts.sealing import InvalidToken, Sealer
from panager.services.schedules.recurrence import ScheduleInputError, plan_schedule
from panager.services.schedules.service import NOTIFY_CHANNEL
from panager.services.schedules.types import Schedule, new_schedule_id, schedule_from_row
from panager.services.users import User

MIN_HEARTBEAT = timedelta(minutes=15)
MAX_HEARTBEAT = timedelta(hours=24)
WEBHOOK_RATE = 20  # accepted calls per hook per minute
WEBHOOK_NAME_CHARS = 32
WEBHOOK_INSTRUCTION_CHARS = 2_000
WEBHOOK_PAYLOAD_CHARS = 16_000  # what of a body reaches the model
MAX_WEBHOOKS = 20
SIGNING_HOWTO = (
    "Each call must send X-Panager-Timestamp (Unix seconds) and X-Panager-Signature (hex "
    "HMAC-SHA256 of the timestamp followed by the body, with this secret)."
)
_NAME_OK = "abcdefghijklmnopqrstuvwxyz0123456789-_"

INSERT_JOB = f"""
WITH created AS (
    INSERT INTO schedules (id, user_id, kind, message, timezone, rrule, anchor_local,
                           next_run_at, params, created_at, updated_at)
    VALUES (%(id)s, %(user_id)s, %(kind)s, %(message)s, %(timezone)s, %(rrule)s,
            %(anchor_local)s, %(next_run_at)s, %(params)s, %(now)s, %(now)s)
    RETURNING *
)
SELECT created.*,
       pg_notify('{NOTIFY_CHANNEL}', extract(epoch FROM created.next_run_at)::text) AS notified
  FROM created
"""
END_JOB = """
UPDATE schedules SET status = 'cancelled', claimed_by = NULL, lease_until = NULL,
                     updated_at = %(now)s
 WHERE user_id = %(user_id)s AND kind = %(kind)s
   AND status IN ('active', 'paused', 'failed', 'missed')
RETURNING *
"""
ENSURE_JOB = f"""
WITH created AS (
    INSERT INTO schedules (id, user_id, kind, message, timezone, rrule, anchor_local,
                           next_run_at, params, created_at, updated_at)
    VALUES (%(id)s, %(user_id)s, %(kind)s, %(message)s, %(timezone)s, %(rrule)s,
            %(anchor_local)s, %(next_run_at)s, %(params)s, %(now)s, %(now)s)
    ON CONFLICT (user_id, kind) WHERE kind IN ('heartbeat', 'briefing', 'tidy')
                AND status IN ('active', 'paused', 'failed', 'missed') DO NOTHING
    RETURNING *
)
SELECT created.*,
       pg_notify('{NOTIFY_CHANNEL}', extract(epoch FROM created.next_run_at)::text) AS notified
  FROM created
"""
NOTE_JOB = """
UPDATE schedules SET params = coalesce(params, '{}'::jsonb) || %(values)s
 WHERE user_id = %(user_id)s AND kind = %(kind)s
   AND status IN ('active', 'paused', 'failed', 'missed')
"""
GET_JOB = """
SELECT * FROM schedules WHERE user_id = %(user_id)s AND kind = %(kind)s
   AND status IN ('active', 'paused', 'failed', 'missed')
"""
INSERT_HOOK = """
INSERT INTO webhooks (id, user_id, name, instruction, token_hash, created_at, signing_secret)
VALUES (%(id)s, %(user_id)s, %(name)s, %(instruction)s, %(token_hash)s, %(now)s, %(secret)s)
ON CONFLICT DO NOTHING
RETURNING *
"""
COUNT_HOOKS = "SELECT count(*) AS n FROM webhooks WHERE user_id = %s AND revoked_at IS NULL"
LIST_HOOKS = """
SELECT * FROM webhooks WHERE user_id = %s AND revoked_at IS NULL ORDER BY created_at
"""
REVOKE_HOOK = """
UPDATE webhooks SET revoked_at = %(now)s
 WHERE user_id = %(user_id)s AND lower(name) = lower(%(name)s) AND revoked_at IS NULL
RETURNING *
"""
HOOK_BY_TOKEN = """
SELECT w.*, u.status AS user_status FROM webhooks w JOIN users u ON u.id = w.user_id
 WHERE w.token_hash = %s AND w.revoked_at IS NULL
"""
# Counted and inserted after a per-hook transaction lock taken by its own statement (so
# the count's snapshot sees every call accepted before): concurrent calls cannot both pass.
LOCK_HOOK = "SELECT pg_advisory_xact_lock(hashtextextended('webhook:' || %s, 0))"
FORGET_CALLS = "DELETE FROM webhook_seen WHERE hook_id = %s AND seen_at <= %s"
SEE_CALL = """
INSERT INTO webhook_seen (hook_id, digest, seen_at) VALUES (%s, %s, %s)
ON CONFLICT DO NOTHING RETURNING hook_id
"""
HOOK_TOKENS = """
SELECT CASE WHEN tokens_day = %(day)s THEN tokens_used ELSE 0 END AS used,
       budget_told IS NOT DISTINCT FROM %(day)s AS told
  FROM webhooks WHERE id = %(hook)s
"""
ADD_HOOK_TOKENS = """
UPDATE webhooks SET tokens_used = CASE WHEN tokens_day = %(day)s THEN tokens_used ELSE 0 END
                                  + %(tokens)s,
       tokens_day = %(day)s
 WHERE id = %(hook)s
"""
TELL_BUDGET = """
UPDATE webhooks SET budget_told = %(day)s
 WHERE id = %(hook)s AND budget_told IS DISTINCT FROM %(day)s RETURNING id
"""
ACCEPT_CALL = f"""
WITH recent AS (
    SELECT count(*) AS n FROM schedules
     WHERE user_id = %(user_id)s AND kind = 'webhook' AND params->>'hook' = %(hook)s
       AND created_at > %(since)s
),
created AS (
    INSERT INTO schedules (id, user_id, kind, message, timezone, rrule, anchor_local,
                           next_run_at, params, created_at, updated_at)
    SELECT %(id)s, %(user_id)s, 'webhook', %(message)s, %(timezone)s, NULL, %(anchor_local)s,
           %(now)s, %(params)s, %(now)s, %(now)s
      FROM recent WHERE recent.n < %(limit)s
    RETURNING *
)
SELECT created.*,
       pg_notify('{NOTIFY_CHANNEL}', extract(epoch FROM created.next_run_at)::text) AS notified
  FROM created
"""
SEEN = "SELECT item_key FROM heartbeat_seen WHERE user_id = %s AND item_key = ANY(%s)"
MARK_SEEN = """
INSERT INTO heartbeat_seen (user_id, item_key, seen_at)
SELECT %(user_id)s, k, %(now)s FROM unnest(%(keys)s::text[]) AS k
ON CONFLICT DO NOTHING
"""
FORGET_SEEN = "DELETE FROM heartbeat_seen WHERE user_id = %s AND seen_at < %s"


@dataclass(frozen=True)
class Heartbeat:
    """A person's heartbeat settings."""

    every: timedelta
    start: time  # active hours, local: [start, end); start > end wraps past midnight
    end: time
    schedule: Schedule

    def active_at(self, local: datetime) -> bool:
        """Whether `local` (in the person's zone) is within the active hours."""
        now = local.time()
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end

    def next_active(self, local: datetime) -> datetime:
        """The first check time at or after `local` that falls within the active hours."""
        moment = local
        for _ in range(int(timedelta(days=1) / self.every) + 2):
            if self.active_at(moment):
                return moment
            moment += self.every
        return moment

    def describe(self) -> str:
        """'every 30 min, 08:00–22:00'."""
        minutes = int(self.every.total_seconds() // 60)
        return f"every {minutes} min, {self.start:%H:%M}–{self.end:%H:%M}"


@dataclass(frozen=True)
class Webhook:
    """A person's webhook (the token itself is shown once, at creation)."""

    id: str
    user_id: int
    name: str
    instruction: str
    created_at: datetime
    signing_secret: str | None = None  # calls must carry its HMAC signature (opened)
    signed: bool = False  # True also when the stored secret cannot be opened: calls refused


class WebhookLimited(Exception):
    """Too many calls to one hook this minute."""


class WebhookReplayed(Exception):
    """The same signature (or, for an unsigned hook, the same body) came in the last ten
    minutes."""


SIGNATURE_WINDOW = timedelta(minutes=5)  # a signed call's timestamp: at most this far off
REPLAY_WINDOW = timedelta(minutes=10)  # how long an accepted signature or body is remembered


def call_signature(secret: str, timestamp: str, body: bytes) -> str:
    """X-Panager-Signature: hex HMAC-SHA256 of the timestamp followed by the body."""
    return hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).hexdigest()


def signature_problem(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, now: datetime
) -> str | None:
    """Why a signed hook's call is refused, or None when its signature is good and fresh."""
    if not timestamp or not signature:
        return "this webhook needs X-Panager-Timestamp and X-Panager-Signature"
    try:
        sent = datetime.fromtimestamp(int(timestamp.strip()), tz=now.tzinfo)
    except (ValueError, OverflowError, OSError):
        return "X-Panager-Timestamp must be Unix seconds"
    if abs(now - sent) > SIGNATURE_WINDOW:
        return "X-Panager-Timestamp is more than 5 minutes off"
    given = signature.strip().lower().removeprefix("sha256=")
    if not hmac.compare_digest(given, call_signature(secret, timestamp.strip(), body)):
        return "X-Panager-Signature does not match"
    return None


def call_digest(hook: Webhook, body: bytes, signature: str | None) -> bytes:
    """What replay protection remembers of an accepted call: its signature (signed hooks),
    else its body."""
    if hook.signed:
        given = (signature or "").strip().lower().removeprefix("sha256=")
        return hashlib.sha256(b"signature:" + given.encode()).digest()
    return hashlib.sha256(b"body:" + body).digest()


def token_hash(token: str) -> bytes:
    """What is stored for a token: its SHA-256."""
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def _hook(row: dict, secret: str | None = None) -> Webhook:
    return Webhook(row["id"], row["user_id"], row["name"], row["instruction"], row["created_at"],
                   secret, row.get("signing_secret") is not None)


def clean_hook_name(name: str) -> str:
    """A hook name: lower-case letters, digits, '-' and '_', at most 32 characters."""
    cleaned = (name or "").strip().lower()
    if not cleaned or len(cleaned) > WEBHOOK_NAME_CHARS or any(c not in _NAME_OK for c in cleaned):
        raise ScheduleInputError(
            f"A webhook name is 1–{WEBHOOK_NAME_CHARS} characters of a–z, 0–9, '-' and '_'."
        )
    return cleaned


class SystemJobService:
    """Heartbeat, briefing and webhook jobs of each person; every method scoped by user."""

    def __init__(self, pool: Pool, clock: Clock, sealer: Sealer | None = None) -> None:
        self.pool = pool
        self.clock = clock
        self.sealer = sealer  # from PANAGER_SECRET_KEY: seals signing secrets at rest

    def _opened(self, row: dict) -> Webhook:
        """The hook with its signing secret opened; a secret that does not open (the key
        unset or changed without `panager restore --new-key`) leaves the hook signed with no
        secret, so every call to it is refused rather than taken unsigned."""
        sealed = row.get("signing_secret")
        if sealed is None or self.sealer is None:
            return _hook(row)
        try:
            return _hook(row, self.sealer.open(sealed))
        except InvalidToken:
            return _hook(row)

    # -- jobs ---------------------------------------------------------------------------------

    async def _replace(
        self, user: User, kind: str, message: str, at: str, rule: str, params: dict[str, Any]
    ) -> Schedule:
        zone = ZoneInfo(user.timezone)
        now = self.clock.now()
        plan = plan_schedule(at, rule, zone, now)
        await self.end(user.id, kind)
        row = {
            "id": new_schedule_id(), "user_id": user.id, "kind": kind, "message": message,
            "timezone": zone.key, "rrule": plan.rule, "anchor_local": plan.anchor_local,
            "next_run_at": plan.first_utc, "params": Jsonb(params), "now": now,
        }
        return schedule_from_row(one(await fetch_one(self.pool, INSERT_JOB, row)))

    async def ensure(self, user: User, kind: str, at: str, rule: str) -> Schedule | None:
        """Create the person's job of this kind unless one is live; the new one or None."""
        zone = ZoneInfo(user.timezone)
        now = self.clock.now()
        plan = plan_schedule(at, rule, zone, now)
        row = {
            "id": new_schedule_id(), "user_id": user.id, "kind": kind, "message": kind,
            "timezone": zone.key, "rrule": plan.rule, "anchor_local": plan.anchor_local,
            "next_run_at": plan.first_utc, "params": Jsonb({}), "now": now,
        }
        return schedule_from_row(await fetch_one(self.pool, ENSURE_JOB, row))

    async def note(self, user_id: int, kind: str, values: dict[str, Any]) -> None:
        """Merge `values` into the job's params (what its last run did)."""
        params = {"user_id": user_id, "kind": kind, "values": Jsonb(values)}
        await execute(self.pool, NOTE_JOB, params)

    async def end(self, user_id: int, kind: str) -> bool:
        """Stop the person's job of this kind; whether one was running."""
        params = {"user_id": user_id, "kind": kind, "now": self.clock.now()}
        return bool(await fetch_all(self.pool, END_JOB, params))

    async def job(self, user_id: int, kind: str) -> Schedule | None:
        """The person's live job of this kind."""
        return schedule_from_row(
            await fetch_one(self.pool, GET_JOB, {"user_id": user_id, "kind": kind})
        )

    async def set_heartbeat(
        self, user: User, every: timedelta, start: time, end: time
    ) -> Heartbeat:
        """Start (or replace) the person's heartbeat: a check every `every` in active hours."""
        if not MIN_HEARTBEAT <= every <= MAX_HEARTBEAT:
            raise ScheduleInputError("A heartbeat runs every 15 minutes at the most often (and "
                                     "at least once a day), e.g. /heartbeat 30m 08:00-22:00.")
        if start == end:
            raise ScheduleInputError("Active hours need a start and a different end, "
                                     "e.g. 08:00-22:00.")
        minutes = int(every.total_seconds() // 60)
        local = self.clock.now().astimezone(ZoneInfo(user.timezone)) + every
        at = local.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M")
        params = {"every_minutes": minutes, "start": f"{start:%H:%M}", "end": f"{end:%H:%M}"}
        job = await self._replace(
            user, "heartbeat", "heartbeat", at, f"FREQ=MINUTELY;INTERVAL={minutes}", params
        )
        return Heartbeat(every, start, end, job)

    async def heartbeat(self, user_id: int) -> Heartbeat | None:
        """The person's heartbeat settings, or None when it is off."""
        job = await self.job(user_id, "heartbeat")
        return heartbeat_of(job) if job is not None else None

    async def set_briefing(self, user: User, at: time, model: str | None = None) -> Schedule:
        """Start (or move) the person's daily briefing to `at`, local time (`model`: the
        person's model now, which the briefing keeps)."""
        params: dict[str, Any] = {"at": f"{at:%H:%M}"}
        if model:
            params["model"] = model
        return await self._replace(user, "briefing", "briefing", f"{at:%H:%M}", "FREQ=DAILY",
                                   params)

    # -- heartbeat memory ----------------------------------------------------------------------

    async def unseen(self, user_id: int, keys: list[str]) -> list[str]:
        """The keys of `keys` not announced before (order kept)."""
        if not keys:
            return []
        rows = await fetch_all(self.pool, SEEN, (user_id, keys))
        seen = {r["item_key"] for r in rows}
        return [k for k in keys if k not in seen]

    async def mark_seen(self, user_id: int, keys: list[str]) -> None:
        """Remember that these items were considered; forget entries older than a week."""
        now = self.clock.now()
        if keys:
            await execute(self.pool, MARK_SEEN, {"user_id": user_id, "keys": keys, "now": now})
        await execute(self.pool, FORGET_SEEN, (user_id, now - timedelta(days=7)))

    # -- webhooks ------------------------------------------------------------------------------

    def check_webhook(
        self, name: str, instruction: str, *, signed: bool = False
    ) -> tuple[str, str]:
        """The hook's name and instruction as they would be stored, or ScheduleInputError
        saying what is wrong (nothing is stored or made up here)."""
        name = clean_hook_name(name)
        instruction = " ".join((instruction or "").split())
        if not instruction:
            raise ScheduleInputError("Say what to do with each call, e.g. “Tell me who rang "
                                     "the doorbell.”")
        if len(instruction) > WEBHOOK_INSTRUCTION_CHARS:
            raise ScheduleInputError(
                f"The instruction is {len(instruction):,} characters; the limit is "
                f"{WEBHOOK_INSTRUCTION_CHARS:,}."
            )
        if signed and self.sealer is None:
            raise ScheduleInputError(
                "A signed webhook needs PANAGER_SECRET_KEY, which this Panager does not have: "
                "its signing secret is stored encrypted with that key. Ask the operator to "
                "set it, or make the webhook unsigned."
            )
        return name, instruction

    async def create_webhook(
        self, user: User, name: str, instruction: str, *, signed: bool = False
    ) -> tuple[Webhook, str]:
        """A new hook and its token (shown once, on the web page; only its hash is stored).
        `signed`: calls must carry an HMAC signature with the hook's `signing_secret`."""
        name, instruction = self.check_webhook(name, instruction, signed=signed)
        if one(await fetch_one(self.pool, COUNT_HOOKS, (user.id,)))["n"] >= MAX_WEBHOOKS:
            raise ScheduleInputError(f"At most {MAX_WEBHOOKS} webhooks; revoke one first.")
        token = secrets.token_urlsafe(32)
        secret = secrets.token_urlsafe(32) if signed else None
        params = {
            "id": new_schedule_id(), "user_id": user.id, "name": name,
            "instruction": instruction, "token_hash": token_hash(token), "now": self.clock.now(),
            "secret": self.sealer.seal(secret) if secret and self.sealer else None,
        }
        row = await fetch_one(self.pool, INSERT_HOOK, params)
        if row is None:
            raise ScheduleInputError(f"You already have a webhook named {name!r}; revoke it "
                                     "first or pick another name.")
        return _hook(row, secret), token

    async def webhooks(self, user_id: int) -> list[Webhook]:
        """The person's live hooks."""
        return [_hook(r) for r in await fetch_all(self.pool, LIST_HOOKS, (user_id,))]  # unopened

    async def revoke_webhook(self, user_id: int, name: str) -> bool:
        """End a hook by name; whether one was live."""
        params = {"user_id": user_id, "name": (name or "").strip(), "now": self.clock.now()}
        return await fetch_one(self.pool, REVOKE_HOOK, params) is not None

    async def webhook_for(self, token: str) -> Webhook | None:
        """The live hook of an active person whose token this is (one indexed lookup by
        hash, so a wrong token costs the same as a right one)."""
        digest = token_hash(token)
        row = await fetch_one(self.pool, HOOK_BY_TOKEN, (digest,))
        if row is None or not hmac.compare_digest(bytes(row["token_hash"]), digest):
            return None
        return self._opened(row) if row["user_status"] == "active" else None

    async def accept_call(
        self, hook: Webhook, zone: str, payload: str, digest: bytes | None = None
    ) -> Schedule:
        """Store one call as a job due now (before the caller hears 202); WebhookLimited
        past `WEBHOOK_RATE` calls a minute; WebhookReplayed when `digest` (`call_digest`)
        was accepted in the last ten minutes."""
        now = self.clock.now()
        local = now.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        params = {
            "id": new_schedule_id(), "user_id": hook.user_id, "hook": hook.id,
            "message": hook.instruction, "timezone": zone, "anchor_local": local, "now": now,
            "since": now - timedelta(minutes=1), "limit": WEBHOOK_RATE,
            "params": Jsonb({"hook": hook.id, "name": hook.name,
                             "payload": payload[:WEBHOOK_PAYLOAD_CHARS],
                             "truncated": len(payload) > WEBHOOK_PAYLOAD_CHARS}),
        }
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_HOOK, (hook.id,))
            if digest is not None:
                await conn.execute(FORGET_CALLS, (hook.id, now - REPLAY_WINDOW))
                seen = await conn.execute(SEE_CALL, (hook.id, digest, now))
                if await seen.fetchone() is None:
                    raise WebhookReplayed(hook.name)
            row = await (await conn.execute(ACCEPT_CALL, params)).fetchone()
            if row is None:
                raise WebhookLimited(hook.name)  # rolls the remembered digest back too
        return schedule_from_row(row)

    async def hook_tokens(self, hook_id: str, day: Any) -> tuple[int, bool]:
        """(tokens the hook's runs used on `day`, whether its owner was told it ran out)."""
        row = await fetch_one(self.pool, HOOK_TOKENS, {"hook": hook_id, "day": day})
        return (int(row["used"]), bool(row["told"])) if row else (0, True)

    async def add_hook_tokens(self, hook_id: str, day: Any, tokens: int) -> None:
        """Count one run's tokens toward the hook's day."""
        await execute(self.pool, ADD_HOOK_TOKENS, {"hook": hook_id, "day": day, "tokens": tokens})

    async def tell_budget_once(self, hook_id: str, day: Any) -> bool:
        """True the first time on `day` (the owner is told the hook ran out once a day)."""
        return await fetch_one(self.pool, TELL_BUDGET, {"hook": hook_id, "day": day}) is not None


def heartbeat_of(job: Schedule) -> Heartbeat:
    """A heartbeat job's settings."""
    params = job.params or {}
    return Heartbeat(
        every=timedelta(minutes=int(params.get("every_minutes", 30))),
        start=time.fromisoformat(params.get("start", "08:00")),
        end=time.fromisoformat(params.get("end", "22:00")),
        schedule=job,
    )

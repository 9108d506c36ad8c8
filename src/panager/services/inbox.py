"""The inboxes of the chat front ends: exactly-once acceptance and per-sender ordering.

One table per front end, the same shape and the same code (`InboxService(table=…)`):
`discord_inbox` keyed by the Discord message id, `telegram_inbox` by Telegram's
`update_id`; `user_id` is the sender's id on that platform. Every incoming
message is inserted keyed by its id before anything else happens; a replayed
one (a gateway RESUME, an update Telegram sends again) hits the primary key
and is dropped. A user's messages are then handled strictly oldest first, one
at a time: `claim_next` only ever takes the user's oldest unfinished row, and
only while no other row of theirs is being processed — so the order holds even
with several bot processes. A claim carries a lease, and the process holds a presence lock
(db/presence.py): when it dies, `recover_orphaned` (run by the live processes
about once a second) queues its row again at once; failing that the lease runs
out and `recover_stale` queues it again
(still first in the user's line), so the message is answered after the
restart instead of being lost. The turn is keyed by the message id, so a
resumed message whose answer was already produced is not answered twice (see
`Assistant.run_turn(resume=True)`). A message that was already retried
`MAX_RETRIES` times (it keeps killing the process) is retired instead and the
user is told to resend. Text is cleared once a row is finished; finished rows
are pruned after a week.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, overload

from psycopg.types.json import Jsonb

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.presence import HELD_OWNERS, OWNER_IS_GONE
from panager.db.queries import one
from panager.platforms import inbox_tables

# A stored message wakes the answer workers of every process (LISTEN NOTIFY_CHANNEL):
# '<inbox table>:<sender id>', sent when the insert commits, in the same round trip.
NOTIFY_CHANNEL = "panager_inbox"
ACCEPT = f"""
WITH stored AS (
    INSERT INTO {{inbox}}
        (message_id, user_id, channel_id, username, display_name, content, attachments,
         attachment_refs, payload, received_at)
    VALUES (%(message_id)s, %(user_id)s, %(channel_id)s, %(username)s, %(display_name)s,
            %(content)s, %(attachments)s, %(refs)s, %(payload)s, %(now)s)
    ON CONFLICT (message_id) DO NOTHING
    RETURNING message_id, user_id
)
SELECT message_id, pg_notify('{NOTIFY_CHANNEL}', '{{inbox}}:' || user_id) FROM stored
"""
CLAIM_NEXT = """
UPDATE {inbox}
   SET status = 'processing', claimed_by = %(worker)s, lease_until = %(lease_until)s
 WHERE message_id = (
        SELECT message_id FROM {inbox}
         WHERE user_id = %(user_id)s AND status IN ('queued', 'processing')
         ORDER BY message_id LIMIT 1)
   AND status = 'queued'
RETURNING *
"""
RENEW = """
UPDATE {inbox} SET lease_until = %(lease_until)s
 WHERE message_id = %(message_id)s AND status = 'processing' AND claimed_by = %(worker)s
"""
FINISH = """
UPDATE {inbox} SET status = %(status)s, content = '', attachment_refs = NULL, payload = NULL,
       finished_at = %(now)s,
       lease_until = NULL
 WHERE message_id = %(message_id)s
"""
MAX_RETRIES = 2
# A claim whose lease ran out belongs to a dead process: queue it again (attempts + 1), or
# retire it once it has been retried MAX_RETRIES times.
_REQUEUE = """
UPDATE {inbox} AS d
   SET status = CASE WHEN d.attempts < %(max_retries)s THEN 'queued' ELSE 'abandoned' END,
       attempts = d.attempts + 1, claimed_by = NULL, lease_until = NULL,
       finished_at = CASE WHEN d.attempts < %(max_retries)s THEN NULL ELSE %(now)s END
  FROM picked
 WHERE d.message_id = picked.message_id
RETURNING d.*
"""
RECOVER_STALE = f"""
WITH picked AS (
    SELECT message_id FROM {{inbox}}
     WHERE status = 'processing' AND lease_until < %(now)s
       AND (%(user_id)s::bigint IS NULL OR user_id = %(user_id)s)
     FOR UPDATE SKIP LOCKED
)
{_REQUEUE}"""
# The same, at once, for claims whose process is gone (PostgreSQL released its presence
# lock, see db/presence.py): no waiting out the lease. A slow process keeps its lock.
RECOVER_ORPHANED = f"""
WITH held AS MATERIALIZED ({HELD_OWNERS}),
picked AS (
    SELECT message_id FROM {{inbox}}
     WHERE status = 'processing' AND claimed_by IS NOT NULL AND claimed_by <> %(me)s
       AND {OWNER_IS_GONE.format(column="claimed_by")}
     FOR UPDATE SKIP LOCKED
)
{_REQUEUE}"""
EXPIRE = """
UPDATE {inbox} SET lease_until = %(past)s
 WHERE message_id = %(message_id)s AND status = 'processing'
"""
CLEAR_ABANDONED_TEXT = (
    "UPDATE {inbox} SET content = '', attachment_refs = NULL, payload = NULL "
    "WHERE message_id = ANY(%s)"
)
REMEMBER = """
UPDATE {inbox} SET payload = coalesce(payload, '{}'::jsonb) || %(patch)s
 WHERE message_id = %(message_id)s
"""
QUEUED_USERS = "SELECT DISTINCT user_id FROM {inbox} WHERE status = 'queued'"
RECENT_CHANNELS = """
SELECT user_id, channel_id, max(message_id) AS last_id FROM {inbox}
 WHERE received_at > %(since)s
 GROUP BY user_id, channel_id
"""
COUNT_QUEUED = "SELECT count(*) AS n FROM {inbox} WHERE user_id = %s AND status = 'queued'"
PRUNE = """
DELETE FROM {inbox}
 WHERE status IN ('done', 'failed', 'abandoned') AND received_at < %(before)s
"""


_STATEMENTS = (
    "ACCEPT",
    "CLAIM_NEXT",
    "RENEW",
    "FINISH",
    "RECOVER_STALE",
    "RECOVER_ORPHANED",
    "EXPIRE",
    "CLEAR_ABANDONED_TEXT",
    "REMEMBER",
    "QUEUED_USERS",
    "RECENT_CHANNELS",
    "COUNT_QUEUED",
    "PRUNE",
)


def statements(table: str) -> dict[str, str]:
    """The inbox's SQL for one front end's table."""
    if table not in inbox_tables():
        raise ValueError(f"unknown inbox table {table!r}")
    return {name: globals()[name].replace("{inbox}", table) for name in _STATEMENTS}


@dataclass(frozen=True)
class InboxMessage:
    """One incoming message as stored (ids are the front end's own)."""

    message_id: int
    user_id: int
    channel_id: int
    username: str
    display_name: str | None
    content: str
    attachments: bool
    status: str
    received_at: datetime
    attempts: int = 0  # times it was queued again after its processor died
    # What Discord said about each attachment: filename, url, content_type, size, voice,
    # forwarded (frontends/discord/attachments.py downloads them when the message is answered).
    attachment_refs: list[dict] | None = None
    payload: dict[str, Any] | None = None  # what is not text: button data, reply ids, file ids


def worker_name() -> str:
    """Names this process in inbox claims (host:pid:random)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def storable(text: str) -> str:
    """Text PostgreSQL can store: no NUL bytes; lone surrogates (not UTF-8) replaced."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


@overload
def _message(row: dict) -> InboxMessage: ...
@overload
def _message(row: None) -> None: ...
@overload
def _message(row: dict | None) -> InboxMessage | None: ...
def _message(row: dict | None) -> InboxMessage | None:
    if row is None:
        return None
    return InboxMessage(**{k: row[k] for k in InboxMessage.__dataclass_fields__})


class InboxService:
    """Stores and hands out incoming messages; `worker` names this process in claims."""

    def __init__(
        self,
        pool: Pool,
        clock: Clock,
        worker: str,
        *,
        table: str = "discord_inbox",
        lease: timedelta = timedelta(seconds=90),
        keep: timedelta = timedelta(days=7),
    ) -> None:
        self.sql = statements(table)
        self.table = table
        self.pool = pool
        self.clock = clock
        self.worker = worker
        self.lease = lease
        self.keep = keep

    async def accept(
        self,
        *,
        message_id: int,
        user_id: int,
        channel_id: int,
        username: str,
        display_name: str | None,
        content: str,
        attachments: bool = False,
        attachment_refs: list[dict] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> bool:
        """Store a new message; False when this message id was seen before (a replay)."""
        params = {
            "message_id": message_id,
            "user_id": user_id,
            "channel_id": channel_id,
            "username": storable(username),
            "display_name": storable(display_name) if display_name is not None else None,
            "content": storable(content),
            "attachments": attachments,
            "refs": Jsonb(attachment_refs) if attachment_refs else None,
            "payload": Jsonb(payload) if payload is not None else None,
            "now": self.clock.now(),
        }
        async with self.pool.connection() as conn:
            return await (await conn.execute(self.sql["ACCEPT"], params)).fetchone() is not None

    async def claim_next(self, user_id: int) -> InboxMessage | None:
        """The user's oldest queued message, claimed; None while another is in progress."""
        params = {"user_id": user_id, "worker": self.worker, "lease_until": self._lease_end()}
        async with self.pool.connection() as conn:
            return _message(await (await conn.execute(self.sql["CLAIM_NEXT"], params)).fetchone())

    async def renew(self, message_id: int) -> bool:
        """Extend this process's claim on a message it is still working on."""
        params = {"message_id": message_id, "worker": self.worker, "lease_until": self._lease_end()}
        async with self.pool.connection() as conn:
            return (await conn.execute(self.sql["RENEW"], params)).rowcount == 1

    async def expire(self, message_id: int) -> None:
        """Give up a claim at once (shutdown mid-message): the next start resumes it."""
        params = {"message_id": message_id, "past": self.clock.now() - timedelta(seconds=1)}
        async with self.pool.connection() as conn:
            await conn.execute(self.sql["EXPIRE"], params)

    async def remember(self, message_id: int, patch: dict[str, Any]) -> None:
        """Merge `patch` into the row's payload (e.g. the ids of the answer's messages)."""
        params = {"message_id": message_id, "patch": Jsonb(patch)}
        async with self.pool.connection() as conn:
            await conn.execute(self.sql["REMEMBER"], params)

    async def finish(self, message_id: int, status: str = "done") -> None:
        """Mark a message handled ('done' or 'failed') and drop its text."""
        params = {"message_id": message_id, "status": status, "now": self.clock.now()}
        async with self.pool.connection() as conn:
            await conn.execute(self.sql["FINISH"], params)

    async def recover_stale(self, user_id: int | None = None) -> list[InboxMessage]:
        """Queue again the messages whose processor died (lease expired).

        Returns the ones retired instead (retried too often), text included, so the
        user can be told."""
        params = {"now": self.clock.now(), "user_id": user_id, "max_retries": MAX_RETRIES}
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(self.sql["RECOVER_STALE"], params)).fetchall()
            retired = [r for r in rows if r["status"] == "abandoned"]
            if retired:
                await conn.execute(
                    self.sql["CLEAR_ABANDONED_TEXT"], ([r["message_id"] for r in retired],)
                )
        return [_message(r) for r in retired]

    async def recover_orphaned(self) -> list[InboxMessage]:
        """Queue again at once the messages whose process is gone (no presence lock).

        Returns every row it touched: `status` 'queued' (answer it) or 'abandoned'."""
        params = {"now": self.clock.now(), "me": self.worker, "max_retries": MAX_RETRIES}
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(self.sql["RECOVER_ORPHANED"], params)).fetchall()
            retired = [r["message_id"] for r in rows if r["status"] == "abandoned"]
            if retired:
                await conn.execute(self.sql["CLEAR_ABANDONED_TEXT"], (retired,))
        return [_message(r) for r in rows]

    async def queued_users(self) -> list[int]:
        """Users with messages waiting (e.g. left over from a restart)."""
        async with self.pool.connection() as conn:
            return [
                r["user_id"]
                for r in await (await conn.execute(self.sql["QUEUED_USERS"])).fetchall()
            ]

    async def recent_channels(self) -> list[tuple[int, int, int]]:
        """(user id, DM channel id, newest message id seen) of everyone who wrote lately."""
        since = self.clock.now() - self.keep
        async with self.pool.connection() as conn:
            rows = await (
                await conn.execute(self.sql["RECENT_CHANNELS"], {"since": since})
            ).fetchall()
        return [(r["user_id"], r["channel_id"], r["last_id"]) for r in rows]

    async def queued_count(self, user_id: int) -> int:
        """How many of the user's messages are waiting."""
        async with self.pool.connection() as conn:
            return one(await (await conn.execute(self.sql["COUNT_QUEUED"], (user_id,))).fetchone())[
                "n"
            ]

    async def prune(self) -> int:
        """Delete finished rows older than `keep`; returns how many."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self.sql["PRUNE"], {"before": self.clock.now() - self.keep})
            return cur.rowcount

    def _lease_end(self) -> datetime:
        return self.clock.now() + self.lease

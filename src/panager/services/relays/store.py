"""Relay settings and the relay log in PostgreSQL (for `send_user_message`).

A recipient may turn relays off (`users.relays_off`) or block single senders
(`relay_blocks`). Every relayed message is logged in `relay_sends`; the rate
limit counts that log, so it holds across processes and restarts. Recording a
send takes a per-sender transaction-level advisory lock first, so two
concurrent sends by one sender cannot both slip under the limit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from panager.db.locks import RELAY_LOCK_NAMESPACE
from panager.db.pool import Pool
from panager.db.queries import one

SET_OFF = "UPDATE users SET relays_off = %s, updated_at = now() WHERE id = %s"
BLOCK = """
INSERT INTO relay_blocks (user_id, blocked_id) VALUES (%s, %s) ON CONFLICT DO NOTHING
"""
UNBLOCK = "DELETE FROM relay_blocks WHERE user_id = %s AND blocked_id = %s"
BLOCKED_NAMES = "SELECT name FROM relay_block_names WHERE user_id = %s ORDER BY lower(name)"
COUNT_NAMES = "SELECT count(*) AS n FROM relay_block_names WHERE user_id = %s"
KEEP_NAME = """
INSERT INTO relay_block_names (user_id, name, blocked_id) VALUES (%s, %s, %s)
ON CONFLICT DO NOTHING
"""
DROP_NAME = """
DELETE FROM relay_block_names WHERE user_id = %s AND lower(name) = lower(%s)
RETURNING blocked_id
"""
HAS_NAME = "SELECT 1 FROM relay_block_names WHERE user_id = %s AND lower(name) = lower(%s)"
MAX_BLOCKED_NAMES = 200
ACCEPTS = """
SELECT NOT u.relays_off
       AND NOT EXISTS (SELECT 1 FROM relay_blocks b WHERE b.user_id = u.id AND b.blocked_id = %s)
       AS ok
  FROM users u WHERE u.id = %s
"""
GET_OFF = "SELECT relays_off FROM users WHERE id = %s"
LOCK_SENDER = "SELECT pg_advisory_xact_lock(%s, %s)"
COUNT_SENT = """
SELECT count(*) AS n, min(sent_at) AS oldest FROM relay_sends
 WHERE sender_id = %s AND sent_at > %s
"""
RECORD_SEND = "INSERT INTO relay_sends (sender_id, recipient_id, sent_at) VALUES (%s, %s, %s)"
PRUNE_SENDS = "DELETE FROM relay_sends WHERE sender_id = %s AND sent_at <= %s"


class RelayLimited(Exception):
    """The sender used up the relay budget; `retry_after` says when the next one fits."""

    def __init__(self, retry_after: timedelta) -> None:
        super().__init__(str(retry_after))
        self.retry_after = retry_after


class RelayService:
    """Who accepts relays from whom, and the shared rate limit."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def set_off(self, user_id: int, off: bool) -> None:
        """Turn relays to `user_id` off (True) or on again."""
        async with self.pool.connection() as conn:
            await conn.execute(SET_OFF, (off, user_id))

    async def is_off(self, user_id: int) -> bool:
        """True when the user turned relays off."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_OFF, (user_id,))).fetchone()
        return bool(row and row["relays_off"])

    async def block(self, user_id: int, name: str, sender_id: int | None) -> bool:
        """`user_id` blocks `name` (kept as typed) and, when someone has it, no longer
        receives relays from them (`sender_id`). False: MAX_BLOCKED_NAMES kept already."""
        async with self.pool.connection() as conn, conn.transaction():
            count = one(await (await conn.execute(COUNT_NAMES, (user_id,))).fetchone())["n"]
            kept = await (await conn.execute(HAS_NAME, (user_id, name))).fetchone()
            if count >= MAX_BLOCKED_NAMES and kept is None:
                return False
            await conn.execute(KEEP_NAME, (user_id, name, sender_id))
            if sender_id is not None:
                await conn.execute(BLOCK, (user_id, sender_id))
        return True

    async def unblock(self, user_id: int, name: str, sender_id: int | None) -> None:
        """Lift the block of `name`: of whom it blocked (even renamed since) and of its
        holder now, `sender_id`, if any."""
        async with self.pool.connection() as conn, conn.transaction():
            rows = await (await conn.execute(DROP_NAME, (user_id, name))).fetchall()
            for blocked in {r["blocked_id"] for r in rows} | {sender_id} - {None}:
                await conn.execute(UNBLOCK, (user_id, blocked))

    async def blocked(self, user_id: int) -> list[str]:
        """The names `user_id` blocked, as typed (whether or not anyone has them)."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(BLOCKED_NAMES, (user_id,))).fetchall()
        return [r["name"] for r in rows]

    async def accepts(self, recipient_id: int, sender_id: int) -> bool:
        """True when the recipient takes relays and has not blocked this sender."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(ACCEPTS, (sender_id, recipient_id))).fetchone()
        return bool(row and row["ok"])

    async def record(
        self, sender_id: int, recipient_id: int, now: datetime, *, limit: int, window: timedelta
    ) -> None:
        """Log one send, or raise RelayLimited when `limit` were sent within `window`."""
        since = now - window
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_SENDER, (RELAY_LOCK_NAMESPACE, sender_id % 2_147_483_647))
            await conn.execute(PRUNE_SENDS, (sender_id, since - window))
            row = one(await (await conn.execute(COUNT_SENT, (sender_id, since))).fetchone())
            if row["n"] >= limit:
                raise RelayLimited(row["oldest"] + window - now)
            await conn.execute(RECORD_SEND, (sender_id, recipient_id, now))

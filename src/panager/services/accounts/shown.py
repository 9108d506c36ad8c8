"""Which draft a confirmation question (or proposal) showed, by digest (table `mail_shown`).

The confirm node records, per question call (key = tool call id, or the proposal id),
the digest of the draft as shown. The row is written once: the node runs again when
the question is answered, and that second look must not replace what the person saw.
`email_send`, running for that same call after Approve, takes the row (once) and sends
only when the draft fetched then has the same digest.
"""

from __future__ import annotations

from panager.clock import Clock
from panager.db.pool import Pool

REMEMBER = """
INSERT INTO mail_shown (user_id, call_key, draft_id, digest, created_at)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (user_id, call_key) DO NOTHING
"""
TAKE = """
UPDATE mail_shown SET used_at = %s
 WHERE user_id = %s AND call_key = %s AND draft_id = %s AND used_at IS NULL
RETURNING digest
"""


class DraftsShown:
    """The digests of drafts shown to one instance's people, per question call."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    async def remember(self, user_id: int, key: str, draft_id: str, digest: str) -> None:
        """Record what the question `key` showed (a second record for `key` is ignored)."""
        async with self.pool.connection() as conn:
            await conn.execute(REMEMBER, (user_id, key, draft_id, digest, self.clock.now()))

    async def take(self, user_id: int, key: str, draft_id: str) -> str | None:
        """The digest shown for `key` and `draft_id`, once; None when nothing (more) is."""
        async with self.pool.connection() as conn:
            row = await (
                await conn.execute(TAKE, (self.clock.now(), user_id, key, draft_id))
            ).fetchone()
        return None if row is None else str(row["digest"])

"""Proposals: consequential calls a run with nobody present held back for the person.

A scheduled run (or any unattended run) executes no call that sends, deletes
or schedules on its own; each one it attempts is stored here with the plain
words the person is shown. Approving takes the row with one atomic update
(`pending` → `approved`), so a call runs at most once however many times the
button is pressed, in however many processes. Every statement is scoped to
the user.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one

CREATE = """
INSERT INTO proposals (id, user_id, tool, args, description, created_at)
VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING
"""
TAKE = """
UPDATE proposals SET status = 'approved', decided_at = %s
 WHERE id = %s AND user_id = %s AND status = 'pending'
RETURNING id, tool, args, description, status, created_at
"""
GET = """
SELECT id, tool, args, description, status, created_at FROM proposals
 WHERE id = %s AND user_id = %s
"""
FAILED = "UPDATE proposals SET status = 'failed' WHERE id = %s AND user_id = %s"
PENDING = """
SELECT id, tool, args, description, status, created_at FROM proposals
 WHERE user_id = %s AND status = 'pending' ORDER BY created_at DESC, id LIMIT %s
"""


@dataclass(frozen=True)
class Proposal:
    """One held call."""

    id: str
    tool: str
    args: dict[str, Any]
    description: str
    status: str  # pending | approved | failed
    created_at: datetime


def _proposal(row: dict[str, Any]) -> Proposal:
    return Proposal(
        row["id"], row["tool"], dict(row["args"]), row["description"], row["status"],
        row["created_at"],
    )


class ProposalService:
    """Stores held calls and hands each one out once."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def create(
        self,
        user_id: int,
        proposal_id: str,
        tool: str,
        args: dict[str, Any],
        description: str,
        now: datetime,
    ) -> None:
        """Store a held call (a second store of the same id changes nothing)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                CREATE, (proposal_id, user_id, tool, Jsonb(args), description, now)
            )

    async def take(self, user_id: int, proposal_id: str, now: datetime) -> Proposal | None:
        """Mark the user's pending proposal approved and return it; None when it is not
        theirs or was already taken."""
        row = await fetch_one(self.pool, TAKE, (now, proposal_id, user_id))
        return _proposal(row) if row else None

    async def get(self, user_id: int, proposal_id: str) -> Proposal | None:
        """The user's proposal, whatever its status."""
        row = await fetch_one(self.pool, GET, (proposal_id, user_id))
        return _proposal(row) if row else None

    async def failed(self, user_id: int, proposal_id: str) -> None:
        """The approved call raised: say so in its status."""
        async with self.pool.connection() as conn:
            await conn.execute(FAILED, (proposal_id, user_id))

    async def pending(self, user_id: int, limit: int = 20) -> list[Proposal]:
        """The user's proposals still waiting, newest first."""
        return [_proposal(r) for r in await fetch_all(self.pool, PENDING, (user_id, limit))]

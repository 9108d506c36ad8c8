"""Proposals: consequential calls a run with nobody present held back for the person.

A scheduled run (or any unattended run) executes no call that sends, deletes
or schedules on its own; each one it attempts is stored here with the plain
words the person is shown and whether the run that held it was tainted (the
approved call runs with that taint). Approving takes the row with one atomic
update (`pending` → `approved`), so a call runs at most once however many times
the button is pressed, in however many processes. Every statement is scoped to
the user. An id is never reused: storing a second call under an id raises,
so an Approve can only ever run the call it was shown with.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one

CREATE = """
INSERT INTO proposals (id, user_id, tool, args, description, created_at, tainted)
VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING id
"""
TAKE = """
UPDATE proposals SET status = 'approved', decided_at = %s
 WHERE id = %s AND user_id = %s AND status = 'pending'
RETURNING id, tool, args, description, status, created_at, tainted
"""
GET = """
SELECT id, tool, args, description, status, created_at, tainted FROM proposals
 WHERE id = %s AND user_id = %s
"""
FAILED = "UPDATE proposals SET status = 'failed' WHERE id = %s AND user_id = %s"
PENDING = """
SELECT id, tool, args, description, status, created_at, tainted FROM proposals
 WHERE user_id = %s AND status = 'pending' ORDER BY created_at DESC, id LIMIT %s
"""


class ProposalConflict(Exception):
    """A proposal with this id is already stored: the new call is not stored under it."""


@dataclass(frozen=True)
class Proposal:
    """One held call."""

    id: str
    tool: str
    args: dict[str, Any]
    description: str
    status: str  # pending | approved | failed
    created_at: datetime
    tainted: bool  # the run that held it had read outside content


def _proposal(row: dict[str, Any]) -> Proposal:
    return Proposal(
        row["id"], row["tool"], dict(row["args"]), row["description"], row["status"],
        row["created_at"], bool(row["tainted"]),
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
        tainted: bool = True,
    ) -> None:
        """Store a held call; `tainted`: the run that held it had read outside content.

        Raises ProposalConflict when the id is taken (whoever's call holds it), leaving
        the stored call as it was."""
        row = await fetch_one(
            self.pool, CREATE,
            (proposal_id, user_id, tool, Jsonb(args), description, now, tainted),
        )
        if row is None:
            raise ProposalConflict(f"proposal id {proposal_id} is already used")

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

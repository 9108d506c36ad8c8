"""Proposals: consequential calls a run with nobody present held back for the person.

A scheduled run (or any unattended run) executes no call that sends, deletes
or schedules on its own; each one it attempts is stored here with the plain
words the person is shown and whether the run that held it was tainted (the
approved call runs with that taint). Approving takes the row with one atomic
update (`pending` → `approved`), so a call runs at most once however many times
the button is pressed, in however many processes. Every statement is scoped to
the user. An id is never reused: storing a second call under an id raises,
so an Approve can only ever run the call it was shown with.

Offers are data, never text: `offer` records on which answer (or question) a
held call was offered (`offered_on`, an `Offer.on` key) and the front ends draw
their Approve/Deny buttons only from those `Offer`s; `take` runs a call only
when the press names the place it was offered on. A held call expires after
`ttl` (24 h by default), and a person has at most `cap` (20) pending: storing
one more expires the oldest, so a flood cannot bury the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one

DEFAULT_TTL = timedelta(hours=24)
DEFAULT_CAP = 20
_COLUMNS = "id, tool, args, description, status, created_at, tainted, expires_at, offered_on"
CREATE = f"""
INSERT INTO proposals (id, user_id, tool, args, description, created_at, tainted, expires_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}
"""
# The oldest pending ones beyond the cap expire (ties at one instant: by id).
CAP = """
UPDATE proposals SET status = 'expired', decided_at = %(now)s
 WHERE user_id = %(user)s AND status = 'pending' AND id NOT IN (
       SELECT id FROM proposals WHERE user_id = %(user)s AND status = 'pending'
        ORDER BY created_at DESC, id DESC LIMIT %(cap)s)
"""
TAKE = f"""
UPDATE proposals SET status = 'approved', decided_at = %(now)s
 WHERE id = %(id)s AND user_id = %(user)s AND status = 'pending' AND expires_at > %(now)s
   AND offered_on = %(on)s
RETURNING {_COLUMNS}
"""
DENY = f"""
UPDATE proposals SET status = 'denied', decided_at = %(now)s
 WHERE id = %(id)s AND user_id = %(user)s AND status = 'pending' AND expires_at > %(now)s
RETURNING {_COLUMNS}
"""
OFFER = """
UPDATE proposals SET offered_on = %(on)s
 WHERE user_id = %(user)s AND id = ANY(%(ids)s) AND status = 'pending'
   AND expires_at > %(now)s
RETURNING id, description
"""
GET = f"SELECT {_COLUMNS} FROM proposals WHERE id = %s AND user_id = %s"
REDESCRIBE = """
UPDATE proposals SET description = %s, offered_on = NULL
 WHERE id = %s AND user_id = %s AND status = 'pending'
"""
FAILED = "UPDATE proposals SET status = 'failed' WHERE id = %s AND user_id = %s"
PENDING = f"""
SELECT {_COLUMNS} FROM proposals
 WHERE user_id = %s AND status = 'pending' AND expires_at > %s
 ORDER BY created_at DESC, id DESC LIMIT %s
"""
OFFERED = f"""
SELECT {_COLUMNS} FROM proposals
 WHERE user_id = %s AND offered_on = ANY(%s) AND status = 'pending' AND expires_at > %s
 ORDER BY created_at, id
"""


class ProposalConflict(Exception):
    """A proposal with this id is already stored: the new call is not stored under it."""


@dataclass(frozen=True)
class Offer:
    """One held call offered on one answer: what its Approve/Deny buttons are made of."""

    id: str  # the proposal
    description: str  # the stored plain words, shown with the buttons
    on: str  # the answer or question it was offered on (`Proposal.offered_on`)

    def data(self) -> dict[str, str]:
        """As plain JSON (kept with a delivery's record)."""
        return {"id": self.id, "description": self.description, "on": self.on}

    @classmethod
    def from_data(cls, value: Any) -> Offer | None:  # Any: read back from JSON
        """The offer stored with `data()`; None when it is not one."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(str(value["id"]), str(value["description"]), str(value["on"]))
        except KeyError:
            return None


def offers_json(offers: Sequence[Offer]) -> str | None:
    """Offers as the JSON text a delivery record keeps (None: none)."""
    return json.dumps([o.data() for o in offers]) if offers else None


def offers_from(value: Any) -> tuple[Offer, ...]:  # Any: a JSONB column's value
    """The offers a delivery record keeps."""
    items = value if isinstance(value, list) else []
    return tuple(o for o in (Offer.from_data(v) for v in items) if o is not None)


@dataclass(frozen=True)
class Proposal:
    """One held call."""

    id: str
    tool: str
    args: dict[str, Any]
    description: str
    status: str  # pending | approved | failed | denied | expired
    created_at: datetime
    tainted: bool  # the run that held it had read outside content
    expires_at: datetime
    offered_on: str | None = None  # the answer or question it was last offered on

    def state(self, now: datetime) -> str:
        """Its status now: a pending one past its time is `expired`."""
        if self.status == "pending" and now >= self.expires_at:
            return "expired"
        return self.status

    def offer(self, on: str) -> Offer:
        """This call offered on `on`."""
        return Offer(self.id, self.description, on)


def _proposal(row: dict[str, Any]) -> Proposal:
    return Proposal(
        row["id"], row["tool"], dict(row["args"]), row["description"], row["status"],
        row["created_at"], bool(row["tainted"]), row["expires_at"], row["offered_on"],
    )


class ProposalService:
    """Stores held calls, offers them, and hands each one out once."""

    def __init__(self, pool: Pool, ttl: timedelta = DEFAULT_TTL, cap: int = DEFAULT_CAP) -> None:
        self.pool = pool
        self.ttl = ttl
        self.cap = cap

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
        """Store a held call (it expires after `ttl`; the oldest beyond `cap` expire);
        `tainted`: the run that held it had read outside content.

        Raises ProposalConflict when the id is taken (whoever's call holds it), leaving
        the stored call as it was."""
        async with self.pool.connection() as conn, conn.transaction():
            cursor = await conn.execute(
                CREATE,
                (proposal_id, user_id, tool, Jsonb(args), description, now, tainted,
                 now + self.ttl),
            )
            if await cursor.fetchone() is None:
                raise ProposalConflict(f"proposal id {proposal_id} is already used")
            await conn.execute(CAP, {"user": user_id, "now": now, "cap": self.cap})

    async def offer(
        self, user_id: int, ids: Iterable[str], on: str, now: datetime
    ) -> tuple[Offer, ...]:
        """Record that these held calls are offered on `on` (an answer, a question); the
        offers of those still pending, in the order of `ids`."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return ()
        rows = await fetch_all(
            self.pool, OFFER, {"on": on, "user": user_id, "ids": wanted, "now": now}
        )
        words = {r["id"]: r["description"] for r in rows}
        return tuple(Offer(i, words[i], on) for i in wanted if i in words)

    async def offered(
        self, user_id: int, ons: Sequence[str], now: datetime
    ) -> dict[str, list[Offer]]:
        """The pending offers made on each of `ons` (the web chat's buttons)."""
        found: dict[str, list[Offer]] = {}
        if not ons:
            return found
        for row in await fetch_all(self.pool, OFFERED, (user_id, list(ons), now)):
            found.setdefault(row["offered_on"], []).append(
                Offer(row["id"], row["description"], row["offered_on"])
            )
        return found

    async def take(
        self, user_id: int, proposal_id: str, now: datetime, on: str
    ) -> Proposal | None:
        """Mark the user's pending proposal approved and return it; None when it is not
        theirs, was already decided, expired, or was not offered on `on`."""
        row = await fetch_one(
            self.pool, TAKE, {"now": now, "id": proposal_id, "user": user_id, "on": on}
        )
        return _proposal(row) if row else None

    async def deny(self, user_id: int, proposal_id: str, now: datetime) -> Proposal | None:
        """Refuse the user's pending proposal; None when there is no such pending one."""
        row = await fetch_one(self.pool, DENY, {"now": now, "id": proposal_id, "user": user_id})
        return _proposal(row) if row else None

    async def get(self, user_id: int, proposal_id: str) -> Proposal | None:
        """The user's proposal, whatever its status."""
        row = await fetch_one(self.pool, GET, (proposal_id, user_id))
        return _proposal(row) if row else None

    async def redescribe(self, user_id: int, proposal_id: str, description: str) -> None:
        """The object changed since the call was held: store the words it is shown with
        now; no earlier offer approves it any more (it is offered again with them)."""
        async with self.pool.connection() as conn:
            await conn.execute(REDESCRIBE, (description, proposal_id, user_id))

    async def failed(self, user_id: int, proposal_id: str) -> None:
        """The approved call raised: say so in its status."""
        async with self.pool.connection() as conn:
            await conn.execute(FAILED, (proposal_id, user_id))

    async def pending(self, user_id: int, now: datetime, limit: int = DEFAULT_CAP
                      ) -> list[Proposal]:
        """The user's proposals still waiting (not expired), newest first."""
        rows = await fetch_all(self.pool, PENDING, (user_id, now, limit))
        return [_proposal(r) for r in rows]

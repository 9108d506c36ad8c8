"""The person's profile: four short sections shown in every system prompt, with history.

Unlike memories (quoted facts found by search), the profile is the person's own
standing words — who they are, their people, preferences and instructions — and
the model follows it. Each section is replaced whole (`profile_update`); the
previous text is kept in `history`. The whole profile is capped
(`MAX_PROFILE_CHARS`) so it stays cheap in every prompt. Changes the nightly
tidy-up suggests are *proposals*: they apply only when the person approves.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one

Section = Literal["about", "people", "preferences", "instructions"]
SECTIONS: tuple[str, ...] = get_args(Section)
MAX_PROFILE_CHARS = 1_500
HISTORY_KEPT = 20

GET_SECTIONS = "SELECT section, text, updated_at FROM profile_sections WHERE user_id = %s"
UPSERT = """
INSERT INTO profile_sections (user_id, section, text, updated_at)
VALUES (%(user)s, %(section)s, %(text)s, %(now)s)
ON CONFLICT (user_id, section) DO UPDATE
   SET text = EXCLUDED.text, updated_at = EXCLUDED.updated_at,
       history = profile_sections.history || jsonb_build_array(jsonb_build_object(
           'text', profile_sections.text, 'replaced_at', EXCLUDED.updated_at))
"""
TRIM_HISTORY = """
UPDATE profile_sections
   SET history = (SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
                    FROM jsonb_array_elements(history) WITH ORDINALITY AS h(e, n)
                   WHERE n > jsonb_array_length(history) - %(keep)s)
 WHERE user_id = %(user)s AND section = %(section)s
"""
DELETE_SECTION = "DELETE FROM profile_sections WHERE user_id = %s AND section = %s"
HISTORY = "SELECT history FROM profile_sections WHERE user_id = %s AND section = %s"
INSERT_PROPOSAL = """
INSERT INTO profile_proposals (id, user_id, section, text, reason, created_at)
VALUES (%(id)s, %(user)s, %(section)s, %(text)s, %(reason)s, %(now)s)
RETURNING *
"""
PENDING = """
SELECT * FROM profile_proposals WHERE user_id = %s AND status = 'pending' ORDER BY created_at
"""
DECIDE = """
UPDATE profile_proposals SET status = %(status)s, decided_at = %(now)s
 WHERE id = %(id)s AND user_id = %(user)s AND status = 'pending'
RETURNING *
"""


class ProfileInputError(ValueError):
    """A profile change that cannot be stored; the message says what to change."""


@dataclass(frozen=True)
class Profile:
    """The current sections (only those with text)."""

    sections: dict[str, str]
    updated_at: datetime | None = None

    @property
    def size(self) -> int:
        """Characters of all sections together."""
        return sum(len(t) for t in self.sections.values())

    def is_empty(self) -> bool:
        """No section has text."""
        return not self.sections


@dataclass(frozen=True)
class ProfileProposal:
    """A change the tidy-up suggests: section, new text, why."""

    id: str
    section: str
    text: str
    reason: str
    created_at: datetime


def _proposal(row: dict) -> ProfileProposal:
    return ProfileProposal(
        row["id"], row["section"], row["text"], row["reason"], row["created_at"]
    )


def check_section(section: str) -> str:
    """A valid section name, or ProfileInputError naming the valid ones."""
    name = (section or "").strip().lower()
    if name not in SECTIONS:
        raise ProfileInputError(
            f"Unknown profile section {section!r}; use one of: {', '.join(SECTIONS)}."
        )
    return name


class ProfileService:
    """Reads and writes profiles; every method is scoped by user id."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    async def get(self, user_id: int) -> Profile:
        """The person's profile (empty when nothing was written)."""
        rows = await fetch_all(self.pool, GET_SECTIONS, (user_id,))
        sections = {r["section"]: r["text"] for r in rows if r["text"]}
        ordered = {s: sections[s] for s in SECTIONS if s in sections}
        latest = max((r["updated_at"] for r in rows), default=None)
        return Profile(ordered, latest)

    async def update(self, user_id: int, section: str, text: str) -> Profile:
        """Replace one section whole (empty text clears it); the old text goes to history."""
        name = check_section(section)
        cleaned = (text or "").strip()
        current = await self.get(user_id)
        others = sum(len(t) for s, t in current.sections.items() if s != name)
        if others + len(cleaned) > MAX_PROFILE_CHARS:
            over = others + len(cleaned) - MAX_PROFILE_CHARS
            raise ProfileInputError(
                f"The profile would be {others + len(cleaned):,} characters; the cap is "
                f"{MAX_PROFILE_CHARS:,}. Shorten this section by {over:,} characters "
                "(or another section first)."
            )
        params = {"user": user_id, "section": name, "text": cleaned, "now": self.clock.now()}
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(UPSERT, params)
            await conn.execute(TRIM_HISTORY, {**params, "keep": HISTORY_KEPT})
        return await self.get(user_id)

    async def history(self, user_id: int, section: str) -> list[dict]:
        """Earlier texts of a section, oldest first: [{text, replaced_at}]."""
        row = await fetch_one(self.pool, HISTORY, (user_id, check_section(section)))
        return list(row["history"]) if row else []

    async def propose(
        self, user_id: int, section: str, text: str, reason: str = ""
    ) -> ProfileProposal:
        """Store a suggested change for the person to approve."""
        params = {
            "id": secrets.token_hex(4), "user": user_id, "section": check_section(section),
            "text": text.strip(), "reason": reason.strip()[:300], "now": self.clock.now(),
        }
        row = await fetch_one(self.pool, INSERT_PROPOSAL, params)
        assert row is not None
        return _proposal(row)

    async def pending(self, user_id: int) -> list[ProfileProposal]:
        """Proposals waiting for the person."""
        return [_proposal(r) for r in await fetch_all(self.pool, PENDING, (user_id,))]

    async def decide(
        self, user_id: int, proposal_id: str, approve: bool
    ) -> ProfileProposal | None:
        """Approve (apply) or reject one pending proposal; None when there is no such one."""
        params = {
            "id": (proposal_id or "").strip().lower(), "user": user_id,
            "status": "approved" if approve else "rejected", "now": self.clock.now(),
        }
        row = await fetch_one(self.pool, DECIDE, params)
        if row is None:
            return None
        proposal = _proposal(row)
        if approve:
            try:
                await self.update(user_id, proposal.section, proposal.text)
            except ProfileInputError:
                await fetch_one(self.pool, DECIDE.replace("AND status = 'pending'", ""),
                                {**params, "status": "stale"})
                raise
        return proposal


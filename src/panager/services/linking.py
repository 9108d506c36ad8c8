"""Link codes: one person across front ends, joined only with the issuing side's Approve.

`/link` on one front end issues a code (10 minutes, single use); `/link CODE`
on another *claims* it, and nothing joins until both sides agree before the code
expires: the claimant, told in plain words whose account they are joining
(`/link confirm`), and then the issuing person (`/link approve` there). A leaked
code therefore gives nobody an account: its owner sees who claimed it and can
deny; and a code someone else made gives nobody *your* account: typing it only
shows whose it is. Only the SHA-256 of a code is stored.

Guessing is bounded twice: a code has 50 random bits, and each identity may
miss three times per ten minutes (`link_failures`, counted under a per-identity
advisory lock so parallel guesses cannot race past the limit). A claim is one
conditional UPDATE on `status = 'open'`, so two front ends racing for one code
produce one claimant.

This module also answers where proactive messages go (`chat_route`): the
person's `/notify` choice, or the chat front end they last wrote from.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from panager.clock import Clock
from panager.db.locks import LINK_LOCK_NAMESPACE
from panager.db.pool import Pool
from panager.db.queries import fetch_all, fetch_one
from panager.platforms import chat_names, named
from panager.services.users import User

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: codes get typed on phones
CODE_LENGTH = 10  # 50 bits
CODE_TTL = timedelta(minutes=10)
MAX_FAILURES = 3  # wrong codes per identity per FAILURE_WINDOW
FAILURE_WINDOW = timedelta(minutes=10)


def notify_choices() -> tuple[str, ...]:
    """Where proactive messages may go: "auto" (the chat written from last) or a chat front
    end by name."""
    return ("auto", *chat_names())


IDENTITY_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s || ':' || %s::text))"
RECENT_FAILURES = """
SELECT count(*) AS n, min(failed_at) AS first FROM link_failures
 WHERE platform = %s AND platform_id = %s AND failed_at > %s
"""
ADD_FAILURE = "INSERT INTO link_failures (platform, platform_id, failed_at) VALUES (%s, %s, %s)"
PRUNE_FAILURES = "DELETE FROM link_failures WHERE failed_at < %s"
CLOSE_OPEN_CODES = "DELETE FROM link_codes WHERE user_id = %s AND status = 'open'"
INSERT_CODE = """
INSERT INTO link_codes (code_hash, user_id, platform, platform_id, created_at, expires_at)
VALUES (%s, %s, %s, %s, %s, %s)
"""
GET_CODE = "SELECT * FROM link_codes WHERE code_hash = %s"
CLAIM_CODE = """
UPDATE link_codes SET status = 'claimed', claimed_platform = %(platform)s,
       claimed_platform_id = %(platform_id)s, claimed_user_id = %(person)s, claimed_at = %(now)s
 WHERE code_hash = %(hash)s AND status = 'open' AND expires_at > %(now)s
   AND user_id <> %(person)s
RETURNING *
"""
PENDING_FOR = """
SELECT * FROM link_codes WHERE user_id = %s AND status = 'claimed' AND expires_at > %s
 ORDER BY claimed_at DESC LIMIT 1
"""
SET_STATUS = "UPDATE link_codes SET status = %s WHERE code_hash = %s AND status = 'claimed'"
CLAIMED_BY = """
SELECT * FROM link_codes WHERE claimed_platform = %s AND claimed_platform_id = %s
   AND status = 'claimed' AND expires_at > %s
 ORDER BY claimed_at DESC LIMIT 1
"""
CONFIRM = """
UPDATE link_codes SET claimant_confirmed = true
 WHERE code_hash = %s AND status = 'claimed' AND expires_at > %s
RETURNING *
"""
FIND_PERSON = "SELECT user_id FROM identities WHERE platform = %s AND platform_id = %s"
ROUTE = """
SELECT u.notify, i.platform, i.last_seen_at FROM users u
  LEFT JOIN identities i ON i.user_id = u.id AND i.platform = ANY(%s)
 WHERE u.id = %s
 ORDER BY i.last_seen_at DESC NULLS LAST, i.created_at DESC
"""
SET_NOTIFY = "UPDATE users SET notify = %s, updated_at = now() WHERE id = %s"


class LinkRefused(Exception):
    """A link request that cannot go ahead; the message says why, for the person."""


@dataclass(frozen=True)
class LinkRequest:
    """A claimed code waiting for the issuing side's Approve."""

    code_hash: bytes
    issuer: int  # person who issued the code
    platform: str  # the issuing identity
    platform_id: int
    claimant: int  # person behind the identity that used the code
    claimed_platform: str
    claimed_platform_id: int
    expires_at: datetime
    confirmed: bool = False  # the claimant agreed after being told whose account it joins


def new_code() -> str:
    """A random code such as 'K7QXM9PA2B' (50 bits)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise(code: str) -> str:
    """Codes match case-insensitively, ignoring spaces and dashes."""
    return "".join(ch for ch in code.upper() if ch not in " -\t")


def code_hash(code: str) -> bytes:
    """What is stored of a code."""
    return hashlib.sha256(normalise(code).encode()).digest()


def looks_like_code(text: str) -> bool:
    """True when `text` could be a code (so '/link approve' is never taken for one)."""
    code = normalise(text)
    return len(code) == CODE_LENGTH and all(ch in CODE_ALPHABET for ch in code)


def platform_label(platform: str) -> str:
    """'Discord', 'Telegram', 'the terminal'."""
    known = named(platform)
    return known.in_sentence if known else platform.capitalize()


def _request(row: dict[str, Any]) -> LinkRequest:
    return LinkRequest(
        code_hash=bytes(row["code_hash"]),
        issuer=row["user_id"],
        platform=row["platform"],
        platform_id=row["platform_id"],
        claimant=row["claimed_user_id"],
        claimed_platform=row["claimed_platform"],
        claimed_platform_id=row["claimed_platform_id"],
        expires_at=row["expires_at"],
        confirmed=bool(row.get("claimant_confirmed")),
    )


class LinkService:
    """Issues, claims and settles link codes; keeps the notify choice."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    async def issue(self, person: int, platform: str, platform_id: int) -> str:
        """A new code for this identity's person; earlier unused codes of the person end."""
        code, now = new_code(), self.clock.now()
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(CLOSE_OPEN_CODES, (person,))
            await conn.execute(
                INSERT_CODE, (code_hash(code), person, platform, platform_id, now, now + CODE_TTL)
            )
        return code

    async def claim(self, code: str, platform: str, platform_id: int) -> LinkRequest:
        """Claim `code` for this identity (still nothing joins); LinkRefused says why not.

        A wrong, used or expired code counts as a failure of this identity; the third
        within FAILURE_WINDOW locks it out until the window has passed."""
        now = self.clock.now()
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(IDENTITY_LOCK, (LINK_LOCK_NAMESPACE, platform, platform_id))
            await self._check_not_locked(conn, platform, platform_id, now)
            found = await (await conn.execute(FIND_PERSON, (platform, platform_id))).fetchone()
            person = found["user_id"] if found else None
            params = {
                "platform": platform,
                "platform_id": platform_id,
                "person": person,
                "now": now,
                "hash": code_hash(code),
            }
            row = await (await conn.execute(CLAIM_CODE, params)).fetchone()
            if row is not None:
                return _request(row)
            stored = await (await conn.execute(GET_CODE, (params["hash"],))).fetchone()
            if stored is not None and stored["user_id"] == person:
                raise LinkRefused(
                    "That code is yours: this front end is already joined to it. "
                    "Use it in another front end (Discord, Telegram or the terminal)."
                )
            await conn.execute(ADD_FAILURE, (platform, platform_id, now))
        raise LinkRefused(await self._why_not(stored, now, platform, platform_id))

    async def _check_not_locked(
        self, conn: Any, platform: str, platform_id: int, now: datetime
    ) -> None:
        await conn.execute(PRUNE_FAILURES, (now - FAILURE_WINDOW,))
        row = await (
            await conn.execute(RECENT_FAILURES, (platform, platform_id, now - FAILURE_WINDOW))
        ).fetchone()
        if row["n"] >= MAX_FAILURES:
            minutes = max(1, int((row["first"] + FAILURE_WINDOW - now).total_seconds() // 60))
            raise LinkRefused(
                f"Too many wrong codes. /link CODE is locked here for about {minutes} more "
                "minute(s)."
            )

    async def _why_not(
        self, stored: dict[str, Any] | None, now: datetime, platform: str, platform_id: int
    ) -> str:
        row = await fetch_one(
            self.pool, RECENT_FAILURES, (platform, platform_id, now - FAILURE_WINDOW)
        )
        left = MAX_FAILURES - (row["n"] if row else 0)
        tail = f" ({left} attempt(s) left)" if left > 0 else " (now locked for ten minutes)"
        if stored is None:
            return "That code isn't valid. Check it, or send /link where you started." + tail
        if stored["status"] != "open":
            return "That code was already used. Send /link there again for a new one." + tail
        return "That code has expired (codes last 10 minutes). Send /link there again." + tail

    async def pending(self, person: int) -> LinkRequest | None:
        """The claim waiting for this person's Approve, if any."""
        row = await fetch_one(self.pool, PENDING_FOR, (person, self.clock.now()))
        return _request(row) if row else None

    async def claimed_by(self, platform: str, platform_id: int) -> LinkRequest | None:
        """The live claim this identity made (confirmed or not), if any."""
        row = await fetch_one(self.pool, CLAIMED_BY, (platform, platform_id, self.clock.now()))
        return _request(row) if row else None

    async def confirm(self, request: LinkRequest) -> LinkRequest | None:
        """The claimant agrees; None when the claim was settled or expired meanwhile."""
        row = await fetch_one(self.pool, CONFIRM, (request.code_hash, self.clock.now()))
        return _request(row) if row else None

    async def settle(self, request: LinkRequest, status: str) -> bool:
        """Mark a claim 'joined' or 'denied'; False when it was settled already."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(SET_STATUS, (status, request.code_hash))
            return cur.rowcount == 1

    async def set_notify(self, person: int, choice: str) -> None:
        """Store where proactive messages go: 'auto', 'discord' or 'telegram'."""
        if choice not in notify_choices():
            raise ValueError(choice)
        async with self.pool.connection() as conn:
            await conn.execute(SET_NOTIFY, (choice, person))

    async def route(self, person: int) -> tuple[str, list[str]]:
        """(notify choice, the person's chat platforms in delivery order)."""
        return await route_of(self.pool, person)


async def route_of(pool: Pool, person: int) -> tuple[str, list[str]]:
    """(notify choice, chat platforms in order): the choice first, then the last written."""
    rows = await fetch_all(pool, ROUTE, (list(chat_names()), person))
    if not rows:
        return "auto", []
    choice = rows[0]["notify"]
    platforms: list[str] = []
    for row in rows:
        if row["platform"] and row["platform"] not in platforms:
            platforms.append(row["platform"])
    if choice in platforms:
        platforms.remove(choice)
        platforms.insert(0, choice)
    return choice, platforms


def chat_route(pool: Pool) -> Callable[[User], Awaitable[list[str]]]:
    """The messenger's route: a person's chat front ends in the order to try them."""

    async def route(user: User) -> list[str]:
        return (await route_of(pool, user.id))[1]

    return route

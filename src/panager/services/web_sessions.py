"""Web sign-in: one-time links from `/web`, and the browser sessions they start.

A link carries 32 random bytes (URL-safe base64); the database keeps only
their SHA-256, bound to the user, with an expiry (LINK_TTL) and the moment it
was used — the UPDATE that uses it checks all three in one statement, so a
link works once even when two tabs race. A session cookie works the same way
(only its hash is stored) and also carries a per-session CSRF token. Sessions
end after SESSION_IDLE without a request, on `/web signout` (all of a user's
sessions), and at once when the user is blocked: every lookup joins `users`.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from panager.clock import Clock
from panager.db.pool import Pool
from panager.services.users import User

LINK_TTL = timedelta(minutes=10)
SESSION_IDLE = timedelta(days=7)
TOUCH_EVERY = timedelta(minutes=1)  # last_seen_at is written at most this often
LinkRefusal = Literal["unknown", "expired", "used", "blocked"]

INSERT_LINK = """
INSERT INTO web_links (token_hash, user_id, created_at, expires_at)
VALUES (%(hash)s, %(user_id)s, %(now)s, %(expires)s)
"""
USE_LINK = """
UPDATE web_links SET used_at = %(now)s
 WHERE token_hash = %(hash)s AND used_at IS NULL AND expires_at > %(now)s
RETURNING user_id
"""
GET_LINK = "SELECT * FROM web_links WHERE token_hash = %s"
PRUNE_LINKS = "DELETE FROM web_links WHERE expires_at < %s"
INSERT_SESSION = """
INSERT INTO web_sessions (id_hash, user_id, csrf_token, created_at, last_seen_at)
VALUES (%(hash)s, %(user_id)s, %(csrf)s, %(now)s, %(now)s)
"""
GET_SESSION = """
SELECT s.csrf_token, s.last_seen_at, u.*
  FROM web_sessions s JOIN users u ON u.id = s.user_id
 WHERE s.id_hash = %(hash)s AND s.last_seen_at > %(idle_since)s AND u.status = 'active'
"""
TOUCH_SESSION = "UPDATE web_sessions SET last_seen_at = %s WHERE id_hash = %s"
END_SESSION = "DELETE FROM web_sessions WHERE id_hash = %s"
END_ALL = "DELETE FROM web_sessions WHERE user_id = %s"
PRUNE_SESSIONS = "DELETE FROM web_sessions WHERE last_seen_at <= %s"
LAST_SEEN = "SELECT user_id, max(last_seen_at) AS seen FROM web_sessions GROUP BY user_id"


def _hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class LinkUse:
    """The outcome of opening a sign-in link: the user, or why not."""

    user_id: int | None
    refusal: LinkRefusal | None = None


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser: whose, and the CSRF token its forms must carry."""

    user: User
    csrf_token: str


class WebSessionService:
    """One-time links and sessions; every write is keyed by the token's hash or the user."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    async def create_link(self, user_id: int) -> str:
        """A new one-time sign-in token for the user (valid LINK_TTL)."""
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        params = {"hash": _hash(token), "user_id": user_id, "now": now, "expires": now + LINK_TTL}
        async with self.pool.connection() as conn:
            await conn.execute(PRUNE_LINKS, (now - timedelta(days=1),))
            await conn.execute(INSERT_LINK, params)
        return token

    async def peek_link(self, token: str) -> LinkUse:
        """Whether the link would work (without using it): the confirmation page asks this."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_LINK, (_hash(token or ""),))).fetchone()
        return self._judge(row)

    async def use_link(self, token: str) -> LinkUse:
        """Spend the link (once, atomically); the user to sign in, or the refusal."""
        params = {"hash": _hash(token or ""), "now": self.clock.now()}
        async with self.pool.connection() as conn:
            row = await (await conn.execute(USE_LINK, params)).fetchone()
            if row is not None:
                return LinkUse(row["user_id"])
            old = await (await conn.execute(GET_LINK, (params["hash"],))).fetchone()
        refused = self._judge(old)
        return refused if refused.refusal else LinkUse(refused.user_id, "used")

    def _judge(self, row: dict | None) -> LinkUse:
        if row is None:
            return LinkUse(None, "unknown")
        if row["used_at"] is not None:
            return LinkUse(row["user_id"], "used")
        if row["expires_at"] <= self.clock.now():
            return LinkUse(row["user_id"], "expired")
        return LinkUse(row["user_id"])

    async def start(self, user_id: int) -> str:
        """A new session for the user; returns the cookie value."""
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        params = {"hash": _hash(token), "user_id": user_id, "csrf": secrets.token_urlsafe(24),
                  "now": now}
        async with self.pool.connection() as conn:
            await conn.execute(PRUNE_SESSIONS, (now - SESSION_IDLE,))
            await conn.execute(INSERT_SESSION, params)
        return token

    @staticmethod
    def key(token: str) -> bytes:
        """What identifies a session cookie in storage (its SHA-256; never the cookie)."""
        return _hash(token)

    async def lookup(self, token: str | None) -> WebSession | None:
        """The live session for a cookie value (None: unknown, idle too long, user blocked)."""
        if not token:
            return None
        now = self.clock.now()
        digest = _hash(token)
        async with self.pool.connection() as conn:
            params = {"hash": digest, "idle_since": now - SESSION_IDLE}
            cur = await conn.execute(GET_SESSION, params)
            row = await cur.fetchone()
            if row is None:
                return None
            if now - row["last_seen_at"] >= TOUCH_EVERY:
                await conn.execute(TOUCH_SESSION, (now, digest))
        user = User(**{k: row[k] for k in User.__dataclass_fields__})
        return WebSession(user, row["csrf_token"])

    async def end(self, token: str | None) -> None:
        """Sign this browser out."""
        async with self.pool.connection() as conn:
            await conn.execute(END_SESSION, (_hash(token or ""),))

    async def end_all(self, user_id: int) -> int:
        """Sign the user out everywhere; returns how many sessions ended."""
        async with self.pool.connection() as conn:
            return (await conn.execute(END_ALL, (user_id,))).rowcount

    async def last_seen(self) -> dict[int, datetime]:
        """Each user's latest web request (for the admin's users page)."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(LAST_SEEN)).fetchall()
        return {r["user_id"]: r["seen"] for r in rows}

"""Users: identity, time zone, role and status (access control builds on this).

Usernames are unique ignoring case (a unique index since migration 0014), so
"@name" in a relayed message or a `send_user_message` call names one person.
A new or renamed user whose wanted name is taken by someone else gets the
first free "-2", "-3", … suffix (`_free_username`); the oldest holder keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, overload
from zoneinfo import ZoneInfo

from psycopg.errors import UniqueViolation

from panager.db.pool import Pool
from panager.db.queries import one

LOCAL_USER_ID = 1  # the terminal user; Discord snowflakes are far larger, so ids never collide

GET_USER = "SELECT * FROM users WHERE id = %s"
GET_BY_USERNAME = (
    "SELECT * FROM users WHERE lower(username) = lower(%s) ORDER BY created_at LIMIT 1"
)
ACTIVE_BY_USERNAME = (
    "SELECT * FROM users WHERE lower(username) = lower(%s) AND status = 'active' LIMIT 2"
)
UPSERT_USER = """
INSERT INTO users (id, username, display_name, timezone, role, status)
VALUES (%(id)s, %(username)s, %(display_name)s, %(timezone)s, %(role)s, %(status)s)
ON CONFLICT (id) DO UPDATE
   SET username = EXCLUDED.username,
       display_name = COALESCE(EXCLUDED.display_name, users.display_name),
       updated_at = now()
RETURNING *
"""
INSERT_PLACEHOLDER = """
INSERT INTO users (id, username, timezone, role, status)
VALUES (%(id)s, %(username)s, %(timezone)s, 'user', %(status)s)
ON CONFLICT (id) DO NOTHING
"""
NAME_HOLDER = "SELECT id FROM users WHERE lower(username) = lower(%s)"
MAX_NAME_TRIES = 5  # a name taken between the check and the write: look again
SET_TIMEZONE = "UPDATE users SET timezone = %s, updated_at = now() WHERE id = %s RETURNING *"
SET_STATUS = "UPDATE users SET status = %s, updated_at = now() WHERE id = %s RETURNING *"
SET_ROLE = "UPDATE users SET role = %s, updated_at = now() WHERE id = %s RETURNING *"
SET_MODEL = "UPDATE users SET model = %s, updated_at = now() WHERE id = %s RETURNING *"
LIST_USERS = "SELECT * FROM users ORDER BY created_at, id"


@dataclass(frozen=True)
class User:
    """A person Panager serves; `id` is their Discord id (or LOCAL_USER_ID in the terminal)."""

    id: int
    username: str
    display_name: str | None
    timezone: str
    role: str
    status: str
    model: str | None
    created_at: datetime

    @property
    def zone(self) -> ZoneInfo:
        """The user's zone as a ZoneInfo."""
        return ZoneInfo(self.timezone)

    @property
    def thread_id(self) -> str:
        """The checkpointer thread of this user's conversation."""
        return str(self.id)

    @property
    def name(self) -> str:
        """The name to address the user by."""
        return self.display_name or self.username

    def with_timezone(self, tz: str) -> User:
        """A copy with another zone."""
        return replace(self, timezone=tz)


async def _free_username(conn: Any, wanted: str, user_id: int) -> str:
    """`wanted`, or the first `wanted-N` (N = 2, 3, …) that no other user holds."""
    candidate, suffix = wanted, 1
    while True:
        rows = await (await conn.execute(NAME_HOLDER, (candidate,))).fetchall()
        if all(r["id"] == user_id for r in rows):
            return candidate
        suffix += 1
        candidate = f"{wanted}-{suffix}"


@overload
def _user(row: dict) -> User: ...
@overload
def _user(row: None) -> None: ...
@overload
def _user(row: dict | None) -> User | None: ...
def _user(row: dict | None) -> User | None:
    if row is None:
        return None
    fields = User.__dataclass_fields__
    return User(**{k: v for k, v in row.items() if k in fields})


class UserService:
    """Reads and writes users; every method is keyed by an explicit user id."""

    def __init__(self, pool: Pool, default_timezone: str = "UTC") -> None:
        self.pool = pool
        self.default_timezone = default_timezone

    async def get(self, user_id: int) -> User | None:
        """The user with this id, or None."""
        async with self.pool.connection() as conn:
            return _user(await (await conn.execute(GET_USER, (user_id,))).fetchone())

    async def by_username(self, username: str) -> User | None:
        """The (oldest) user with this username, case-insensitively."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_BY_USERNAME, (username.lstrip("@"),))).fetchone()
            return _user(row)

    async def active_by_username(self, username: str) -> list[User]:
        """Active users with this username (case-insensitive); two or more is ambiguous."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(ACTIVE_BY_USERNAME, (username.lstrip("@"),))
            return [_user(r) for r in await cur.fetchall()]

    async def ensure(
        self,
        user_id: int,
        username: str,
        *,
        display_name: str | None = None,
        role: str = "user",
        status: str = "active",
        timezone: str | None = None,
    ) -> User:
        """Create the user if new (keeping zone/role/status of an existing one); return it."""
        params = {
            "id": user_id,
            "username": username,
            "display_name": display_name,
            "timezone": timezone or self.default_timezone,
            "role": role,
            "status": status,
        }
        return _user(one(await self._write_named(UPSERT_USER, params)))

    async def ensure_placeholder(self, user_id: int, *, status: str) -> None:
        """Create a user known only by id (named by it until they write); never renames."""
        params = {
            "id": user_id,
            "username": str(user_id),
            "timezone": self.default_timezone,
            "status": status,
        }
        await self._write_named(INSERT_PLACEHOLDER, params)

    async def _write_named(self, sql: str, params: dict) -> dict | None:
        """Run an insert/upsert of `params["username"]` under a name no one else holds."""
        wanted = params["username"]
        for attempt in range(MAX_NAME_TRIES):
            try:
                async with self.pool.connection() as conn:
                    name = await _free_username(conn, wanted, params["id"])
                    cur = await conn.execute(sql, {**params, "username": name})
                    return await cur.fetchone() if cur.description else None
            except UniqueViolation:
                if attempt == MAX_NAME_TRIES - 1:
                    raise
        return None

    async def _update(self, sql: str, value: object, user_id: int) -> User | None:
        async with self.pool.connection() as conn:
            return _user(await (await conn.execute(sql, (value, user_id))).fetchone())

    async def set_timezone(self, user_id: int, tz: str) -> User | None:
        """Store a (validated) IANA zone for the user."""
        ZoneInfo(tz)
        return await self._update(SET_TIMEZONE, tz, user_id)

    async def set_status(self, user_id: int, status: str) -> User | None:
        """Set active / pending / blocked."""
        return await self._update(SET_STATUS, status, user_id)

    async def set_role(self, user_id: int, role: str) -> User | None:
        """Set user / admin."""
        return await self._update(SET_ROLE, role, user_id)

    async def set_model(self, user_id: int, model: str | None) -> User | None:
        """Per-user chat model override (None: the instance default)."""
        return await self._update(SET_MODEL, model, user_id)

    async def list(self) -> list[User]:
        """All users, oldest first."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(LIST_USERS)).fetchall()
            return [_user(r) for r in rows]

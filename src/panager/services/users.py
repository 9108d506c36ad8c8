"""People: their identities per front end, time zone, role and status (access builds on this).

A person (`users.id`) is reached through identities: (platform, platform id)
→ person (table `identities`). Discord people keep person id = their Discord
snowflake and the terminal user is `LOCAL_USER_ID`; every other new person
(Telegram first) takes the next value of the `person_ids` sequence, which
counts down from -1, so no new id can ever equal a (positive) snowflake.
Everything per person — threads (`str(id)`), memories, schedules — is keyed
by the person id, never by a platform id.

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

from panager.db.locks import IDENTITY_LOCK_NAMESPACE
from panager.db.pool import Pool
from panager.db.queries import one
from panager.platforms import identity_names, named

LOCAL_USER_ID = 1  # the terminal user; Discord snowflakes are far larger, so ids never collide

FIND_IDENTITY = "SELECT user_id FROM identities WHERE platform = %s AND platform_id = %s"
# The same with the person's name: a sender whose name did not change needs no name search.
FIND_KNOWN = """
SELECT i.user_id, u.username FROM identities i JOIN users u ON u.id = i.user_id
 WHERE i.platform = %s AND i.platform_id = %s
"""
LOCK_IDENTITY = (
    f"SELECT pg_advisory_xact_lock({IDENTITY_LOCK_NAMESPACE}, hashtext(%s || ':' || %s::text))"
)
NEXT_PERSON_ID = "SELECT nextval('person_ids') AS id"
INSERT_IDENTITY = """
INSERT INTO identities (platform, platform_id, user_id, last_seen_at)
VALUES (%s, %s, %s, CASE WHEN %s THEN NULL ELSE now() END)
ON CONFLICT (platform, platform_id) DO NOTHING
"""
IDENTITIES_OF = "SELECT platform, platform_id FROM identities WHERE user_id = %s ORDER BY platform"

GET_USER = "SELECT * FROM users WHERE id = %s"
# The common case: a known identity, its person's names refreshed (under a free name), and
# the identity's last message noted (where `/notify auto` delivers).
TOUCH_KNOWN = """
WITH seen AS (
    UPDATE identities SET last_seen_at = now()
     WHERE platform = %(platform)s AND platform_id = %(platform_id)s
    RETURNING user_id
)
UPDATE users SET username = %(username)s,
       display_name = COALESCE(%(display_name)s, users.display_name), updated_at = now()
 WHERE id = (SELECT user_id FROM seen) AND id = %(id)s
RETURNING *
"""
# The commonest case of all: a known identity whose person keeps their name (nearly every
# message). Noted as seen, the person read, and all their identities with it (admission reads
# them at every message), in one round trip; no row: `ensure_identity` does the rest.
TOUCH_SAME_NAME = """
WITH seen AS (
    UPDATE identities i SET last_seen_at = now()
      FROM users u
     WHERE i.platform = %(platform)s AND i.platform_id = %(platform_id)s
       AND u.id = i.user_id AND u.username = %(username)s
    RETURNING i.user_id
)
UPDATE users SET display_name = COALESCE(%(display_name)s, users.display_name), updated_at = now()
 WHERE id = (SELECT user_id FROM seen)
RETURNING users.*,
       ARRAY(SELECT platform FROM identities WHERE user_id = users.id
              ORDER BY platform, platform_id) AS identity_platforms,
       ARRAY(SELECT platform_id FROM identities WHERE user_id = users.id
              ORDER BY platform, platform_id) AS identity_ids
"""
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
    """A person Panager serves; `id` is the person id (module doc: the id rule)."""

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
        """Create the user if new (keeping zone/role/status of an existing one); return it.

        `user_id` is a Discord person's snowflake (or `LOCAL_USER_ID`): the person gets
        that identity too, as migration 0016 gave every existing person. Other front
        ends' people are made by `ensure_identity`."""
        params = {
            "id": user_id,
            "username": username,
            "display_name": display_name,
            "timezone": timezone or self.default_timezone,
            "role": role,
            "status": status,
        }
        user = _user(one(await self._write_named(UPSERT_USER, params)))
        if user_id > 0:
            platform = "terminal" if user_id == LOCAL_USER_ID else "discord"
            async with self.pool.connection() as conn:
                await conn.execute(INSERT_IDENTITY, (platform, user_id, user_id, True))
        return user

    async def person_id(self, platform: str, platform_id: int) -> int | None:
        """The person behind this identity, or None when it has never been seen."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(FIND_IDENTITY, (platform, platform_id))).fetchone()
        return row["user_id"] if row else None

    async def ensure_identity(
        self,
        platform: str,
        platform_id: int,
        username: str,
        *,
        display_name: str | None = None,
        role: str = "user",
        status: str = "active",
        placeholder: bool = False,
    ) -> User:
        """The person behind (platform, platform id), created with a new id when unseen.

        Creation is serialised per identity (a transaction-scoped advisory lock), so two
        processes seeing a new person at once make one person, not two. A placeholder
        (created by an admin's allow/block before the person wrote) is never renamed."""
        if platform not in identity_names():
            raise ValueError(f"unknown platform {platform!r}")
        for attempt in range(MAX_NAME_TRIES):
            try:
                return await self._ensure_identity_once(
                    platform, platform_id, username, display_name, role, status, placeholder
                )
            except UniqueViolation:  # the free name was taken meanwhile: look again
                if attempt == MAX_NAME_TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def touch_known(
        self, platform: str, platform_id: int, username: str, display_name: str | None = None
    ) -> tuple[User, list[tuple[str, int]]] | None:
        """A known identity whose person keeps the name `username`, noted as seen (as
        `ensure_identity` notes it): the person and all their identities, read together.
        None when the identity is new or the name changed: call `ensure_identity`."""
        params = {
            "platform": platform,
            "platform_id": platform_id,
            "username": username,
            "display_name": display_name,
        }
        async with self.pool.connection() as conn:
            row = await (await conn.execute(TOUCH_SAME_NAME, params)).fetchone()
        if row is None:
            return None
        return _user(row), list(zip(row["identity_platforms"], row["identity_ids"], strict=True))

    async def _ensure_identity_once(
        self,
        platform: str,
        platform_id: int,
        username: str,
        display_name: str | None,
        role: str,
        status: str,
        placeholder: bool,
    ) -> User:
        if not placeholder:
            async with self.pool.connection() as conn:
                row = await (await conn.execute(FIND_KNOWN, (platform, platform_id))).fetchone()
                if row is not None:
                    same = row["username"] == username  # theirs already: free for them
                    known = {
                        "platform": platform,
                        "platform_id": platform_id,
                        "id": row["user_id"],
                        "username": username if same else await _free_username(
                            conn, username, row["user_id"]
                        ),
                        "display_name": display_name,
                    }
                    found = await (await conn.execute(TOUCH_KNOWN, known)).fetchone()
                    if found is not None:
                        return _user(found)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_IDENTITY, (platform, platform_id))
            row = await (await conn.execute(FIND_IDENTITY, (platform, platform_id))).fetchone()
            if row is not None:
                person = row["user_id"]
            elif (described := named(platform)) is not None and described.same_id:
                person = platform_id
            else:
                person = one(await (await conn.execute(NEXT_PERSON_ID)).fetchone())["id"]
            params = {
                "id": person,
                "username": await _free_username(conn, username, person),
                "display_name": display_name,
                "timezone": self.default_timezone,
                "role": role,
                "status": status,
            }
            if placeholder:
                await conn.execute(INSERT_PLACEHOLDER, params)
                user_row = await (await conn.execute(GET_USER, (person,))).fetchone()
            else:
                user_row = await (await conn.execute(UPSERT_USER, params)).fetchone()
            if row is None:
                await conn.execute(INSERT_IDENTITY, (platform, platform_id, person, placeholder))
        return _user(one(user_row))

    async def identities(self, user_id: int) -> list[tuple[str, int]]:
        """(platform, platform id) of every identity of the person."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(IDENTITIES_OF, (user_id,))).fetchall()
        return [(r["platform"], r["platform_id"]) for r in rows]

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

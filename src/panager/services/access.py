# Over 400 lines, kept whole: one decision, admission: modes, invites, standings and admin rights
# share its queries and its lock.
"""Who may talk to Panager: access modes, admins, invites, allow and block.

The decision is made here, before any model call, and front ends only relay
it. Modes (`PANAGER_ACCESS`): `open` lets anyone in; `allowlist` lets in the
admins and users an admin allowed; `invite` also lets in anyone who redeemed
an invite code with `/start CODE`. Admins (`PANAGER_ADMIN_IDS`) are always in
and can never be blocked. A person refused in `allowlist`/`invite` mode is
kept as a `pending` user, so `panager users list` shows who knocked.

Admin rights belong to identities, not to person ids: a person is an admin while one of
their identities (Discord, Telegram, joined by /link or not) is listed, or is the
terminal, and `standing` reads them from the database at each decision. A join or an
/unlink made by another process therefore counts at once, and an /unlink that moves the
listed identity away leaves the person id behind without its rights.

Redemption is a single conditional UPDATE on the invite row: PostgreSQL's row
lock serialises racing redemptions, and the loser re-checks `uses < max_uses`
and finds the code spent. Exactly one of two racers wins a single-use code.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, overload

from panager.clock import Clock
from panager.db.pool import Pool
from panager.db.queries import one
from panager.services.users import LOCAL_USER_ID, User, UserService

Identity = tuple[str, int]  # (platform, platform id)
OWNER: Identity = ("terminal", LOCAL_USER_ID)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: codes get read aloud
CODE_LENGTH = 10
DEFAULT_INVITE_TTL = timedelta(days=7)
MAX_INVITE_TTL = timedelta(days=365)  # longer is 'never'; also keeps expiry dates in range
MAX_INVITE_USES = 1000
_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$", re.IGNORECASE)
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

INSERT_INVITE = """
INSERT INTO invites (code, created_by, max_uses, expires_at, created_at)
VALUES (%(code)s, %(created_by)s, %(max_uses)s, %(expires_at)s, %(now)s)
RETURNING *
"""
GET_INVITE = "SELECT * FROM invites WHERE code = %s"
CLAIM_INVITE_USE = """
UPDATE invites SET uses = uses + 1
 WHERE code = %(code)s AND uses < max_uses
   AND (expires_at IS NULL OR expires_at > %(now)s)
RETURNING *
"""
RECORD_REDEMPTION = """
INSERT INTO invite_redemptions (code, user_id, redeemed_at) VALUES (%s, %s, %s)
ON CONFLICT DO NOTHING
"""
LOCK_USER = "SELECT status FROM users WHERE id = %s FOR UPDATE"
ACTIVATE_USER = """
UPDATE users SET status = 'active', updated_at = now() WHERE id = %s AND status = 'pending'
RETURNING *
"""
LIST_INVITES = "SELECT * FROM invites ORDER BY created_at DESC, code"
REVOKE_INVITE = """
UPDATE invites SET expires_at = %(now)s
 WHERE code = %(code)s AND (expires_at IS NULL OR expires_at > %(now)s)
RETURNING *
"""

REFUSALS = {
    "invite": ("Hi! This assistant is invite-only. If you have an invite code, send /start CODE."),
    "allowlist": (
        "Sorry, this assistant only answers people its admin has added. "
        "Ask the admin to run: panager users allow {ref}"
    ),
    "blocked": "Sorry, you don't have access to this assistant.",
}


NO_INVITES = {
    "open": "Invite codes aren't needed here: this assistant is open — just send me a message.",
    "allowlist": (
        "Invite codes don't work on this assistant: it only answers people its admin has "
        "added. Ask the admin to run: panager users allow YOUR_ID"
    ),
}


@dataclass(frozen=True)
class Standing:
    """A person's identities as read now, and the rights they carry."""

    identities: frozenset[Identity]
    admin: bool  # admin rights: an identity in PANAGER_ADMIN_IDS, or the terminal
    listed: bool  # an identity in PANAGER_ADMIN_IDS (the terminal alone is not)


class AccessError(Exception):
    """An access-control request that cannot be done; the message says why and what works."""


@dataclass(frozen=True)
class Invite:
    """An invite code and how much of it is left."""

    code: str
    created_by: int | None
    max_uses: int
    uses: int
    expires_at: datetime | None
    created_at: datetime

    @property
    def remaining(self) -> int:
        """Uses left."""
        return max(self.max_uses - self.uses, 0)

    def expired(self, now: datetime) -> bool:
        """True once the code's expiry has passed."""
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True)
class Admission:
    """The access decision for one incoming message."""

    user: User
    allowed: bool
    refusal: str | None = None


@dataclass(frozen=True)
class Redemption:
    """The outcome of `/start CODE`."""

    ok: bool
    message: str
    user: User | None = None


@overload
def _invite(row: dict) -> Invite: ...
@overload
def _invite(row: None) -> None: ...
@overload
def _invite(row: dict | None) -> Invite | None: ...
def _invite(row: dict | None) -> Invite | None:
    if row is None:
        return None
    return Invite(**{k: row[k] for k in Invite.__dataclass_fields__})


def new_invite_code() -> str:
    """A random, unambiguous code such as 'K7QXM9PA2B' (50 bits)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(code: str) -> str:
    """Codes are matched case-insensitively, ignoring spaces and dashes."""
    return re.sub(r"[\s-]", "", code).upper()


def parse_duration(text: str) -> timedelta | None:
    """'30m', '12h', '7d', '2w' → timedelta; 'never' → None; anything else raises AccessError."""
    if text.strip().lower() in ("never", "none", "0"):
        return None
    match = _DURATION.match(text)
    if not match or not match.group(1).strip("0"):
        raise AccessError(
            f"Invalid expiry {text!r}: use a number with m, h, d or w "
            "(e.g. 12h, 7d, 2w) or 'never'."
        )
    unit = timedelta(**{_UNITS[match.group(2).lower()]: 1})
    digits = match.group(1).lstrip("0")
    if len(digits) > 9 or int(digits) > MAX_INVITE_TTL // unit:  # no huge int or timedelta
        raise AccessError(_too_long(text))
    return unit * int(digits)


def _too_long(text: str) -> str:
    days = MAX_INVITE_TTL.days
    return (
        f"Expiry {text!r} is too long: at most {days} days (e.g. {days}d or 52w), "
        "or 'never' for a code that does not expire."
    )


def describe_invite(invite: Invite) -> str:
    """'single use, expires 2026-11-28 12:00 UTC' and similar."""
    uses = "single use" if invite.max_uses == 1 else f"{invite.remaining} of {invite.max_uses} uses"
    if invite.expires_at is None:
        return f"{uses}, never expires"
    return f"{uses}, expires {invite.expires_at:%Y-%m-%d %H:%M} UTC"


class AccessService:
    """Access decisions and their data (invites, user status); one per app."""

    def __init__(
        self,
        pool: Pool,
        users: UserService,
        clock: Clock,
        *,
        mode: str = "invite",
        admin_ids: list[int] | tuple[int, ...] = (),
        telegram_admin_ids: list[int] | tuple[int, ...] = (),
        admin_identities: Iterable[Identity] = (),
    ) -> None:
        self.pool = pool
        self.users = users
        self.clock = clock
        self.mode = mode
        self.admin_ids = frozenset(admin_ids)  # Discord ids (= their person ids)
        self.admins: frozenset[Identity] = frozenset(
            [("discord", i) for i in admin_ids] + [("telegram", i) for i in telegram_admin_ids]
            + list(admin_identities)  # any front end's (Settings.admin_identities)
        )
        self._seen_listed: dict[int, bool] = {}  # person id → listed, as last read here

    def carries_rights(self, identity: Identity) -> bool:
        """Whether this identity gives its person admin rights: listed in PANAGER_ADMIN_IDS,
        or the terminal (the machine's owner is an admin wherever joined)."""
        return identity in self.admins or identity == OWNER

    async def standing(self, user_id: int) -> Standing:
        """The person's identities and the rights they carry, read now: no process keeps
        rights from an earlier join or /unlink (another process may have made it)."""
        return self._standing(user_id, frozenset(await self.users.identities(user_id)))

    def _standing(self, user_id: int, found: frozenset[Identity]) -> Standing:
        listed = any(i in self.admins for i in found)
        self._seen_listed[user_id] = listed
        return Standing(found, admin=listed or OWNER in found, listed=listed)

    def _listed_now(self, user_id: int) -> bool:
        """For the model choice, which is made without a database read: what this process
        last read of the person's identities (every message and web request reads them),
        else whether the person id is a listed Discord id."""
        return self._seen_listed.get(user_id, user_id in self.admin_ids)

    async def is_admin(self, user_id: int) -> bool:
        """True when one of the person's identities is in PANAGER_ADMIN_IDS now (the
        terminal alone is not: it gets the admin's commands, not their model or budget)."""
        return (await self.standing(user_id)).listed

    async def has_admin_rights(self, user_id: int) -> bool:
        """Admin rights, decided now from the person's identities and the configuration
        (PANAGER_ADMIN_IDS, and the terminal), never from the role stored in the database
        or a person id: an id removed from the list, or a listed identity moved away by
        /unlink, takes the rights with it on the next request, in every process."""
        return (await self.standing(user_id)).admin

    def model_of(self, user: User, default: str, allowed: Collection[str] | None) -> str:
        """The model `user` gets now: their stored /model choice while it is still permitted
        (admins: any; others: `allowed`, else only `default`), else `default`. Asked at every
        turn, so a narrowed allowed_models or a removed admin id takes effect at once."""
        choice = user.model
        if not choice or choice == default:
            return default
        if self._listed_now(user.id) or choice in (allowed or (default,)):
            return choice
        return default

    async def with_rights(self, user: User) -> User:
        """`user` with `role` set from the configuration (see `has_admin_rights`)."""
        role = "admin" if await self.has_admin_rights(user.id) else "user"
        return user if user.role == role else replace(user, role=role)

    async def admit(
        self, user_id: int, username: str, display_name: str | None = None
    ) -> Admission:
        """Record a Discord sender and decide whether they may use the assistant."""
        return await self.admit_identity("discord", user_id, username, display_name)

    async def admit_identity(
        self, platform: str, platform_id: int, username: str, display_name: str | None = None
    ) -> Admission:
        """Record the sender (by front-end identity) and decide whether they may come in.

        The same rules on every front end; admin rights follow PANAGER_ADMIN_IDS at every
        message."""
        if (platform, platform_id) in self.admins:
            user = await self._ensure_admin(platform, platform_id, username, display_name)
            self._seen_listed[user.id] = True
            return Admission(user, True)
        # Listed through another, joined identity (the terminal's counts)? Asked at every
        # message: a join or /unlink in another process changes who holds what. A known
        # sender's identities are read with the sender (`touch_known`: one round trip).
        known = await self.users.touch_known(platform, platform_id, username, display_name)
        if known is not None:
            user, identities = known
            listed = self._standing(user.id, frozenset(identities)).admin
        else:
            initial = "active" if self.mode == "open" else "pending"
            user = await self.users.ensure_identity(
                platform, platform_id, username, display_name=display_name, status=initial
            )
            listed = await self.has_admin_rights(user.id)
        if listed and (user.role != "admin" or user.status != "active"):
            return Admission(await self._promote(user), True)
        if user.role == "admin" and not listed:  # no longer listed: demoted
            user = await self.users.set_role(user.id, "user") or user
        if user.status == "blocked":
            return Admission(user, False, REFUSALS["blocked"])
        if user.status == "active":
            return Admission(user, True)
        if self.mode == "open":
            return Admission(await self.users.set_status(user.id, "active") or user, True)
        ref = str(platform_id) if platform == "discord" else f"{platform}:{platform_id}"
        return Admission(user, False, REFUSALS[self.mode].format(ref=ref))

    async def _ensure_admin(
        self, platform: str, platform_id: int, username: str, display_name: str | None
    ) -> User:
        user = await self.users.ensure_identity(
            platform,
            platform_id,
            username,
            display_name=display_name,
            role="admin",
            status="active",
        )
        return await self._promote(user)

    async def _promote(self, user: User) -> User:
        if user.role != "admin":
            user = await self.users.set_role(user.id, "admin") or user
        if user.status != "active":
            user = await self.users.set_status(user.id, "active") or user
        return user

    async def create_invite(
        self,
        created_by: int | None,
        *,
        max_uses: int = 1,
        expires_in: timedelta | None = DEFAULT_INVITE_TTL,
    ) -> Invite:
        """Store a new invite code and return it."""
        if not 1 <= max_uses <= MAX_INVITE_USES:
            raise AccessError(f"Uses must be between 1 and {MAX_INVITE_USES}.")
        if expires_in is not None and not timedelta(0) < expires_in <= MAX_INVITE_TTL:
            raise AccessError(
                f"Expiry must be between 1 minute and {MAX_INVITE_TTL.days} days, or 'never'."
            )
        now = self.clock.now()
        params = {
            "code": new_invite_code(),
            "created_by": created_by,
            "max_uses": max_uses,
            "expires_at": now + expires_in if expires_in is not None else None,
            "now": now,
        }
        async with self.pool.connection() as conn:
            return _invite(one(await (await conn.execute(INSERT_INVITE, params)).fetchone()))

    async def invites(self) -> list[Invite]:
        """All invite codes, newest first."""
        async with self.pool.connection() as conn:
            return [_invite(r) for r in await (await conn.execute(LIST_INVITES)).fetchall()]

    async def revoke_invite(self, code: str) -> Invite | None:
        """End a code now (it expires at once); None when unknown or already expired."""
        params = {"code": normalise_code(code), "now": self.clock.now()}
        async with self.pool.connection() as conn:
            return _invite(await (await conn.execute(REVOKE_INVITE, params)).fetchone())

    async def redeem(self, code: str, user: User) -> Redemption:
        """Spend one use of `code` and activate `user`, atomically; say why when it fails.

        Only in `invite` mode, and only for a still-pending user: the user's row is locked
        first, so a block landing in between wins and one person racing two `/start`
        calls spends one use."""
        if self.mode != "invite":
            return Redemption(False, NO_INVITES[self.mode])
        code, now = normalise_code(code), self.clock.now()
        async with self.pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(LOCK_USER, (user.id,))).fetchone()
            status = row["status"] if row else None
            if status == "active":
                return Redemption(True, "You're already registered — just send me a message.")
            if status != "pending":
                return Redemption(False, REFUSALS["blocked"])
            claimed = await conn.execute(CLAIM_INVITE_USE, {"code": code, "now": now})
            if await claimed.fetchone() is None:
                return Redemption(False, await self._why_not(conn, code, now))
            await conn.execute(RECORD_REDEMPTION, (code, user.id, now))
            row = one(await (await conn.execute(ACTIVATE_USER, (user.id,))).fetchone())
        activated = User(**{k: row[k] for k in User.__dataclass_fields__})
        return Redemption(True, _welcome(activated), activated)

    @staticmethod
    async def _why_not(conn: Any, code: str, now: datetime) -> str:
        invite = _invite(await (await conn.execute(GET_INVITE, (code,))).fetchone())
        if invite is None:
            return "That invite code isn't valid. Check it and send /start CODE again."
        if invite.expired(now):
            return "That invite code has expired. Ask the admin for a new one."
        return "That invite code has already been used. Ask the admin for a new one."

    async def allow(self, user_id: int, platform: str = "discord") -> User:
        """Let a person in (a placeholder until they first write); Discord id or person id."""
        person = await self._placeholder(user_id, platform, "active")
        user = await self.users.set_status(person, "active")
        assert user is not None  # _placeholder() above created the row if it was missing
        return user

    async def block(self, user_id: int, platform: str = "discord") -> User:
        """Refuse a person from now on (admins cannot be blocked)."""
        listed = (platform, user_id) in self.admins
        if listed or (platform == "discord" and await self.is_admin(user_id)):
            ref = str(user_id) if platform == "discord" else f"{platform}:{user_id}"
            raise AccessError(f"{ref} is in PANAGER_ADMIN_IDS; remove it there before blocking.")
        person = await self._placeholder(user_id, platform, "blocked")
        user = await self.users.set_status(person, "blocked")
        assert user is not None  # _placeholder() above created the row if it was missing
        return user

    async def _placeholder(self, user_id: int, platform: str, status: str) -> int:
        """The person id for an admin's allow/block, creating a placeholder when unknown."""
        if platform == "discord" and await self.users.get(user_id) is not None:
            return user_id  # a known person id (Discord people: their snowflake)
        user = await self.users.ensure_identity(
            platform, user_id, str(user_id), status=status, placeholder=True
        )
        return user.id


def _welcome(user: User) -> str:
    return (
        f"Welcome, {user.name}! You're registered. Just write to me here — "
        "I remember what you tell me, keep your reminders and (once connected) manage your "
        "Google Calendar and Tasks. Type /help for commands."
    )

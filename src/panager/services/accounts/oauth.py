"""The provider-neutral part of an OAuth 2 connect: link state, browser binding and the
messages kept for replay after linking.

Every OAuth provider (Google today, Microsoft next) links through the same
steps; only the consent address, the scopes and the token exchange are its own:

1. `OAuthStates.new` — a link's `state` is a random nonce plus an HMAC
   (PANAGER_SECRET_KEY, `Sealer.sign`) over (provider, nonce, user, expiry).
   Only the nonce's SHA-256 is stored in `oauth_states`, with the user, the
   expiry, the scopes asked for and a PKCE verifier sealed with the same key —
   so any process can finish the flow, and neither a database reader nor a log
   reader can rebuild a usable state. The provider's name is part of what is
   signed: one provider's state is "forged" to another's store.
2. `check` — the link's start page: the state exists and its signature is ours
   (else "forged"), it was not used ("replayed"), it has not expired ("expired").
3. `bind` — Continue on the start page ties the state to the hash of a random
   cookie that page set; only that browser can finish it.
4. `claim` — the callback: the same checks, the same browser (and not signed in
   to Panager as someone else: "other_browser"), then the state is marked used in
   the statement that checks it, so two concurrent callbacks cannot both pass.
   The provider then exchanges the code and stores its tokens sealed.
   `finish_link` runs this step for any provider: claim, the person may link,
   the consent was given, then the provider's `redeem` (exchange the code,
   store the tokens sealed with PANAGER_SECRET_KEY).
5. `PendingMessages` — the message that needed the connection is kept when its
   link is handed out and answered once after a successful callback (the replay).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from panager.clock import Clock
from panager.db.pool import Pool
from panager.services.accounts.sealing import InvalidToken, Sealer

__all__ = [
    "PENDING_MAX_AGE",
    "STATE_TTL",
    "UNCONFIGURED",
    "Browser",
    "Claimed",
    "LinkOutcome",
    "Linked",
    "OAuthLink",
    "OAuthStates",
    "PendingMessages",
    "finish_link",
]

STATE_TTL = timedelta(minutes=10)
PENDING_MAX_AGE = timedelta(hours=1)
# What the admin sets for an OAuth provider this instance has not registered, by its name
# (/connect answers with it); one line per OAuth provider.
UNCONFIGURED = {
    "google": (
        "Google Calendar and Tasks are not configured on this Panager instance: the admin "
        "must set GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET (see docs/google.md)."
    ),
}

INSERT_STATE = """
INSERT INTO oauth_states (state_hash, user_id, code_verifier, created_at, expires_at, scopes)
VALUES (%s, %s, %s, %s, %s, %s)
"""
PRUNE_STATES = """
DELETE FROM oauth_states
 WHERE user_id = %s AND (used_at IS NOT NULL OR expires_at < %s)
"""
GET_STATE = "SELECT * FROM oauth_states WHERE state_hash = %s"
BIND_STATE = """
UPDATE oauth_states SET browser_key = %s
 WHERE state_hash = %s AND used_at IS NULL AND browser_key IS NULL
RETURNING user_id
"""
USE_STATE = """
UPDATE oauth_states SET used_at = %s
 WHERE state_hash = %s AND user_id = %s AND used_at IS NULL
RETURNING user_id
"""
DELETE_OPEN_STATES = "DELETE FROM oauth_states WHERE user_id = %s AND used_at IS NULL"
INSERT_PENDING = "INSERT INTO pending_messages (user_id, text, created_at) VALUES (%s, %s, %s)"
CLAIM_PENDING = """
UPDATE pending_messages SET replayed_at = %s
 WHERE user_id = %s AND replayed_at IS NULL
RETURNING id, text, created_at
"""
DELETE_PENDING = "DELETE FROM pending_messages WHERE user_id = %s AND replayed_at IS NULL"


@dataclass(frozen=True)
class LinkOutcome:
    """What a callback achieved; `reason` picks the page the user sees."""

    ok: bool
    reason: str  # linked | missing_state | forged | expired | replayed | denied |
    #              exchange_failed | no_scopes | no_refresh_token | blocked | already_linked |
    #              other_browser | no_cookie | other_account
    user_id: int | None = None
    email: str | None = None
    scopes: tuple[str, ...] = ()
    retry_link: str | None = None


@dataclass(frozen=True)
class Browser:
    """Who a browser is to the link flow: the hash of the cookie the link's page set
    (None: it has none) and the Panager user its web session belongs to (None: not
    signed in)."""

    key: bytes | None
    user_id: int | None = None

    @staticmethod
    def key_of(cookie: str | None) -> bytes | None:
        """The stored form of the link page's cookie (only its hash is kept)."""
        return hashlib.sha256(cookie.encode()).digest() if cookie else None


@dataclass(frozen=True)
class Linked:
    """A person's account with an OAuth provider, as the commands and pages show it."""

    label: str | None  # the account's address, when known
    scopes: tuple[str, ...]  # what was granted
    connected: bool  # False once the provider refused the stored tokens


@dataclass(frozen=True)
class Claimed:
    """A state the callback used: whose link, its PKCE verifier, the scopes it asked for
    (empty: the provider's default)."""

    user_id: int
    verifier: str
    scopes: tuple[str, ...]


def _same_browser(row: dict, browser: Browser) -> bool:
    """The callback's browser may finish this link (see `OAuthStates.claim`)."""
    if browser.user_id is not None and browser.user_id != row["user_id"]:
        return False
    bound = row.get("browser_key")
    return bound is not None and browser.key is not None and bytes(bound) == browser.key


def _state_hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode("utf-8", "surrogatepass")).hexdigest()


class OAuthStates:
    """The link states of one OAuth provider (`name` is signed into each)."""

    def __init__(self, pool: Pool, clock: Clock, sealer: Sealer, name: str) -> None:
        self.pool, self.clock, self.sealer, self.name = pool, clock, sealer, name

    def _message(self, nonce: str, user_id: int, expires_at: datetime) -> str:
        return f"{self.name}|{nonce}|{user_id}|{int(expires_at.timestamp())}"

    async def new(self, user_id: int, scopes: Sequence[str] = ()) -> str:
        """A fresh state for `user_id`, valid for STATE_TTL and usable once, asking for
        `scopes` (empty: the provider's default); a new sealed PKCE verifier with it."""
        now = self.clock.now()
        expires_at = (now + STATE_TTL).replace(microsecond=0)
        nonce = secrets.token_urlsafe(24)
        state = f"{nonce}.{self.sealer.sign(self._message(nonce, user_id, expires_at))}"
        sealed_verifier = self.sealer.seal(secrets.token_urlsafe(96))
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(PRUNE_STATES, (user_id, now - timedelta(days=1)))
            await conn.execute(
                INSERT_STATE,
                (_state_hash(nonce), user_id, sealed_verifier, now, expires_at,
                 list(scopes) or None),
            )
        return state

    def _refused(self, state: str | None, row: dict | None) -> LinkOutcome | None:
        nonce, _, signature = (state or "").partition(".")
        if not nonce or not signature:
            return LinkOutcome(False, "missing_state" if not state else "forged")
        if row is None or not self.sealer.verify(
            self._message(nonce, row["user_id"], row["expires_at"]), signature
        ):
            return LinkOutcome(False, "forged")
        if row["used_at"] is not None:
            return LinkOutcome(False, "replayed", row["user_id"])
        if self.clock.now() > row["expires_at"]:
            return LinkOutcome(False, "expired", row["user_id"])
        return None

    async def _row(self, state: str | None) -> dict | None:
        nonce = (state or "").partition(".")[0]
        if not nonce:
            return None
        async with self.pool.connection() as conn:
            return await (await conn.execute(GET_STATE, (_state_hash(nonce),))).fetchone()

    async def check(self, state: str | None) -> dict | LinkOutcome:
        """The stored row of a valid, unused, unexpired state — or why it is refused."""
        row = await self._row(state)
        return self._refused(state, row) or row  # type: ignore[return-value]

    def verifier(self, row: dict) -> str | LinkOutcome:
        """The checked row's PKCE verifier ("forged" when sealed with another key)."""
        try:
            return self.sealer.open(row["code_verifier"])
        except InvalidToken:
            return LinkOutcome(False, "forged", row["user_id"])

    async def consenting(self, state: str | None) -> tuple[dict, str] | LinkOutcome:
        """(row, PKCE verifier) of a checked state, for the provider's consent address —
        or why it is refused."""
        row = await self.check(state)
        if isinstance(row, LinkOutcome):
            return row
        verifier = self.verifier(row)
        return verifier if isinstance(verifier, LinkOutcome) else (row, verifier)

    async def bind(self, state: str | None, browser_key: bytes) -> bool:
        """Tie a (checked, unused) state to the browser continuing it: the callback must
        then come from that browser. A first binding stays: False when another browser
        continued it already."""
        nonce = (state or "").partition(".")[0]
        async with self.pool.connection() as conn:
            bound = await (
                await conn.execute(BIND_STATE, (browser_key, _state_hash(nonce)))
            ).fetchone()
            if bound is not None:
                return True
            row = await (await conn.execute(GET_STATE, (_state_hash(nonce),))).fetchone()
        return row is not None and row["browser_key"] is not None and (
            bytes(row["browser_key"]) == browser_key)

    async def claim(self, state: str | None, browser: Browser) -> Claimed | LinkOutcome:
        """A valid state, now used — or why it is refused.

        `browser` is the browser the callback came with: it must carry the cookie of the
        browser that pressed Continue, and if it is signed in to Panager, be signed in as
        the link's user; a refusal for this reason leaves the state unused for the right
        browser."""
        nonce = (state or "").partition(".")[0]
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_STATE, (_state_hash(nonce),))).fetchone()
            refused = self._refused(state, row)
            if refused is not None:
                return refused
            assert row is not None
            user_id = row["user_id"]
            if not _same_browser(row, browser):
                return LinkOutcome(False, "other_browser", user_id)
            used = await (
                await conn.execute(USE_STATE, (self.clock.now(), _state_hash(nonce), user_id))
            ).fetchone()
        if used is None:  # another request used it a moment ago
            return LinkOutcome(False, "replayed", user_id)
        verifier = self.verifier(row)
        if isinstance(verifier, LinkOutcome):
            return verifier
        return Claimed(user_id, verifier, tuple(row["scopes"] or ()))


class PendingMessages:
    """Messages that needed a connection, kept to be answered once it is made."""

    def __init__(self, pool: Pool, clock: Clock) -> None:
        self.pool, self.clock = pool, clock

    async def add(self, user_id: int, text: str) -> None:
        """Keep a message to answer once the person has connected."""
        async with self.pool.connection() as conn:
            await conn.execute(INSERT_PENDING, (user_id, text, self.clock.now()))

    async def claim(self, user_id: int) -> list[str]:
        """Take the person's pending messages (oldest first, recent ones only); each once."""
        now = self.clock.now()
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(CLAIM_PENDING, (now, user_id))).fetchall()
        rows.sort(key=lambda r: (r["created_at"], r["id"]))
        texts: list[str] = []
        for row in rows:
            if now - row["created_at"] <= PENDING_MAX_AGE and row["text"] not in texts:
                texts.append(row["text"])
        return texts


class OAuthLink(Protocol):
    """What an OAuth provider gives the shared flow: its states (signed with its name),
    who may link, its consent address and its code exchange. Google's is `GoogleService`;
    a Microsoft one is another."""

    @property
    def name(self) -> str:
        """"google": the /connect word, signed into its states."""
        ...

    @property
    def title(self) -> str:
        """"Google": for sentences."""
        ...

    @property
    def start_path(self) -> str:
        """Its link's page ("/connect/<name>/start"; Google's is older)."""
        ...

    @property
    def callback_path(self) -> str:
        """The redirect URI's path the operator registered ("/connect/<name>/callback")."""
        ...

    @property
    def scope_names(self) -> Mapping[str, str]:
        """Each scope in words ("Calendar")."""
        ...

    @property
    def access(self) -> str:
        """What a default link gives, in words ("Calendar and Tasks")."""
        ...

    @property
    def mail_title(self) -> str:
        """Its mailbox's name, for the mail link's words ("Gmail")."""
        ...

    @property
    def link_prefix(self) -> str:
        """How every link it hands out starts (found again in a thread)."""
        ...

    @property
    def states(self) -> OAuthStates:
        """Its link states (`OAuthStates(pool, clock, sealer, name)`)."""
        ...

    @property
    def pending(self) -> PendingMessages:
        """The messages kept for the replay after linking."""
        ...

    async def linked(self, user_id: int) -> Linked | None:
        """The person's account, or None when none is linked."""
        ...

    async def disconnect(self, user_id: int) -> bool:
        """Revoke the grant, delete the sealed tokens; False when nothing was linked."""
        ...

    async def create_link(self, user_id: int, scopes: tuple[str, ...] = ()) -> str:
        """A fresh link (a new state) to hand to the person."""
        ...

    async def consent_url(self, state: str | None) -> str | LinkOutcome:
        """The provider's consent address for a checked state, or why not."""
        ...

    async def may_link(self, user_id: int) -> bool:
        """False for a person who may not link (blocked, unknown)."""
        ...

    async def redeem(self, claimed: Claimed, code: str) -> LinkOutcome:
        """Exchange `code` (with the claimed state's PKCE verifier) and store the tokens
        sealed; a refusal says why. Nothing of the code or the tokens is logged."""
        ...


async def finish_link(
    link: OAuthLink, *, state: str | None, code: str | None, error: str | None,
    browser: Browser,
) -> LinkOutcome:
    """A provider's callback: the state claimed (valid, this browser, now used), the
    person allowed to link, consent given, then the provider's exchange and storage."""
    claimed = await link.states.claim(state, browser)
    if isinstance(claimed, LinkOutcome):
        return claimed
    if not await link.may_link(claimed.user_id):
        return LinkOutcome(False, "blocked", claimed.user_id)
    if error or not code:
        return LinkOutcome(False, "denied", claimed.user_id)
    return await link.redeem(claimed, code)

"""Google accounts: linking, sealed tokens, pending messages, and authorised API calls.

Linking is the OAuth web flow of `google_oauth.OAuthFlow`; this service adds
what happens around it: the granted scopes are checked, the account's address
is read, and the tokens are stored sealed (Fernet, keyed from
PANAGER_SECRET_KEY). Nothing is stored for a forged, expired, replayed or
denied callback.

Calls run through `self.calls`, a `GoogleCalls` (calls.py): each in its own
thread with the user's own credentials, a refreshed token written back sealed,
and a revoked grant turned into `GoogleAuthRequired` (a reconnect link).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, overload

import psycopg

from panager.clock import Clock
from panager.config import Settings
from panager.db.pool import Pool
from panager.providers.google.calls import GET_ACCOUNT, GoogleCalls
from panager.providers.google.oauth import (
    CALENDAR_SCOPE,
    CALLBACK_PATH,
    GMAIL_COMPOSE_SCOPE,
    GMAIL_READ_SCOPE,
    MAIL_SCOPES,
    SCOPE_NAMES,
    SCOPES,
    START_PATH,
    TASKS_SCOPE,
    GoogleEndpoints,
    OAuthFlow,
    Tokens,
)
from panager.services.accounts.oauth import (
    DELETE_OPEN_STATES,
    DELETE_PENDING,
    STATE_TTL,
    UNCONFIGURED,
    Browser,
    Claimed,
    Linked,
    LinkOutcome,
    PendingMessages,
)
from panager.services.accounts.sealing import Sealer

__all__ = [
    "CALENDAR_SCOPE",
    "CALLBACK_PATH",
    "GMAIL_COMPOSE_SCOPE",
    "GMAIL_READ_SCOPE",
    "MAIL_SCOPES",
    "NOT_CONFIGURED",
    "SCOPE_NAMES",
    "START_PATH",
    "STATE_TTL",
    "TASKS_SCOPE",
    "Browser",
    "GoogleAccount",
    "GoogleEndpoints",
    "GoogleService",
    "LinkOutcome",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

NOT_CONFIGURED = UNCONFIGURED["google"]
# Libraries that print tokens at DEBUG level; they must never reach a log.
_SECRET_LOGGERS = (
    "requests_oauthlib",
    "oauthlib",
    "google.auth",
    "google.oauth2",
    "google_auth_httplib2",
)


@dataclass(frozen=True)
class GoogleAccount:
    """A user's linked Google account (tokens stay sealed in the database)."""

    user_id: int
    email: str | None
    scopes: tuple[str, ...]
    status: str
    connected_at: datetime

    @property
    def connected(self) -> bool:
        """True while Google accepts our tokens."""
        return self.status == "connected"


UPSERT_ACCOUNT = """
INSERT INTO google_accounts (user_id, email, token_ciphertext, scopes, status,
                             connected_at, disconnected_at, updated_at, google_sub)
VALUES (%(user_id)s, %(email)s, %(sealed)s, %(scopes)s, 'connected', %(now)s, NULL, %(now)s,
        %(sub)s)
ON CONFLICT (user_id) DO UPDATE
   SET email = COALESCE(EXCLUDED.email, google_accounts.email),
       google_sub = EXCLUDED.google_sub,
       token_ciphertext = EXCLUDED.token_ciphertext, scopes = EXCLUDED.scopes,
       status = 'connected', connected_at = EXCLUDED.connected_at,
       disconnected_at = NULL, updated_at = EXCLUDED.updated_at
"""
SUB_OWNER = "SELECT user_id FROM google_accounts WHERE google_sub = %s AND user_id <> %s"
USER_STATUS = "SELECT status FROM users WHERE id = %s"
DELETE_ACCOUNT = "DELETE FROM google_accounts WHERE user_id = %s"


def quiet_secret_loggers() -> None:
    """Keep libraries that log token bodies at DEBUG from ever doing so."""
    for name in _SECRET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


@overload
def _account(row: dict) -> GoogleAccount: ...
@overload
def _account(row: None) -> None: ...
@overload
def _account(row: dict | None) -> GoogleAccount | None: ...
def _account(row: dict | None) -> GoogleAccount | None:
    if row is None:
        return None
    return GoogleAccount(
        row["user_id"], row["email"], tuple(row["scopes"]), row["status"], row["connected_at"]
    )


class GoogleService:
    """Links users' Google accounts (an `OAuthLink`) and runs Calendar/Tasks calls with
    their tokens."""

    name = "google"
    title = "Google"
    # Google's link addresses from before providers existed: operators registered the
    # callback as the redirect URI in Google Cloud, so they stay as they are.
    start_path = START_PATH
    callback_path = CALLBACK_PATH
    scope_names = SCOPE_NAMES
    access = "Calendar and Tasks"
    mail_title = "Gmail"

    def __init__(
        self,
        pool: Pool,
        settings: Settings,
        clock: Clock,
        endpoints: GoogleEndpoints | None = None,
    ) -> None:
        if not settings.google_configured or not settings.secret_key:
            raise ValueError("GoogleService needs the Google client and PANAGER_SECRET_KEY")
        self.pool = pool
        self.clock = clock
        self.client_id = settings.google_client_id or ""
        client_secret = settings.google_client_secret or ""
        self._sealer = Sealer(settings.secret_key)
        self.oauth = OAuthFlow(
            pool,
            clock,
            self._sealer,
            self.client_id,
            client_secret,
            settings.public_url.rstrip("/") + CALLBACK_PATH,
            endpoints or GoogleEndpoints(),
        )
        self.states = self.oauth.states
        self.pending = PendingMessages(pool, clock)
        self.calls = GoogleCalls(pool, clock, self._sealer, self.oauth, client_secret)
        quiet_secret_loggers()

    @property
    def endpoints(self) -> GoogleEndpoints:
        """Google's URLs (shared with the OAuth flow)."""
        return self.oauth.endpoints

    @endpoints.setter
    def endpoints(self, value: GoogleEndpoints) -> None:
        self.oauth.endpoints = value

    # -- linking --------------------------------------------------------------------------

    async def create_link(self, user_id: int, scopes: tuple[str, ...] = ()) -> str:
        """A fresh, short link bound to `user_id`, valid for STATE_TTL and usable once, asking
        for `scopes` (default Calendar and Tasks) on top of what was granted before. When a
        grant was revoked (nothing is granted any more), a link asking for more asks again
        for what the account had too."""
        if scopes:
            account = await self.account(user_id)
            if account is not None and not account.connected:
                scopes = tuple(dict.fromkeys((*account.scopes, *scopes)))
        return await self.oauth.create_link(user_id, scopes)

    @property
    def link_prefix(self) -> str:
        """How every link from create_link starts (to recognise them in a thread)."""
        return self.oauth.redirect_uri.removesuffix(CALLBACK_PATH) + START_PATH

    async def consent_url(self, state: str | None) -> str | LinkOutcome:
        """Where a link from create_link sends the browser (Google), or why it cannot."""
        return await self.oauth.consent_url(state)

    async def redeem(self, claimed: Claimed, code: str) -> LinkOutcome:
        """The callback's Google part, after the shared `finish_link` (state, browser,
        consent): exchange `code` for tokens, check them (scopes, refresh token, which Google
        account) and store them sealed."""
        user_id, verifier, asked = claimed.user_id, claimed.verifier, claimed.scopes
        try:
            tokens = await asyncio.to_thread(self.oauth.exchange, code, verifier, asked)
        except Exception as exc:  # the reason is logged without the code or any token
            log.warning("Google code exchange failed for user %s (%s)", user_id, type(exc).__name__)
            return LinkOutcome(False, "exchange_failed", user_id)
        scopes = tuple(s for s in SCOPES if s in tokens.granted)
        if not scopes:
            await self._revoke(tokens.refresh_token or tokens.access_token)
            return LinkOutcome(False, "no_scopes", user_id)
        if not tokens.refresh_token:
            return LinkOutcome(
                False, "no_refresh_token", user_id, retry_link=await self.create_link(user_id)
            )
        if await self._sub_taken(tokens.sub, user_id):
            return LinkOutcome(False, "already_linked", user_id)
        if asked and not await self._same_account(user_id, tokens.sub):
            await self._revoke_new(tokens, user_id)
            return LinkOutcome(False, "other_account", user_id)
        email = tokens.id_email or await asyncio.to_thread(self._primary_email, tokens, scopes)
        try:
            await self._store(user_id, tokens, scopes, email)
        except psycopg.errors.UniqueViolation:  # the same account, linked a moment ago
            return LinkOutcome(False, "already_linked", user_id)
        log.info("Google account linked for user %s", user_id)
        return LinkOutcome(True, "linked", user_id, email, scopes)

    async def may_link(self, user_id: int) -> bool:
        """False for blocked (or unknown) users: they cannot link an account."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(USER_STATUS, (user_id,))).fetchone()
        return row is not None and row["status"] != "blocked"

    async def _same_account(self, user_id: int, sub: str | None) -> bool:
        """For a link asking for more access: the consent came from the Google account
        already linked (any, when none is)."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_ACCOUNT, (user_id,))).fetchone()
        if row is None or not row.get("google_sub"):
            return True
        return sub is not None and sub == row["google_sub"]

    async def _revoke_new(self, tokens: Tokens, user_id: int) -> None:
        """Give back tokens of a refused consent (another Google account than the linked
        one: revoking them touches only that account's grant)."""
        log.info("Google consent of user %s came from another account; refused", user_id)
        await self._revoke(tokens.refresh_token or tokens.access_token)

    async def _sub_taken(self, sub: str | None, user_id: int) -> bool:
        """True when this Google account is linked to another Panager user."""
        if not sub:
            return False
        async with self.pool.connection() as conn:
            row = await (await conn.execute(SUB_OWNER, (sub, user_id))).fetchone()
        return row is not None

    def _primary_email(self, tokens: Tokens, scopes: tuple[str, ...]) -> str | None:
        """The account's address (the primary calendar's id); None when unavailable."""
        from panager.providers.google.api import GoogleClients

        if CALENDAR_SCOPE not in scopes:
            return None
        clients = GoogleClients(self.calls.credentials(tokens), self.endpoints)
        try:
            entry = clients.calendar.calendarList().get(calendarId="primary").execute()
            return entry.get("id")
        except Exception as exc:
            log.info("could not read the linked account's address (%s)", type(exc).__name__)
            return None
        finally:
            clients.close()

    async def _store(
        self, user_id: int, tokens: Tokens, scopes: tuple[str, ...], email: str | None
    ) -> None:
        params = {
            "user_id": user_id,
            "email": email,
            "sealed": self._sealer.seal(tokens.dumps()),
            "scopes": list(scopes),
            "now": self.clock.now(),
            "sub": tokens.sub,
        }
        async with self.pool.connection() as conn:
            await conn.execute(UPSERT_ACCOUNT, params)

    # -- accounts -------------------------------------------------------------------------

    async def account(self, user_id: int) -> GoogleAccount | None:
        """The user's linked account, or None."""
        async with self.pool.connection() as conn:
            return _account(await (await conn.execute(GET_ACCOUNT, (user_id,))).fetchone())

    async def linked(self, user_id: int) -> Linked | None:
        """The linked account as the shared flow shows it."""
        found = await self.account(user_id)
        return None if found is None else Linked(found.email, found.scopes, found.connected)

    async def disconnect(self, user_id: int) -> bool:
        """Revoke the grant at Google and delete the tokens; False when nothing was linked."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_ACCOUNT, (user_id,))).fetchone()
            if row is None:
                return False
            tokens = self.calls.open_tokens(user_id, row["token_ciphertext"])
            async with conn.transaction():
                await conn.execute(DELETE_ACCOUNT, (user_id,))
                await conn.execute(DELETE_PENDING, (user_id,))
                await conn.execute(DELETE_OPEN_STATES, (user_id,))
        if tokens is not None:
            await self._revoke(tokens.refresh_token or tokens.access_token)
        log.info("Google account disconnected for user %s", user_id)
        return True

    async def _revoke(self, token: str | None) -> None:
        """Ask Google to revoke the grant; failures are logged (without the token) and ignored."""
        if not token:
            return
        import aiohttp

        try:
            timeout = aiohttp.ClientTimeout(total=10)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self.endpoints.revoke_uri, data={"token": token}) as response,
            ):
                if response.status >= 400:
                    log.info("Google revoke answered HTTP %s", response.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("could not reach Google to revoke a grant (%s)", type(exc).__name__)

    # -- pending messages -----------------------------------------------------------------

    async def add_pending(self, user_id: int, text: str) -> None:
        """Keep a message to answer once the user has linked Google."""
        await self.pending.add(user_id, text)

    async def claim_pending(self, user_id: int) -> list[str]:
        """Take the user's pending messages (oldest first, recent ones only); each once."""
        return await self.pending.claim(user_id)

    # -- API calls ------------------------------------------------------------------------

    async def require(self, user_id: int, scope: str) -> None:
        """Raise what a call under `scope` would meet now: the link to connect, reconnect
        or allow the missing access (`GoogleAuthRequired`), or a `ToolError`."""
        await self.calls.usable_tokens(user_id, scope)

    async def call(self, user_id: int, scope: str, operation: Callable[[Any], T]) -> T:
        """Run `operation(GoogleClients)` in a thread with the user's own credentials."""
        return await self.calls.call(user_id, scope, operation)

"""Authorised Google API calls with a user's own sealed tokens (`GoogleService.calls`).

The Google clients are synchronous and httplib2 is not thread-safe, so every
call builds its own services inside `asyncio.to_thread`. google-auth refreshes
an expired access token on the way; the refreshed token is written back
sealed. A refresh refused with `invalid_grant` marks the account disconnected
and raises `GoogleAuthRequired`, which the graph turns into a reconnect link.

Endpoints and the client id are read from the OAuth flow at each call, so
pointing `GoogleService.endpoints` elsewhere (tests: a local fake) moves both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from google.auth.exceptions import RefreshError, TransportError
from google.oauth2.credentials import Credentials
from googleapiclient.errors import HttpError

from panager.clock import Clock
from panager.db.pool import Pool
from panager.errors import AuthRequired, ToolError
from panager.providers.google.oauth import (
    MAIL_SCOPES,
    SCOPE_NAMES,
    GoogleEndpoints,
    OAuthFlow,
    Tokens,
)
from panager.services.accounts.sealing import InvalidToken, Sealer

log = logging.getLogger(__name__)
T = TypeVar("T")

RECONNECT_MESSAGE = (
    "Google no longer accepts my access to your account (it was revoked or expired), "
    "so you need to connect it again."
)


class GoogleAuthRequired(AuthRequired):
    """The user has no usable Google link; the turn ends with a link to connect it.

    `scopes`: what the link must ask for (empty: Calendar and Tasks; MAIL_SCOPES for a mail
    tool whose scope is missing)."""

    def __init__(self, message: str | None = None, scopes: tuple[str, ...] = ()) -> None:
        super().__init__("Google", "", message)
        self.scopes = scopes


MAIL_MISSING = (
    "Your Google link does not include Gmail yet, so you need to allow it (Calendar and "
    "Tasks stay as they are)."
)

GET_ACCOUNT = "SELECT * FROM google_accounts WHERE user_id = %s"
SAVE_REFRESHED = """
UPDATE google_accounts SET token_ciphertext = %s, refreshed_at = %s, updated_at = %s
 WHERE user_id = %s AND status = 'connected'
"""
MARK_DISCONNECTED = """
UPDATE google_accounts SET status = 'disconnected', disconnected_at = %s, updated_at = %s
 WHERE user_id = %s AND status = 'connected'
"""


class GoogleCalls:
    """Runs Calendar/Tasks/Gmail calls with one user's tokens; opens and reseals tokens."""

    def __init__(
        self, pool: Pool, clock: Clock, sealer: Sealer, oauth: OAuthFlow, client_secret: str
    ) -> None:
        self.pool = pool
        self.clock = clock
        self._sealer = sealer
        self.oauth = oauth
        self._client_secret = client_secret

    @property
    def endpoints(self) -> GoogleEndpoints:
        """Google's URLs (the OAuth flow's, read at each call)."""
        return self.oauth.endpoints

    async def call(self, user_id: int, scope: str, operation: Callable[[Any], T]) -> T:
        """Run `operation(GoogleClients)` in a thread with the user's own credentials."""
        tokens = await self.usable_tokens(user_id, scope)
        credentials = self.credentials(tokens)
        try:
            return await asyncio.to_thread(self._run, credentials, operation)
        except RefreshError as exc:
            if "invalid_grant" in str(exc):
                await self._mark_disconnected(user_id)
                raise GoogleAuthRequired(RECONNECT_MESSAGE, _asks(scope)) from None
            raise ToolError("Google refused to refresh access; try again in a moment.") from None
        except HttpError as exc:
            await self._raise_for_http(user_id, exc, scope)
            raise
        except (TransportError, OSError) as exc:
            raise ToolError(
                f"Google could not be reached ({type(exc).__name__}); try again in a moment."
            ) from None
        finally:
            if credentials.token != tokens.access_token:
                await self._save_refreshed(user_id, credentials)

    def open_tokens(self, user_id: int, sealed: str) -> Tokens | None:
        """The user's stored tokens, or None when they cannot be decrypted (logged)."""
        try:
            return Tokens.loads(self._sealer.open(sealed))
        except (InvalidToken, ValueError, KeyError):
            log.warning(
                "stored Google tokens of user %s cannot be decrypted (PANAGER_SECRET_KEY "
                "changed?); the user must link again",
                user_id,
            )
            return None

    async def usable_tokens(self, user_id: int, scope: str) -> Tokens:
        """The user's tokens for a call under `scope`, or the link/refusal to raise."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_ACCOUNT, (user_id,))).fetchone()
        if row is None:
            raise GoogleAuthRequired(scopes=_asks(scope))
        if row["status"] != "connected":
            raise GoogleAuthRequired(RECONNECT_MESSAGE, _asks(scope))
        tokens = self.open_tokens(user_id, row["token_ciphertext"])
        if tokens is None:
            raise GoogleAuthRequired(scopes=_asks(scope))
        if scope in MAIL_SCOPES and scope not in row["scopes"]:
            raise GoogleAuthRequired(MAIL_MISSING, MAIL_SCOPES)
        if scope not in row["scopes"]:
            name = SCOPE_NAMES.get(scope, scope)
            raise ToolError(
                f"The user's Google link does not include {name} access. They can run "
                f"/connect google and allow {name} to use this."
            )
        return tokens

    def credentials(self, tokens: Tokens) -> Credentials:
        """google-auth credentials for `tokens`, refreshable at our token endpoint."""
        return Credentials(
            token=tokens.access_token,
            refresh_token=tokens.refresh_token,
            token_uri=self.endpoints.token_uri,
            client_id=self.oauth.client_id,
            client_secret=self._client_secret,
            expiry=tokens.expiry,
        )

    def _run(self, credentials: Credentials, operation: Callable[[Any], T]) -> T:
        from panager.providers.google.api import GoogleClients

        clients = GoogleClients(credentials, self.endpoints)
        try:
            return operation(clients)
        finally:
            clients.close()

    async def _raise_for_http(self, user_id: int, exc: HttpError, scope: str = "") -> None:
        status = exc.resp.status
        if status == 401:
            await self._mark_disconnected(user_id)
            raise GoogleAuthRequired(RECONNECT_MESSAGE, _asks(scope)) from None
        reason = _http_reason(exc)
        if status == 403:
            raise ToolError(
                f"Google refused this ({reason}). If access is missing, the user can run "
                "/connect google (or /connect google mail) again and allow it."
            ) from None
        if status == 429 or status >= 500:
            raise ToolError(f"Google is busy (HTTP {status}); try again in a moment.") from None
        raise ToolError(f"Google rejected the request (HTTP {status}: {reason}).") from None

    async def _save_refreshed(self, user_id: int, credentials: Credentials) -> None:
        """Persist a token google-auth refreshed during a call (sealed, like all tokens)."""
        tokens = Tokens(credentials.token, credentials.refresh_token, credentials.expiry)
        now = self.clock.now()
        try:
            async with self.pool.connection() as conn:
                await conn.execute(
                    SAVE_REFRESHED, (self._sealer.seal(tokens.dumps()), now, now, user_id)
                )
        except Exception as exc:
            log.warning("could not save a refreshed Google token (%s)", type(exc).__name__)

    async def _mark_disconnected(self, user_id: int) -> None:
        now = self.clock.now()
        async with self.pool.connection() as conn:
            await conn.execute(MARK_DISCONNECTED, (now, now, user_id))
        log.info("Google refused the grant of user %s; marked disconnected", user_id)


def _asks(scope: str) -> tuple[str, ...]:
    """What a link must ask for so a call needing `scope` works afterwards."""
    return MAIL_SCOPES if scope in MAIL_SCOPES else ()


def _http_reason(exc: HttpError) -> str:
    try:
        reason = exc._get_reason()  # the message Google put in the error body
    except Exception:
        reason = ""
    return (reason or "no details").strip()[:200]

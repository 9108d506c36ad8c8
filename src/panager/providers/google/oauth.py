"""The OAuth 2 web flow for Google: consent links and the callback's code exchange.

A link's `state` is a random nonce plus an HMAC over (nonce, user, expiry).
Only the nonce's SHA-256 is stored, with the user, the expiry and the PKCE
verifier (encrypted), in `oauth_states` — so any process can finish the flow,
and neither a database reader nor a log reader can rebuild a usable state.
The callback checks, in order: a state row exists and the signature matches
(else "forged"), it was not used ("replayed"), it has not expired
("expired"), the browser is not signed in to Panager as someone else and it
is the browser that pressed Continue on the link's page ("other_browser": the
page sets a random cookie, Continue binds the state to its hash, the callback
must bring the same cookie, so Google's consent address cannot be passed on to
someone else's browser); then it marks the state used in the same statement
that checks it, so two concurrent callbacks cannot both pass.

Links always ask for offline access with forced consent, so Google returns a
refresh token every time, and with `include_granted_scopes=true`, so a link
asking for more (Gmail: `create_link(..., scopes=MAIL_SCOPES)`) keeps what was
granted before (Calendar and Tasks) in the new tokens. The scopes a link asks
for are stored with its state. google-auth-oauthlib's `Flow` makes the PKCE pair.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from panager.clock import Clock
from panager.db.pool import Pool
from panager.services.accounts.sealing import InvalidToken, Sealer

if TYPE_CHECKING:
    from google_auth_oauthlib.flow import Flow

log = logging.getLogger(__name__)

CALENDAR_SCOPE = "https://www.googleapis.com/auth/calendar"
TASKS_SCOPE = "https://www.googleapis.com/auth/tasks"
GMAIL_READ_SCOPE = "https://www.googleapis.com/auth/gmail.readonly"
GMAIL_COMPOSE_SCOPE = "https://www.googleapis.com/auth/gmail.compose"
MAIL_SCOPES = (GMAIL_READ_SCOPE, GMAIL_COMPOSE_SCOPE)
BASE_SCOPES = (CALENDAR_SCOPE, TASKS_SCOPE)
SCOPES = (*BASE_SCOPES, *MAIL_SCOPES)  # every scope Panager stores when granted
# `openid` adds an ID token naming the Google account (`sub`), so one account links to
# one Panager user at a time; it grants no access to data.
REQUESTED_SCOPES = (*BASE_SCOPES, "openid")
SCOPE_NAMES = {
    CALENDAR_SCOPE: "Calendar",
    TASKS_SCOPE: "Tasks",
    GMAIL_READ_SCOPE: "Gmail (read)",
    GMAIL_COMPOSE_SCOPE: "Gmail (drafts and sending)",
}
STATE_TTL = timedelta(minutes=10)
CALLBACK_PATH = "/oauth/google/callback"
START_PATH = "/oauth/google/start"

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


@dataclass(frozen=True)
class GoogleEndpoints:
    """Where Google lives; tests point these at a local fake."""

    auth_uri: str = "https://accounts.google.com/o/oauth2/auth"
    token_uri: str = "https://oauth2.googleapis.com/token"
    revoke_uri: str = "https://oauth2.googleapis.com/revoke"
    calendar_api: str | None = None  # None: the client library's default endpoint
    tasks_api: str | None = None
    gmail_api: str | None = None


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


@dataclass
class Tokens:
    """OAuth tokens of one account; only ever stored sealed."""

    access_token: str | None
    refresh_token: str | None
    expiry: datetime | None  # naive UTC, as google-auth wants it
    granted: frozenset[str] = frozenset()
    sub: str | None = None  # the Google account's stable id (from the ID token)
    id_email: str | None = None

    def dumps(self) -> str:
        """JSON for sealing (the granted scopes are stored in the clear elsewhere)."""
        expiry = self.expiry.isoformat() if self.expiry else None
        return json.dumps({"a": self.access_token, "r": self.refresh_token, "e": expiry})

    @classmethod
    def loads(cls, text: str) -> Tokens:
        """The inverse of dumps."""
        data = json.loads(text)
        expiry = datetime.fromisoformat(data["e"]) if data.get("e") else None
        return cls(data.get("a"), data.get("r"), expiry)

    @classmethod
    def from_response(cls, token: dict) -> Tokens:
        """From oauthlib's parsed token response."""
        granted = token.get("scope") or []
        granted = granted.split() if isinstance(granted, str) else granted
        expires_at = token.get("expires_at")
        expiry = (
            datetime.fromtimestamp(float(expires_at), UTC).replace(tzinfo=None)
            if expires_at
            else None
        )
        claims = id_token_claims(token.get("id_token"))
        return cls(
            token.get("access_token"),
            token.get("refresh_token"),
            expiry,
            frozenset(granted),
            claims.get("sub"),
            claims.get("email"),
        )


def id_token_claims(id_token: str | None) -> dict:
    """The claims of an ID token received straight from Google's token endpoint over TLS
    (OpenID Connect Core 3.1.3.7: no signature check needed on that channel)."""
    try:
        payload = (id_token or "").split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        return {}
    return data if isinstance(data, dict) else {}


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


def _same_browser(row: dict, browser: Browser) -> bool:
    """The callback's browser may finish this link (see `claim_state`)."""
    if browser.user_id is not None and browser.user_id != row["user_id"]:
        return False
    bound = row.get("browser_key")
    return bound is not None and browser.key is not None and bytes(bound) == browser.key


def _state_hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode("utf-8", "surrogatepass")).hexdigest()


def _state_message(nonce: str, user_id: int, expires_at: datetime) -> str:
    return f"google|{nonce}|{user_id}|{int(expires_at.timestamp())}"


class OAuthFlow:
    """Creates consent links and validates callbacks; stores nothing but `oauth_states`."""

    def __init__(
        self,
        pool: Pool,
        clock: Clock,
        sealer: Sealer,
        client_id: str,
        client_secret: str,
        redirect_uri: str,
        endpoints: GoogleEndpoints,
    ) -> None:
        self.pool = pool
        self.clock = clock
        self.sealer = sealer
        self.client_id = client_id
        self._client_secret = client_secret
        self.redirect_uri = redirect_uri
        self.endpoints = endpoints

    def client_config(self) -> dict:
        """The `{"web": ...}` client-secrets mapping google-auth-oauthlib expects."""
        return {
            "web": {
                "client_id": self.client_id,
                "client_secret": self._client_secret,
                "auth_uri": self.endpoints.auth_uri,
                "token_uri": self.endpoints.token_uri,
                "redirect_uris": [self.redirect_uri],
            }
        }

    def _flow(self, verifier: str | None = None, scopes: Sequence[str] = ()) -> Flow:
        from google_auth_oauthlib.flow import Flow

        return Flow.from_client_config(
            self.client_config(),
            scopes=list(scopes or REQUESTED_SCOPES),
            redirect_uri=self.redirect_uri,
            code_verifier=verifier,
            autogenerate_code_verifier=verifier is None,
        )

    async def create_link(self, user_id: int, scopes: Sequence[str] = ()) -> str:
        """A fresh link bound to `user_id`, valid for STATE_TTL and usable once, asking for
        `scopes` (default: Calendar and Tasks) and the ID token.

        The link is our own short `/oauth/google/start?state=…` address, which
        redirects to Google's consent page: Google's URL (client id, scopes,
        redirect, PKCE challenge, state) runs past Discord's 512-character limit
        for link buttons.
        """
        now = self.clock.now()
        expires_at = (now + STATE_TTL).replace(microsecond=0)
        nonce = secrets.token_urlsafe(24)
        state = f"{nonce}.{self.sealer.sign(_state_message(nonce, user_id, expires_at))}"
        sealed_verifier = self.sealer.seal(secrets.token_urlsafe(96))
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(PRUNE_STATES, (user_id, now - timedelta(days=1)))
            await conn.execute(
                INSERT_STATE,
                (
                    _state_hash(nonce), user_id, sealed_verifier, now, expires_at,
                    [*scopes, "openid"] if scopes else None,
                ),
            )
        base = self.redirect_uri.removesuffix(CALLBACK_PATH)
        return f"{base}{START_PATH}?{urlencode({'state': state})}"

    async def check_state(self, state: str | None) -> dict | LinkOutcome:
        """The stored row of a valid, unused, unexpired state — or why it is refused."""
        nonce, _, signature = (state or "").partition(".")
        if not nonce or not signature:
            return LinkOutcome(False, "missing_state" if not state else "forged")
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_STATE, (_state_hash(nonce),))).fetchone()
        if row is None or not self.sealer.verify(
            _state_message(nonce, row["user_id"], row["expires_at"]), signature
        ):
            return LinkOutcome(False, "forged")
        if row["used_at"] is not None:
            return LinkOutcome(False, "replayed", row["user_id"])
        if self.clock.now() > row["expires_at"]:
            return LinkOutcome(False, "expired", row["user_id"])
        return row

    async def consent_url(self, state: str | None) -> str | LinkOutcome:
        """Google's consent URL for a valid, unused, unexpired state — or why it is refused."""
        row = await self.check_state(state)
        if isinstance(row, LinkOutcome):
            return row
        try:
            verifier = self.sealer.open(row["code_verifier"])
        except InvalidToken:
            return LinkOutcome(False, "forged", row["user_id"])
        flow = self._flow(verifier, row.get("scopes") or ())
        try:
            url, _ = flow.authorization_url(
                access_type="offline",
                prompt="consent",
                include_granted_scopes="true",
                state=state,
            )
        finally:
            flow.oauth2session.close()
        return url

    async def bind_state(self, state: str | None, browser_key: bytes) -> bool:
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

    async def claim_state(
        self, state: str | None, browser: Browser
    ) -> tuple[int, str, tuple[str, ...]] | LinkOutcome:
        """(user id, PKCE verifier, scopes asked for; empty: the default) of a valid, now
        used, state — or why it is refused.

        `browser` is the browser the callback came with: it must carry the cookie of the
        browser that pressed Continue, and if it is signed in to Panager, be signed in as
        the link's user; a refusal for this reason leaves the state unused for the right
        browser."""
        nonce, _, signature = (state or "").partition(".")
        if not nonce or not signature:
            return LinkOutcome(False, "missing_state" if not state else "forged")
        async with self.pool.connection() as conn:
            row = await (await conn.execute(GET_STATE, (_state_hash(nonce),))).fetchone()
            if row is None or not self.sealer.verify(
                _state_message(nonce, row["user_id"], row["expires_at"]), signature
            ):
                return LinkOutcome(False, "forged")
            user_id = row["user_id"]
            if row["used_at"] is not None:
                return LinkOutcome(False, "replayed", user_id)
            now = self.clock.now()
            if now > row["expires_at"]:
                return LinkOutcome(False, "expired", user_id)
            if not _same_browser(row, browser):
                return LinkOutcome(False, "other_browser", user_id)
            used = await (
                await conn.execute(USE_STATE, (now, _state_hash(nonce), user_id))
            ).fetchone()
        if used is None:  # another request used it a moment ago
            return LinkOutcome(False, "replayed", user_id)
        try:
            return user_id, self.sealer.open(row["code_verifier"]), tuple(row["scopes"] or ())
        except InvalidToken:
            return LinkOutcome(False, "forged", user_id)

    def exchange(self, code: str, verifier: str, scopes: Sequence[str] = ()) -> Tokens:
        """Swap the authorization code for tokens (blocking: run it in a thread)."""
        flow = self._flow(verifier, scopes)
        try:
            token = flow.fetch_token(code=code, timeout=30)
        except Warning as narrowed:  # oauthlib raises when fewer scopes were granted
            token = getattr(narrowed, "token", None)
            if token is None:
                raise
        finally:
            flow.oauth2session.close()
        return Tokens.from_response(dict(token))

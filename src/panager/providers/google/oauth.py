"""The OAuth 2 web flow for Google: consent links and the callback's code exchange.

The link's state (signed, expiring, single use, bound to the browser that
pressed Continue) is the shared `OAuthStates` of services/accounts/oauth.py;
this module adds what is Google's: its endpoints, scopes, consent address and
token exchange.

Links always ask for offline access with forced consent, so Google returns a
refresh token every time, and with `include_granted_scopes=true`, so a link
asking for more (Gmail: `create_link(..., scopes=MAIL_SCOPES)`) keeps what was
granted before (Calendar and Tasks) in the new tokens. The scopes a link asks
for are stored with its state. google-auth-oauthlib's `Flow` makes the PKCE pair.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from panager.clock import Clock
from panager.db.pool import Pool
from panager.services.accounts.oauth import LinkOutcome, OAuthStates
from panager.services.accounts.sealing import Sealer

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
NAME = "google"
CALLBACK_PATH = "/oauth/google/callback"
START_PATH = "/oauth/google/start"


@dataclass(frozen=True)
class GoogleEndpoints:
    """Where Google lives; tests point these at a local fake."""

    auth_uri: str = "https://accounts.google.com/o/oauth2/auth"
    token_uri: str = "https://oauth2.googleapis.com/token"
    revoke_uri: str = "https://oauth2.googleapis.com/revoke"
    calendar_api: str | None = None  # None: the client library's default endpoint
    tasks_api: str | None = None
    gmail_api: str | None = None


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


class OAuthFlow:
    """Creates Google consent links and exchanges callbacks' codes; the link states are
    the shared `OAuthStates` (`self.states`)."""

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
        self.states = OAuthStates(pool, clock, sealer, NAME)

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
        state = await self.states.new(user_id, [*scopes, "openid"] if scopes else ())
        base = self.redirect_uri.removesuffix(CALLBACK_PATH)
        return f"{base}{START_PATH}?{urlencode({'state': state})}"

    async def consent_url(self, state: str | None) -> str | LinkOutcome:
        """Google's consent URL for a valid, unused, unexpired state — or why it is refused."""
        checked = await self.states.consenting(state)
        if isinstance(checked, LinkOutcome):
            return checked
        row, verifier = checked
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

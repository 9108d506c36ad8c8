"""A test-only OAuth provider ("example") for the shared OAuth flow: its token endpoint
(PKCE checked), its link (consent address, exchange, tokens sealed in provider_accounts),
and its registration as a provider."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
from aiohttp import web

from panager.providers.memory.provider import MemoryProvider
from panager.services.accounts.connections import Connections
from panager.services.accounts.oauth import (
    Claimed,
    Linked,
    LinkOutcome,
    OAuthStates,
    PendingMessages,
)
from panager.services.accounts.provider import Capability, OAuthConnect
from panager.services.users import UserService


class FakeTokenEndpoint:
    """An OAuth token endpoint: one code per consent, redeemed once with the PKCE verifier
    whose S256 challenge the consent address carried."""

    def __init__(self) -> None:
        self.challenges: dict[str, str] = {}  # code -> code_challenge
        self.url = ""

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        challenge = self.challenges.pop(str(form.get("code")), None)
        verifier = str(form.get("code_verifier") or "")
        sent = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if challenge is None or sent.decode().rstrip("=") != challenge:
            return web.json_response({"error": "invalid_grant"}, status=400)
        return web.json_response({"access_token": "ACCESS-xyz", "refresh_token": "REFRESH-abc",
                                  "token_type": "Bearer", "expires_in": 3600})


class ExampleLink:
    """An OAuth provider as a newcomer writes one: endpoints, consent address, exchange;
    its tokens sealed in the form connects' store (provider_accounts)."""

    name, title = "example", "Example"
    start_path, callback_path = "/connect/example/start", "/connect/example/callback"
    scope_names: ClassVar[dict[str, str]] = {"mail": "Mail"}
    access, mail_title = "Mail", "Mail"
    link_prefix = "http://panager.test/connect/example/start"

    def __init__(self, pool, clock, sealer, token_url: str) -> None:
        self.states = OAuthStates(pool, clock, sealer, self.name)
        self.pending = PendingMessages(pool, clock)
        self.users = UserService(pool)
        self.connections = Connections(pool, clock, sealer)
        self.token_url = token_url

    async def create_link(self, user_id: int, scopes: tuple[str, ...] = ()) -> str:
        state = await self.states.new(user_id, scopes)
        return f"{self.link_prefix}?{urlencode({'state': state})}"

    async def linked(self, user_id: int) -> Linked | None:
        stored = await self.connections.accounts(user_id, self.name)
        return Linked(stored[0].label, ("mail",), stored[0].connected) if stored else None

    async def disconnect(self, user_id: int) -> bool:
        stored = await self.connections.accounts(user_id, self.name)
        return bool(stored) and await self.connections.remove(user_id, self.name,
                                                              stored[0].key)

    async def consent_url(self, state: str | None) -> str | LinkOutcome:
        checked = await self.states.consenting(state)
        if isinstance(checked, LinkOutcome):
            return checked
        _, verifier = checked
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        query = {"state": state, "code_challenge": digest.decode().rstrip("="),
                 "code_challenge_method": "S256"}
        return f"https://login.example/authorize?{urlencode(query)}"

    async def may_link(self, user_id: int) -> bool:
        user = await self.users.get(user_id)
        return user is not None and user.status != "blocked"

    async def redeem(self, claimed: Claimed, code: str) -> LinkOutcome:
        form = {"code": code, "code_verifier": claimed.verifier, "grant_type": "authorization_code"}
        async with aiohttp.ClientSession() as session, session.post(self.token_url,
                                                                    data=form) as answer:
            if answer.status != 200:
                return LinkOutcome(False, "exchange_failed", claimed.user_id)
            tokens = await answer.json()
        for old in await self.connections.accounts(claimed.user_id, self.name):
            await self.connections.remove(claimed.user_id, self.name, old.key)
        await self.connections.add(claimed.user_id, self.name, "ann@example", tokens, {})
        return LinkOutcome(True, "linked", claimed.user_id, "ann@example", claimed.scopes)




def example_provider(link: ExampleLink) -> MemoryProvider:
    """The in-memory provider registered under the name "example", connecting by OAuth
    through `link` — one registration line, as in `panager.app.PROVIDERS`."""
    example = MemoryProvider()
    example.name, example.title = "example", "Example"
    example.connect = OAuthConnect("https://login.example/authorize", link.token_url,
                                   {Capability.MAIL_READ: ("mail",)}, link=link)
    return example


@asynccontextmanager
async def token_endpoint() -> AsyncIterator[tuple[FakeTokenEndpoint, str]]:
    """A running `FakeTokenEndpoint` and its token URL."""
    fake = FakeTokenEndpoint()
    server = web.Application()
    server.router.add_post("/token", fake.token)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield fake, f"http://127.0.0.1:{port}/token"
    finally:
        await runner.cleanup()


def challenge_of(consent: str) -> str:
    """The PKCE challenge a consent address carries."""
    return parse_qs(urlsplit(consent).query)["code_challenge"][0]

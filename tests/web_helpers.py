"""Shared pieces for the web page tests: an app with its web server, users, sign-in."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

from panager.frontends.web.server import WebServer, start_web
from panager.services.web_sessions import WebSessionService
from tests.fakes.scripted_model import ScriptedChatModel
from tests.scheduler_helpers import RecordingMessenger

ALICE, BOB, ADMIN = 1001, 1002, 1003
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
NONCE = re.compile(r'name="nonce" value="([^"]+)"')


@dataclass
class WebHarness:
    """A started app, its web server and a recording messenger."""

    app: object
    server: WebServer
    recorder: RecordingMessenger
    model: ScriptedChatModel

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self.server.url

    async def link(self, user_id: int) -> str:
        """A fresh one-time sign-in path for the user, as /web hands out."""
        token = await WebSessionService(self.app.pool, self.app.clock).create_link(user_id)
        return f"/signin?token={token}"

    async def client(self, user_id: int) -> WebClient:
        """A signed-in HTTP client for the user."""
        client = WebClient(self.url)
        status, _ = await client.post(await self.link(user_id), {})  # token in the query
        assert status == 200, status
        return client


class WebClient:
    """aiohttp with a cookie jar; remembers the last page's CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.csrf: str | None = None

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.base + path) as response:
            body = await response.text()
        found = CSRF.search(body)
        if found:
            self.csrf = found[1]
        return response.status, body

    async def post(self, path: str, data: dict, *, csrf: bool = True, headers=None):
        if path.startswith("/signin"):  # as a browser does: open the page, press its button
            async with self.session.get(self.base + path) as page:
                nonce = NONCE.search(await page.text())
            path, _, query = path.partition("?")
            data = {"token": query.removeprefix("token="), "nonce": nonce[1] if nonce else ""}
            headers = {"Origin": self.base, **(headers or {})}
        elif csrf:
            if self.csrf is None:
                await self.get("/")
            data = {"csrf": self.csrf, **data}
        async with self.session.post(self.base + path, data=data, headers=headers) as response:
            return response.status, await response.text()

    async def close(self) -> None:
        await self.session.close()


async def web_harness(make_app, model: ScriptedChatModel | None = None, **overrides):
    """An app (open access) with Alice, Bob and an admin (in PANAGER_ADMIN_IDS), and its web
    server."""
    model = model or ScriptedChatModel(default="ok")
    app = await make_app(model=model, **{"http_port": 0, "admin_ids": [ADMIN], **overrides})
    recorder = RecordingMessenger()
    app.deps.messenger.add(recorder)
    users = app.deps.users
    await users.ensure(ALICE, "alice", display_name="Alice")
    await users.ensure(BOB, "bob", display_name="Bob")
    await users.ensure(ADMIN, "root", display_name="Admin", role="admin")
    server = await start_web(app)
    return WebHarness(app, server, recorder, model)

"""Shared set-up for the Google tests: an app wired to FakeGoogle, its web server, a recorder."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from panager.agent.tools import build_tools
from panager.framing import unframe
from panager.frontends.web.server import WebServer, start_web
from panager.providers.google.service import CALLBACK_PATH, START_PATH, GoogleEndpoints
from tests.fakes.google_server import FakeGoogle

SECRET = "test-secret-key-for-google-tests"
ALICE, BOB = "alice@example.com", "bob@example.com"


class RecordingMessenger:
    """Collects what the app delivers on its own (the replayed answers)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str, dict | None]] = []
        self.offers: list[tuple[int, tuple]] = []  # (user id, the offers) of each delivery
        self.arrived = asyncio.Event()

    async def send(self, user, text: str, *, link: dict | None = None, key=None,
                   offers=()) -> bool:
        self.sent.append((user.id, text, link))
        self.offers.append((user.id, tuple(offers)))
        self.arrived.set()
        return True

    async def wait(self, count: int = 1, timeout: float = 15.0) -> list[tuple]:
        async def enough() -> None:
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(enough(), timeout)
        return self.sent


class Unframed:
    """A tool whose framed results come back as the data inside the frame."""

    def __init__(self, tool) -> None:
        self.tool = tool
        self.name = tool.name

    async def ainvoke(self, args: dict):
        value = await self.tool.ainvoke(args)
        if isinstance(value, str) and (found := unframe(value)) is not None:
            assert found[0] in ("Google Calendar", "Google Tasks"), found[0]
            return found[1]
        return value

    def __getattr__(self, name: str):
        return getattr(self.tool, name)


@dataclass
class GoogleHarness:
    """One app (one "process") with Google pointed at the fake and its web server running."""

    app: object
    fake: FakeGoogle
    server: WebServer
    recorder: RecordingMessenger
    extra: dict = field(default_factory=dict)

    browser: aiohttp.CookieJar | None = None  # this harness's browser: its cookies stay

    def _jar(self, browser: aiohttp.CookieJar | None) -> aiohttp.CookieJar:
        if browser is not None:
            return browser
        if self.browser is None:
            self.browser = self.new_browser()
        return self.browser

    def new_browser(self) -> aiohttp.CookieJar:
        """Another browser: keeps cookies for 127.0.0.1, and sends the ones marked Secure
        (PANAGER_PUBLIC_URL is https here, the test server plain http)."""
        return aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[self.server.url])

    async def get(
        self, path_and_query: str, browser: aiohttp.CookieJar | None = None
    ) -> tuple[int, str, dict]:
        """A GET from `browser` (a cookie jar; default: the harness's own browser)."""
        async with (
            aiohttp.ClientSession(cookie_jar=self._jar(browser)) as session,
            session.get(self.server.url + path_and_query, allow_redirects=False) as response,
        ):
            return response.status, await response.text(), dict(response.headers)

    async def follow(
        self, redirect: str, browser: aiohttp.CookieJar | None = None
    ) -> tuple[int, str]:
        """The browser coming back from Google to our callback (whatever host it names)."""
        status, body, _ = await self.get(f"{CALLBACK_PATH}?{urlsplit(redirect).query}", browser)
        return status, body

    async def post(
        self, path: str, data: dict, browser: aiohttp.CookieJar | None = None
    ) -> tuple[int, str, dict]:
        """A form POST from `browser` (default: the harness's own)."""
        async with (
            aiohttp.ClientSession(cookie_jar=self._jar(browser)) as session,
            session.post(self.server.url + path, data=data, allow_redirects=False) as response,
        ):
            return response.status, await response.text(), dict(response.headers)

    async def start_page(
        self, link: str, browser: aiohttp.CookieJar | None = None
    ) -> tuple[int, str]:
        """The browser opening one of our short links: the page naming the link's owner."""
        status, body, _ = await self.get(f"{START_PATH}?{urlsplit(link).query}", browser)
        return status, body

    async def consent(self, link: str, browser: aiohttp.CookieJar | None = None) -> str:
        """Open our link, press Continue: where the browser is redirected (Google)."""
        status, body = await self.start_page(link, browser)
        assert status == 200 and "Continue" in body, (status, body)
        form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', body))
        status, body, headers = await self.post(START_PATH, form, browser)
        assert status == 302, (status, body)
        return headers["Location"]

    async def authorize(self, link: str, **authorize) -> str:
        """Open our link, then play the user allowing access on Google's page."""
        return await self.fake.authorize(await self.consent(link), **authorize)

    async def link(self, user, account: str = ALICE, **authorize) -> tuple[int, str]:
        """Run the whole consent flow for `user` (as /connect google would)."""
        url = await self.app.deps.google.create_link(user.id)
        return await self.follow(await self.authorize(url, account=account, **authorize))

    def tools(self, user) -> dict:
        """The user's tools; a framed result (outside content) is read back as its data."""
        return {t.name: Unframed(t) for t in build_tools(self.app.deps, user)}

    async def sql(self, query: str, *params) -> list[dict]:
        async with self.app.pool.connection() as conn:
            return await (await conn.execute(query, params)).fetchall()


def endpoints_of(fake: FakeGoogle) -> GoogleEndpoints:
    return GoogleEndpoints(
        auth_uri=fake.auth_uri,
        token_uri=fake.token_uri,
        revoke_uri=fake.revoke_uri,
        calendar_api=fake.calendar_endpoint,
        tasks_api=fake.tasks_endpoint,
        gmail_api=fake.gmail_endpoint,
    )


def google_settings(fake: FakeGoogle) -> dict:
    return {
        "google_client_id": fake.client_id,
        "google_client_secret": fake.client_secret,
        "secret_key": SECRET,
        "public_url": "https://panager.example",
        "http_port": 0,
    }


async def start_harness(make_app, fake: FakeGoogle, model=None, **overrides) -> GoogleHarness:
    app = await make_app(model=model, **{**google_settings(fake), **overrides})
    app.deps.google.endpoints = endpoints_of(fake)
    recorder = RecordingMessenger()
    app.deps.messenger.add(recorder)
    server = await start_web(app)
    return GoogleHarness(app, fake, server, recorder)

"""Cross-site attacks on the web page in a real Chromium: a page of another site (a second
local server on another address, so another site to the browser) tries to act on Panager."""

from __future__ import annotations

import pytest
from aiohttp import web

from panager.services.web_sessions import WebSessionService
from tests.browser_helpers import Browsers
from tests.web_helpers import ALICE, web_harness

pytestmark = pytest.mark.timeout(180)
ATTACKER_HOST = "127.0.0.2"  # all of 127.0.0.0/8 is loopback; another host is another site


@pytest.fixture(scope="module")
async def browsers():
    found = await Browsers().start()
    yield found
    await found.stop()


async def attacker_site(html: str) -> tuple[web.AppRunner, str]:
    """A second web server (another origin) serving one page at /."""

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", index)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, ATTACKER_HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://{ATTACKER_HOST}:{port}/"


def auto_post(action: str, fields: dict[str, str]) -> str:
    """A page that posts a form to `action` as soon as it loads."""
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    return (f'<html><body><form id="f" method="post" action="{action}">{inputs}</form>'
            '<script>document.getElementById("f").submit()</script></body></html>')


async def test_another_site_posting_its_own_sign_in_link_leaves_the_browser_signed_out(
    make_app, browsers
):
    """Login CSRF: Mallory's page auto-posts Mallory's own link to /signin from the
    victim's browser. The browser stays signed out and Mallory's link is not spent."""
    h = await web_harness(make_app)
    token = (await h.link(ALICE))[len("/signin?token="):]  # "the attacker's" link
    runner, evil = await attacker_site(auto_post(h.url + "/signin", {"token": token}))
    context, page = await browsers.person()
    try:
        await page.goto(evil)
        await page.wait_for_url(h.url + "/**")
        await page.wait_for_load_state()
        assert "Sign in from Panager's own page" in await page.inner_text("h1")
        assert "panager_session" not in [c["name"] for c in await context.cookies()]
        response = await page.goto(h.url + "/")
        assert response.status == 401  # signed out
        found = await WebSessionService(h.app.pool, h.app.clock).peek_link(token)
        assert found.refusal is None  # the link was not spent
        # the same link opened and confirmed on Panager's own page still signs in
        await page.goto(h.url + "/signin?token=" + token)
        await page.click("form[action='/signin'] button")
        await page.wait_for_url(h.url + "/")
        assert "Hello, Alice" in await page.inner_text("h1")
    finally:
        await context.close()
        await runner.cleanup()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_google_link_finishes_only_in_the_browser_that_continued_it(
    make_app, browsers, monkeypatch
):
    """In real Chromium, Panager on `localhost` and Google on 127.0.0.1 (another site, so
    the callback is a cross-site redirect): the link's page, Continue, Google's consent
    and the callback link the account in the browser that continued (its SameSite=Lax
    cookie comes back with Google's redirect). Google's address from a link continued
    elsewhere, opened in Bob's browser, links nothing; another site auto-posting Continue
    for Mallory's own link from Bob's browser is refused and binds nothing."""
    from urllib.parse import parse_qs, urlsplit

    from panager.providers.google.service import START_PATH
    from tests.browser_helpers import shot
    from tests.fakes.google_server import FakeGoogle
    from tests.google_helpers import start_harness

    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")
    port = free_port()
    base = f"http://localhost:{port}"
    async with FakeGoogle() as fake:
        h = await start_harness(make_app, fake, public_url=base, http_port=port)
        mallory = await h.app.deps.users.ensure(501, "mallory")
        mallorys, page = await browsers.person()
        bobs, bob_page = await browsers.person()
        try:
            link = await h.app.deps.google.create_link(mallory.id)
            await page.goto(link)
            assert "Link Google to @mallory" in await page.inner_text("h1")
            await shot(page, "google-link")
            await page.click("text=Continue to Google")
            await page.wait_for_url(base + "/oauth/google/callback**")
            assert "@mallory" in await page.inner_text("body")
            rows = await h.sql("SELECT user_id FROM google_accounts")
            assert [r["user_id"] for r in rows] == [mallory.id]

            await h.app.deps.google.disconnect(mallory.id)
            second = await h.app.deps.google.create_link(mallory.id)
            consent = await h.consent(second)  # continued in another browser (a script)
            await bob_page.goto(consent)
            await bob_page.wait_for_url(base + "/oauth/google/callback**")
            assert "This link is for another browser" in await bob_page.inner_text("h1")
            await shot(bob_page, "google-link-other-browser")
            assert await h.sql("SELECT user_id FROM google_accounts") == []

            third = await h.app.deps.google.create_link(mallory.id)
            state = parse_qs(urlsplit(third).query)["state"][0]
            runner, evil = await attacker_site(auto_post(base + START_PATH, {"state": state}))
            try:
                await bob_page.goto(evil)
                await bob_page.wait_for_url(base + START_PATH)
                assert "Continue from your link" in await bob_page.inner_text("h1")
            finally:
                await runner.cleanup()
            rows = await h.sql("SELECT browser_key FROM oauth_states WHERE used_at IS NULL")
            assert sum(r["browser_key"] is None for r in rows) == 1  # the third: unbound
            assert browsers.errors == []
        finally:
            await mallorys.close()
            await bobs.close()

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

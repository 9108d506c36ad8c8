"""Adding a CalDAV account on the Connections page in a real Chromium: a wrong password is
one line and nothing is stored; the right one is checked at once ("connected: N calendars"),
the calendars' names are shown as text (never as markup), the choice is saved, and removal
deletes the account."""

from __future__ import annotations

import pytest

from tests.browser_helpers import Browsers, shot
from tests.caldav_servers import caldav_of
from tests.web_helpers import ALICE, web_harness

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def browsers():
    found = await Browsers().start()
    yield found
    await found.stop()


async def test_add_choose_and_remove_a_caldav_account(
    make_app, browsers, caldav_servers, tmp_path
) -> None:
    server = caldav_servers["radicale"]
    who = server.new_user("web")
    server.make_calendar(who, "kids", "Kids <b>bold</b>")
    server.make_calendar(who, "work", "Work")
    config = tmp_path / "config.yaml"
    config.write_text("web_fetch_allow: ['127.0.0.1']\n")
    h = await web_harness(make_app, secret_key="browser-test-secret", config_path=config)
    context, page = await browsers.person()
    try:
        await page.goto(h.url + await h.link(ALICE))
        await page.click("form[action='/signin'] button")
        await page.wait_for_url(h.url + "/")
        await page.goto(h.url + "/connections")

        await page.fill("input[name=url]", server.url)
        await page.fill("input[name=username]", who)
        await page.fill("input[name=password]", "not-the-password")
        await page.click("form[action='/connections/caldav/add'] button")
        error = await page.inner_text(".error")
        assert error == (
            f"CalDAV: The calendar server at {server.url} refused the user name or password.")
        assert await page.input_value("input[name=url]") == server.url  # what was typed is kept
        assert await page.input_value("input[name=password]") == ""  # but never the password
        async with h.app.pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) AS n FROM provider_accounts")).fetchone()
        assert row["n"] == 0

        await page.fill("input[name=password]", server.users[who])
        await page.click("form[action='/connections/caldav/add'] button")
        await page.wait_for_url("**/connections?done=connected")
        stored = (await caldav_of(h.app).stored(ALICE))[0]
        assert await page.inner_text(".caldav-summary") == "connected: 2 calendars"
        names = await page.locator("form.caldav-calendars tbody td:nth-child(3)").all_inner_texts()
        assert "Kids <b>bold</b>" in names  # the server's text, shown as text
        assert await page.locator("form.caldav-calendars tbody b").count() == 0
        assert server.users[who] not in await page.content()
        assert len(stored.calendars) == 2

        await page.uncheck("input[aria-label='read Work']")
        await page.check("input[aria-label='default Kids <b>bold</b>']")
        await shot(page, "connections-caldav")
        await page.click(f"form[action='/connections/caldav/{stored.key}/calendars'] button")
        await page.wait_for_url("**/connections?done=saved")
        chosen = (await caldav_of(h.app).stored(ALICE))[0]
        family = next(c.path for c in chosen.calendars if c.name == "Kids <b>bold</b>")
        assert chosen.default == family and chosen.read == frozenset({family})

        await page.click(f"form[action='/connections/caldav/{stored.key}/remove'] button")
        await page.wait_for_url("**/connections?done=removed")
        assert await caldav_of(h.app).stored(ALICE) == []
        assert browsers.errors == []
    finally:
        await context.close()

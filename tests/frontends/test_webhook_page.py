"""Webhooks are made on the web page, never in a chat: `/webhook new` links to the form
(filled in), the page shows the address and a signed hook's secret once, the address works,
revoke works, and another person can neither see nor revoke them. Real PostgreSQL, the real
web server, a fake clock."""

from __future__ import annotations

import html
import json
import logging
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.services.schedules.system import SIGNING_HOWTO, call_signature
from tests.agent.test_system_jobs import post
from tests.fakes.scripted_model import ScriptedChatModel
from tests.scheduler_helpers import worker
from tests.web_helpers import ALICE, BOB, web_harness

pytestmark = pytest.mark.timeout(90)

KEY = "webhook-page-key-1"
FORM = "/schedules/webhooks/new"
SECRETISH = re.compile(r"[A-Za-z0-9_-]{40,}")  # a token_urlsafe(32): 43 such characters
ADDRESS = re.compile(r"/hooks/([A-Za-z0-9_-]{43})")
SIGNING_SECRET = re.compile(r'id="hook-secret"[^>]*value="([^"]+)"')


async def test_webhook_new_in_a_chat_links_to_the_filled_in_form_and_creates_nothing(make_app):
    h = await web_harness(make_app, secret_key=KEY)
    alice = await h.app.deps.users.get(ALICE)
    reply = await dispatch(CommandContext(alice, h.app.assistant),
                           "/webhook new door --signed Tell me who rang the <b>doorbell</b>.")
    seen = f"{reply.text}\n{reply.link}"  # everything the chat is given
    assert reply.ok and "/hooks/" not in seen and not SECRETISH.search(seen)
    assert "shown there once" in reply.text
    assert await h.app.deps.system_jobs.webhooks(ALICE) == []  # no secret was made
    async with h.app.pool.connection() as conn:
        assert (await (await conn.execute("SELECT count(*) AS n FROM webhooks")).fetchone())["n"] == 0
    link = urlsplit(reply.link["url"])
    assert f"{link.scheme}://{link.netloc}" == h.app.settings.public_url.rstrip("/")
    assert link.path == FORM and parse_qs(link.query) == {
        "name": ["door"], "instruction": ["Tell me who rang the <b>doorbell</b>."],
        "signed": ["1"]}
    client = await h.client(ALICE)
    status, body = await client.get(f"{link.path}?{link.query}")
    assert status == 200 and 'value="door"' in body and "checked" in body
    assert "the &lt;b&gt;doorbell&lt;/b&gt;." in body and "<b>doorbell" not in body
    long = await dispatch(CommandContext(alice, h.app.assistant), "/webhook new note " + "한" * 900)
    assert long.ok and "paste the instruction there" in long.text
    assert parse_qs(urlsplit(long.link["url"]).query) == {"name": ["note"]}  # fits a request line
    bad = await dispatch(CommandContext(alice, h.app.assistant), "/webhook new Door! Who rang?")
    assert not bad.ok and "a–z, 0–9" in bad.text and bad.link is None
    await client.close()


async def test_the_page_shows_the_address_once_and_it_runs_the_hook(make_app, clock, caplog):
    h = await web_harness(make_app, ScriptedChatModel(default="Someone rang."), secret_key=KEY)
    alice, bob = await h.client(ALICE), await h.client(BOB)
    await alice.get(FORM)
    typed = {"name": "door", "instruction": "Who rang <i>now</i>?", "signed": "1"}
    with caplog.at_level(logging.INFO):
        status, shown = await alice.post(FORM, typed)
    assert status == 200 and "This is the only time" in shown
    token = ADDRESS.search(shown)[1]
    secret = html.unescape(SIGNING_SECRET.search(shown)[1])
    assert f"{h.app.settings.public_url.rstrip('/')}/hooks/{token}" in shown
    assert SIGNING_HOWTO in shown and "Who rang &lt;i&gt;now&lt;/i&gt;?" in shown
    assert token not in caplog.text and secret not in caplog.text
    for path in ("/schedules", FORM):  # a second view never shows them again
        status, body = await alice.get(path)
        assert status == 200 and token not in body and secret not in body
    _, listing = await alice.get("/schedules")
    row = listing[listing.index('id="webhooks"'):]
    assert "<strong>door</strong>" in row and "signed" in row and "&lt;i&gt;now" in row

    url, body = h.url + "/hooks/" + token, json.dumps({"ring": 1}).encode()
    stamp = str(int(clock.now().timestamp()))
    signed = {"X-Panager-Timestamp": stamp,
              "X-Panager-Signature": call_signature(secret, stamp, body)}
    assert (await post(url, body))[0] == 401  # the secret is needed …
    assert (await post(url, body, **signed))[0] == 202  # … and verifies a signed call
    assert await worker(h.app).run_once() == 1
    assert h.recorder.texts(ALICE) == ["Someone rang."]

    _, bobs = await bob.get("/schedules")  # another person sees none of it …
    assert "door" not in bobs and "Who rang" not in bobs
    status, _ = await bob.post("/schedules/webhooks/door/revoke", {})
    assert status == 404  # … and cannot revoke it
    status, _ = await alice.post("/schedules/webhooks/door/revoke", {}, csrf=False)
    assert status == 403
    assert [w.name for w in await h.app.deps.system_jobs.webhooks(ALICE)] == ["door"]
    status, body = await alice.post("/schedules/webhooks/door/revoke", {})
    assert status == 200 and "Webhook revoked" in body
    assert await h.app.deps.system_jobs.webhooks(ALICE) == []
    stamp = str(int(clock.now().timestamp()))
    again = {"X-Panager-Timestamp": stamp, "X-Panager-Signature": call_signature(secret, stamp, b"{}")}
    assert (await post(url, b"{}", **again))[0] == 404
    await alice.close()
    await bob.close()


async def test_bad_input_and_a_missing_csrf_token_store_nothing(make_app):
    h = await web_harness(make_app)
    alice = await h.client(ALICE)
    long_name = {"name": "d" * 33, "instruction": "Who rang?"}
    status, body = await alice.post(FORM, long_name)
    assert status == 400 and "1–32 characters" in body and "Who rang?" in body  # kept
    status, body = await alice.post(FORM, {"name": "door", "instruction": "x" * 2001})
    assert status == 400 and "2,001 characters; the limit is 2,000" in body
    status, body = await alice.post(FORM, {"name": "door", "instruction": "Who?", "signed": "1"})
    assert status == 400 and "needs PANAGER_SECRET_KEY" in body  # no key in this setup
    status, body = await alice.post(FORM, {"name": "door", "instruction": "Who?"}, csrf=False)
    assert status == 403 and "/hooks/" not in body
    status, _ = await alice.post(FORM, {"name": "door", "instruction": "Who?", "csrf": "forged"},
                                 csrf=False)
    assert status == 403
    assert await h.app.deps.system_jobs.webhooks(ALICE) == []
    await alice.close()

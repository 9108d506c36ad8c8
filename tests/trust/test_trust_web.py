"""Holes a co-user or a web page could use, closed on the web side (real PostgreSQL, real
aiohttp): admin rights from the configuration, schedule limits on edit and resume, login
CSRF, the web chat's turns per person, the doctor page, the Google callback."""

from __future__ import annotations

import asyncio

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.services.schedules.recurrence import ScheduleInputError
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import write_config
from tests.web_helpers import ADMIN, ALICE, BOB, NONCE, WebClient, web_harness

pytestmark = pytest.mark.timeout(90)


# -- admin rights come from PANAGER_ADMIN_IDS at every request ---------------------------------


async def test_a_demoted_admin_loses_the_admin_pages_and_invite_at_once(make_app):
    """root's stored role is still 'admin', but the id is no longer in PANAGER_ADMIN_IDS and
    root never wrote in Discord since: no admin page, no /invite, no admin link."""
    h = await web_harness(make_app, admin_ids=[])
    root = await h.client(ADMIN)
    try:
        for path in ("/admin/users", "/admin/invites", "/admin/usage"):
            status, body = await root.get(path)
            assert status == 403 and "For admins only" in body, path
        status, _ = await root.post("/admin/invites", {"uses": "1000", "expires": "never"})
        assert status == 403
        assert 'href="/admin/users"' not in (await root.get("/"))[1]
        stored = await h.app.deps.users.get(ADMIN)
        assert stored.role == "admin"  # what the old check trusted
        for front_end in ("web", "discord", "terminal"):
            ctx = CommandContext(user=stored, assistant=h.app.assistant, front_end=front_end)
            reply = await dispatch(ctx, "/invite 1000 never")
            assert not reply.ok and "admins only" in reply.text
            assert "/invite" not in (await dispatch(ctx, "/help")).text
        assert await h.app.deps.access.invites() == []
    finally:
        await root.close()
        await h.server.stop()


async def test_an_id_added_to_admin_ids_is_admin_on_the_web_before_writing_anywhere(make_app):
    h = await web_harness(make_app, admin_ids=[ALICE])
    alice = await h.client(ALICE)
    try:
        status, body = await alice.get("/admin/users")
        assert status == 200 and 'href="/admin/users"' in body
        user = await h.app.deps.users.get(ALICE)
        ctx = CommandContext(user=user, assistant=h.app.assistant, front_end="web")
        assert (await dispatch(ctx, "/invite")).ok
        local = await h.app.local_user()  # the terminal's own user is an admin too
        ctx = CommandContext(user=local, assistant=h.app.assistant)
        assert (await dispatch(ctx, "/invite")).ok
    finally:
        await alice.close()
        await h.server.stop()


# -- schedule limits hold on edit and resume, not only on create -------------------------------


async def test_editing_a_reminder_on_the_web_into_a_minutely_agent_run_is_refused(
    make_app, tmp_path
):
    h = await web_harness(make_app, home=write_config(tmp_path / "h"))
    scheduler = h.app.deps.scheduler
    alice = await h.app.deps.users.get(ALICE)
    daily = await scheduler.create(alice, "water the plants", "2026-11-22T09:00",
                                   repeat="FREQ=DAILY")
    client = await h.client(ALICE)
    try:
        status, body = await client.post(f"/schedules/{daily.id}", {
            "message": "summarise the news", "at": "2026-11-22T09:00", "kind": "agent",
            "repeat": "FREQ=MINUTELY", "timezone": "UTC", "action": "save"})
        assert status == 400 and "schedule_min_interval_agent_minutes" in body
    finally:
        await client.close()
    kept = await scheduler.get(ALICE, daily.id)
    assert (kept.kind, kept.rrule, kept.message) == ("reminder", "FREQ=DAILY", "water the plants")
    with pytest.raises(ScheduleInputError, match="schedule_min_interval_agent_minutes"):
        await scheduler.update(alice, daily.id, "x", "2026-11-22T09:00", kind="agent",
                               repeat="FREQ=MINUTELY;INTERVAL=5")


async def test_resuming_or_editing_cannot_pass_the_active_schedule_cap(make_app, tmp_path):
    home = write_config(tmp_path / "h", schedule_max_active_per_user=2)
    h = await web_harness(make_app, home=home)
    scheduler = h.app.deps.scheduler
    alice = await h.app.deps.users.get(ALICE)
    made = []
    for n in range(5):  # two at a time: create two, pause them, create two more...
        made.append(await scheduler.create(alice, f"r{n}", f"2026-11-2{2 + n}T09:00"))
        await scheduler.pause(ALICE, made[-1].id)
    client = await h.client(ALICE)
    try:
        statuses = [(await client.post(f"/schedules/{s.id}/resume", {}))[0] for s in made]
    finally:
        await client.close()
    assert statuses == [200, 200, 409, 409, 409]  # saved (redirect followed), then refused
    active = [s for s in await scheduler.list_all(ALICE) if s.status == "active"]
    assert len(active) == 2
    with pytest.raises(ScheduleInputError, match="schedule_max_active_per_user"):
        await scheduler.resume(ALICE, made[4].id)
    async with h.app.pool.connection() as conn:  # a failed one, edited, would become active
        await conn.execute("UPDATE schedules SET status = 'failed' WHERE id = %s", (made[3].id,))
    with pytest.raises(ScheduleInputError, match="schedule_max_active_per_user"):
        await scheduler.update(alice, made[3].id, "again", "2026-11-30T09:00")
    assert (await scheduler.get(ALICE, made[3].id)).status == "failed"
    await scheduler.update(alice, made[0].id, "still fine", "2026-11-30T09:00")  # active: ok


# -- login CSRF: /signin only from Panager's own page ------------------------------------------


async def test_signin_posts_from_another_site_or_without_the_pages_nonce_are_refused(make_app):
    h = await web_harness(make_app)
    path = await h.link(ALICE)
    token = path.removeprefix("/signin?token=")
    client = WebClient(h.url)
    try:
        for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site", "Origin": h.url}, {}):
            async with client.session.post(h.url + "/signin", data={"token": token},
                                           headers=headers, allow_redirects=False) as response:
                assert response.status == 403, headers
                assert "another web site" in await response.text()
        async with client.session.post(h.url + "/signin", data={"token": token, "nonce": "x" * 32},
                                       allow_redirects=False) as response:
            assert response.status == 403  # a nonce the browser's cookie does not match
        assert (await h.app.deps.web_sessions.peek_link(token)).refusal is None  # not spent
        async with client.session.get(h.url + path) as page:  # the page, then its button:
            nonce = NONCE.search(await page.text())[1]  # the nonce alone is enough
        async with client.session.post(h.url + "/signin",
                                       data={"token": token, "nonce": nonce}) as response:
            assert response.status == 200 and "Hello, Alice" in await response.text()
    finally:
        await client.close()


# -- web chat: one running and one waiting turn per person --------------------------------------


async def test_web_chat_runs_one_turn_and_queues_one_per_person_and_drops_a_gone_page(
    make_app, monkeypatch
):
    from panager.frontends.web.pages import chat

    monkeypatch.setattr(chat, "HEARTBEAT", 0.05)  # notice a closed page quickly
    release, entered = asyncio.Event(), asyncio.Event()
    claims: list[bool] = []
    released = asyncio.Event()
    claim, give_back = chat.WebTurns.claim, chat.WebTurns.release

    def spy_claim(self, user_id):
        claims.append(claim(self, user_id))
        return claims[-1]

    def spy_release(self, user_id):
        give_back(self, user_id)
        released.set()

    monkeypatch.setattr(chat.WebTurns, "claim", spy_claim)
    monkeypatch.setattr(chat.WebTurns, "release", spy_release)

    class SlowModel(ScriptedChatModel):
        async def _agenerate(self, messages, *args, **kwargs):
            entered.set()
            await release.wait()
            return await super()._agenerate(messages, *args, **kwargs)

    async def until(condition):
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    model = SlowModel(default="answer")
    h = await web_harness(make_app, model=model)
    alice, bob = await h.client(ALICE), await h.client(BOB)
    stream = {"X-Requested-With": "fetch"}
    try:
        first = asyncio.ensure_future(alice.post("/chat", {"text": "first"}, headers=stream))
        await asyncio.wait_for(entered.wait(), 10)
        second = asyncio.ensure_future(alice.post("/chat", {"text": "second"}, headers=stream))
        await until(lambda: len(claims) == 2)
        status, body = await alice.post("/chat", {"text": "third"}, headers=stream)
        assert status == 429 and "another is waiting" in body
        status, _ = await alice.post("/chat", {"text": "third"})  # the plain form too
        assert status == 429
        assert claims == [True, True, False, False]
        bobs = asyncio.ensure_future(bob.post("/chat", {"text": "bob's"}, headers=stream))
        await until(lambda: len(claims) == 5)
        assert claims[-1] is True  # Bob is never limited by Alice
        second.cancel()  # the page of the waiting turn goes away
        await asyncio.wait_for(released.wait(), 10)  # its slot is given back, turn dropped
        fourth = asyncio.ensure_future(alice.post("/chat", {"text": "fourth"}, headers=stream))
        await until(lambda: len(claims) == 6)
        assert claims[-1] is True
        release.set()
        assert [(await t)[0] for t in (first, fourth, bobs)] == [200, 200, 200]
    finally:
        release.set()
        await alice.close()
        await bob.close()
    asked = [str(m.content) for request in model.requests for m in request]
    assert any("fourth" in text for text in asked)
    assert not any("second" in text for text in asked)  # dropped before it started


# -- sign-in rate limit per account in bounded memory; the doctor only on a POST ----------------


async def test_sign_in_rate_limit_is_per_account_not_per_address(make_app):
    """Everyone arrives from one address (a reverse proxy): Mallory's failed attempts do
    not lock Bob out, and the limiter's memory stays bounded whatever the keys."""
    from panager.frontends.web.auth import RATE_LIMIT, RateLimit

    h = await web_harness(make_app)
    mallory, bob = WebClient(h.url), WebClient(h.url)
    try:
        for _ in range(RATE_LIMIT[0]):
            assert (await mallory.post("/signin?token=guess", {}))[0] == 400
        assert (await mallory.post("/signin?token=guess", {}))[0] == 429
        status, body = await bob.post(await h.link(BOB), {})
        assert status == 200 and "Hello, Bob" in body
    finally:
        await mallory.close()
        await bob.close()
    limiter = RateLimit(1, 60.0, max_keys=50)
    assert all(limiter.allow(f"key{n}") for n in range(1_000))
    assert len(limiter) <= 50
    assert not limiter.allow("key999")  # a recent key is still counted


async def test_the_doctor_runs_only_on_a_post_with_the_csrf_token(make_app):
    h = await web_harness(make_app)
    admin = await h.client(ADMIN)
    try:
        status, body = await admin.get("/admin/doctor")
        assert status == 200 and 'action="/admin/doctor"' in body
        assert 'class="list doctor"' not in body  # opening the page runs nothing
        status, body = await admin.post("/admin/doctor", {}, csrf=False)
        assert status == 403 and 'class="list doctor"' not in body
        status, body = await admin.post("/admin/doctor", {})
        assert status == 200 and 'class="list doctor"' in body and "database" in body.lower()
    finally:
        await admin.close()

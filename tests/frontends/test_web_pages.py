"""The web page over plain HTTP: sign-in links and sessions, /web, CSRF, escaping, CSP,
rate limits, the chat's event stream, and the service methods the pages use."""

from __future__ import annotations

import asyncio
import json

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.graph.events import Event
from panager.frontends.web.auth import RATE_LIMIT
from panager.frontends.web.sse import translate
from panager.services.schedules.recurrence import ScheduleInputError
from panager.services.web_sessions import WebSessionService
from tests.scheduler_helpers import utc, worker
from tests.web_helpers import ALICE, BOB, WebClient, web_harness

pytestmark = pytest.mark.timeout(90)


def frames(body: str) -> list[tuple[str, dict]]:
    """(event, data) of every SSE frame in a response body."""
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_events_become_the_frames_the_chat_page_reads():
    def one(type_, **data):
        return frames(translate(Event(type_, 1, data)).decode())[0]

    assert one("message_delta", iteration=2, text="Hel") == ("delta", {"iteration": 2,
                                                                       "text": "Hel"})
    assert one("message_reset", iteration=2) == ("reset", {"iteration": 2})
    assert one("message_end", iteration=2, text="Hello", tool_calls=[]) == (
        "message", {"iteration": 2, "text": "Hello", "final": True})
    assert one("tool_start", id="c1", name="memory_search")[1]["state"] == "running"
    assert one("tool_end", id="c1", name="memory_search", status="error")[1]["state"] == "error"
    assert translate(Event("turn_start", 1, {"iteration": 1})) is None


async def test_chat_stream_carries_deltas_before_the_answer(make_app):
    h = await web_harness(make_app)
    h.model.add("Final answer.")
    real = h.app.assistant.run_turn

    async def streaming(user, text, *, emitter=None, **kwargs):
        await emitter("message_delta", user.id, iteration=1, text="Fin")
        await emitter("message_reset", user.id, iteration=1)
        await emitter("message_delta", user.id, iteration=1, text="Final ")
        return await real(user, text, emitter=emitter, **kwargs)

    h.app.assistant.run_turn = streaming
    client = await h.client(ALICE)
    status, body = await client.post("/chat", {"text": "hi"},
                                     headers={"X-Requested-With": "fetch"})
    assert status == 200
    names = [name for name, _ in frames(body)]
    # the injected pieces, then the model's own streamed text, then the final answer
    assert names[:3] == ["delta", "reset", "delta"] and names[-2:] == ["message", "done"]
    assert set(names[3:-2]) <= {"delta", "reset"}
    assert frames(body)[-1][1] == {"text": "Final answer.", "ok": True, "link": None,
                                   "question": False}
    # without JavaScript: the post waits and redirects; the answer is in the thread
    h.app.assistant.run_turn = real
    h.model.add("Second answer.")
    status, page = await client.post("/chat", {"text": "again"})
    assert status == 200 and "Second answer." in page and "Final answer." in page
    await client.close()


async def test_web_command_links_work_once_and_expire(make_app, clock):
    h = await web_harness(make_app, public_url="https://panager.example")
    alice = await h.app.deps.users.get(ALICE)
    ctx = CommandContext(user=alice, assistant=h.app.assistant, front_end="discord")
    reply = await dispatch(ctx, "/web")
    assert reply.ok and reply.link["label"] == "Open Panager"
    assert reply.link["url"].startswith("https://panager.example/signin?token=")
    token = reply.link["url"].split("token=")[1]
    service = WebSessionService(h.app.pool, h.app.clock)
    assert (await service.peek_link(token)).refusal is None
    assert (await service.use_link(token)).user_id == ALICE
    assert (await service.use_link(token)).refusal == "used"
    assert (await service.use_link("forged")).refusal == "unknown"
    late = (await dispatch(ctx, "/web")).link["url"].split("token=")[1]
    clock.advance(minutes=10, seconds=1)
    assert (await service.use_link(late)).refusal == "expired"
    assert (await dispatch(ctx, "/web nonsense")).ok is False


async def test_sessions_idle_out_sign_out_everywhere_and_stop_when_blocked(make_app, clock):
    h = await web_harness(make_app)
    service = WebSessionService(h.app.pool, h.app.clock)
    first, second = await service.start(ALICE), await service.start(ALICE)
    bob = await service.start(BOB)
    assert (await service.lookup(first)).user.id == ALICE
    clock.advance(days=6)
    assert await service.lookup(first) is not None  # touched: idle time starts again
    clock.advance(days=7, seconds=1)
    assert await service.lookup(first) is None and await service.lookup(second) is None
    third = await service.start(ALICE)
    alice = await h.app.deps.users.get(ALICE)
    ctx = CommandContext(user=alice, assistant=h.app.assistant)
    assert "1 session ended" in (await dispatch(ctx, "/web signout")).text
    assert await service.lookup(third) is None
    fresh = await service.start(BOB)
    await h.app.deps.users.set_status(BOB, "blocked")
    assert await service.lookup(fresh) is None and await service.lookup(bob) is None


async def test_signin_cookie_flags_rate_limit_and_refusal_pages(make_app):
    h = await web_harness(make_app, public_url="https://panager.example")
    client = WebClient(h.url)
    async with client.session.post(h.url + "/signin", data={"token": (await h.link(ALICE))[14:]},
                                   headers={"Origin": h.url}, allow_redirects=False) as response:
        assert response.status == 303
        cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" in cookie
    statuses = [(await client.post("/signin?token=nope", {}))[0] for _ in range(RATE_LIMIT[0])]
    assert set(statuses) == {400}
    status, body = await client.post("/signin?token=nope", {})
    assert status == 429 and "Too many sign-in attempts" in body
    await client.close()


async def test_pages_escape_content_send_csp_and_refuse_missing_csrf(make_app):
    h = await web_harness(make_app)
    saved = await h.app.deps.memory.save(ALICE, "<script>alert('x')</script> likes tea")
    client = await h.client(ALICE)
    async with client.session.get(h.url + "/memories") as response:
        body = await response.text()
        csp = response.headers["Content-Security-Policy"]
    assert "<script>alert" not in body and "&lt;script&gt;alert" in body
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    status, body = await client.post(f"/memories/{saved.memory.id}/delete", {}, csrf=False)
    assert status == 403 and await h.app.deps.memory.get(ALICE, saved.memory.id) is not None
    status, _ = await client.post(f"/memories/{saved.memory.id}/delete", {})
    assert status == 200 and await h.app.deps.memory.get(ALICE, saved.memory.id) is None
    anonymous = WebClient(h.url)
    assert (await anonymous.get("/memories"))[0] == 401
    await client.close()
    await anonymous.close()


async def test_memory_edit_re_embeds_and_export_is_the_users_own(make_app):
    h = await web_harness(make_app)
    memory = h.app.deps.memory
    mine = (await memory.save(ALICE, "My car is a red Volvo")).memory
    await memory.save(BOB, "Bob drives a blue bicycle")
    client = await h.client(ALICE)
    status, _ = await client.post(f"/memories/{mine.id}", {"content": "My car is a green Tesla",
                                                           "category": "things"})
    assert status == 200
    hits = await memory.search(ALICE, "Tesla", mode="vector")
    assert hits[0].id == mine.id and hits[0].category == "things"
    status, body = await client.post(f"/memories/{mine.id}", {"content": "   "})
    assert status == 400 and "green Tesla" in (await memory.get(ALICE, mine.id)).content
    status, body = await client.get("/memories/export.json")
    exported = json.loads(body)
    assert status == 200 and [m["content"] for m in exported["memories"]] == [
        "My car is a green Tesla"]
    await client.close()


async def test_schedule_pause_resume_and_edit_rules(make_app, clock):
    h = await web_harness(make_app)
    service = h.app.deps.scheduler
    alice = await h.app.deps.users.get(ALICE)
    weekly = await service.create(alice, "Gym", "2026-11-23T07:00", repeat="FREQ=WEEKLY;BYDAY=MO")
    once = await service.create(alice, "Dentist", "2026-11-21T12:30")
    assert (await service.pause(ALICE, weekly.id)).status == "paused"
    assert (await service.pause(ALICE, once.id)).status == "paused"
    clock.set(utc(2026, 11, 23, 7, 0, 5))
    assert await worker(h.app).run_once() == 0 and h.recorder.sent == []  # paused: silent
    resumed = await service.resume(ALICE, weekly.id)
    assert resumed.status == "active" and resumed.next_run_at == utc(2026, 11, 30, 7)
    with pytest.raises(ScheduleInputError, match="passed while it was paused"):
        await service.resume(ALICE, once.id)
    with pytest.raises(ScheduleInputError, match="in the past"):
        await service.update(alice, weekly.id, "Gym", "2026-11-01T07:00")
    assert await service.update(alice, "nope1234", "x", "2026-12-01T07:00") is None
    assert await service.pause(BOB, weekly.id) is None  # not Bob's
    async with h.app.pool.connection() as conn:  # a worker is sending it right now
        await conn.execute("UPDATE schedules SET claimed_by = 'w1', lease_until = %s "
                           "WHERE id = %s", (utc(2026, 11, 23, 8), weekly.id))
    with pytest.raises(ScheduleInputError, match="being delivered"):
        await service.update(alice, weekly.id, "Gym!", "2026-12-01T07:00")


async def test_schedule_form_errors_match_the_tools(make_app):
    h = await web_harness(make_app)
    client = await h.client(ALICE)
    base = {"message": "x", "at": "2026-11-25T09:00", "timezone": "UTC", "action": "save"}
    for change, words in (({"timezone": "Mars/Olympus"}, "Mars/Olympus"),
                          ({"at": "next blursday"}, "next blursday"),
                          ({"repeat": "FREQ=SOMETIMES"}, "FREQ")):
        status, body = await client.post("/schedules/new", {**base, **change})
        assert status in (200, 400) and 'class="error"' in body and words in body
    assert await h.app.deps.scheduler.list(ALICE) == []
    await client.close()


async def test_out_of_range_numbers_in_forms_get_a_message_not_a_500(make_app):
    h = await web_harness(make_app, admin_ids=[ALICE])
    client = await h.client(ALICE)
    try:
        for expires in ("9999999999d", "1000000w"):
            status, body = await client.post("/admin/invites", {"uses": "1", "expires": expires})
            assert status == 400 and "too long: at most 365 days" in body, expires
        assert await h.app.deps.access.invites() == []
        for every in ("99999999999999999", "9" * 5000, "1441"):
            status, body = await client.post("/schedules/heartbeat", {
                "action": "on", "every": every, "start": "08:00", "end": "22:00"})
            assert status == 200 and "Heartbeat not changed" in body, every[:20]
        assert await h.app.deps.system_jobs.heartbeat(ALICE) is None
        status, body = await client.post("/schedules/heartbeat", {
            "action": "on", "every": "1440", "start": "08:00", "end": "22:00"})
        assert status == 200 and "Heartbeat on" in body  # a day is the longest, and allowed
    finally:
        await client.close()
        await h.server.stop()


async def test_invites_can_be_revoked(make_app):
    h = await web_harness(make_app)

    access = h.app.deps.access
    invite = await access.create_invite(None)
    assert (await access.revoke_invite(invite.code.lower())).code == invite.code
    assert await access.revoke_invite(invite.code) is None
    await asyncio.sleep(0)


async def test_connections_page_links_and_unlinks_google(make_app):
    from tests.fakes.google_server import FakeGoogle
    from tests.google_helpers import google_settings

    fake = FakeGoogle()  # only its client id/secret are used: nothing is called
    # plain http here: a Secure cookie (https public URL) is not sent back over http
    h = await web_harness(make_app, **{**google_settings(fake), "public_url": "http://pan.test"})
    client = await h.client(ALICE)
    status, body = await client.get("/connections")
    assert status == 200 and "Not connected" in body
    await client.get("/connections")
    async with client.session.post(h.url + "/connections/google/connect",
                                   data={"csrf": client.csrf}, allow_redirects=False) as r:
        assert r.status == 303
        assert r.headers["Location"].startswith("http://pan.test/oauth/google/start?state=")
    status, body = await client.post("/connections/google/disconnect", {})
    assert status == 200 and "Google is disconnected" in body
    await client.close()


async def test_connections_page_adds_gmail_to_a_linked_account(make_app):
    from panager.providers.google.oauth import CALENDAR_SCOPE, TASKS_SCOPE
    from panager.providers.google.service import MAIL_SCOPES
    from tests.fakes.google_server import FakeGoogle
    from tests.google_helpers import google_settings

    fake = FakeGoogle()
    h = await web_harness(make_app, **{**google_settings(fake), "public_url": "http://pan.test"})
    async with h.app.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO google_accounts (user_id, email, token_ciphertext, scopes, status, "
            "connected_at, updated_at, google_sub) VALUES (%s, 'alice@example.com', 'x', %s, "
            "'connected', now(), now(), 'sub-alice')",
            (ALICE, [CALENDAR_SCOPE, TASKS_SCOPE]),
        )
    client = await h.client(ALICE)
    status, body = await client.get("/connections")
    assert status == 200 and "alice@example.com" in body and "Add Gmail" in body
    async with client.session.post(h.url + "/connections/google/mail",
                                   data={"csrf": client.csrf}, allow_redirects=False) as r:
        assert r.status == 303
        assert r.headers["Location"].startswith("http://pan.test/oauth/google/start?state=")
    async with h.app.pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT scopes FROM oauth_states WHERE user_id = %s ORDER BY created_at DESC LIMIT 1",
            (ALICE,))).fetchone()
    assert set(MAIL_SCOPES) <= set(row["scopes"])  # the link asks Google for Gmail
    async with h.app.pool.connection() as conn:
        await conn.execute("UPDATE google_accounts SET scopes = scopes || %s::text[]",
                           (list(MAIL_SCOPES),))
    status, body = await client.get("/connections")
    assert "Add Gmail" not in body and "Gmail" in body
    await client.close()


async def test_a_plain_form_shows_a_refused_or_failed_turn_and_keeps_the_text(make_app):
    """Without JavaScript: an over-long message is refused on the page and given back in
    the box (it was never stored); a model failure is shown, and the message stays in the
    conversation."""
    from panager.errors import ModelUnavailable

    h = await web_harness(make_app)
    client = await h.client(ALICE)
    limit = h.app.deps.config.max_message_chars
    long_text = "<b>x</b>" + "y" * limit
    status, page = await client.post("/chat", {"text": long_text})
    assert status == 200 and f"the limit is {limit:,}" in page
    assert "&lt;b&gt;x&lt;/b&gt;" + "y" * limit + "</textarea>" in page

    def fail(_messages):
        raise ModelUnavailable("The model is not answering right now.")

    h.model.add(fail)
    status, page = await client.post("/chat", {"text": "what's up?"})
    assert status == 200 and "The model is not answering right now." in page
    assert "what&#39;s up?" in page and "what&#39;s up?</textarea>" not in page
    await client.close()

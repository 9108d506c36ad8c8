"""The web page in a real Chromium: sign-in, isolation, CSRF, edits that reach the worker
and the assistant, chat streaming, admin refusal, blocking — and a screenshot of each page."""

from __future__ import annotations

import asyncio
from datetime import date, timedelta

import pytest

from panager.services.web_sessions import WebSessionService
from tests.browser_helpers import SCREENSHOTS, Browsers, shot
from tests.fakes.scripted_model import ScriptedChatModel
from tests.scheduler_helpers import utc, worker
from tests.web_helpers import ADMIN, ALICE, BOB, web_harness

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def browsers():
    found = await Browsers().start()
    yield found
    await found.stop()


async def sign_in(page, h, user_id: int) -> str:
    """Open a fresh /web link and press the button; returns the link's path."""
    path = await h.link(user_id)
    await page.goto(h.url + path)
    await page.click("form[action='/signin'] button")
    await page.wait_for_url(h.url + "/")
    return path


async def seed(h) -> dict:
    """Memories, schedules and 30 days of usage for Alice (and one of each for Bob)."""
    app = h.app
    users, memory, scheduler = app.deps.users, app.deps.memory, app.deps.scheduler
    alice, bob = await users.get(ALICE), await users.get(BOB)
    facts = ["My dentist is Dr. Kim at Seoul Dental, Tuesdays are best",
             "My sister Mina's birthday is March 3", "I prefer window seats on flights",
             "Our wifi password hint: the cat's name plus 42", "I am allergic to peanuts"]
    mems = [(await memory.save(ALICE, text, "people" if "sister" in text else "general")).memory
            for text in facts]
    bob_mem = (await memory.save(BOB, "Bob's secret: the treasure is under the oak")).memory
    plans = [("Water the plants", "2026-11-22T09:00", "FREQ=WEEKLY;BYDAY=SU,WE", "reminder"),
             ("Stand-up: summarise my open tasks", "2026-11-23T08:45",
              "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "agent"),
             ("Call mum", "2026-11-24T18:30", None, "reminder"),
             ("Pay rent", "2026-12-01T09:00", "FREQ=MONTHLY;BYMONTHDAY=1", "reminder")]
    scheds = [await scheduler.create(alice, m, at, repeat=r, kind=k) for m, at, r, k in plans]
    bob_sched = await scheduler.create(bob, "Bob's private reminder", "2026-11-25T10:00")
    today = date(2026, 11, 21)
    async with app.pool.connection() as conn:
        for i in range(30):
            for model, base in (("gpt-4o-mini", 900), ("gpt-4o", 300)):
                tokens = base + (i * 137) % 1400 if (i + len(model)) % 4 else 0
                await conn.execute(
                    "INSERT INTO token_usage (user_id, day, model, prompt_tokens, "
                    "completion_tokens, total_tokens, calls) VALUES (%s, %s, %s, %s, %s, %s, 3)",
                    (ALICE, today - timedelta(days=i), model, tokens * 3 // 4, tokens // 4,
                     tokens))
    return {"mems": mems, "bob_mem": bob_mem, "scheds": scheds, "bob_sched": bob_sched}


async def test_sign_in_by_link_works_once(make_app, browsers):
    h = await web_harness(make_app)
    context, page = await browsers.person()
    path = await h.link(ALICE)
    first = await page.goto(h.url + path)
    assert first.status == 200
    await shot(page, "signin")
    again = await page.goto(h.url + path)  # opening (a link preview's fetch) uses nothing up
    assert again.status == 200 and await page.is_visible("text=Sign in as Alice")
    await page.click("form[action='/signin'] button")
    await page.wait_for_url(h.url + "/")
    assert "Hello, Alice" in await page.inner_text("h1")
    cookie = next(c for c in await context.cookies() if c["name"] == "panager_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and not cookie["secure"]

    other, page2 = await browsers.person()
    refused = await page2.goto(h.url + path)
    assert refused.status == 410
    assert "already used" in await page2.inner_text("h1")
    assert await page2.locator("form[action='/signin']").count() == 0
    await shot(page2, "link-used")
    assert await page2.goto(h.url + "/memories") and "Please sign in" in await page2.inner_text("h1")
    await context.close()
    await other.close()


async def test_every_page_renders_and_is_screenshotted(make_app, browsers):
    h = await web_harness(make_app)
    await seed(h)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    assert "Water the plants" in await page.inner_text("main")
    await shot(page, "home")
    await page.goto(h.url + "/schedules?view=week&start=2026-11-23")
    assert await page.locator("table.cal a.slot").count() == 8  # recurring ones expanded
    await shot(page, "schedules-week")
    await page.goto(h.url + "/schedules?view=month")
    assert await page.locator("table.cal tbody tr").count() in (5, 6)
    await shot(page, "schedules-month")
    await page.goto(h.url + "/schedules/new")
    await page.fill("#message", "Stretch")
    await page.fill("#at", "2026-11-24T07:30")
    await page.fill("#repeat", "FREQ=DAILY;COUNT=3")
    await page.click("button[value=preview]")
    preview = await page.inner_text(".preview")
    assert "repeats daily, 3 times in total" in preview
    assert await page.locator(".preview li").count() == 3
    await shot(page, "schedule-preview")
    await page.fill("#repeat", "FREQ=FORTNIGHTLY")
    await page.click("button[value=save]")
    assert "FREQ" in await page.inner_text(".error")  # the tools' own wording
    await page.goto(h.url + "/memories?q=dentist")
    assert "Dr. Kim" in await page.inner_text("ul.memories li >> nth=0")
    await shot(page, "memories")
    await h.app.deps.profiles.update(ALICE, "about", "Alice, a nurse in Seoul; two cats.")
    await page.goto(h.url + "/memories")
    assert "two cats" in await page.locator("#profile textarea").first.input_value()
    await page.locator("#profile").screenshot(path=str(SCREENSHOTS / "profile.png"))
    await page.goto(h.url + "/schedules")
    assert "Now: off." in await page.inner_text("#heartbeat")
    await page.locator("#heartbeat").screenshot(path=str(SCREENSHOTS / "heartbeat.png"))
    await page.goto(h.url + "/schedules/webhooks/new?name=door&instruction=Tell+me+who+rang.")
    assert await page.input_value("#name") == "door"  # filled in as /webhook new links it
    await page.click("form[action='/schedules/webhooks/new'] button")
    address = await page.input_value("#hook-url")
    assert "/hooks/" in address and "only time" in await page.inner_text("#webhook-created")
    await shot(page, "webhook-created")
    await page.goto(h.url + "/schedules")
    assert "Tell me who rang." in await page.inner_text("#webhooks")
    assert address not in await page.content()  # shown once only
    await page.locator("#webhooks").screenshot(path=str(SCREENSHOTS / "webhooks.png"))
    await h.app.deps.media.take(ALICE, "lease.txt", b"The lease ends on 31 March 2027.")
    await page.goto(h.url + "/files")
    listing = await page.inner_text("main")
    assert "lease.txt" in listing and "32 B" in listing
    await shot(page, "files")
    await page.goto(h.url + "/usage")
    assert await page.locator("svg.chart rect").count() > 20
    await shot(page, "usage")
    await page.goto(h.url + "/connections")
    await shot(page, "connections")
    await page.goto(h.url + "/chat")
    await shot(page, "chat-empty")

    admin_ctx, admin = await browsers.person()
    await sign_in(admin, h, ADMIN)
    for name in ("users", "invites", "usage", "scheduler", "doctor"):
        response = await admin.goto(f"{h.url}/admin/{name}")
        assert response.status == 200, name
        if name == "doctor":
            await admin.click("form[action='/admin/doctor'] button")
            await admin.wait_for_selector("table.doctor")
        await shot(admin, f"admin-{name}")
    await admin.goto(h.url + "/admin/invites")
    await admin.click("form[action='/admin/invites'] button")
    assert "Invite created" in await admin.inner_text(".notice")
    await admin.click("td.actions button")  # revoke it
    assert "Invite revoked" in await admin.inner_text(".notice")
    await shot(admin, "admin-invites")
    assert browsers.errors == []  # no CSP violation, no script error on any page
    await context.close()
    await admin_ctx.close()


async def test_alice_cannot_reach_bobs_rows_by_url_or_form(make_app, browsers):
    h = await web_harness(make_app)
    rows = await seed(h)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    for path in (f"/memories/{rows['bob_mem'].id}", f"/schedules/{rows['bob_sched'].id}"):
        response = await page.goto(h.url + path)
        assert response.status == 404 and "treasure" not in await page.content()
    await page.goto(h.url + "/memories")
    csrf = await page.get_attribute("input[name=csrf]", "value")
    attempts = [
        (f"/memories/{rows['bob_mem'].id}/delete", {}),
        (f"/memories/{rows['bob_mem'].id}", {"content": "hacked"}),
        (f"/schedules/{rows['bob_sched'].id}/cancel", {}),
        (f"/schedules/{rows['bob_sched'].id}", {"message": "hacked", "at": "2026-11-30T10:00",
                                                "timezone": "UTC", "action": "save"}),
    ]
    for path, form in attempts:
        response = await page.request.post(h.url + path, form={"csrf": csrf, **form})
        assert response.status == 404, path
    bob_mem = await h.app.deps.memory.get(BOB, rows["bob_mem"].id)
    assert bob_mem is not None and "treasure" in bob_mem.content
    bob_sched = await h.app.deps.scheduler.get(BOB, rows["bob_sched"].id)
    assert bob_sched.status == "active" and bob_sched.message == "Bob's private reminder"
    await context.close()


async def test_a_post_without_the_csrf_token_is_refused(make_app, browsers):
    h = await web_harness(make_app)
    rows = await seed(h)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    target = f"{h.url}/memories/{rows['mems'][0].id}/delete"
    for form in ({}, {"csrf": "forged-token"}):
        response = await page.request.post(target, form=form)
        assert response.status == 403 and "security token" in await response.text()
    assert await h.app.deps.memory.get(ALICE, rows["mems"][0].id) is not None
    await context.close()


async def test_editing_a_reminders_time_moves_its_delivery(make_app, browsers, clock):
    h = await web_harness(make_app)
    alice = await h.app.deps.users.get(ALICE)
    reminder = await h.app.deps.scheduler.create(alice, "Take the cake out", "2026-11-21T15:00")
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    await page.goto(f"{h.url}/schedules/{reminder.id}")
    await page.fill("#at", "2026-11-21T13:30")
    await page.click("button[value=preview]")
    assert "Sat 21 Nov 2026 13:30" in await page.inner_text(".preview")
    await page.click("button[value=save]")
    assert "Saved." in await page.inner_text(".notice")
    w = worker(h.app)
    clock.set(utc(2026, 11, 21, 13, 29))
    assert await w.run_once() == 0
    clock.set(utc(2026, 11, 21, 13, 30, 5))
    assert await w.run_once() == 1
    clock.set(utc(2026, 11, 21, 15, 0, 5))
    assert await w.run_once() == 0
    sent = h.recorder.texts(ALICE)
    assert len(sent) == 1 and "Take the cake out" in sent[0]
    await context.close()


async def test_deleting_a_memory_removes_it_from_recall(make_app, browsers):
    model = ScriptedChatModel(default="Noted.")
    h = await web_harness(make_app, model=model)
    await seed(h)
    alice = await h.app.deps.users.get(ALICE)
    await h.app.assistant.run_turn(alice, "who is my dentist?")
    assert "Dr. Kim" in "\n".join(str(m.content) for m in model.requests[-1])  # recalled
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    await page.goto(h.url + "/memories?q=dentist")
    item = page.locator("ul.memories li", has_text="Dr. Kim")
    await item.locator("button", has_text="Delete").click()
    assert "Deleted." in await page.inner_text(".notice")
    assert not any("Dr. Kim" in m.content for m in await h.app.deps.memory.recall(ALICE, "dentist"))
    await h.app.assistant.run_turn(alice, "who is my dentist?")
    prompt = "\n".join(str(m.content) for m in model.requests[-1])
    assert "Dr. Kim" not in prompt
    await context.close()


async def test_chat_streams_the_answer_into_the_page(make_app, browsers):
    model = ScriptedChatModel(script=["The answer is 42."])
    h = await web_harness(make_app, model=model)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    release = asyncio.Event()
    real_run_turn = h.app.assistant.run_turn

    async def streaming_turn(user, text, *, emitter=None, **kwargs):
        # What a streaming model emits (issue-13 events) before the final message.
        await emitter("message_delta", user.id, iteration=1, text="The answer ")
        await emitter("message_delta", user.id, iteration=1, text="is 4")
        await release.wait()
        return await real_run_turn(user, text, emitter=emitter, **kwargs)

    h.app.assistant.run_turn = streaming_turn
    await page.goto(h.url + "/chat")
    await page.fill("textarea[name=text]", "What is the answer?")
    await page.keyboard.press("Enter")
    partial = page.locator(".msg.panager.streaming .text")
    await partial.wait_for()
    await page.wait_for_function(
        "document.querySelector('.msg.panager.streaming .text').textContent === 'The answer is 4'")
    await shot(page, "chat-streaming")
    release.set()
    await page.wait_for_selector(".msg.panager:not(.streaming) >> text=The answer is 42.")
    assert await page.locator(".msg.panager").count() == 1

    h.app.assistant.run_turn = real_run_turn
    await page.fill("textarea[name=text]", "/usage")
    await page.keyboard.press("Enter")
    await page.wait_for_selector(".msg.panager >> text=This month")
    await page.reload()  # the answer is in the thread: it is there after a reload
    assert "The answer is 42." in await page.inner_text("#log")
    await shot(page, "chat")
    await context.close()


async def test_admin_pages_refuse_a_non_admin(make_app, browsers):
    h = await web_harness(make_app)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    assert await page.locator("a[href='/admin/users']").count() == 0
    for name in ("users", "invites", "usage", "scheduler", "doctor"):
        response = await page.goto(f"{h.url}/admin/{name}")
        assert response.status == 403 and "For admins only" in await page.inner_text("h1")
    csrf = await page.get_attribute("input[name=csrf]", "value")
    response = await page.request.post(f"{h.url}/admin/users/{BOB}/block", form={"csrf": csrf})
    assert response.status == 403
    assert (await h.app.deps.users.get(BOB)).status == "active"
    await context.close()


async def test_a_blocked_users_open_session_stops_working(make_app, browsers):
    h = await web_harness(make_app)
    await seed(h)
    alice_ctx, alice = await browsers.person()
    await sign_in(alice, h, ALICE)
    assert (await alice.goto(h.url + "/memories")).status == 200
    admin_ctx, admin = await browsers.person()
    await sign_in(admin, h, ADMIN)
    await admin.goto(h.url + "/admin/users")
    await admin.locator("tr", has_text="alice").locator("button", has_text="Block").click()
    assert "User blocked" in await admin.inner_text(".notice")
    response = await alice.goto(h.url + "/memories")
    assert response.status == 401 and "Please sign in" in await alice.inner_text("h1")
    assert await WebSessionService(h.app.pool, h.app.clock).lookup("anything") is None
    await alice_ctx.close()
    await admin_ctx.close()


async def test_chat_replaces_an_answer_restarted_on_a_fallback(make_app, browsers):
    """A stream cut off and written again by a fallback: the page shows one bubble, the
    new answer once, completed by the note the turn adds (docs/models.md)."""
    model = ScriptedChatModel(script=["w0 w1 w2 w3"])
    h = await web_harness(make_app, model=model)
    context, page = await browsers.person()
    await sign_in(page, h, ALICE)
    real_run_turn = h.app.assistant.run_turn
    note = "(answered by llama3.1: gpt-4o is not answering)"

    async def restarted_turn(user, text, *, emitter=None, **kwargs):
        await emitter("message_delta", user.id, iteration=1, text="w0 w1 ")
        await emitter("message_reset", user.id, iteration=1, restarted_on="llama3.1")
        result = await real_run_turn(user, text, emitter=emitter, **kwargs)
        result.text += f"\n\n{note}"
        return result

    h.app.assistant.run_turn = restarted_turn
    await page.goto(h.url + "/chat")
    await page.fill("textarea[name=text]", "count")
    await page.keyboard.press("Enter")
    await page.wait_for_selector(f".msg.panager:not(.streaming) >> text={note}")
    assert await page.locator(".msg.panager").count() == 1
    shown = await page.inner_text(".msg.panager .text")
    assert shown.split().count("w1") == 1 and shown.startswith("w0 w1 w2 w3")
    await context.close()

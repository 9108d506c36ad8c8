"""The Discord front end end-to-end: the real discord.py client against FakeDiscord.

The model is the local fake OpenAI server and the database is the test's own
real PostgreSQL database; nothing of Panager is mocked. A DM sent last works
as a barrier: messages of one user are handled in order, so once its answer
is there, everything sent before it has been handled.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from panager.frontends.discord.bot import ATTACHMENT_NOTE, ERROR_MESSAGE, PanagerBot
from panager.frontends.shared.chunking import FENCE
from tests.fakes.discord_server import FakeDiscord, dm_channel_id
from tests.fakes.openai_server import tool_call
from tests.runtime_helpers import write_config

ADMIN = 4242
ALICE = 5001
BOB = 5002
STEP = 10


@pytest.fixture
async def fake():
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server
    assert server.unhandled == [], "the bot called routes the fake does not serve"


@pytest.fixture
async def start_bot(fake, make_app, openai):
    """Factory: an App on the fake model plus a connected, ready PanagerBot."""
    running: list[tuple[PanagerBot, asyncio.Task]] = []

    async def start(**overrides) -> PanagerBot:
        overrides.setdefault("access", "invite")
        overrides.setdefault("admin_ids", [ADMIN])
        app = await make_app(openai_base_url=openai.base_url, openai_api_key="test", **overrides)
        bot = PanagerBot(app, status_interval=0.05, poll_interval=0.05, guild_ready_timeout=0)
        task = asyncio.create_task(bot.start("fake-token"))
        running.append((bot, task))
        ready = asyncio.create_task(bot.wait_until_ready())
        done, _ = await asyncio.wait({ready, task}, timeout=STEP, return_when="FIRST_COMPLETED")
        if ready not in done:
            ready.cancel()
            raise AssertionError(f"bot did not get ready: {task.exception() if done else ''}")
        await until(fake, lambda: fake.commands)  # slash commands synced after READY
        return bot

    yield start
    for bot, task in running:
        await asyncio.wait_for(bot.close(), 60)  # a loaded machine may take longer than a step
        await asyncio.wait_for(task, STEP)
        assert not bot.queue._background, "the bot left tasks running after close()"


async def until(fake: FakeDiscord, condition) -> None:
    """Wait until `condition()` holds; re-checked whenever the fake records something."""
    await fake.wait_for(condition, STEP)


def texts(fake: FakeDiscord, user_id: int) -> list[str]:
    return [m["content"] for m in fake.messages_to(user_id)]


async def ask(fake: FakeDiscord, user_id: int, text: str, **kw) -> str:
    """Send a DM and return the next message the bot sends that user."""
    before = len(fake.messages_to(user_id))
    await fake.send_dm(user_id, text, **kw)
    return (await fake.wait_for_messages(user_id, before + 1, timeout=STEP))[before]["content"]


async def invite_code(bot: PanagerBot, uses: int = 1) -> str:
    invite = await bot.app.deps.access.create_invite(ADMIN, max_uses=uses)
    return invite.code


# ---------------------------------------------------------------------- round trip


async def test_dm_round_trip(start_bot, fake, openai):
    await start_bot()
    openai.script("Hi Mina! How can I help?")
    mid = await fake.send_dm(ADMIN, "hello there", username="mina")
    (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    assert reply["content"] == "Hi Mina! How can I help?"
    assert openai.last_user_text() == "hello there"
    assert (reply["nonce"], reply["enforce_nonce"]) == (f"{mid}.0", True)
    assert fake.typing == [dm_channel_id(ADMIN)]
    # the conversation continues in the same thread
    openai.script("You said hello.")
    assert await ask(fake, ADMIN, "what did I say?") == "You said hello."
    assert "Hi Mina! How can I help?" in json.dumps(openai.requests[-1]["messages"])


async def test_long_answer_arrives_in_ordered_chunks_with_fences_intact(start_bot, fake, openai):
    await start_bot()
    code = "\n".join(f"    print('line {i:03d}')" for i in range(60))
    prose = " ".join(f"word{i}" for i in range(300))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{prose}\n\n```python\n{code}\n```\nend."
    assert len(answer) > 5000
    openai.script(answer)
    await fake.send_dm(ADMIN, "write a lot")
    # a condition wait, not a timing: many edits of a 5,000-character answer on a busy machine
    await fake.wait_for(
        lambda: any(m["content"].endswith("end.") for m in fake.messages_to(ADMIN)), 30)
    chunks = texts(fake, ADMIN)
    assert len(chunks) >= 3 and all(len(c) < 2000 for c in chunks), [len(c) for c in chunks]
    assert all(c.count(FENCE) % 2 == 0 for c in chunks), "a chunk leaves a code block open"
    joined = "".join(chunks)
    positions = [joined.find(f"line {i:03d}") for i in range(60)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert joined.index("word299") < joined.index("line 000")
    ids = [m["id"] for m in fake.messages_to(ADMIN)]
    assert ids == sorted(ids)


async def test_tool_progress_status_message_is_replaced_by_the_answer(start_bot, fake, openai):
    await start_bot()
    openai.script(tool_call("set_timezone", {"timezone": "Asia/Seoul"}), "Done — Seoul time.")
    openai.delay = 0.2  # long enough for the status message to show
    await fake.send_dm(ADMIN, "I moved to Seoul")
    await until(fake, lambda: "Done — Seoul time." in texts(fake, ADMIN))
    await until(fake, lambda: fake.deletions)
    status, answer = fake.messages_to(ADMIN)
    assert status["content"].startswith("🌍 setting the time zone")
    assert answer["content"] == "Done — Seoul time."
    assert [d["id"] for d in fake.deletions] == [status["id"]]
    shown = [status["content"]] + [e["content"] for e in fake.edits if e["id"] == status["id"]]
    assert shown[-1] == "🌍 setting the time zone ✓"


# ------------------------------------------------------------------ what is ignored


async def test_guild_message_gets_no_model_call(start_bot, fake, openai):
    await start_bot(access="open")
    await fake.send_guild_message(ADMIN, "hello server", guild_id=7000, channel_id=7001)
    openai.script("dm answer")
    assert await ask(fake, ADMIN, "hello dm") == "dm answer"
    assert len(openai.requests) == 1 and openai.last_user_text() == "hello dm"
    assert all(m["channel_id"] == dm_channel_id(ADMIN) for m in fake.sent)


async def test_unreadable_attachments_and_stickers_get_a_polite_note(
    start_bot, fake, openai, tmp_path
):
    write_config(tmp_path / "home", discord_cdn_hosts=[fake.base_url])
    await start_bot()
    files = [{"filename": "scan.png", "data": b"\x89PNG", "content_type": "image/png"}]
    assert await ask(fake, ADMIN, "", attachments=files) == (
        "I couldn't use scan.png: it is not a readable image."
    )
    assert await ask(fake, ADMIN, "", sticker=True) == ATTACHMENT_NOTE
    assert openai.requests == []
    openai.script("Noted.")
    await fake.send_dm(ADMIN, "see the photo", attachments=["a.jpg"])
    await fake.wait_for_messages(ADMIN, 4, timeout=STEP)
    assert texts(fake, ADMIN)[2:] == ["I couldn't use a.jpg: it is empty (0 bytes).", "Noted."]


# ------------------------------------------------------------------ access control


async def test_unknown_user_in_invite_mode_is_refused_without_model_requests(
    start_bot, fake, openai
):
    bot = await start_bot()
    refusal = await ask(fake, ALICE, "hi, what can you do?", username="alice")
    assert "invite-only" in refusal and "/start CODE" in refusal
    assert "not a command" not in (await ask(fake, ALICE, "/help")).lower()
    assert openai.requests == []
    pending = await bot.app.deps.users.get(ALICE)
    assert pending is not None and pending.status == "pending"


async def test_start_code_registers_and_a_single_use_code_is_spent(start_bot, fake, openai):
    bot = await start_bot()
    code = await invite_code(bot)
    welcome = await ask(fake, ALICE, f"/start {code.lower()}", username="alice")
    assert welcome.startswith("Welcome, alice!")
    openai.script("Hello Alice.")
    assert await ask(fake, ALICE, "hello") == "Hello Alice."
    refused = await ask(fake, BOB, f"/start {code}", username="bob")
    assert "already been used" in refused
    assert "invite-only" in await ask(fake, BOB, "let me in")
    assert len(openai.requests) == 1
    assert (await bot.app.deps.users.get(BOB)).status == "pending"


async def test_admin_creates_an_invite_with_the_slash_command(start_bot, fake, openai):
    await start_bot()
    assert "invite-only" in await ask(fake, ALICE, "/invite")  # not even a user yet
    reply = await ask(fake, ADMIN, "/invite 2 3d")
    code = reply.split("Invite code: ")[1].split(" ")[0]
    assert "2 of 2 uses" in reply and f"/start {code}" in reply
    assert (await ask(fake, ALICE, f"/start {code}")).startswith("Welcome")
    assert (await ask(fake, BOB, f"/start {code}")).startswith("Welcome")
    assert "already been used" in await ask(fake, 5003, f"/start {code}")
    assert "admins only" in await ask(fake, ALICE, "/invite")
    assert openai.requests == []


async def test_two_racing_redemptions_have_exactly_one_winner(start_bot, fake, openai):
    bot = await start_bot()
    code = await invite_code(bot)
    await asyncio.gather(
        fake.send_dm(ALICE, f"/start {code}", username="alice"),
        fake.send_dm(BOB, f"/start {code}", username="bob"),
    )
    (a,) = await fake.wait_for_messages(ALICE, 1, timeout=STEP)
    (b,) = await fake.wait_for_messages(BOB, 1, timeout=STEP)
    outcomes = sorted([a["content"].startswith("Welcome"), b["content"].startswith("Welcome")])
    assert outcomes == [False, True], (a["content"], b["content"])
    statuses = {(await bot.app.deps.users.get(u)).status for u in (ALICE, BOB)}
    assert statuses == {"active", "pending"}


async def test_allowlist_and_block(start_bot, fake, openai):
    bot = await start_bot(access="allowlist")
    access = bot.app.deps.access
    assert f"panager users allow {ALICE}" in await ask(fake, ALICE, "hi")
    await access.allow(ALICE)
    openai.script("Welcome in.")
    assert await ask(fake, ALICE, "hi again") == "Welcome in."
    await access.block(ALICE)
    assert "don't have access" in await ask(fake, ALICE, "still there?")
    assert len(openai.requests) == 1


# ------------------------------------------------------------ ordering, exactly once


async def test_three_dms_back_to_back_are_answered_in_order(start_bot, fake, openai):
    await start_bot()
    openai.handler = lambda body: f"re: {body['messages'][-1]['content']}"
    openai.delay = 0.1
    for word in ("one", "two", "three"):
        await fake.send_dm(ADMIN, word)
    replies = await fake.wait_for_messages(ADMIN, 3, timeout=STEP)
    assert [r["content"] for r in replies] == ["re: one", "re: two", "re: three"]
    # one turn at a time: each request already carries the previous answers
    history = [json.dumps(r["messages"]) for r in openai.requests]
    assert len(history) == 3
    assert "re: one" in history[1] and "re: two" in history[2]
    # answers to messages that had others waiting behind them quote their question
    assert replies[0].get("message_reference") or fake._messages[replies[0]["id"]].get(
        "message_reference"
    )


async def test_replayed_message_create_is_answered_once(start_bot, fake, openai):
    await start_bot()
    openai.handler = lambda body: f"re: {body['messages'][-1]['content']}"
    await fake.send_dm(ADMIN, "only once", message_id=111_222_333_444)
    await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    await fake.replay_last()
    await fake.send_dm(ADMIN, "only once", message_id=111_222_333_444)

    async def while_away() -> None:
        await fake.send_dm(ADMIN, "sent while disconnected")

    await fake.disconnect_and_resume(during=while_away, timeout=STEP)
    await fake.wait_for_messages(ADMIN, 2, timeout=STEP)
    await fake.replay_last()  # and once more after the RESUME
    assert await ask(fake, ADMIN, "barrier") == "re: barrier"
    assert texts(fake, ADMIN) == ["re: only once", "re: sent while disconnected", "re: barrier"]
    assert len(openai.requests) == 3


async def test_messages_left_over_from_a_dead_process_are_answered_on_start(
    start_bot, fake, openai, make_app, clock
):
    bot = await start_bot()
    inbox = bot.inbox
    fake.user(ADMIN, "admin")  # the DM channel exists on Discord's side
    channel = dm_channel_id(ADMIN)
    common = {"user_id": ADMIN, "channel_id": channel, "username": "admin", "display_name": None}
    assert await inbox.accept(message_id=10, content="half done", **common)
    assert await inbox.claim_next(ADMIN) is not None  # "processing" by a process that dies
    assert await inbox.accept(message_id=11, content="still queued", **common)
    clock.advance(minutes=5)  # the dead process's lease runs out
    openai.handler = lambda body: f"re: {body['messages'][-1]['content']}"
    await bot.queue.recover()
    replies = await fake.wait_for_messages(ADMIN, 2, timeout=STEP)
    assert [r["content"] for r in replies] == ["re: half done", "re: still queued"]
    assert len(openai.requests) == 2


# ------------------------------------------------------------------- robustness


async def test_a_failing_handler_costs_one_short_message_and_the_bot_lives_on(
    start_bot, fake, openai, monkeypatch
):
    bot = await start_bot()

    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(bot.app.assistant, "run_turn", broken)
    assert await ask(fake, ADMIN, "hello") == ERROR_MESSAGE
    monkeypatch.undo()
    openai.script("Back to normal.")
    assert await ask(fake, ADMIN, "hello again") == "Back to normal."
    assert texts(fake, ADMIN) == [ERROR_MESSAGE, "Back to normal."]


@pytest.mark.timing
async def test_model_outage_gets_a_clear_message(start_bot, fake, openai, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("model_retries: 0\n")
    await start_bot(config_path=config)
    openai.fail_for(math.inf, 500)
    reply = await ask(fake, ADMIN, "are you there?")
    assert "Traceback" not in reply and len(reply) < 400


# ---------------------------------------------------------------- slash commands


async def test_slash_commands_are_registered_for_dms_and_answer(start_bot, fake, openai):
    bot = await start_bot()
    names = {c["name"] for c in fake.commands}
    assert {"help", "start", "invite", "timezone", "clear"} <= names
    assert all(c.get("contexts") == [1] for c in fake.commands)  # DMs only
    await fake.send_slash_command(ADMIN, "timezone", {"args": "Europe/Berlin"})
    (reply,) = await fake.wait_for_messages(ADMIN, 1, timeout=STEP)
    assert reply["content"].startswith("Time zone set to Europe/Berlin")
    # a newcomer joins through the command picker
    code = await invite_code(bot)
    await fake.send_slash_command(ALICE, "start", {"args": code})
    (welcome,) = await fake.wait_for_messages(ALICE, 1, timeout=STEP)
    assert welcome["content"].startswith("Welcome")
    await fake.send_slash_command(BOB, "help")
    (refused,) = await fake.wait_for_messages(BOB, 1, timeout=STEP)
    assert "invite-only" in refused["content"]
    assert openai.requests == []


# --------------------------------------------------------------- proactive DMs


async def test_messenger_delivers_dms_with_a_link_button(start_bot, fake):
    bot = await start_bot()
    user = await bot.app.deps.users.ensure(ALICE, "alice")
    link = {"url": "https://accounts.example/auth?state=abc", "label": "Connect Google"}
    assert await bot.app.deps.messenger.send(user, "Please connect Google.", link=link)
    (dm,) = await fake.wait_for_messages(ALICE, 1, timeout=STEP)
    assert dm["content"] == "Please connect Google."
    (button,) = dm["components"][0]["components"]
    assert (button["style"], button["url"], button["label"]) == (5, link["url"], "Connect Google")
    local = await bot.app.local_user()
    assert not await bot.messenger.send(local, "not for Discord")


async def test_reminder_due_while_the_bot_runs_arrives_as_a_dm(start_bot, fake, openai, clock):
    bot = await start_bot()
    openai.script(
        tool_call("schedule_create", {"message": "stretch your legs", "at": "2026-11-21T12:05"}),
        "Okay, I'll remind you at 12:05.",
    )
    await fake.send_dm(ADMIN, "remind me to stretch at 12:05")
    await until(fake, lambda: "Okay, I'll remind you at 12:05." in texts(fake, ADMIN))
    before = len(fake.messages_to(ADMIN))
    clock.advance(minutes=5)
    await bot.app.make_worker().run_once()
    reminder = (await fake.wait_for_messages(ADMIN, before + 1, timeout=STEP))[before]
    assert reminder["content"].startswith("stretch your legs")
    assert len(openai.requests) == 2  # the reminder itself costs no model call

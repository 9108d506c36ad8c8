"""Hostile input through Discord: huge messages, NUL bytes, lone surrogates, forged ids,
oversized tool arguments. Each gets a clear answer, nothing crashes, nothing leaks.

The bot runs in this process (the real PanagerBot on the real database, against
the fake Discord and the fake model API), so the test can look at the stored rows.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from panager.frontends.discord.bot import PanagerBot
from tests.fakes.openai_server import tool_call, tool_calls
from tests.reliability.conftest import TOKEN, last_user_text, texts_to, write_home
from tests.reliability.test_crash_recovery import ask

pytestmark = pytest.mark.timeout(120)

ALICE, BOB = 7301, 7302


@pytest.fixture
async def bot(discord, openai, make_app, tmp_path):
    # The oversized arguments below count as ~160k tokens: no daily budget, so the answers
    # are exactly the model's (the budget has its own tests).
    home = write_home(tmp_path / "home", daily_token_budget=0)
    app = await make_app(
        openai_base_url=openai.base_url, openai_api_key="test", access="open", home=home
    )
    with discord.patch_discord():
        bot = PanagerBot(app, status_interval=0.05, poll_interval=0.05, guild_ready_timeout=0)
        task = asyncio.create_task(bot.start(TOKEN))
        await asyncio.wait_for(bot.wait_until_ready(), 20)
        yield bot
        await bot.close()
        await asyncio.wait_for(task, 20)


async def answered(discord, user_id: int, text: str, answer: str) -> None:
    """Send a DM and wait for `answer` (tool turns post a status message first)."""
    await discord.send_dm(user_id, text)
    try:
        await discord.wait_for(lambda: answer in texts_to(discord, user_id), timeout=20)
    except TimeoutError:
        raise AssertionError(f"no {answer!r}; got {texts_to(discord, user_id)!r}") from None


def tool_results(request: dict) -> list[dict]:
    """The tool messages of a chat request, parsed."""
    return [json.loads(m["content"]) for m in request["messages"] if m.get("role") == "tool"]


async def test_a_20000_character_message_gets_the_limit_and_costs_no_tokens(bot, discord, openai):
    reply = await ask(discord, ALICE, "x" * 20_000)
    assert "20,000 characters; the limit is 8,000" in reply
    assert openai.requests == []
    assert await ask(discord, ALICE, "short now") == "answer to: short now"


async def test_nul_bytes_and_lone_surrogates_are_cleaned_not_fatal(bot, discord, openai):
    fake_name = "eve\udfff"
    discord.user(ALICE, fake_name)
    reply = await ask(discord, ALICE, "hel\x00lo \ud800 world\x00")
    assert reply == "answer to: hello ? world"
    assert "\x00" not in json.dumps(openai.requests[-1])
    user = await bot.app.deps.users.get(ALICE)
    assert user.username == "eve?"
    assert await ask(discord, ALICE, "\ud83d\ude00 fine") == "answer to: \U0001f600 fine"


async def test_tools_called_with_another_users_ids_change_nothing(bot, discord, openai):
    deps = bot.app.deps
    bob = await deps.users.ensure(BOB, "bob")
    memory = (await deps.memory.save(BOB, "Bob's locker code is 4711")).memory
    schedule = await deps.scheduler.create(bob, "Bob's dentist", "2026-11-25T09:00")
    openai.script(
        tool_calls(
            ("memory_forget", {"memory_id": memory.id}),
            ("schedule_cancel", {"schedule_id": schedule.id}),
            ("memory_search", {"query": "locker code"}),
            ("send_user_message", {"recipient": "bob", "text": "hi from alice"}),
        ),
        "I could not do any of that.",
    )
    forged = f"forget memory {memory.id}, cancel {schedule.id}"
    await answered(discord, ALICE, forged, "I could not do any of that.")
    results = tool_results(openai.requests[-1])
    assert len(results) == 4
    assert "4711" not in json.dumps(openai.requests[-1])  # Bob's memory never reached Alice
    assert await deps.memory.get(BOB, memory.id) is not None
    assert (await deps.scheduler.get(BOB, schedule.id)).status == "active"
    # The same through the zero-token slash commands.
    assert "4711" not in await ask(discord, ALICE, f"/memory forget {memory.id}")
    await ask(discord, ALICE, f"/schedules cancel {schedule.id}")
    assert await deps.memory.get(BOB, memory.id) is not None
    assert (await deps.scheduler.get(BOB, schedule.id)).status == "active"
    assert texts_to(discord, BOB) == []


async def test_oversized_tool_arguments_are_refused_and_the_thread_stays_usable(
    bot, discord, openai
):
    deps = bot.app.deps
    openai.script(
        tool_calls(
            ("memory_save", {"content": "m" * 100_000}),
            ("schedule_create", {"message": "s" * 50_000, "at": "2026-11-25T09:00"}),
        ),
        tool_call("memory_save", '{"content": "' + "z" * 200_000),  # cut-off JSON
        "Those were too long.",
    )
    await answered(discord, ALICE, "save all this", "Those were too long.")
    first, second = openai.requests[-2], openai.requests[-1]
    errors = tool_results(first)
    assert len(errors) == 2 and all("000 characters" in e["error"] for e in errors), errors
    assert len(tool_results(second)) == 3  # the malformed call got a result too
    assert await deps.memory.count(ALICE) == 0
    assert await deps.scheduler.list(ALICE) == []
    assert await ask(discord, ALICE, "still fine?") == "answer to: still fine?"
    assert last_user_text(openai.requests[-1]) == "still fine?"
    size = len(json.dumps(openai.requests[-1]))
    assert size < 100_000, f"the next request carries {size:,} characters of old arguments"

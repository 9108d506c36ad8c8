"""Discord, Telegram and the terminal joined into one person, end to end.

The real discord.py and aiogram clients talk to the local fake Discord and
Telegram servers, the model is the local fake OpenAI server, and the database
is the test's own PostgreSQL database. The terminal is the REPL's command
path and its messenger.
"""

from __future__ import annotations

import json

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.frontends.terminal.chat import Console, TerminalMessenger
from tests.discord_helpers import running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import tool_call
from tests.telegram_helpers import STEP, running_front, telegram_settings
from tests.telegram_helpers import ask as tg_ask

pytestmark = pytest.mark.timeout(180)

DISCORD = 424242424242424242
TELEGRAM = 777001


@pytest.fixture
async def discord_fake():
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server
    assert server.unhandled == [], "the bot called routes the fake does not serve"


@pytest.fixture
async def app(make_app, openai, telegram):
    return await make_app(
        openai_base_url=openai.base_url, openai_api_key="test", **telegram_settings(telegram)
    )


async def dc_ask(fake: FakeDiscord, text: str) -> str:
    before = len(fake.messages_to(DISCORD))
    await fake.send_dm(DISCORD, text)
    return (await fake.wait_for_messages(DISCORD, before + 1, timeout=STEP))[before]["content"]


async def terminal(app, text: str) -> str:
    user = await app.deps.users.get(await app.deps.users.person_id("terminal", 1))
    ctx = CommandContext(user=user, assistant=app.assistant, front_end="terminal")
    return (await dispatch(ctx, text)).text


async def dc_turn(fake: FakeDiscord, text: str, answer: str) -> None:
    """Send a DM and wait until `answer` is shown (after the turn's status message)."""
    await fake.send_dm(DISCORD, text)
    await fake.wait_for(lambda: answer in fake.shown_to(DISCORD), STEP)


def code_in(text: str) -> str:
    return text.split("Your link code: ")[1].split()[0]


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_three_front_ends_one_person_memory_reminders_and_unlink(
    app, openai, telegram, discord_fake, clock, capsys
):
    await app.local_user()
    app.deps.messenger.add(TerminalMessenger(Console(interactive=False), app.deps.users))
    async with running_bot(app, discord_fake), running_front(app, telegram):
        # Discord issues, Telegram claims, Discord approves.
        code = code_in(await dc_ask(discord_fake, "/link"))
        claimed = await tg_ask(telegram, TELEGRAM, f"/link {code}")
        assert "Code accepted" in claimed and "one person" in claimed
        assert "Confirmed" in await tg_ask(telegram, TELEGRAM, "/link confirm")
        await discord_fake.wait_for(
            lambda: any("used your link code" in m["content"]
                        for m in discord_fake.messages_to(DISCORD)), STEP
        )
        assert (await dc_ask(discord_fake, "/link approve")).startswith("Joined")
        # The terminal issues, Telegram (already one person with Discord) claims, the
        # terminal approves: all three are one person.
        code = code_in(await terminal(app, "/link"))
        assert "Code accepted" in await tg_ask(telegram, TELEGRAM, f"/link {code}")
        assert "Confirmed" in await tg_ask(telegram, TELEGRAM, "/link confirm")
        assert (await terminal(app, "/link approve")).startswith("Joined")
        users = app.deps.users
        person = await users.person_id("terminal", 1)
        assert await users.person_id("discord", DISCORD) == person
        assert await users.person_id("telegram", TELEGRAM) == person

        # A memory saved on Telegram is recalled on Discord.
        openai.script(
            tool_call("memory_save", {"content": "My locker code is 4711"}), "Saved.",
            tool_call("memory_search", {"query": "locker code"}), "It is 4711.",
        )
        assert await tg_ask(telegram, TELEGRAM, "remember: my locker code is 4711") == "Saved."
        await dc_turn(discord_fake, "what is my locker code?", "It is 4711.")
        assert "4711" in " ".join(tool_results(openai.requests[-1]))

        # A reminder set on Discord (written from last) goes to Telegram after /notify telegram …
        assert "Telegram" in await tg_ask(telegram, TELEGRAM, "/notify telegram")
        openai.script(
            tool_call("schedule_create", {"message": "stretch your legs", "at": "2026-11-21T12:05"}),
            "Okay.",
        )
        await dc_turn(discord_fake, "remind me to stretch at 12:05", "Okay.")
        shown_dc = len(discord_fake.messages_to(DISCORD))
        capsys.readouterr()
        clock.advance(minutes=5)
        await app.make_worker().run_once()
        await telegram.wait_for(
            lambda: telegram.shown_to(TELEGRAM)[-1].startswith("stretch your legs"), STEP
        )
        assert len(discord_fake.messages_to(DISCORD)) == shown_dc  # not on Discord
        assert "stretch your legs" in capsys.readouterr().out  # the open terminal shows a copy

        # … and with auto, to the chat written from last.
        assert "last" in await tg_ask(telegram, TELEGRAM, "/notify auto")
        openai.script(
            tool_call("schedule_create", {"message": "drink water", "at": "2026-11-21T12:10"}),
            "Sure.",
        )
        await dc_turn(discord_fake, "remind me to drink water at 12:10", "Sure.")
        shown_tg = len(telegram.messages_to(TELEGRAM))
        clock.advance(minutes=5)
        await app.make_worker().run_once()
        await discord_fake.wait_for(
            lambda: discord_fake.messages_to(DISCORD)[-1]["content"].startswith("drink water"),
            STEP,
        )
        assert len(telegram.messages_to(TELEGRAM)) == shown_tg

        # /unlink on Telegram: its next message starts an empty person.
        assert (await tg_ask(telegram, TELEGRAM, "/unlink")).startswith("Unlinked")
        openai.script(tool_call("memory_search", {"query": "locker code"}), "I don't know.")
        assert await tg_ask(telegram, TELEGRAM, "what is my locker code?") == "I don't know."
        fresh = await users.person_id("telegram", TELEGRAM)
        assert fresh != person and await users.identities(fresh) == [("telegram", TELEGRAM)]
        request = openai.requests[-1]
        said = [m["content"] for m in request["messages"] if m["role"] == "user"]
        assert said == ["what is my locker code?"]  # an empty conversation
        assert "4711" not in json.dumps(request)  # and none of the joined person's memories
        assert await users.person_id("discord", DISCORD) == person  # the rest stays together

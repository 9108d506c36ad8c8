"""The model API answers 500 for 30 s: one clear message per user message, then recovery."""

from __future__ import annotations

import asyncio

import pytest

from panager.llm import UNAVAILABLE_MESSAGE
from tests.reliability.conftest import texts_to, write_home
from tests.reliability.test_crash_recovery import ask

pytestmark = pytest.mark.timeout(180)

OUTAGE_SECONDS = 30
EARLY = [7201, 7202, 7203, 7204]  # write as the outage starts
MIDWAY = [7205, 7206, 7207, 7208]  # write halfway through it
CLEAR = UNAVAILABLE_MESSAGE.split("(")[0]


async def test_model_500s_for_30s_get_one_clear_message_each_then_answers(
    panager_run, discord, openai, db_url, tmp_path
):
    run = panager_run(database_url=db_url, home=write_home(tmp_path / "home"))
    await run.start()
    loop = asyncio.get_running_loop()
    openai.fail_for(OUTAGE_SECONDS, status=500)
    started = loop.time()
    await asyncio.gather(*(discord.send_dm(u, f"hello from {u}") for u in EARLY))
    await asyncio.gather(*(discord.wait_for_messages(u, 1, timeout=30) for u in EARLY))
    await asyncio.sleep(max(0.0, OUTAGE_SECONDS / 2 - (loop.time() - started)))
    await asyncio.gather(*(discord.send_dm(u, f"hello from {u}") for u in MIDWAY))
    await asyncio.gather(*(discord.wait_for_messages(u, 1, timeout=30) for u in MIDWAY))
    failed_requests = len(openai.requests)

    await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (loop.time() - started)) + 0.5)
    answers = await asyncio.gather(*(ask(discord, u, "still there?") for u in EARLY + MIDWAY))
    assert answers == ["answer to: still there?"] * len(EARLY + MIDWAY)
    for user in EARLY + MIDWAY:
        first, second = texts_to(discord, user)  # exactly one message per message
        assert first.startswith(CLEAR) and "server error 500" in first, first
        assert "Traceback" not in first and second == "answer to: still there?"
    assert failed_requests >= 2 * len(EARLY + MIDWAY)  # each message was retried first
    assert run.alive and "Traceback" not in run.log()

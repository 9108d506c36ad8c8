"""The model API answers 500 for a while: one clear message per user message, then recovery.

The outage lasts until the test ends it, not for a number of seconds: users write as it
starts, more users write once the first ones' requests have been refused and retried,
and it ends only after every one of them has had their message."""

from __future__ import annotations

import asyncio
import math

import pytest

from panager.model_retries import UNAVAILABLE_MESSAGE
from tests.reliability.conftest import eventually, texts_to, write_home
from tests.reliability.test_crash_recovery import ask

pytestmark = pytest.mark.timeout(180)

EARLY = [7201, 7202, 7203, 7204]  # write as the outage starts
MIDWAY = [7205, 7206, 7207, 7208]  # write halfway through it
CLEAR = UNAVAILABLE_MESSAGE.split("(")[0]


async def test_model_500s_for_a_while_get_one_clear_message_each_then_answers(
    panager_run, discord, openai, db_url, tmp_path
):
    run = panager_run(database_url=db_url, home=write_home(tmp_path / "home"))
    await run.start()
    openai.fail_for(math.inf, status=500)
    await asyncio.gather(*(discord.send_dm(u, f"hello from {u}") for u in EARLY))
    await eventually(lambda: len(openai.requests) >= 2 * len(EARLY), 30, "refused retries")
    await asyncio.gather(*(discord.send_dm(u, f"hello from {u}") for u in MIDWAY))
    await asyncio.gather(*(discord.wait_for_messages(u, 1, timeout=60) for u in EARLY + MIDWAY))
    failed_requests = len(openai.requests)

    openai.recover()
    answers = await asyncio.gather(*(ask(discord, u, "still there?") for u in EARLY + MIDWAY))
    assert answers == ["answer to: still there?"] * len(EARLY + MIDWAY)
    for user in EARLY + MIDWAY:
        first, second = texts_to(discord, user)  # exactly one message per message
        assert first.startswith(CLEAR) and "server error 500" in first, first
        assert "Traceback" not in first and second == "answer to: still there?"
    assert failed_requests >= 2 * len(EARLY + MIDWAY)  # each message was retried first
    assert run.alive and "Traceback" not in run.log()

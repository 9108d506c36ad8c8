"""`panager run --components telegram,worker` killed with SIGKILL mid-turn, then restarted.

Telegram keeps an update until a `getUpdates` with a higher offset confirms it,
and the process stores each update before confirming it: the message the
process was answering when it died is answered once after the restart, so is
a message sent while no process ran, and the bot token shows up in no log line.
"""

from __future__ import annotations

import pytest

from tests.reliability.conftest import eventually, last_user_text, write_home
from tests.reliability.test_crash_recovery import FAST_LEASES, hold_model_on

pytestmark = pytest.mark.timeout(180)

PERSON = 7002



async def test_kill_9_mid_turn_is_answered_once_after_restart(
    panager_run, telegram, openai, db_url, tmp_path
):
    home = write_home(tmp_path / "home", telegram_poll_seconds=1, **FAST_LEASES)
    run = panager_run(
        database_url=db_url,
        home=home,
        components="telegram,worker",
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_URL=telegram.base_url,
    )
    await run.start()
    telegram.dm(PERSON, "hello")
    await telegram.wait_for(lambda: telegram.shown_to(PERSON) == ["answer to: hello"], 30)

    release_model = hold_model_on(openai, "the plan")
    telegram.dm(PERSON, "what was the plan?")
    await eventually(
        lambda: any("the plan" in last_user_text(b) for b in openai.requests), 20, "model call"
    )
    run.kill()
    assert await run.wait_dead() == -9
    release_model.set()
    telegram.dm(PERSON, "are you there?")  # sent while no process runs: Telegram keeps it
    await run.start()
    expected = ["answer to: hello", "answer to: what was the plan?", "answer to: are you there?"]
    await telegram.wait_for(lambda: telegram.shown_to(PERSON) == expected, 60)
    asked = [last_user_text(b) for b in openai.requests]
    assert asked.count("are you there?") == 1 and asked.count("hello") == 1
    assert "panager is running" in run.log() and "Traceback" not in run.log()
    assert telegram.token not in run.log() and telegram.token.split(":")[1] not in run.log()

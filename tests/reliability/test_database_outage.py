"""PostgreSQL stops for 10 s under a running `panager run`, then comes back.

The bot must answer again without a restart, and users who wrote while the
database was away are told at once and answered once it is back — their
messages are never silently dropped. This test runs its own PostgreSQL (the
pgserver binaries), since stopping the session's shared server would break
every other test.
"""

from __future__ import annotations

import asyncio

import pytest

from panager.frontends.discord.bot import STORE_DELAYED
from tests.reliability.conftest import eventually, last_user_text, texts_to, write_home
from tests.reliability.stoppable_pg import StoppablePostgres
from tests.reliability.test_crash_recovery import ask, hold_model_on

pytestmark = pytest.mark.timeout(180)

OUTAGE_SECONDS = 10
EARLY, LATE, BUSY, AFTER = 7101, 7102, 7103, 7104


@pytest.fixture
def postgres():
    server = StoppablePostgres()
    yield server
    server.close()


async def test_database_outage_is_ridden_out_and_reported(
    panager_run, discord, openai, postgres, tmp_path
):
    url = postgres.database("panager")
    run = panager_run(database_url=url, home=write_home(tmp_path / "home"))
    await run.start()
    assert await ask(discord, EARLY, "before") == "answer to: before"
    release = hold_model_on(openai, "busy")
    await discord.send_dm(BUSY, "busy question")  # a turn is running when the database stops
    await eventually(lambda: any("busy" in last_user_text(b) for b in openai.requests), 20, "turn")

    loop = asyncio.get_running_loop()
    await asyncio.to_thread(postgres.stop)
    stopped = loop.time()
    release.set()
    await discord.send_dm(LATE, "written during the outage")
    await discord.send_dm(EARLY, "me too")
    for user in (LATE, EARLY):  # told within seconds, not left waiting in silence
        await eventually(lambda u=user: STORE_DELAYED in texts_to(discord, u), 10, "the notice")
    await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (loop.time() - stopped)))
    await asyncio.to_thread(postgres.start)

    await discord.wait_for_messages(LATE, 2, timeout=60)
    await discord.wait_for_messages(EARLY, 3, timeout=60)
    assert texts_to(discord, LATE) == [STORE_DELAYED, "answer to: written during the outage"]
    assert texts_to(discord, EARLY) == ["answer to: before", STORE_DELAYED, "answer to: me too"]
    assert await ask(discord, AFTER, "after") == "answer to: after"
    # The turn cut off by the outage got one clear sentence (no silence, no traceback).
    (busy,) = texts_to(discord, BUSY)
    assert busy.startswith(("answer to: busy question", "Sorry")), busy
    assert run.alive and run.starts == 1  # recovered without a restart

"""`panager run` killed with SIGKILL mid-turn and mid-delivery, and stopped with SIGTERM.

What must hold after a restart: the message the process was answering when it
died is answered (once), so is a message sent while no process was running
(read back from the DM history: Discord does not send it again), a reminder whose send was cut off reaches the user
once, the conversation carries on, and checkpoint pruning keeps the thread's
storage small in the running process.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from panager.clock import SystemClock
from panager.db.pool import open_pool
from panager.services.schedules.service import ScheduleService
from panager.services.users import UserService
from tests.fakes.openai_server import Reply
from tests.reliability.conftest import eventually, last_user_text, texts_to, write_home

pytestmark = pytest.mark.timeout(180)

USER = 7001
REMINDER = "stretch your legs"
FAST_LEASES = {
    "inbox_lease_seconds": 2,
    "scheduler_lease_seconds": 3,
    "scheduler_poll_seconds": 0.5,
}


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=2)
    yield pool
    await pool.close()


async def one(pool, sql: str, *params):
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchone()


async def create_reminder(pool, user_id: int, text: str, in_seconds: float) -> str:
    """A one-off reminder stored as the schedule_create tool would store it."""
    user = await UserService(pool, "UTC").ensure(user_id, f"user{user_id}")
    at = (datetime.now(UTC) + timedelta(seconds=in_seconds)).isoformat()
    return (await ScheduleService(pool, SystemClock()).create(user, text, at)).id


async def ask(discord, user_id: int, text: str, timeout: float = 20) -> str:
    """Send a DM and return the next message the bot sends that user."""
    before = len(discord.messages_to(user_id))
    await discord.send_dm(user_id, text)
    replies = await discord.wait_for_messages(user_id, before + 1, timeout=timeout)
    return replies[before]["content"]


def hold_model_on(openai, words: str) -> asyncio.Event:
    """Model requests whose user text contains `words` hang until the returned event is set."""
    release = asyncio.Event()

    async def handler(body):
        text = last_user_text(body)
        if words in text:
            await release.wait()
        return f"answer to: {text}"

    openai.handler = handler
    return release


def hold_discord_on(discord, words: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Bot messages containing `words` are posted, then the response hangs until released."""
    posted, release = asyncio.Event(), asyncio.Event()

    async def after_create(message):
        if words in message["content"]:
            posted.set()
            await release.wait()

    discord.after_create = after_create
    return posted, release


async def test_kill_9_mid_turn_and_mid_delivery_loses_and_repeats_nothing(
    panager_run, discord, openai, db_url, pool, tmp_path
):
    run = panager_run(database_url=db_url, home=write_home(tmp_path / "home", **FAST_LEASES))
    await run.start()
    assert await ask(discord, USER, "hello") == "answer to: hello"

    # 1. Killed while the model is still thinking about a message.
    release_model = hold_model_on(openai, "the plan")
    await discord.send_dm(USER, "what was the plan?")
    await eventually(
        lambda: any("the plan" in last_user_text(b) for b in openai.requests), 20, "model call"
    )
    run.kill()
    assert await run.wait_dead() == -9
    release_model.set()
    await eventually(lambda: not discord._gateway.ready.is_set(), 10, "the gateway to notice")
    await discord.send_dm(USER, "are you there?")  # no process connected: Discord won't resend
    await run.start()  # the dead process's claim runs out; the message is queued again
    await discord.wait_for_messages(USER, 3, timeout=30)
    assert texts_to(discord, USER) == [
        "answer to: hello",
        "answer to: what was the plan?",
        "answer to: are you there?",  # read back from the DM history
    ]

    # 2. Killed after Discord posted a reminder but before the bot heard back.
    posted, release_discord = hold_discord_on(discord, REMINDER)
    schedule_id = await create_reminder(pool, USER, REMINDER, in_seconds=1.5)
    await asyncio.wait_for(posted.wait(), 30)
    run.kill()
    await run.wait_dead()
    release_discord.set()
    await run.start()  # another worker takes over the cut-off send: same nonce, no copy
    delivered = "SELECT status FROM schedule_runs WHERE schedule_id = %s"
    await eventually(
        lambda: _status_is(pool, delivered, schedule_id, "delivered"), 30, "the run delivered"
    )
    await asyncio.sleep(0.5)  # room for a (wrong) second copy to show up
    assert sum(REMINDER in t for t in texts_to(discord, USER)) == 1

    # 3. The conversation carries on, with each message in it once.
    assert await ask(discord, USER, "and now?") == "answer to: and now?"
    history = [m.get("content") for m in openai.requests[-1]["messages"]]
    assert history.count("what was the plan?") == 1
    assert history.count("answer to: what was the plan?") == 1
    assert "panager is running" in run.log() and "Traceback" not in run.log()


async def _status_is(pool, sql: str, key: str, status: str) -> bool:
    row = await one(pool, sql, key)
    return row is not None and row["status"] == status


async def test_checkpoints_are_pruned_in_panager_run(
    panager_run, discord, openai, db_url, pool, tmp_path
):
    run = panager_run(database_url=db_url, home=write_home(tmp_path / "home"))
    await run.start()
    turns = 9
    for i in range(turns):
        assert await ask(discord, USER, f"message {i}") == f"answer to: message {i}"
    count = "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s"

    async def pruned() -> bool:
        return (await one(pool, count, str(USER)))["n"] <= 5

    await eventually(pruned, 10, "checkpoints pruned")  # without pruning: one per turn or more
    history = [m.get("content") for m in openai.requests[-1]["messages"]]
    assert [f"message {i}" for i in range(turns)] == [h for h in history if h.startswith("mess")]


async def test_sigterm_finishes_the_turn_and_releases_claimed_schedules(
    panager_run, discord, openai, db_url, pool, tmp_path
):
    # The default 60 s lease: a send cut off by the shutdown is not retried by its own timeout.
    home = write_home(tmp_path / "home", scheduler_poll_seconds=0.5)
    run = panager_run(database_url=db_url, home=home)
    await run.start()
    assert await ask(discord, USER, "hello") == "answer to: hello"
    posted, release_discord = hold_discord_on(discord, REMINDER)
    schedule_id = await create_reminder(pool, USER, REMINDER, in_seconds=1)
    await asyncio.wait_for(posted.wait(), 30)  # a delivery hangs ...
    release_model = hold_model_on(openai, "slow")
    await discord.send_dm(USER, "a slow question")  # ... and a turn is running
    await eventually(lambda: any("slow" in last_user_text(b) for b in openai.requests), 20, "turn")
    asyncio.get_running_loop().call_later(1.0, release_model.set)
    assert await run.terminate() == 0
    assert "answer to: a slow question" in texts_to(discord, USER)  # finished, not dropped
    assert "panager stopped" in run.log() and "Traceback" not in run.log()
    claim = "SELECT claimed_by, lease_until FROM schedules WHERE id = %s"
    assert dict(await one(pool, claim, schedule_id)) == {"claimed_by": None, "lease_until": None}
    busy = "SELECT count(*) AS n FROM discord_inbox WHERE status IN ('queued', 'processing')"
    assert (await one(pool, busy))["n"] == 0
    release_discord.set()

    await run.start()  # released: the next process delivers at once, without a second copy
    delivered = "SELECT status FROM schedule_runs WHERE schedule_id = %s"
    await eventually(
        lambda: _status_is(pool, delivered, schedule_id, "delivered"), 15, "the run delivered"
    )
    assert sum(REMINDER in t for t in texts_to(discord, USER)) == 1


async def test_kill_9_mid_stream_leaves_one_complete_answer(
    panager_run, discord, openai, db_url, tmp_path
):
    run = panager_run(database_url=db_url, home=write_home(tmp_path / "home", **FAST_LEASES))
    await run.start()
    answer = " ".join(f"piece{i}" for i in range(150)) + "\n\nAll done."
    pieces = [answer[i : i + 30] for i in range(0, len(answer), 30)]
    openai.script(
        Reply(content=answer, pieces=pieces, piece_delay=0.15),  # killed part-way through
        Reply(content=answer, pieces=pieces, piece_delay=0.02),  # the run after the restart
    )
    await discord.send_dm(USER, "tell me everything")
    (posted,) = await discord.wait_for_messages(USER, 1, timeout=30)
    await eventually(lambda: discord.edits_of(posted["id"]), 20, "an edit of the streamed answer")
    assert discord.shown_to(USER) != [answer]  # killed mid-stream: the message is partial
    run.kill()
    assert await run.wait_dead() == -9
    await run.start()  # the message is queued again; the turn runs anew and streams again
    await eventually(lambda: discord.shown_to(USER) == [answer], 40, "the complete answer")
    await asyncio.sleep(1.5)  # room for a (wrong) second copy to show up
    assert discord.shown_to(USER) == [answer]
    assert [m["id"] for m in discord.messages_to(USER)] == [posted["id"]]
    assert "Traceback" not in run.log()

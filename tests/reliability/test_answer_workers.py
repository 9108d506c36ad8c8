"""A receiver and two answer workers (`panager run --components answers`), one killed mid-answer.

The receiver (`--components discord`, `receiver_answers: false`) holds the
gateway and only stores DMs; two answer worker processes claim the stored rows
through the inbox and answer over Discord's REST API. While one worker is
inside a turn (the model holds that message), it gets SIGKILL. What must hold:
every message answered exactly once, each person's answers in the order of
their messages, the receiver answering none, and no person ever having two
model calls at once (their messages are never answered by two workers at the
same time).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from panager.db.pool import open_pool
from tests.reliability.conftest import eventually, last_user_text, write_home

pytestmark = pytest.mark.timeout(240)

USERS = 6
MESSAGES = 4
FIRST_USER = 510_000
HELD = (FIRST_USER, 1)  # the message the killed worker is answering
MARKER = re.compile(r"u(\d+)-m(\d+)")
CONFIG = {"inbox_lease_seconds": 5, "receiver_answers": False}


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=2)
    yield pool
    await pool.close()


async def fetch(pool, sql: str, *params) -> list[dict]:
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def test_two_answer_workers_and_a_kill_answer_everything_once_in_order(
    panager_run, discord, openai, db_url, pool, tmp_path
):
    in_flight: Counter[int] = Counter()
    most_at_once: Counter[int] = Counter()
    release = asyncio.Event()

    async def model(body: dict) -> str:
        text = last_user_text(body)
        found = MARKER.search(text)
        if found is None:
            return f"answer to: {text}"
        user, k = int(found.group(1)), int(found.group(2))
        in_flight[user] += 1
        most_at_once[user] = max(most_at_once[user], in_flight[user])
        try:
            if (user, k) == HELD:
                await release.wait()
            else:
                await asyncio.sleep(0)  # let other requests in while this one is counted
        finally:
            in_flight[user] -= 1
        return f"answer to: {text}"

    openai.handler = model
    receiver = panager_run(
        database_url=db_url, home=write_home(tmp_path / "receiver", **CONFIG),
        components="discord",
    )
    workers = [
        panager_run(database_url=db_url, home=write_home(tmp_path / f"w{i}", **CONFIG),
                    components="answers")
        for i in range(2)
    ]
    await asyncio.gather(receiver.start(), *(w.start() for w in workers))
    assert all("answers discord" in w.log() for w in workers)

    users = [FIRST_USER + i for i in range(USERS)]

    async def writes(user: int) -> None:
        for k in range(MESSAGES):
            await discord.send_dm(user, f"u{user}-m{k} please echo")

    await asyncio.gather(*(writes(u) for u in users))
    held_text = f"u{HELD[0]}-m{HELD[1]}"
    await eventually(
        lambda: any(held_text in last_user_text(b) for b in openai.requests), 60,
        "the held message to reach the model",
    )
    (row,) = await fetch(
        pool, "SELECT claimed_by FROM discord_inbox WHERE user_id = %s AND status = 'processing'",
        HELD[0],
    )
    (victim,) = [w for w in workers if f":{w.proc.pid}:" in row["claimed_by"]]
    survivor = next(w for w in workers if w is not victim)
    victim.kill()
    assert await victim.wait_dead() == -9
    release.set()

    total = USERS * MESSAGES
    await discord.wait_for(lambda: len(discord.sent) >= total, timeout=120)
    for user in users:
        got = [MARKER.search(m["content"]) for m in discord.messages_to(user)]
        assert all(got), [m["content"] for m in discord.messages_to(user)]
        pairs = [(int(g.group(1)), int(g.group(2))) for g in got if g]
        assert pairs == [(user, k) for k in range(MESSAGES)], f"user {user} got {pairs}"
    assert len(discord.sent) == total  # nothing twice, no notices
    assert max(most_at_once.values()) == 1, dict(most_at_once)

    async def all_recorded() -> bool:  # the row is marked done just after its answer is posted
        done = await fetch(pool, "SELECT 1 FROM discord_inbox WHERE status = 'done'")
        return len(done) == total

    await eventually(all_recorded, 60, "every message recorded as answered")
    rows = await fetch(pool, "SELECT status, claimed_by, attempts FROM discord_inbox")
    assert len(rows) == total
    claimers = {r["claimed_by"].split(":")[1] for r in rows}
    assert str(receiver.proc.pid) not in claimers  # the receiver only stored
    assert str(survivor.proc.pid) in claimers
    retried = [r for r in rows if r["attempts"]]  # what the victim held when it died
    assert {r["claimed_by"].split(":")[1] for r in retried} == {str(survivor.proc.pid)}
    assert receiver.alive and survivor.alive

"""Many users send 5 DMs each at once to a real `panager run`; the model takes 200 ms.

Every message must be answered, each user's answers must come in the order
of their messages, and each answer must carry the asker's own marker (the
fake model echoes the user's message, so an answer given to the wrong user or
from the wrong thread shows up as a foreign marker).

In the suite 24 users write (PANAGER_LOAD_USERS changes it): their turns run
at the same time through one graph, one checkpointer and a pool of 20
connections (more users than connections), while each user's later messages
queue behind the turn that is running; that is what ordering, cross-talk and
loss depend on, and more users add only more of the same. The throughput figure
comes from `bench/load.py`, which runs this test with 200 users and reports
throughput and latency (DM dispatched → answer posted) as JSON, in both
layouts: PANAGER_LOAD_LAYOUT=one (one `panager run`, the default) and `split`
(a receiver that only stores, `receiver_answers: false`, plus two
`panager run --components answers` processes).
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import time

import pytest

from bench.common import percentile
from tests.reliability.conftest import report, write_home

USERS = int(os.environ.get("PANAGER_LOAD_USERS", "24"))
LAYOUT = os.environ.get("PANAGER_LOAD_LAYOUT", "one")
ANSWER_WORKERS = 2  # in the split layout
pytestmark = pytest.mark.timeout(120 + USERS)

MESSAGES = 5
MODEL_SECONDS = 0.2
FIRST_USER = 300_000
MARKER = re.compile(r"u(\d+)-m(\d+)")


async def test_users_5_dms_each_all_answered_in_order_without_cross_talk(
    panager_run, discord, openai, db_url, tmp_path
):
    openai.delay = MODEL_SECONDS
    if LAYOUT == "split":
        config = {"receiver_answers": False}
        run = panager_run(database_url=db_url, home=write_home(tmp_path / "home", **config))
        workers = [
            panager_run(database_url=db_url, components="answers",
                        home=write_home(tmp_path / f"answers{i}", **config))
            for i in range(ANSWER_WORKERS)
        ]
    else:
        run, workers = panager_run(database_url=db_url, home=write_home(tmp_path / "home")), []
    await asyncio.gather(run.start(), *(w.start() for w in workers))
    users = [FIRST_USER + i for i in range(USERS)]
    sent_at: dict[tuple[int, int], float] = {}

    async def user_writes(user: int) -> None:
        for k in range(MESSAGES):
            sent_at[(user, k)] = time.monotonic()
            await discord.send_dm(user, f"u{user}-m{k} please echo")

    started = time.monotonic()
    await asyncio.gather(*(user_writes(u) for u in users))
    total = USERS * MESSAGES
    await discord.wait_for(lambda: len(discord.sent) >= total, timeout=60 + USERS)
    finished = max(m["time"] for m in discord.sent)

    latencies = []
    for user in users:
        replies = discord.messages_to(user)
        markers = [MARKER.search(r["content"]) for r in replies]
        assert all(markers), [r["content"] for r in replies]
        got = [(int(m.group(1)), int(m.group(2))) for m in markers]
        assert got == [(user, k) for k in range(MESSAGES)], f"user {user} got {got}"
        latencies += [r["time"] - sent_at[(user, k)] for k, r in enumerate(replies)]
    assert len(discord.sent) == total  # nothing extra: no notices, no duplicates

    numbers = {
        "messages": total,
        "users": USERS,
        "model_ms": int(MODEL_SECONDS * 1000),
        "wall_s": round(finished - started, 1),
        "throughput_per_s": round(total / (finished - started), 1),
        "latency_p50_s": round(statistics.median(latencies), 2),
        "latency_p95_s": round(percentile(latencies, 95), 2),
        "latency_max_s": round(max(latencies), 2),
        # Discord calls besides the answers themselves, per message
        "edits_per_message": round(len(discord.edits) / total, 2),
        "typing_per_message": round(len(discord.typing) / total, 2),
    }
    title = f"{USERS} users x {MESSAGES} DMs" + (", split" if workers else "")
    report(title, numbers)
    print(f"\nload: {numbers}")
    assert run.alive and all(w.alive for w in workers)

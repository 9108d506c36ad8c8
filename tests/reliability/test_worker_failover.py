"""Two `panager run --components worker` processes, 200 reminders due at once.

One worker is killed with SIGKILL at the due time, while every send it started
is posted to Discord but not yet answered. PostgreSQL releases the dead
worker's presence lock with its connection; the surviving worker takes its
claims back within about a second instead of after the 60 s lease, and
re-sends each cut-off reminder with the same nonce, so every user sees every
reminder exactly once. A worker paused with SIGSTOP (shorter than the lease)
keeps its connection, so its lock, so its claims.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from bench.common import percentile
from panager.clock import SystemClock
from panager.db.pool import open_pool
from panager.services.schedules.service import ScheduleService
from panager.services.users import UserService
from tests.reliability.conftest import eventually, report, write_home

pytestmark = pytest.mark.timeout(240)

USERS = 20
PER_USER = 10
FIRST_USER = 610_000
LEASE_SECONDS = 60
WORKER_CONFIG = {"scheduler_lease_seconds": LEASE_SECONDS, "scheduler_poll_seconds": 0.5}
TEXT = re.compile(r"reminder u\d+ n\d+")
CLAIMS = "SELECT id, claimed_by FROM schedules WHERE claimed_by IS NOT NULL"


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=4)
    yield pool
    await pool.close()


async def rows(pool, sql: str, *params) -> list[dict]:
    async with pool.connection() as conn:
        return await (await conn.execute(sql, params)).fetchall()


async def two_workers(panager_run, db_url, tmp_path):
    runs = [
        panager_run(
            database_url=db_url,
            home=write_home(tmp_path / f"w{i}", **WORKER_CONFIG),
            components="worker",
        )
        for i in range(2)
    ]
    await asyncio.gather(*(r.start() for r in runs))
    return runs


async def reminders_due_together(pool, count_per_user: int, in_seconds: float) -> dict[str, str]:
    """Reminders for USERS users, all due at the same instant; {schedule id: text}."""
    users = UserService(pool, "UTC")
    service = ScheduleService(pool, SystemClock())
    at = (datetime.now(UTC) + timedelta(seconds=in_seconds)).replace(microsecond=0)
    made = {}
    for u in range(USERS):
        user = await users.ensure(FIRST_USER + u, f"user{u}")
        for k in range(count_per_user):
            text = f"reminder u{u} n{k}"
            made[(await service.create(user, text, at.isoformat())).id] = text
    return made


def slow_posts(discord, seconds: float = 0.1) -> None:
    """Every bot message is stored at once; Discord's answer takes `seconds`."""

    async def after_create(message):
        await asyncio.sleep(seconds)

    discord.after_create = after_create


def owner_of(run) -> str:
    return f":{run.proc.pid}:"


async def claims_by(pool, run) -> set[str]:
    return {r["id"] for r in await rows(pool, CLAIMS) if owner_of(run) in r["claimed_by"]}


async def both_sending(pool, runs) -> bool:
    """Both workers hold claims, and each has a send under way (posted, not yet answered)."""
    claimed = await rows(pool, CLAIMS)
    sending = await rows(pool, "SELECT claimed_by FROM schedule_runs WHERE status = 'sending'")
    return all(
        any(owner_of(r) in c["claimed_by"] for c in claimed)
        and any(owner_of(r) in c["claimed_by"] for c in sending)
        for r in runs
    )


def assert_each_seen_once(discord, made: dict[str, str]) -> None:
    seen = Counter(m.group(0) for s in discord.sent if (m := TEXT.search(s["content"])))
    texts = Counter(made.values())
    shown = {t: seen[t] for t in texts if seen[t] != 1}
    assert not shown, f"reminders not seen exactly once: {list(shown.items())[:5]}"
    assert len(discord.sent) == len(made)


async def all_delivered(pool, count: int) -> bool:
    done = await rows(pool, "SELECT count(*) AS n FROM schedule_runs WHERE status = 'delivered'")
    return done[0]["n"] == count


async def test_sigkill_at_due_time_the_dead_workers_share_is_delivered_in_seconds(
    panager_run, discord, db_url, pool, tmp_path
):
    killed, survivor = await two_workers(panager_run, db_url, tmp_path)
    slow_posts(discord)
    made = await reminders_due_together(pool, PER_USER, in_seconds=3)
    await eventually(lambda: both_sending(pool, [killed, survivor]), 30, "claims")
    orphaned = await claims_by(pool, killed)
    killed.kill()
    killed_at = datetime.now(UTC)
    await killed.wait_dead()

    await eventually(lambda: all_delivered(pool, len(made)), 60, "all 200 delivered")
    assert_each_seen_once(discord, made)
    runs = await rows(
        pool,
        "SELECT schedule_id, delivered_at, attempts FROM schedule_runs WHERE schedule_id = ANY(%s)",
        list(orphaned),
    )
    delays = [(r["delivered_at"] - killed_at).total_seconds() for r in runs]
    numbers = {
        "reminders": len(made),
        "killed_workers_share": len(orphaned),
        "resent_same_nonce": sum(r["attempts"] > 1 for r in runs),
        "recovery_p50_s": round(percentile(delays, 50), 2),
        "recovery_p99_s": round(percentile(delays, 99), 2),
        "recovery_max_s": round(max(delays), 2),
        "lease_s": LEASE_SECONDS,
    }
    report("worker killed at due time", numbers)
    print(f"\nfailover: {numbers}")
    assert len(runs) == len(orphaned) > 0
    assert numbers["resent_same_nonce"] > 0  # the dead worker's sends were cut off mid-way
    # Recovered by the presence lock, not by the lease running out (which takes 60 s).
    assert max(delays) < LEASE_SECONDS / 2, numbers
    assert "took back" in survivor.log() and "Traceback" not in survivor.log()


async def settled_claims(pool, stopped) -> set[str]:
    """The claims of a stopped process once two reads a moment apart agree (what it had
    in flight when it stopped may still commit)."""
    before = await claims_by(pool, stopped)
    while True:
        await asyncio.sleep(0.5)
        now = await claims_by(pool, stopped)
        if now == before:
            return now
        before = now


async def test_a_paused_worker_keeps_its_claims(panager_run, discord, db_url, pool, tmp_path):
    paused, other = await two_workers(panager_run, db_url, tmp_path)
    slow_posts(discord)
    made = await reminders_due_together(pool, PER_USER, in_seconds=3)
    await eventually(lambda: both_sending(pool, [paused, other]), 30, "claims")
    paused.signal(signal.SIGSTOP)
    try:
        held = await settled_claims(pool, paused)  # a commit sent just before the stop lands
        await asyncio.sleep(4)  # the other worker looks for dead owners every second
        assert held and await claims_by(pool, paused) == held
    finally:
        paused.signal(signal.SIGCONT)
    await eventually(lambda: all_delivered(pool, len(made)), 60, "all delivered")
    assert_each_seen_once(discord, made)
    runs = await rows(
        pool,
        "SELECT claimed_by, attempts FROM schedule_runs WHERE schedule_id = ANY(%s)",
        list(held),
    )
    assert all(owner_of(paused) in r["claimed_by"] and r["attempts"] == 1 for r in runs), runs
    assert "took back" not in other.log()

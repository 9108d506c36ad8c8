"""Presence locks on the real PostgreSQL: a killed process's claims are found at once.

The claim owner is a real child process holding its presence lock; it is
paused (SIGSTOP: still present) and then killed (SIGKILL: gone as soon as
PostgreSQL sees its connection drop). Inbox and schedule claims of a gone
owner are taken back without any clock moving past a lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta

import pytest

from panager.db.pool import open_pool
from panager.db.presence import Presence
from panager.services.inbox import InboxService
from panager.services.schedules.liveness import reclaim_orphans
from panager.services.schedules.service import ScheduleService
from panager.services.users import UserService
from tests.reliability.conftest import eventually

HOLDER = """
import asyncio, sys
from panager.db.presence import Presence

async def main():
    await Presence(sys.argv[1], sys.argv[2]).start()
    print("held", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""
COMMON = {"user_id": 9, "channel_id": 900009, "username": "u", "display_name": None}


@pytest.fixture
async def pool(db_url):
    pool = await open_pool(db_url, max_size=3)
    yield pool
    await pool.close()


@pytest.fixture
async def holder(db_url):
    """Factory: a child process holding the presence lock of `owner`."""
    procs = []

    async def start(owner: str):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOLDER, db_url, owner, stdout=asyncio.subprocess.PIPE
        )
        procs.append(proc)
        assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"held"
        return proc

    yield start
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_inbox_claim_of_a_killed_process_is_queued_again_at_once(pool, clock, holder):
    dead = InboxService(pool, clock, "bot-a")
    alive = InboxService(pool, clock, "bot-b")
    await dead.accept(message_id=1, content="asked just before the crash", **COMMON)
    assert (await dead.claim_next(9)).message_id == 1
    proc = await holder("bot-a")
    assert await alive.recover_orphaned() == []  # bot-a is alive: hands off
    os.kill(proc.pid, signal.SIGSTOP)  # slow, not dead: the session and its lock stay
    try:
        await asyncio.sleep(0.5)
        assert await alive.recover_orphaned() == []
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    await proc.wait()
    found: list = []

    async def recovered() -> bool:
        found.extend(await alive.recover_orphaned())
        return bool(found)

    await eventually(recovered, 10, "the dead process's message")  # no clock advanced
    assert [(m.message_id, m.status, m.attempts) for m in found] == [(1, "queued", 1)]
    assert (await alive.claim_next(9)).content == "asked just before the crash"
    assert await alive.recover_orphaned() == []  # never our own claims


async def test_schedule_claims_of_a_killed_worker_are_released(pool, db_url, holder, clock):
    user = await UserService(pool, "UTC").ensure(9, "u")
    service = ScheduleService(pool, clock)
    for k in range(3):
        await service.create(user, f"r{k}", (clock.now() + timedelta(minutes=1)).isoformat())
    clock.advance(minutes=2)
    lease = timedelta(minutes=10)
    assert len(await service.claims.claim_due("worker-a", clock.now(), lease=lease)) == 3
    proc = await holder("worker-a")
    me = Presence(db_url, "worker-b")
    await me.start()
    try:
        assert await reclaim_orphans(pool, "worker-b") == 0
        assert await service.claims.claim_due("worker-b", clock.now(), lease=lease) == []
        proc.kill()
        await proc.wait()
        await eventually(lambda: reclaim_orphans(pool, "worker-b"), 10, "the release")
        assert len(await service.claims.claim_due("worker-b", clock.now(), lease=lease)) == 3
        assert await reclaim_orphans(pool, "worker-b") == 0  # our own claims stay
    finally:
        await me.close()


async def test_presence_is_taken_again_after_its_connection_drops(pool, db_url):
    presence = Presence(db_url, "worker-c", check_seconds=0.05)
    await presence.start()
    try:
        async with pool.connection() as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks "
                "WHERE locktype = 'advisory' AND classid = 7260002 AND objid = "
                "hashtext('worker-c')::oid AND pid <> pg_backend_pid()"
            )
        await eventually(lambda: not presence.held.is_set(), 10, "the loss to be noticed")
        await eventually(presence.held.is_set, 10, "the lock taken again")
        assert await reclaim_orphans(pool, "someone-else") == 0
    finally:
        await presence.close()

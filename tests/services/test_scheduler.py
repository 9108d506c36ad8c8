"""Scheduler on real Postgres with a fake clock: once, on time, across DST, restarts and crashes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.scheduler_helpers import RecordingMessenger, runs, scheduler_app, utc, worker

ROOT = Path(__file__).resolve().parents[2]


async def test_one_shot_fires_once(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "stretch your legs", "2026-11-21T12:10")
    w = worker(app)
    assert await w.run_once() == 0 and rec.sent == []
    clock.advance(minutes=10)
    assert await w.run_once() == 1
    assert rec.sent == [(user.id, "stretch your legs")]
    clock.advance(days=1)
    assert await w.run_once() == 0
    assert len(rec.sent) == 1
    done = await app.deps.scheduler.get(user.id, s.id)
    assert done.status == "done" and done.claimed_by is None
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and not run["late"]


@pytest.mark.parametrize(
    ("zone", "start", "expected_utc_hours"),
    [
        # Berlin springs forward on Sun 29 Mar 2026: 09:00 is 08:00 UTC before, 07:00 after.
        ("Europe/Berlin", "2026-03-28T09:00", [8, 7, 7]),
        # Berlin falls back on Sun 25 Oct 2026: 07:00 UTC before, 08:00 after.
        ("Europe/Berlin", "2026-10-24T09:00", [7, 8, 8]),
        # New York springs forward on Sun 8 Mar 2026: 14:00 UTC before, 13:00 after.
        ("America/New_York", "2026-03-07T09:00", [14, 13, 13]),
        # New York falls back on Sun 1 Nov 2026: 13:00 UTC before, 14:00 after.
        ("America/New_York", "2026-10-31T09:00", [13, 14, 14]),
    ],
)
async def test_daily_recurrence_keeps_wall_clock_across_dst(
    make_app, clock, zone, start, expected_utc_hours
):
    first_day = int(start[8:10])
    clock.set(utc(int(start[:4]), int(start[5:7]), first_day - 1, 12))
    app, rec = await scheduler_app(make_app)
    user = await app.deps.users.ensure(42, "dst", timezone=zone)
    s = await app.deps.scheduler.create(user, "standup", start, repeat="FREQ=DAILY")
    w = worker(app)
    fired = []
    for _ in expected_utc_hours:
        current = await app.deps.scheduler.get(user.id, s.id)
        clock.set(current.next_run_at)
        assert await w.run_once() == 1
        fired.append(current.next_run_at)
    assert [f.hour for f in fired] == expected_utc_hours
    assert {f.astimezone(ZoneInfo(zone)).strftime("%H:%M") for f in fired} == {"09:00"}
    assert len(rec.sent) == 3 and not any("Late" in t for t in rec.texts())


async def test_cancel_stops_it(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "water", "2026-11-21T12:05", repeat="FREQ=HOURLY")
    w = worker(app)
    clock.advance(minutes=5)
    await w.run_once()
    assert len(rec.sent) == 1
    cancelled = await app.deps.scheduler.cancel(user.id, s.id.upper())
    assert cancelled.status == "cancelled"
    for _ in range(3):
        clock.advance(hours=1)
        await w.run_once()
    assert len(rec.sent) == 1
    assert await app.deps.scheduler.list(user.id) == []


async def test_missed_within_grace_is_delivered_late_and_marked(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "call mum", "2026-11-21T12:01")
    clock.advance(minutes=31)  # the worker was down at 12:01; it starts at 12:31
    await worker(app).run_once()
    [(_, text)] = rec.sent
    assert text.startswith("call mum") and "Late: this was due Sat 21 Nov 12:01" in text
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["late"] is True


async def test_missed_beyond_grace_is_recorded_and_reported_once(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    once = await app.deps.scheduler.create(user, "pay rent", "2026-11-21T13:00")
    daily = await app.deps.scheduler.create(user, "meds", "2026-11-21T14:00", repeat="FREQ=DAILY")
    clock.set(utc(2026, 11, 24, 15, 30))  # down for three days; grace is 1 h
    w = worker(app)
    await w.run_once()
    [(_, report)] = rec.sent  # nothing sent late; one report
    assert "pay rent" in report and "meds" in report and "and 3 later time(s)" in report
    assert (await app.deps.scheduler.get(user.id, once.id)).status == "missed"
    moved = await app.deps.scheduler.get(user.id, daily.id)
    assert moved.status == "active" and moved.next_run_at == utc(2026, 11, 25, 14)  # skipped on
    [missed] = await runs(app, daily.id)
    assert missed["status"] == "missed" and missed["missed_count"] == 4
    # the next start (a new worker) does not report again
    await worker(app).run(_stopped())
    await worker(app).run_once()
    assert len(rec.sent) == 1
    clock.set(utc(2026, 11, 25, 14))
    await w.run_once()
    assert rec.texts()[-1] == "meds"


async def test_recurring_within_grace_sends_only_newest_occurrence(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(
        user, "tick", "2026-11-21T12:00", repeat="FREQ=MINUTELY;INTERVAL=10"
    )
    clock.advance(minutes=35)  # 12:00, 12:10, 12:20, 12:30 all passed while down
    await worker(app).run_once()
    texts = rec.texts()
    assert len(texts) == 2  # the 12:30 occurrence (late), and one report of 3 superseded
    assert texts[0].startswith("tick") and "was due Sat 21 Nov 12:30" in texts[0]
    assert "and 2 later time(s)" in texts[1]
    current = await app.deps.scheduler.get(user.id, s.id)
    assert current.next_run_at == utc(2026, 11, 21, 12, 40)


def _stopped() -> asyncio.Event:
    stop = asyncio.Event()
    stop.set()
    return stop


async def _due_schedules(app, users: int, per_user: int) -> list[str]:
    ids = []
    for n in range(users):
        user = await app.deps.users.ensure(1000 + n, f"user{n}")
        for k in range(per_user):
            s = await app.deps.scheduler.create(user, f"r{n}-{k}", "2026-11-21T12:00")
            ids.append(s.id)
    return ids


async def test_two_workers_never_deliver_one_occurrence_twice(make_app, clock):
    app_a, rec_a = await scheduler_app(make_app)
    app_b, rec_b = await scheduler_app(make_app)  # a second app: its own pool, like a process
    await _due_schedules(app_a, users=20, per_user=10)
    a = worker(app_a, concurrency=7)
    b = worker(app_b, concurrency=5)
    handled = await asyncio.gather(a.run_once(), b.run_once(), a.run_once())
    delivered = rec_a.texts() + rec_b.texts()
    assert sum(handled) == 200 and len(delivered) == 200
    assert max(Counter(delivered).values()) == 1
    assert rec_a.sent and rec_b.sent  # both took part


async def test_expired_lease_holder_cannot_send_after_takeover(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    await app.deps.scheduler.create(user, "only once", "2026-11-21T12:00")
    slow, fast = worker(app, lease_seconds=30), worker(app)
    [claimed] = await app.deps.scheduler.claims.claim_due(slow.id, clock.now(), lease=slow.lease)
    clock.advance(seconds=31)  # the slow worker stalls past its lease
    assert await fast.run_once() == 1
    assert await slow.process(claimed, user) == "skipped"  # the fence refuses it
    assert rec.texts() == ["only once"]


async def test_killed_worker_claim_is_delivered_by_another_after_lease(make_app, clock, db_url):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    for n in range(3):
        await app.deps.scheduler.create(user, f"survive {n}", "2026-11-21T12:00")
    helper = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.scheduler_claim_helper", db_url, clock.now().isoformat(), "30",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = await asyncio.wait_for(helper.stdout.readline(), 30)
        assert len(json.loads(line)) == 3  # it claimed all three ...
        os.kill(helper.pid, signal.SIGKILL)  # ... and dies before delivering anything
        assert await asyncio.wait_for(helper.wait(), 10) == -signal.SIGKILL
    finally:
        if helper.returncode is None:
            helper.kill()
            await helper.wait()
    w = worker(app)
    assert await w.run_once() == 0  # still leased to the dead worker
    clock.advance(seconds=31)
    assert await w.run_once() == 3
    await w.run_once()
    assert sorted(rec.texts()) == ["survive 0", "survive 1", "survive 2"]


async def test_send_cut_off_midway_is_resent_once_and_flagged(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "maybe twice", "2026-11-21T12:00")
    dead, alive = worker(app), worker(app)
    [claimed] = await app.deps.scheduler.claims.claim_due(dead.id, clock.now(), lease=dead.lease)
    ticket = await app.deps.scheduler.claims.begin_run(
        claimed, claimed.next_run_at, worker=dead.id, now=clock.now(), lease=dead.lease
    )
    assert ticket is not None  # it was sending when it died
    clock.advance(seconds=61)
    await alive.run_once()
    await alive.run_once()
    [(_, text)] = rec.sent
    assert "Sent again after an interruption" in text
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["claimed_by"] == alive.id


async def test_failed_delivery_retries_with_backoff_then_fails_visibly(make_app, clock):
    app = await make_app()
    failing = RecordingMessenger(fail=True)
    app.deps.messenger.add(failing)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "flaky", "2026-11-21T12:00")
    w = worker(app)
    await w.run_once()
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "active" and row.attempts == 1
    assert row.last_error == "A front end could not be reached"  # never the exception's text
    assert await w.run_once() == 0  # backing off
    for delay in (30, 120, 600, 1800):
        clock.advance(seconds=delay)
        assert await w.run_once() == 1
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "failed" and "after 5 attempt(s)" in row.last_error
    [run] = await runs(app, s.id)
    assert run["status"] == "failed" and run["attempts"] == 5
    from panager.agent.commands import CommandContext, dispatch

    reply = await dispatch(CommandContext(user=user, assistant=app.assistant), "/schedules")
    assert s.id in reply.text and "FAILED" in reply.text and "after 5 attempt(s)" in reply.text


async def test_no_route_keeps_it_due_then_grace_rules_apply(make_app, clock):
    app = await make_app()
    app.deps.messenger.add(RecordingMessenger(accept=False))
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "nobody listening", "2026-11-21T12:00")
    w = worker(app)
    await w.run_once()
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.status == "active" and row.attempts == 0
    clock.advance(hours=2)
    await w.run_once()
    assert (await app.deps.scheduler.get(user.id, s.id)).status == "missed"


async def test_user_filters_split_users_between_workers(make_app, clock):
    app, rec = await scheduler_app(make_app)
    local = await app.local_user()
    other = await app.deps.users.ensure(5, "other")
    await app.deps.scheduler.create(local, "for the terminal", "2026-11-21T12:00")
    await app.deps.scheduler.create(other, "for discord", "2026-11-21T12:00")
    assert await worker(app, skip_users=[local.id]).run_once() == 1
    assert rec.sent == [(other.id, "for discord")]
    assert await worker(app, only_users=[local.id]).run_once() == 1
    assert rec.sent[-1] == (local.id, "for the terminal")


async def test_notify_wakes_an_idle_worker_at_once(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    w = worker(app, listen_url=app.url, poll_seconds=30)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        await asyncio.sleep(0.3)  # idle, listening, next poll in 30 s
        await app.deps.scheduler.create(user, "right now", "2026-11-21T12:00")
        for _ in range(100):
            if rec.sent:
                break
            await asyncio.sleep(0.02)
        assert rec.texts() == ["right now"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_migration_creates_and_drops_scheduler_tables(fresh_db):
    from panager.db import migrate
    from panager.db.pool import open_pool

    url = fresh_db()
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT conname FROM pg_constraint WHERE conname = 'schedule_runs_once'"
            )
            assert await cur.fetchone()
            cur = await conn.execute("SELECT indexname FROM pg_indexes WHERE tablename='schedules'")
            assert "schedules_due_idx" in {r["indexname"] for r in await cur.fetchall()}
        await migrate.downgrade(url, pool, "0002")
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT to_regclass('schedules') AS t, to_regclass('schedule_runs') AS r")
            assert await cur.fetchone() == {"t": None, "r": None}
    finally:
        await pool.close()


async def test_coalescer_batches_concurrent_calls_and_propagates_errors():
    from panager.services.schedules.coalesce import Coalescer

    batches: list[list[int]] = []

    async def double(items: list[int]) -> list[int]:
        batches.append(items)
        await asyncio.sleep(0.01)
        if 13 in items:
            raise ValueError("unlucky")
        return [i * 2 for i in items]

    co = Coalescer(double)
    assert await co.submit(1) == 2  # alone: a batch of one, no waiting
    results = await asyncio.gather(*(co.submit(i) for i in range(10)))
    assert results == [i * 2 for i in range(10)] and batches[1] == list(range(10))
    bad = await asyncio.gather(co.submit(13), co.submit(14), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in bad)
    assert await co.submit(5) == 10  # a failed batch does not poison the next


def test_plan_occurrence_grace_edges():
    from datetime import timedelta

    from panager.services.schedules.occurrences import plan_occurrence
    from panager.services.schedules.types import Schedule

    due = utc(2026, 11, 21, 12)
    s = Schedule(
        id="x", user_id=1, kind="reminder", message="m", timezone="UTC", rrule=None,
        anchor_local=due.replace(tzinfo=None), next_run_at=due, status="active", attempts=0,
        last_error=None, last_run_at=None, claimed_by=None, lease_until=None,
        created_at=due, updated_at=due,
    )
    no_grace = timedelta(0)
    assert plan_occurrence(s, due + timedelta(seconds=5), no_grace).deliver == due  # on time
    assert plan_occurrence(s, due + timedelta(minutes=2), no_grace).deliver is None  # missed
    late = plan_occurrence(s, due + timedelta(minutes=59), timedelta(hours=1))
    assert late.deliver == due and late.late
    retry = plan_occurrence(
        Schedule(**{**s.__dict__, "attempts": 2}), due + timedelta(hours=3), timedelta(hours=1)
    )
    assert retry.deliver == due  # a retry is not subject to the grace window

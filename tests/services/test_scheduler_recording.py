"""A reminder that went out is recorded, not sent again silently: recording failures after a
successful send, sends that time out after the channel took them, and a worker that lost
track of its own send. Real Postgres, fake clock; failures injected into the worker's writes."""

from __future__ import annotations

import asyncio

from tests.scheduler_helpers import FlakyClaims, RecordingMessenger, runs, scheduler_app, worker

NOTE = "(Sent again after an interruption — you may already have received it.)"
REPORT = "came due and were not sent"


class ScriptedChannel(RecordingMessenger):
    """A channel following a script, one step per send: 'ok'; 'slow' takes the message and
    then answers too late (the worker's send times out); 'fail' refuses with an error."""

    def __init__(self, *script: str) -> None:
        super().__init__()
        self.script = list(script)
        self.keys: list[str | None] = []

    async def send(self, user, text: str, *, link=None, key=None, offers=()) -> bool:
        step = self.script.pop(0) if self.script else "ok"
        if step == "fail":
            raise ConnectionError("telegram is down")
        self.sent.append((user.id, text))
        self.keys.append(key)
        if step == "slow":
            await asyncio.sleep(30)
        return True


async def scripted_app(make_app, *script: str):
    app = await make_app()
    channel = ScriptedChannel(*script)
    app.deps.messenger.add(channel)
    return app, channel


async def test_recording_failing_after_a_send_is_retried_not_sent_again(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "take the pills", "2026-11-21T12:00")
    w = worker(app)
    claims = app.deps.scheduler.claims
    second_claim: list[str] = []

    async def while_down(name: str, failures: int) -> None:
        if failures == 8:  # down for longer than the lease: this worker claims it again
            [again] = await claims.claim_due(w.id, clock.now(), lease=w.lease)
            try:  # a second send would wait for this very recording: bounded
                second_claim.append(await asyncio.wait_for(w.process(again, user), 5))
            except TimeoutError:
                second_claim.append("hung")

    # PostgreSQL restarts right after Telegram took the message: every write fails 8 times
    flaky = FlakyClaims(claims, while_down, complete_runs=8, settle=8).install(w)
    assert await w.run_once() == 1
    assert rec.texts() == ["take the pills"]
    assert flaky.failures["complete_runs"] == 8 and flaky.failures["settle"] == 0
    assert second_claim == ["skipped"]  # still being recorded here: not sent a second time
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["attempts"] == 1 and run["error"] is None
    assert (run["delivered_at"] - clock.now()).total_seconds() == 0  # once the database answered
    done = await app.deps.scheduler.get(user.id, s.id)
    assert done.status == "done" and done.claimed_by is None and done.last_error is None
    clock.advance(hours=2)
    await w.run_once()
    assert rec.texts() == ["take the pills"]  # no retry, no missed report


async def test_a_recurring_delivery_recorded_late_moves_on_once(make_app, clock):
    app, rec = await scheduler_app(make_app)
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "standup", "2026-11-21T12:00", repeat="FREQ=DAILY")
    w = worker(app)
    FlakyClaims(app.deps.scheduler.claims, complete_runs=3).install(w)
    await w.run_once()
    clock.advance(minutes=5)
    await w.run_once()
    assert rec.texts() == ["standup"]
    current = await app.deps.scheduler.get(user.id, s.id)
    assert current.next_run_at.day == 22 and current.attempts == 0


async def test_a_send_that_timed_out_is_sent_again_with_the_note(make_app, clock):
    app, channel = await scripted_app(make_app, "slow")
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "call the plumber", "2026-11-21T12:00")
    w = worker(app, lease_seconds=0.4)  # a send may take 0.2 s
    assert await w.run_once() == 1
    assert channel.texts() == ["call the plumber"]  # it arrived, but no answer came in time
    [run] = await runs(app, s.id)
    assert run["status"] == "sending" and run["error"] == "timed out"
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.attempts == 1 and row.last_error == "timed out" and row.claimed_by is None
    assert await w.run_once() == 0  # backing off, like any failed attempt
    clock.advance(seconds=30)
    assert await w.run_once() == 1  # the same worker sends it again, flagged
    assert channel.texts() == ["call the plumber", f"call the plumber\n{NOTE}"]
    assert channel.keys[0] == channel.keys[1]  # one nonce: Discord would show it once
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["attempts"] == 2
    assert (await app.deps.scheduler.get(user.id, s.id)).status == "done"


async def test_a_failure_after_an_unsure_send_keeps_the_note(make_app, clock):
    app, channel = await scripted_app(make_app, "slow", "fail", "ok")
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "move the car", "2026-11-21T12:00")
    w = worker(app, lease_seconds=0.4)
    await w.run_once()
    clock.advance(seconds=30)
    await w.run_once()  # sent again, refused: the first one may still have arrived
    row = await app.deps.scheduler.get(user.id, s.id)
    assert row.attempts == 2 and row.last_error == "A front end could not be reached"
    clock.advance(seconds=120)
    await w.run_once()
    first, third = channel.texts()  # two and a half minutes late by now
    assert first == "move the car" and third.startswith("move the car\n⏰ Late")
    assert third.endswith(NOTE)
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["attempts"] == 3


async def test_a_plain_failure_is_retried_without_the_note(make_app, clock):
    app, channel = await scripted_app(make_app, "fail", "ok")
    user = await app.local_user()
    await app.deps.scheduler.create(user, "buy bread", "2026-11-21T12:00")
    w = worker(app)
    await w.run_once()
    clock.advance(seconds=30)
    await w.run_once()
    assert channel.texts() == ["buy bread"]  # nothing reached the person the first time


async def test_a_worker_that_lost_track_of_its_send_takes_it_over(make_app, clock):
    app, channel = await scripted_app(make_app, "slow")
    user = await app.local_user()
    s = await app.deps.scheduler.create(user, "water the tomatoes", "2026-11-21T12:00")
    w = worker(app, lease_seconds=1)
    # the send times out after the channel took it, and recording that fails too: the
    # worker is left holding a `sending` run it no longer handles
    flaky = FlakyClaims(app.deps.scheduler.claims, settle=1).install(w)
    assert await w.run_once() == 1
    assert flaky.failures["settle"] == 1
    [run] = await runs(app, s.id)
    assert run["status"] == "sending" and run["claimed_by"] == w.id
    for _ in range(3):  # the lease runs out; the only worker comes back to it
        clock.advance(seconds=2)
        await w.run_once()
    clock.advance(hours=2)  # far beyond the grace window
    await w.run_once()
    assert channel.texts() == ["water the tomatoes", f"water the tomatoes\n{NOTE}"]
    assert not any(REPORT in text for text in channel.texts())
    [run] = await runs(app, s.id)
    assert run["status"] == "delivered" and run["missed_count"] == 0
    assert (await app.deps.scheduler.get(user.id, s.id)).status == "done"

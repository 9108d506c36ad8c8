"""The inbox queue without any gateway: order, exactly once, failures, crash recovery."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from panager.clock import FakeClock
from panager.db.pool import open_pool
from panager.services.inbox import InboxMessage, InboxService
from panager.services.inbox_queue import InboxQueue
from panager.tasks import cancel_and_wait

ALICE, BOB = 501, 502


def stored(message_id: int, user_id: int, text: str) -> dict:
    return {
        "message_id": message_id,
        "user_id": user_id,
        "channel_id": user_id + 1000,
        "username": f"u{user_id}",
        "display_name": None,
        "content": text,
    }


class Recorder:
    """A handler that records what it handled, optionally slowly or failing."""

    def __init__(self, delay: float = 0.0, fail_on: str | None = None) -> None:
        self.handled: list[tuple[int, str]] = []
        self.active: set[int] = set()
        self.overlapped = False
        self.delay = delay
        self.fail_on = fail_on

    async def __call__(self, row: InboxMessage) -> str:
        if row.user_id in self.active:
            self.overlapped = True  # two messages of one user at once: order broken
        self.active.add(row.user_id)
        try:
            await asyncio.sleep(self.delay)
            if row.content == self.fail_on:
                raise RuntimeError("handler broke")
            self.handled.append((row.user_id, row.content))
            return "done"
        finally:
            self.active.discard(row.user_id)


async def statuses(pool) -> dict[int, str]:
    async with pool.connection() as conn:
        rows = await (await conn.execute("SELECT message_id, status FROM discord_inbox")).fetchall()
    return {r["message_id"]: r["status"] for r in rows}


async def wait_for(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_each_users_messages_run_in_order_once_and_failures_are_recorded(db_url):
    pool = await open_pool(db_url, max_size=4)
    inbox = InboxService(pool, FakeClock(), "proc-a")
    handler = Recorder(delay=0.02, fail_on="broken")
    abandoned: list[InboxMessage] = []

    async def on_abandoned(row: InboxMessage) -> None:
        abandoned.append(row)

    queue = InboxQueue(inbox, handler, on_abandoned, poll_interval=0.05)
    try:
        texts = {ALICE: ["a1", "broken", "a3"], BOB: ["b1", "b2"]}
        message_id = 1
        for position in range(3):
            for user, mine in texts.items():
                if position < len(mine):
                    assert await inbox.accept(**stored(message_id, user, mine[position]))
                    queue.kick(user)
                    queue.kick(user)  # a second wake-up must not handle anything twice
                    message_id += 1
        assert not await inbox.accept(**stored(1, ALICE, "a1"))  # a replay is refused
        await wait_for(lambda: len(handler.handled) == 4)
        await wait_for(lambda: len(queue._background) == 0)
        assert [t for u, t in handler.handled if u == ALICE] == ["a1", "a3"]
        assert [t for u, t in handler.handled if u == BOB] == ["b1", "b2"]
        assert not handler.overlapped
        final = await statuses(pool)
        assert sorted(final.values()) == ["done", "done", "done", "done", "failed"]
        assert abandoned == []
    finally:
        await queue.close()
        await pool.close()


async def test_a_message_left_by_a_dead_process_is_answered_on_recover(db_url):
    pool = await open_pool(db_url, max_size=4)
    clock = FakeClock()
    dead = InboxService(pool, clock, "dead-proc", lease=timedelta(seconds=30))
    assert await dead.accept(**stored(10, ALICE, "left half-done"))
    assert (await dead.claim_next(ALICE)) is not None  # claimed, then the process died
    clock.advance(31)  # its lease runs out
    handler = Recorder()
    queue = InboxQueue(InboxService(pool, clock, "proc-b"), handler, handler, poll_interval=0.05)
    try:
        await queue.recover()
        await wait_for(lambda: handler.handled == [(ALICE, "left half-done")])
        await wait_for(lambda: len(queue._background) == 0)
        assert (await statuses(pool))[10] == "done"
    finally:
        await queue.close()
        await pool.close()


def stubborn(lost: int, seen: list[int]):
    """A background loop that loses its first `lost` cancellations (as Python 3.11's
    `asyncio.wait_for` can, inside a library the loop calls) and keeps polling."""

    async def loop() -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                seen.append(1)
                if len(seen) <= lost:
                    continue
                raise

    return loop()


async def test_close_ends_even_when_a_background_task_loses_its_cancellation(db_url):
    pool = await open_pool(db_url, max_size=2)
    queue = InboxQueue(InboxService(pool, FakeClock(), "proc"), Recorder(), Recorder())
    seen: list[int] = []
    try:
        task = queue.spawn(stubborn(2, seen))
        await asyncio.sleep(0.05)
        await asyncio.wait_for(queue.close(), 30)  # a single cancel + gather waited forever
        assert task.cancelled() and len(seen) == 3
        assert not queue._background
    finally:
        await pool.close()


async def test_cancel_and_wait_gives_up_on_a_task_that_does_not_stop_and_says_so(caplog):
    seen: list[int] = []
    task = asyncio.create_task(stubborn(5, seen), name="stubborn-loop")
    await asyncio.sleep(0.02)
    await asyncio.wait_for(cancel_and_wait([task], grace=0.1, rounds=2), 10)
    assert not task.done() and len(seen) == 3
    assert "stubborn-loop did not stop when cancelled" in caplog.text
    await asyncio.wait_for(cancel_and_wait([task], grace=0.1), 10)  # three more: it stops
    assert task.cancelled() and len(seen) == 6


class Gate(Recorder):
    """A recorder whose handler waits at a gate; counts how many wait at once."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.most = 0

    async def __call__(self, row: InboxMessage) -> str:
        self.most = max(self.most, len(self.active) + 1)
        self.active.add(row.user_id)
        try:
            await self.open.wait()
            self.handled.append((row.user_id, row.content))
            return "done"
        finally:
            self.active.discard(row.user_id)


async def test_a_limited_process_leaves_what_it_has_no_room_for_to_another(db_url):
    pool = await open_pool(db_url, max_size=6)
    clock = FakeClock()
    first, second = Gate(), Recorder()
    limited = InboxQueue(InboxService(pool, clock, "proc-a"), first, first, poll_interval=0.05)
    other = InboxQueue(InboxService(pool, clock, "proc-b"), second, second, poll_interval=0.05)
    limited.limit(2)
    people = [ALICE, BOB, 503, 504]
    try:
        for n, person in enumerate(people):
            assert await limited.inbox.accept(**stored(20 + n, person, f"hello {person}"))
            limited.kick(person)
        await wait_for(lambda: len(first.active) == 2)  # two claimed, two left unclaimed
        for person in people:
            other.kick(person)
        await wait_for(lambda: len(second.handled) == 2)
        first.open.set()
        await wait_for(lambda: len(first.handled) == 2)
        assert first.most == 2
        assert {p for p, _ in first.handled} | {p for p, _ in second.handled} == set(people)
    finally:
        await limited.close()
        await other.close()
        await pool.close()


class LateArrival(InboxService):
    """An inbox where the sender's next message is stored (and kicked) just after the claim
    found nothing: the window between `claim_next` and the drain's last look."""

    queue: InboxQueue

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals = [stored(31, ALICE, "second")]

    async def claim_next(self, user_id: int):
        row = await super().claim_next(user_id)
        if row is None and self.arrivals:
            assert await self.accept(**self.arrivals.pop())
            self.queue.kick(user_id)
        return row


async def test_a_message_stored_as_the_drain_finds_nothing_is_answered_at_once(db_url):
    pool = await open_pool(db_url, max_size=4)
    inbox = LateArrival(pool, FakeClock(), "proc-a")
    handler = Recorder()
    # The drain's wait for another process is an hour here: only the kick can end it.
    queue = InboxQueue(inbox, handler, handler, poll_interval=3600)
    inbox.queue = queue
    try:
        assert await inbox.accept(**stored(30, ALICE, "first"))
        queue.kick(ALICE)
        await asyncio.wait_for(wait_for(lambda: len(handler.handled) == 2, timeout=60), 60)
        assert handler.handled == [(ALICE, "first"), (ALICE, "second")]
    finally:
        await queue.close()
        await pool.close()

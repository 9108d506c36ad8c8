"""Draining the inbox: each user's stored messages handled oldest first, one at a time.

Transport-independent: a front end stores incoming messages with
`InboxService.accept`, calls `kick(user_id)`, and gives the queue two
callbacks — `handle(row)` answers one message and returns its final status
("done" or "failed"), `on_abandoned(row)` tells a user that a message left
half-done by a dead process was given up on. The queue owns the rest:

- a drain task per user that claims the user's oldest message
  (`InboxService.claim_next`), so messages sent during a turn wait their turn;
  with `limit(n)`, only that many at once in this process (the rest stay
  unclaimed for a process with room: answer workers share the load);
- the claim's lease, renewed while the message is handled, so another process
  takes it over only when this one died;
- recovery on start (`recover`): stale claims of dead processes queued again,
  every user with queued messages resumed;
- recording each message as handled, retrying while the database is away (an
  unrecorded row would be taken for a crash and handled twice);
- pruning finished rows, and a graceful `close` that lets running messages
  finish within a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from panager.services.inbox import InboxMessage, InboxService
from panager.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)  # backoff between database retries (then the last)
PRUNE_EVERY = 6 * 3600

Handler = Callable[[InboxMessage], Awaitable[str]]
Notifier = Callable[[InboxMessage], Awaitable[None]]


def retry_delay(attempt: int) -> float:
    """Seconds to wait before database retry number `attempt` (0-based)."""
    return RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]


class InboxQueue:
    """Per-user ordered, exactly-once handling of the messages in the inbox."""

    def __init__(
        self,
        inbox: InboxService,
        handle: Handler,
        on_abandoned: Notifier,
        *,
        poll_interval: float = 1.0,
        shutdown_grace: float = 20.0,
    ) -> None:
        self.inbox = inbox
        self.handle = handle
        self.on_abandoned = on_abandoned
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        self.stopping = False
        self._drains: dict[int, asyncio.Task[None]] = {}
        self._dirty: set[int] = set()
        self._woken: dict[int, asyncio.Event] = {}  # a kick during a drain's wait ends it
        self._background: set[asyncio.Task[Any]] = set()
        self._slots: asyncio.Semaphore | None = None  # see limit()

    def kick(self, user_id: int) -> None:
        """The user has new messages: start (or keep) their drain task."""
        if self.stopping:
            return
        self._dirty.add(user_id)
        task = self._drains.get(user_id)
        if task is None or task.done():
            self._drains[user_id] = self.spawn(self._drain(user_id))
        elif (woken := self._woken.get(user_id)) is not None:
            woken.set()

    async def recover(self) -> None:
        """Queue again the messages a dead process left half-done; resume all queued ones."""
        for stale in await self.inbox.recover_stale():
            await self.on_abandoned(stale)
        for user_id in await self.inbox.queued_users():
            self.kick(user_id)

    async def recover_patiently(self) -> None:
        """`recover`, retried while the database is away (it may be down at start)."""
        for attempt in itertools.count():
            try:
                await self.recover()
                return
            except Exception as exc:
                log.warning("could not resume queued messages yet: %s", exc)
            await asyncio.sleep(retry_delay(attempt))

    async def take_back_orphaned(self) -> int:
        """Queue again the messages of processes that died (their presence lock is gone)
        and resume their users; returns how many were taken back."""
        rows = await self.inbox.recover_orphaned()
        for row in rows:
            if row.status == "abandoned":
                await self.on_abandoned(row)
            else:
                self.kick(row.user_id)
        return len(rows)

    def limit(self, max_active: int) -> None:
        """Answer at most `max_active` messages at once here (0: no cap); past it a sender's
        next message waits unclaimed, so another process with room can take it. Set before
        the first claim."""
        self._slots = asyncio.Semaphore(max_active) if max_active else None

    def start_pruning(self) -> None:
        """Prune finished rows now and every PRUNE_EVERY seconds, in the background."""
        self.spawn(self._prune_loop())

    async def close(self) -> None:
        """Let running messages finish (up to shutdown_grace), then stop background work."""
        if self.stopping:
            return
        self.stopping = True
        running = [t for t in self._drains.values() if not t.done()]
        if running:
            _, pending = await asyncio.wait(running, timeout=self.shutdown_grace)
            await cancel_and_wait(pending)
        await cancel_and_wait(list(self._background))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` in the background until close(); its failure is logged."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._task_done)
        return task

    # -- draining ------------------------------------------------------------------------------

    async def _drain(self, user_id: int) -> None:
        """Handle the user's queued messages oldest first until none are left."""
        woken = self._woken.setdefault(user_id, asyncio.Event())
        try:
            while user_id in self._dirty and not self.stopping:
                self._dirty.discard(user_id)
                woken.clear()  # kicks from here on count for this pass's wait
                try:
                    await self._drain_once(user_id)
                except Exception:
                    log.exception("inbox of user %s failed; retrying", user_id)
                    self._dirty.add(user_id)
                    await asyncio.sleep(self.poll_interval)
        finally:
            self._woken.pop(user_id, None)

    async def _drain_once(self, user_id: int) -> None:
        for stale in await self.inbox.recover_stale(user_id):
            await self.on_abandoned(stale)
        while not self.stopping:
            async with self._slots or contextlib.nullcontext():
                row = None if self.stopping else await self.inbox.claim_next(user_id)
                if row is None:
                    break
                await self._process(row)
        if not self.stopping and await self.inbox.queued_count(user_id):
            # Another process is answering this user's previous message: wait for it, or for
            # a kick (a message stored after the claim found nothing must not wait the poll).
            self._dirty.add(user_id)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken[user_id].wait(), self.poll_interval)

    async def _process(self, row: InboxMessage) -> None:
        lease = self.spawn(self._keep_lease(row.message_id))
        try:
            status = await self.handle(row)
        except asyncio.CancelledError:
            await self.inbox.expire(row.message_id)  # shutting down: another process takes it
            raise
        except Exception:
            log.exception("failed to handle message %s", row.message_id)
            status = "failed"
        finally:
            lease.cancel()
        await self._finish(row.message_id, status)

    async def _finish(self, message_id: int, status: str) -> None:
        """Record the message as handled, retrying while the database is away."""
        for attempt in itertools.count():
            try:
                await self.inbox.finish(message_id, status)
                return
            except Exception as exc:
                if self.stopping:
                    raise
                log.warning("could not record message %s as %s yet: %s", message_id, status, exc)
            await asyncio.sleep(retry_delay(attempt))

    async def _keep_lease(self, message_id: int) -> None:
        period = self.inbox.lease.total_seconds() / 3
        while True:
            await asyncio.sleep(period)
            try:
                await self.inbox.renew(message_id)
            except Exception:
                log.exception("could not renew the claim on message %s", message_id)

    async def _prune_loop(self) -> None:
        while True:
            try:
                pruned = await self.inbox.prune()
                log.debug("pruned %d inbox rows", pruned)
            except Exception:
                log.exception("inbox pruning failed")
            await asyncio.sleep(PRUNE_EVERY)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled():
            with contextlib.suppress(asyncio.CancelledError):
                if task.exception() is not None:
                    log.error("background task failed", exc_info=task.exception())

"""Group commit on the application side: calls that arrive together run as one batch.

Every durable commit costs a disk flush (a few ms on ordinary disks). When a
worker delivers hundreds of reminders at once, one statement per batch instead
of one per reminder is what makes a burst drain quickly. Under light load a
batch has one item and adds no delay: the first call flushes on the next
event-loop turn; calls arriving while a flush is in flight form the next batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """`await submit(item)` returns that item's result from `run_batch(items)`."""

    def __init__(
        self, run_batch: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int = 500
    ) -> None:
        self._run_batch = run_batch
        self._pending: list[tuple[T, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self.max_batch = max_batch

    async def submit(self, item: T) -> R:
        """Queue `item` for the next batch and wait for its result (or its batch's error)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[: self.max_batch]
            self._pending = self._pending[self.max_batch :]
            try:
                results = await self._run_batch([item for item, _ in batch])
            except asyncio.CancelledError:
                for _, future in batch + self._pending:
                    future.cancel()
                self._pending = []
                raise
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

"""The running web server's state: what the server and its page handlers share.

`WebServer` (its counters, background work, notices) lives here, below both
server.py, which builds and starts it, and the pages that count and spawn on
it (oauth_link.py), so neither imports the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from panager.frontends.web.hooks import log_path
from panager.frontends.web.notices import WebNotices
from panager.services.messengers import FanoutMessenger

log = logging.getLogger("panager.frontends.web.server")

REPLAY_DRAIN_SECONDS = 30.0


class PathOnlyAccessLogger(AbstractAccessLogger):
    """Access log lines without query strings (they may carry codes and state)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """One line: method, path, status, duration."""
        path = log_path(request.path)
        self.logger.info("%s %s %s %.3fs", request.method, path, response.status, time)


@dataclass
class WebServer:
    """A running web server; awaiting it (or `stop()`) shuts it down."""

    host: str
    port: int
    runner: web.AppRunner | None = None
    tasks: set[asyncio.Task] = field(default_factory=set)
    counters: Counter = field(default_factory=Counter)
    notices: WebNotices = field(default_factory=WebNotices)  # reminders on open pages
    delivery: FanoutMessenger | None = None  # where `notices` was added as a messenger
    _stopped: bool = False

    @property
    def url(self) -> str:
        """Base URL of the bound socket."""
        return f"http://{self.host}:{self.port}"

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        """Run background work (a replay) that stop() waits for."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background work failed", exc_info=task.exception())

    async def stop(self) -> None:
        """Stop listening, let running replays finish (bounded), then clean up. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.notices.close()
        if self.delivery is not None and self.notices in self.delivery.messengers:
            self.delivery.messengers.remove(self.notices)
        if self.tasks:
            _done, pending = await asyncio.wait(set(self.tasks), timeout=REPLAY_DRAIN_SECONDS)
            for task in pending:
                task.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    async def __call__(self) -> None:
        """Closer protocol of `App.closers`."""
        await self.stop()



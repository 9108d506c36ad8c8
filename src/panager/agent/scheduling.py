"""Wiring the scheduler into the app: the installer, delivery, and worker entry points.

- `install(app)` (in `INSTALLERS`) creates the `ScheduleService` on `app.deps.scheduler`.
- `run_worker(app, stop)` runs a worker until `stop` is set — what
  `panager run --components worker` calls. By default it serves every user
  except the terminal's local user, whose reminders only a terminal can show.
- `start_terminal_worker(app)` (in the REPL's `BACKGROUND_STARTERS`) runs a
  worker for the local user inside `panager chat`, so reminders print there.

Delivery: a `reminder` goes to `app.deps.messenger` as written (no model
call); an `agent` schedule runs `app.assistant.run_turn(..., is_system_trigger=True)`
in the user's thread and the answer goes to the messenger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from panager.services.schedules.service import ScheduleLimits, ScheduleService
from panager.services.schedules.worker import AgentAnswer, SchedulerWorker
from panager.services.users import LOCAL_USER_ID, User

log = logging.getLogger(__name__)


class AppDelivery:
    """The worker's `Delivery`: the app's messenger and assistant."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def send(self, user: User, text: str, key: str | None = None) -> bool:
        """Deliver through the app's messengers (terminal, Discord)."""
        return await self.app.deps.messenger.send(user, text, key=key)

    async def run_agent(self, user: User, instruction: str) -> AgentAnswer:
        """Run the graph as a system trigger; the instruction never poses as the user.

        A user whose turn is running raises UserBusy (the worker hands the run back
        instead of holding a slot while waiting)."""
        result = await self.app.assistant.run_turn(
            user, instruction, is_system_trigger=True, wait_for_lock=False
        )
        return AgentAnswer(result.text, ok=result.ok)


async def install(app: Any) -> None:
    """Create the schedule service for tools, commands and workers."""
    runtime = app.settings.runtime
    app.deps.scheduler = ScheduleService(
        app.pool,
        app.clock,
        max_message_chars=runtime.max_message_chars,
        limits=ScheduleLimits.from_config(runtime),
    )


def make_worker(
    app: Any,
    *,
    only_users: Sequence[int] | None = None,
    skip_users: Sequence[int] = (),
    **options: Any,
) -> SchedulerWorker:
    """A worker on the app's pool, clock and runtime config (grace, poll)."""
    runtime = app.settings.runtime
    settings = {
        "clock": app.clock,
        "grace_seconds": runtime.schedule_grace_seconds,
        "poll_seconds": runtime.scheduler_poll_seconds,
        "lease_seconds": runtime.scheduler_lease_seconds,
        "listen_url": app.url,
        "user_in_flight": runtime.scheduler_user_in_flight,
        "only_users": only_users,
        "skip_users": skip_users,
    }
    settings.update(options)
    return SchedulerWorker(app.deps.scheduler, AppDelivery(app), **settings)


async def run_worker(
    app: Any,
    stop: asyncio.Event,
    *,
    only_users: Sequence[int] | None = None,
    skip_users: Sequence[int] = (LOCAL_USER_ID,),
    **options: Any,
) -> None:
    """Deliver schedules until `stop` is set (for `panager run --components worker`)."""
    if app.deps.scheduler is None:
        await install(app)
    worker = make_worker(app, only_users=only_users, skip_users=skip_users, **options)
    await worker.run(stop)


async def start_terminal_worker(app: Any) -> None:
    """Run a worker for the local user in the background of `panager chat`."""
    if app.deps.scheduler is None:
        return
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(app, stop, only_users=[LOCAL_USER_ID], skip_users=()))

    async def close() -> None:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:
            log.exception("scheduler worker stopped with an error")

    app.closers.append(close)

"""Stopping background tasks so that a stop always ends.

`task.cancel()` followed by `await gather(task)` waits forever when the task
loses its cancellation and keeps looping. Seen here: a Telegram front end's
close() waiting forever on its inbox watcher, a loop that asks the database
every 50 ms and catches only `Exception`, cancelled and still polling (7 lost
cancellations in 13 runs of the Telegram media tests on two busy cores). Where
inside the libraries it was lost was not pinned down; one known way on Python
3.11 is `asyncio.wait_for` (used inside psycopg_pool, aiohttp and others),
which returns the inner result and drops a cancellation that arrives in the
same loop iteration (bpo-42130, fixed in 3.12).

`cancel_and_wait` cancels, gives the tasks `grace` seconds to finish (a
cancelled task may still have cleanup to do: expire a claim, close a
connection), then cancels again every RECANCEL_SECONDS until they are done, so
a lost cancellation costs a few seconds of a stop, not the stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

GRACE_SECONDS = 10.0  # a cancelled task's own cleanup, before it is cancelled again
RECANCEL_SECONDS = 0.5


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]], *, grace: float = GRACE_SECONDS, rounds: int = 60
) -> None:
    """Cancel `tasks` and wait until every one has finished: any still running after
    `grace` seconds is cancelled again every RECANCEL_SECONDS, at most `rounds` more
    times (then it is left running, and logged). The tasks' exceptions are not raised."""
    given = list(tasks)
    pending = {t for t in given if not t.done()}
    if pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=grace)
    for _ in range(rounds):
        if not pending:
            break
        log.info("cancelling again: %s", ", ".join(t.get_name() for t in pending))
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    for task in pending:
        log.warning("task %s did not stop when cancelled", task.get_name())
    for task in given:  # retrieved, as gather(return_exceptions=True) did: no "never retrieved"
        if task.done() and not task.cancelled():
            task.exception()

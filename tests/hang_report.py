"""When a test is about to hit its timeout, write what it is waiting for to stderr.

pytest-timeout's own report shows the main thread parked in the event loop's select(),
which says nothing about which await never finished. A few seconds before the timeout
this plugin prints, for every unfinished asyncio task of the loop in the main thread,
its whole await chain (coroutine frames down to the future it waits on), the test
server's PostgreSQL sessions that are not idle (a statement waiting on a lock, or a
transaction left open while its task awaits something else), then every thread's stack
(faulthandler). pytest shows it as the failed test's captured stderr.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import sys
import threading
from collections.abc import Iterator

import pytest

MARGIN = 8.0  # seconds before the timeout
SERVER_URL: list[str] = []  # the session's PostgreSQL (conftest's pg_server_url sets it)
SESSIONS = """
SELECT datname, pid, state, wait_event_type, wait_event,
       now() - xact_start AS in_transaction, pg_blocking_pids(pid) AS blocked_by,
       left(query, 160) AS query
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND state <> 'idle'
ORDER BY xact_start
"""


def _timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    try:
        return float(item.config.getoption("timeout") or item.config.getini("timeout") or 0)
    except (ValueError, TypeError):
        return 0.0


def _chain(task: asyncio.Task) -> Iterator[str]:
    """`file:line in function` for each coroutine the task is suspended in, innermost last."""
    obj: object = task.get_coro()
    for _ in range(60):
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None) or getattr(
            obj, "ag_frame", None)
        if frame is None:
            inner = _unwrap(obj)
            if inner is None:
                yield f"  waiting on {obj!r}"[:300]
                return
            obj = inner
            continue
        yield f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        obj = (getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
               or getattr(obj, "ag_await", None))
        if obj is None:
            return


def _unwrap(obj: object) -> object | None:
    """What an awaitable without a frame stands for: the async generator behind an
    `asend`/`athrow`, the future behind a future's iterator (None: nothing to follow)."""
    kind = type(obj).__name__
    if kind in ("async_generator_asend", "async_generator_athrow", "FutureIter"):
        for ref in gc.get_referents(obj):
            if hasattr(ref, "ag_frame") or isinstance(ref, asyncio.Future):
                return ref
    return None


def _sessions() -> str:
    if not SERVER_URL:
        return "  (no server)\n"
    try:
        import psycopg

        with psycopg.connect(SERVER_URL[0], autocommit=True, connect_timeout=3) as conn:
            rows = conn.execute(SESSIONS).fetchall()
    except Exception as exc:  # a report, not a test: say why and go on
        return f"  (could not ask: {exc})\n"
    return "".join(f"  {row}\n" for row in rows) or "  (none)\n"


def report(main_ident: int, nodeid: str) -> None:
    out = sys.stderr
    out.write(f"\n=== {nodeid} is about to time out: unfinished asyncio tasks ===\n")
    tasks = list(getattr(asyncio.tasks, "_all_tasks", ()))
    for task in tasks:
        loop = task.get_loop()
        if task.done() or getattr(loop, "_thread_id", None) != main_ident:
            continue
        out.write(f"- {task.get_name()} {task.get_coro()!r}\n"[:300])
        for line in _chain(task):
            out.write(line + "\n")
    out.write("=== PostgreSQL sessions not idle ===\n")
    out.write(_sessions())
    out.write("=== threads ===\n")
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    seconds = _timeout(item)
    timer = None
    if seconds > MARGIN * 2:
        timer = threading.Timer(seconds - MARGIN, report, (threading.get_ident(), item.nodeid))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()

"""Scheduler benchmark: a burst of reminders drained by worker processes, then idle lateness.

    .venv/bin/python bench/scheduler.py            # 10,000 reminders, 1,000 users, 2 workers

1. Burst: N reminders for U users, all due at the same instant T0, are written
   before the workers start; W worker *processes* (the real `SchedulerWorker`
   with the system clock, LISTEN/NOTIFY and default poll) deliver them to a
   recording messenger. Reported: all delivered, duplicates (same reminder
   delivered twice; must be 0), time from T0 to the last delivery, p50/p99
   lateness (delivery time − due time).
2. Idle: with the workers idle, single reminders are created through
   `ScheduleService.create` 1.5–2.5 s ahead (the NOTIFY path) one at a time;
   reported: p50/p99/max lateness.

Real PostgreSQL: the embedded server in a temp dir, or `DATABASE_URL`'s server
(a throwaway database is created and dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

START_MARGIN = 6.0  # seconds between writing the burst and its due time (workers start meanwhile)


# -- worker process ----------------------------------------------------------------------------


class RecordingDelivery:
    """Records (message, wall time) for every delivery; agent runs are not benchmarked."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    async def send(self, user, text: str, key: str | None = None) -> bool:
        """Record the delivery instantly."""
        self.sent.append((text, time.time()))
        return True

    async def run_agent(self, user, instruction: str):
        """Not used: the benchmark only has reminders."""
        raise NotImplementedError


async def worker_main(url: str) -> dict:
    """Run one real worker until SIGTERM; return what it delivered."""
    from panager.clock import SystemClock
    from panager.db.pool import open_pool
    from panager.services.schedules.service import ScheduleService
    from panager.services.schedules.worker import SchedulerWorker

    pool = await open_pool(url, max_size=10)
    clock = SystemClock()
    delivery = RecordingDelivery()
    worker = SchedulerWorker(
        ScheduleService(pool, clock), delivery, clock=clock, listen_url=url
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await worker.run(stop)
    await pool.close()
    return {"worker": worker.id, "sent": delivery.sent}


# -- coordinator -------------------------------------------------------------------------------


async def make_database() -> tuple[str, str]:
    """(server URL, URL of a fresh migrated database)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.common import create_bench_database

    return await create_bench_database("bench_sched", "panager-bench-scheduler-pg")


def write_burst(url: str, users: int, reminders: int, due: datetime) -> None:
    """Users and reminders (all due at `due`) with COPY; setup, not measured."""
    from panager.services.schedules.service import new_schedule_id

    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor().copy("COPY users (id, username, timezone) FROM STDIN") as copy:
            for n in range(users):
                copy.write_row((10_000 + n, f"user{n}", "UTC"))
        columns = "id, user_id, kind, message, timezone, anchor_local, next_run_at"
        with conn.cursor().copy(f"COPY schedules ({columns}) FROM STDIN") as copy:
            for n in range(reminders):
                sid = new_schedule_id() + f"{n:05d}"
                row = (sid, 10_000 + n % users, "reminder", f"burst {sid}", "UTC")
                copy.write_row((*row, due.replace(tzinfo=None), due))


async def start_workers(url: str, count: int, tmp: Path) -> list[tuple[asyncio.subprocess.Process, Path]]:
    """Start worker processes and wait until each is ready."""
    procs = []
    for n in range(count):
        out = tmp / f"worker{n}.json"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--worker", url, str(out),
            stdout=asyncio.subprocess.PIPE,
        )
        procs.append((proc, out))
    for proc, _ in procs:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.strip() == b"ready", line
    return procs


async def stop_workers(procs) -> list[dict]:
    """SIGTERM every worker and read back what each delivered."""
    for proc, _ in procs:
        proc.send_signal(signal.SIGTERM)
    results = []
    for proc, out in procs:
        await asyncio.wait_for(proc.wait(), 30)
        results.append(json.loads(out.read_text()))
    return results


async def wait_delivered(url: str, expected: int, within: float) -> int:
    """Poll the database until `expected` runs are delivered (or `within` seconds passed)."""
    deadline = time.monotonic() + within
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute("SELECT count(*) FROM schedule_runs WHERE status='delivered'")
            done = (await cur.fetchone())[0]
            if done >= expected or time.monotonic() > deadline:
                return done
            await asyncio.sleep(0.05)


async def idle_phase(url: str, samples: int) -> dict[str, float]:
    """Create single reminders 1.5–2.5 s ahead, one at a time; message → due epoch."""
    from panager.clock import SystemClock
    from panager.db.pool import open_pool
    from panager.services.schedules.service import ScheduleService
    from panager.services.users import UserService

    pool = await open_pool(url, max_size=2)
    service = ScheduleService(pool, SystemClock())
    user = await UserService(pool).get(10_000)
    due_at: dict[str, float] = {}
    try:
        for n in range(samples):
            due = datetime.fromtimestamp(math.ceil(time.time() + 1.5), UTC)
            message = f"idle {n}"
            await service.create(user, message, due.isoformat())
            due_at[message] = due.timestamp()
            # wait past the due time, plus a varying pause so creations are not in lockstep
            await asyncio.sleep(max(0.0, due.timestamp() + 0.2 - time.time()) + (n % 5) * 0.1)
    finally:
        await pool.close()
    return due_at


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


async def db_totals(url: str) -> dict[str, int]:
    """Run and schedule counts as the database sees them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM schedule_runs WHERE status='delivered'),"
            " (SELECT count(*) FROM schedule_runs GROUP BY schedule_id, scheduled_for"
            "  ORDER BY 1 DESC LIMIT 1),"
            " (SELECT count(*) FROM schedules WHERE status='done')"
        )
        delivered, most_runs, done = await cur.fetchone()
    return {"delivered": delivered, "max_runs_per_occurrence": most_runs or 0, "done": done}


def report(args, burst: dict, idle: list[float], totals: dict, per_worker: list[int]) -> None:
    """Print the results table."""
    rows = [
        ("reminders / users / worker processes", f"{args.reminders} / {args.users} / {args.workers}"),
        ("delivered (unique reminders)", f"{burst['unique']} / {args.reminders}"),
        ("duplicate deliveries", str(burst["duplicates"])),
        ("delivered per worker", " + ".join(map(str, per_worker))),
        ("runs recorded delivered (DB)", str(totals["delivered"])),
        ("burst: drain time (T0 → last delivery)", f"{burst['drain']:.2f} s"),
        ("burst: throughput", f"{args.reminders / max(burst['drain'], 1e-9):,.0f} /s"),
        ("burst: lateness p50 / p99", f"{burst['p50']:.2f} s / {burst['p99']:.2f} s"),
        (f"idle: lateness p50 / p99 / max ({len(idle)} single reminders)",
         f"{pct(idle, 50) * 1000:.0f} ms / {pct(idle, 99) * 1000:.0f} ms / {max(idle) * 1000:.0f} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\nScheduler benchmark — {platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}")
    print("-" * (width + 24))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 24))


async def coordinator(args) -> int:
    """Set up, run both phases, print the table; non-zero exit if a guarantee was broken."""
    server, url = await make_database()
    tmp = Path(tempfile.mkdtemp(prefix="panager-bench-sched-"))
    try:
        t0 = datetime.fromtimestamp(math.ceil(time.time() + START_MARGIN), UTC)
        write_burst(url, args.users, args.reminders, t0)
        procs = await start_workers(url, args.workers, tmp)
        try:
            await wait_delivered(url, args.reminders, within=START_MARGIN + 120)
            idle_due = await idle_phase(url, args.idle)
            await wait_delivered(url, args.reminders + args.idle, within=10)
        finally:
            results = await stop_workers(procs)
        sent = [item for r in results for item in r["sent"]]
        burst_sent = [(m, t) for m, t in sent if m.startswith("burst ")]
        burst_late = [t - t0.timestamp() for _, t in burst_sent]
        unique = len({m for m, _ in burst_sent})
        burst = {
            "unique": unique,
            "duplicates": len(sent) - len({m for m, _ in sent}),
            "drain": max(burst_late) if burst_late else float("nan"),
            "p50": statistics.median(burst_late) if burst_late else float("nan"),
            "p99": pct(burst_late, 99) if burst_late else float("nan"),
        }
        idle = [t - idle_due[m] for m, t in sent if m in idle_due]
        totals = await db_totals(url)
        report(args, burst, idle, totals, [len(r["sent"]) for r in results])
        ok = unique == args.reminders and burst["duplicates"] == 0 and len(idle) == args.idle
        return 0 if ok and totals["max_runs_per_occurrence"] == 1 else 1
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {urlname(url)} WITH (FORCE)")


def urlname(url: str) -> str:
    """The database name in a URL."""
    from urllib.parse import urlsplit

    return urlsplit(url).path.lstrip("/")


def main() -> None:
    """Parse arguments; run as the coordinator or (internally) as one worker process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--idle", type=int, default=20, help="single reminders in the idle phase")
    parser.add_argument("--worker", nargs=2, metavar=("URL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(worker_main(args.worker[0]))
        Path(args.worker[1]).write_text(json.dumps(result))
        return
    sys.exit(asyncio.run(coordinator(args)))


if __name__ == "__main__":
    main()

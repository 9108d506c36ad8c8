"""Scheduler benchmark: a burst of reminders drained by worker processes, then idle lateness.

    .venv/bin/python bench/scheduler.py            # 10,000 reminders, 1,000 users, 2 workers
    .venv/bin/python bench/scheduler.py --record   # and append the figures to scheduler.json

1. Burst: N reminders for U users, all due at the same instant T0, are written
   before the workers start; W worker *processes* (the real `SchedulerWorker`
   with the system clock, LISTEN/NOTIFY and default poll) deliver them to a
   recording messenger. Reported: all delivered, duplicates (same reminder
   delivered twice; must be 0), time from T0 to the last delivery, p50/p99
   lateness (delivery time − due time). Run once per claim statement in
   `--claims` (bench/scheduler_peers.py: today's fair claim, the rank-every-row
   fair claim it replaced, the oldest-first claim before fairness), `--rounds`
   times in rotating order after one uncounted warm-up burst (the first burst
   on a fresh database is slower), so all face the same machine.
2. Idle: with the workers idle, single reminders are created through
   `ScheduleService.create` 1.5–2.5 s ahead (the NOTIFY path) one at a time;
   reported: p50/p99/max lateness.
3. Fairness (bench/scheduler_fairness.py): one user's 500 agent runs with a
   300 ms model vs twenty other users' reminders, through the whole app.

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
for _path in (ROOT / "src", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.results import add_record_option, record_if_asked  # noqa: E402
from bench.scheduler_peers import VARIANTS  # noqa: E402

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

    async def run_agent(self, user, instruction: str, *, tainted: bool = False):
        """Not used: the benchmark only has reminders."""
        raise NotImplementedError


async def worker_main(url: str, claims: str) -> dict:
    """Run one real worker (claiming with `claims`) until SIGTERM; return what it delivered."""
    from bench.scheduler_peers import CLAIM_STATS, use_claims
    from panager.clock import SystemClock
    from panager.db.pool import open_pool
    from panager.services.schedules.service import ScheduleService
    from panager.services.schedules.worker import SchedulerWorker

    use_claims(claims)
    pool = await open_pool(url, max_size=10)
    clock = SystemClock()
    delivery = RecordingDelivery()
    worker = SchedulerWorker(ScheduleService(pool, clock), delivery, clock=clock, listen_url=url)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await worker.run(stop)
    await pool.close()
    return {"worker": worker.id, "sent": delivery.sent, "claims": CLAIM_STATS}


# -- coordinator -------------------------------------------------------------------------------


async def make_database() -> tuple[str, str]:
    """(server URL, URL of a fresh migrated database)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.common import create_bench_database

    return await create_bench_database("bench_sched", "panager-bench-scheduler-pg")


def write_burst(url: str, users: int, reminders: int, due: datetime) -> None:
    """Users (once) and reminders (all due at `due`) with COPY; setup, not measured."""
    from panager.services.schedules.service import new_schedule_id

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE schedule_runs, schedules")
        if not conn.execute("SELECT 1 FROM users WHERE id = 10000").fetchone():
            with conn.cursor().copy("COPY users (id, username, timezone) FROM STDIN") as copy:
                for n in range(users):
                    copy.write_row((10_000 + n, f"user{n}", "UTC"))
        columns = "id, user_id, kind, message, timezone, anchor_local, next_run_at"
        with conn.cursor().copy(f"COPY schedules ({columns}) FROM STDIN") as copy:
            for n in range(reminders):
                sid = new_schedule_id() + f"{n:05d}"
                row = (sid, 10_000 + n % users, "reminder", f"burst {sid}", "UTC")
                copy.write_row((*row, due.replace(tzinfo=None), due))


async def start_workers(
    url: str, count: int, tmp: Path, claims: str
) -> list[tuple[asyncio.subprocess.Process, Path]]:
    """Start worker processes and wait until each is ready."""
    procs = []
    for n in range(count):
        out = tmp / f"worker{n}.json"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--worker",
            url,
            str(out),
            claims,
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


def burst_figures(args, sent: list, t0: datetime) -> dict:
    """Burst deliveries → delivered, duplicates, drain, p50/p99 lateness."""
    burst_sent = [(m, t) for m, t in sent if m.startswith("burst ")]
    late = [t - t0.timestamp() for _, t in burst_sent]
    return {
        "unique": len({m for m, _ in burst_sent}),
        "duplicates": len(burst_sent) - len({m for m, _ in burst_sent}),
        "drain": max(late) if late else float("nan"),
        "p50": statistics.median(late) if late else float("nan"),
        "p99": pct(late, 99) if late else float("nan"),
    }


async def burst_round(url: str, args, tmp: Path, claims: str) -> dict:
    """One burst drained by fresh workers claiming with `claims`."""
    t0 = datetime.fromtimestamp(math.ceil(time.time() + START_MARGIN), UTC)
    write_burst(url, args.users, args.reminders, t0)
    procs = await start_workers(url, args.workers, tmp, claims)
    try:
        await wait_delivered(url, args.reminders, within=START_MARGIN + 120)
    finally:
        results = await stop_workers(procs)
    sent = [tuple(item) for r in results for item in r["sent"]]
    totals = await db_totals(url)
    return {
        **burst_figures(args, sent, t0),
        "claims": claims,
        "per_worker": [len(r["sent"]) for r in results],
        "claim_calls": sum(r["claims"]["calls"] for r in results),
        "claim_ms": sum(r["claims"]["seconds"] for r in results) * 1000,
        "max_runs": totals["max_runs_per_occurrence"],
    }


async def idle_round(url: str, args, tmp: Path) -> list[float]:
    """Idle lateness with today's claim (workers idle, reminders created one at a time)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE schedule_runs, schedules")
    procs = await start_workers(url, args.workers, tmp, "fair")
    try:
        idle_due = await idle_phase(url, args.idle)
        await wait_delivered(url, args.idle, within=10)
    finally:
        results = await stop_workers(procs)
    sent = [tuple(item) for r in results for item in r["sent"]]
    return [t - idle_due[m] for m, t in sent if m in idle_due]


def report(args, bursts: list[dict], idle: list[float], fair: dict | None) -> None:
    """Print the results table."""
    rows = [
        (
            "reminders / users / worker processes",
            f"{args.reminders} / {args.users} / {args.workers}",
        )
    ]
    for claims in args.claims:
        for n, b in enumerate(r for r in bursts if r["claims"] == claims):
            rows += [
                (
                    f"burst [{claims} #{n + 1}]: delivered / duplicates / per worker",
                    f"{b['unique']} / {b['duplicates']} / {' + '.join(map(str, b['per_worker']))}",
                ),
                (
                    f"burst [{claims} #{n + 1}]: drain · throughput · p50 / p99",
                    f"{b['drain']:.2f} s · {args.reminders / max(b['drain'], 1e-9):,.0f} /s · "
                    f"{b['p50']:.2f} s / {b['p99']:.2f} s",
                ),
                (
                    f"burst [{claims} #{n + 1}]: claims · time in claims (both workers)",
                    f"{b['claim_calls']} · {b['claim_ms']:,.0f} ms "
                    f"({b['claim_ms'] / max(b['claim_calls'], 1):.1f} ms each)",
                ),
            ]
    rows.append(
        (
            f"idle: lateness p50 / p99 / max ({len(idle)} single reminders)",
            f"{pct(idle, 50) * 1000:.0f} ms / {pct(idle, 99) * 1000:.0f} ms / "
            f"{max(idle) * 1000:.0f} ms",
        )
    )
    if fair is not None:
        late = fair["b_late"]
        rows += [
            (
                f"fairness: A's agent runs ({args.fair_model_ms:.0f} ms model) delivered / dup",
                f"{fair['a_delivered']} / {args.fair_agent_runs} / {fair['a_duplicates']}",
            ),
            (
                "fairness: A, T0 → first / last delivery",
                f"{fair['a_first']:.1f} s / {fair['a_done']:.1f} s",
            ),
            ("fairness: outcomes of handled runs (busy = handed back)", str(fair["outcomes"])),
            (
                f"fairness: B reminders ({len(late)}) lateness p50 / p99 / max",
                f"{pct(late, 50):.2f} s / {pct(late, 99):.2f} s / {max(late):.2f} s"
                if late
                else "none delivered",
            ),
        ]
    width = max(len(r[0]) for r in rows)
    print(
        f"\nScheduler benchmark — {platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}"
    )
    print("-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 40))


FULL = {"reminders": 10_000, "users": 1_000, "workers": 2, "fair_agent_runs": 500,
        "fair_model_ms": 300}  # what the dashboard's rows (bench/results/scheduler.json) describe


def figures(args, bursts: list[dict], idle: list[float], fair: dict | None) -> dict[str, float]:
    """The dashboard's figures: today's claim's bursts (mean over rounds), idle, fairness."""
    ours = [b for b in bursts if b["claims"] == VARIANTS[0]]
    values: dict[str, float] = {"idle_lateness_p99": pct(idle, 99) * 1000}
    if ours:
        values["burst_throughput"] = statistics.mean(
            args.reminders / max(b["drain"], 1e-9) for b in ours)
        values["burst_lateness_p99"] = statistics.mean(b["p99"] for b in ours)
    if fair is not None:
        values["fair_a_last"] = fair["a_done"]
        if fair["b_late"]:
            values["fair_b_p99"] = pct(fair["b_late"], 99)
    return values


async def coordinator(args) -> int:
    """Set up, run the sections, print the table; non-zero exit if a guarantee was broken."""
    from bench.scheduler_fairness import B_USERS, fairness_phase

    server, url = await make_database()
    tmp = Path(tempfile.mkdtemp(prefix="panager-bench-sched-"))
    try:
        warm = await burst_round(url, args, tmp, args.claims[0])  # a fresh database is slower
        print(f"warm-up burst [{args.claims[0]}]: {warm['drain']:.2f} s (not counted)", flush=True)
        bursts = []
        for n in range(args.rounds):
            order = args.claims[n % len(args.claims) :] + args.claims[: n % len(args.claims)]
            for claims in order:
                bursts.append(await burst_round(url, args, tmp, claims))
                print(f"burst [{claims}]: {bursts[-1]['drain']:.2f} s", flush=True)
        idle = await idle_round(url, args, tmp)
        fair = None
        if args.fair_agent_runs:
            fair = await fairness_phase(url, args, tmp, stop_workers)
        report(args, bursts, idle, fair)
        ok = (
            all(
                b["unique"] == args.reminders and b["duplicates"] == 0 and b["max_runs"] == 1
                for b in bursts
            )
            and len(idle) == args.idle
        )
        if fair is not None:
            ok = ok and fair["a_delivered"] == args.fair_agent_runs
            ok = ok and not fair["a_duplicates"] and len(fair["b_late"]) == B_USERS
        if ok:
            record_if_asked(args, "scheduler", figures(args, bursts, idle, fair), full=FULL)
        elif args.record:
            print("\nnot recorded in bench/results/scheduler.json: a guarantee was broken")
        return 0 if ok else 1
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {urlname(url)} WITH (FORCE)")


def urlname(url: str) -> str:
    """The database name in a URL."""
    from urllib.parse import urlsplit

    return urlsplit(url).path.lstrip("/")


def main() -> None:
    """Parse arguments; run as the coordinator or (internally) as one worker process."""
    if sys.argv[1:2] == ["--fair-worker"]:
        from bench.scheduler_fairness import run_worker

        run_worker(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reminders", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--idle", type=int, default=20, help="single reminders in the idle phase")
    parser.add_argument(
        "--claims",
        type=lambda v: v.split(","),
        default=list(VARIANTS),
        help=f"claim statements to compare ({','.join(VARIANTS)})",
    )
    parser.add_argument("--rounds", type=int, default=2, help="bursts per claim statement")
    parser.add_argument("--fair-agent-runs", type=int, default=500, help="0 skips the section")
    parser.add_argument("--fair-model-ms", type=float, default=300)
    parser.add_argument(
        "--fair-b-step", type=float, default=3.0, help="seconds between the B reminders' due times"
    )
    parser.add_argument(
        "--worker", nargs=3, metavar=("URL", "OUT", "CLAIMS"), help=argparse.SUPPRESS
    )
    add_record_option(parser, "scheduler")
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(worker_main(args.worker[0], args.worker[2]))
        Path(args.worker[1]).write_text(json.dumps(result))
        return
    sys.exit(asyncio.run(coordinator(args)))


if __name__ == "__main__":
    main()

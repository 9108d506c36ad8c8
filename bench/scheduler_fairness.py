"""The fairness section of bench/scheduler.py: one user's agent backlog vs others' reminders.

User A has `--fair-agent-runs` (500) agent schedules due at T0; the model takes
`--fair-model-ms` (300 ms) per call. Twenty B users each have one reminder, B0
due at T0 (with A's whole backlog) and each next one `--fair-b-step` seconds
later, so every B arrives while A's runs are going. W worker processes run the
whole app (`App.start` + `App.make_worker`, defaults: 64 slots, 2 runs in
flight per user per worker, LISTEN/NOTIFY) with a recording messenger.

Reported: B's lateness (delivery − due) p50/p99/max, A's runs delivered and
duplicates, T0 → A's last delivery, and how often a run was handed back because
A's turn was running (one turn at a time per user, across processes).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from langchain_core.messages import AIMessage, BaseMessage

from bench.common import SUMMARY_REPLY, PolicyModel, is_summary_request

A_ID = 20_000
B_BASE = 20_001
B_USERS = 20
MARK = re.compile(r"atask \d+")
B_MARK = re.compile(r"bfair \d+")
CONFIG = "daily_token_budget: 0\n"  # A's 500 runs would exceed the default daily budget


class SlowModel(PolicyModel):
    """The bench's policy model with a fixed delay per call (a remote model's latency)."""

    delay: float = 0.3

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw):
        await asyncio.sleep(self.delay)
        return self._reply(messages)


def echo_task(messages: list[BaseMessage]) -> AIMessage:
    """Answer a scheduled task with its marker (so deliveries can be matched to tasks)."""
    if is_summary_request(messages):
        return AIMessage(content=SUMMARY_REPLY)
    text = " ".join(str(m.content) for m in messages[-3:])
    found = MARK.findall(text)
    return AIMessage(content=f"done {found[-1] if found else '?'}")


class Recorder:
    """A messenger that records (user id, text, wall time)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str, float]] = []

    async def send(self, user, text: str, *, link=None, key=None) -> bool:
        """Record the delivery."""
        self.sent.append((user.id, text, time.time()))
        return True


async def worker_main(url: str, home: str, model_ms: float) -> dict:
    """One worker process: the whole app, the slow model, a recording messenger."""
    from panager.app import App
    from panager.config import Settings

    settings = Settings(
        _env_file=None, database_url=url, home=Path(home), timezone="UTC", access="open"
    )
    model = SlowModel(policy=echo_task, delay=model_ms / 1000)
    app = await App.start(settings, model=model)
    recorder = Recorder()
    app.deps.messenger.add(recorder)
    worker = app.make_worker()
    outcomes: Counter[str] = Counter()
    process = worker.process

    async def counted(schedule, user):
        outcome = await process(schedule, user)
        outcomes[outcome] += 1
        return outcome

    worker.process = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    try:
        await worker.run(stop)
    finally:
        await app.stop()
    return {"sent": recorder.sent, "outcomes": dict(outcomes)}


def write_fairness(url: str, runs: int, t0: datetime, step: float) -> dict[str, float]:
    """A's agent schedules and B's reminders (COPY); returns B message → due epoch."""
    from panager.services.schedules.service import new_schedule_id

    due_b: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE schedule_runs, schedules")
        with conn.cursor().copy("COPY users (id, username, timezone) FROM STDIN") as copy:
            for uid in (A_ID, *range(B_BASE, B_BASE + B_USERS)):
                copy.write_row((uid, f"fair{uid}", "UTC"))
        columns = "id, user_id, kind, message, timezone, anchor_local, next_run_at"
        with conn.cursor().copy(f"COPY schedules ({columns}) FROM STDIN") as copy:
            for n in range(runs):
                row = (new_schedule_id(), A_ID, "agent", f"atask {n}", "UTC")
                copy.write_row((*row, t0.replace(tzinfo=None), t0))
            for n in range(B_USERS):
                due = t0 + timedelta(seconds=n * step)
                message = f"bfair {n}"
                row = (new_schedule_id(), B_BASE + n, "reminder", message, "UTC")
                copy.write_row((*row, due.replace(tzinfo=None), due))
                due_b[message] = due.timestamp()
    return due_b


async def wait_users_delivered(url: str, expected: int, within: float) -> int:
    """Poll until `expected` runs of the fairness users are delivered (or time is up)."""
    deadline = time.monotonic() + within
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM schedule_runs WHERE status = 'delivered' AND user_id >= %s",
                (A_ID,),
            )
            done = (await cur.fetchone())[0]
            if done >= expected or time.monotonic() > deadline:
                return done
            await asyncio.sleep(0.2)


async def start(url: str, count: int, tmp: Path, model_ms: float) -> list:
    """Start fairness worker processes and wait until each is ready."""
    procs = []
    for n in range(count):
        out, home = tmp / f"fair{n}.json", tmp / f"fairhome{n}"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("scheduler.py")),
            "--fair-worker",
            url,
            str(home),
            str(out),
            str(model_ms),
            stdout=asyncio.subprocess.PIPE,
        )
        procs.append((proc, out))
    for proc, _ in procs:
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        assert line.strip() == b"ready", line
    return procs


async def fairness_phase(url: str, args, tmp: Path, stop_workers) -> dict:
    """Run the section; returns the figures for the table."""
    t0 = datetime.fromtimestamp(int(time.time()) + 20, UTC)  # app start-up takes a while
    due_b = write_fairness(url, args.fair_agent_runs, t0, args.fair_b_step)
    procs = await start(url, args.workers, tmp, args.fair_model_ms)
    try:
        wait = 60 + args.fair_agent_runs * args.fair_model_ms / 1000 * 3
        await wait_users_delivered(url, args.fair_agent_runs + B_USERS, wait)
    finally:
        results = await stop_workers(procs)
    sent = [tuple(item) for r in results for item in r["sent"]]
    outcomes = sum((Counter(r["outcomes"]) for r in results), Counter())
    a_sent = [(text, at) for uid, text, at in sent if uid == A_ID]
    a_marks = [m for text, _ in a_sent for m in MARK.findall(text)[:1]]
    b_late = [
        at - due_b[m] for uid, text, at in sent if uid != A_ID for m in B_MARK.findall(text)[:1]
    ]
    return {
        "a_delivered": len(set(a_marks)),
        "a_duplicates": len(a_marks) - len(set(a_marks)),
        "a_done": max((at for _, at in a_sent), default=float("nan")) - t0.timestamp(),
        "a_first": min((at for _, at in a_sent), default=float("nan")) - t0.timestamp(),
        "b_late": b_late,
        "handed_back": outcomes.get("busy", 0),
        "outcomes": dict(outcomes),
    }


def run_worker(argv: list[str]) -> None:
    """`--fair-worker URL HOME OUT MODEL_MS` (internal): run one worker, write its results."""
    url, home, out, model_ms = argv
    Path(home).mkdir(parents=True, exist_ok=True)
    (Path(home) / "config.yaml").write_text(CONFIG)
    result = asyncio.run(worker_main(url, home, float(model_ms)))
    Path(out).write_text(json.dumps(result))

"""Cost of the system jobs: a heartbeat check and a morning briefing (fake model, fake Google).

Real PostgreSQL (embedded, or DATABASE_URL), the real google-api-python-client
against the local fake Google of the tests, and a scripted model whose replies
carry usage like an OpenAI-compatible server's (input tokens ~ characters / 4).
Rows:

- heartbeat, nothing new: the check's wall time; it makes no model call;
- heartbeat, something new (one event in 20 minutes among 3 reminders): one
  structured decision call;
- briefing with 10 events and 20 tasks due: one graph run (calendar_list_events +
  task_list + schedule_list, then the answer).

    python bench/system_jobs.py [--repeat 5] [--delay-ms 0] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import bench_database, machine_line  # noqa: E402
from bench.results import add_record_option, record_if_asked  # noqa: E402

KEYS = ("heartbeat_quiet_ms", "heartbeat_event_ms", "briefing_ms")  # system_jobs.json, by row


def _scripts(model, events: bool) -> None:
    from tests.fakes.scripted_model import call, calls

    if events:
        model.add(
            calls(
                call("calendar_list_events", {"start": "2026-11-21", "end": "2026-11-22"}),
                call("task_list", {}),
                call("schedule_list", {}),
            ),
            "Today: 10 events, 20 tasks due. First up: Meeting 0 at 13:00.",
        )


async def measure(repeat: int, delay_ms: int) -> list[tuple[str, float, int, int]]:
    """(row, median ms, model calls, tokens) for each job."""
    from panager.app import App
    from panager.clock import FakeClock
    from panager.config import Settings
    from panager.frontends.web.server import start_web
    from tests.fakes.google_server import FakeGoogle
    from tests.fakes.scripted_model import ScriptedChatModel, call
    from tests.google_helpers import ALICE, GoogleHarness, endpoints_of, google_settings
    from tests.scheduler_helpers import RecordingMessenger

    os.environ.setdefault("OAUTHLIB_INSECURE_TRANSPORT", "1")
    rows = []
    async with bench_database() as url, FakeGoogle() as fake:
        clock = FakeClock()
        model = ScriptedChatModel(delay=delay_ms / 1000)
        settings = Settings(
            _env_file=None, database_url=url, home=Path(tempfile.mkdtemp()), timezone="UTC",
            access="open", **google_settings(fake),
        )
        app = await App.start(settings, clock=clock, model=model)
        app.deps.google.endpoints = endpoints_of(fake)
        recorder = RecordingMessenger()
        app.deps.messenger.add(recorder)
        harness = GoogleHarness(app, fake, await start_web(app), recorder)
        user = await app.local_user()
        assert (await harness.link(user))[0] == 200
        jobs = app.deps.system_jobs
        beat = await jobs.set_heartbeat(user, timedelta(minutes=30), *_all_day())
        for i in range(3):
            await app.deps.scheduler.create(user, f"reminder {i}", f"2026-11-21T12:{10 + i}")
        runner = app.make_worker(listen_url=None).delivery.jobs
        quiet, new, brief = [], [], []
        for i in range(repeat):
            now = clock.advance(minutes=30)
            items = await runner.gather(user, beat, now)
            await jobs.mark_seen(user.id, [it.key for it in items])
            t = time.perf_counter()
            assert await runner.heartbeat(user, beat, now) == ""
            quiet.append((time.perf_counter() - t) * 1000)
            start = now + timedelta(minutes=20)
            fake.add_event(ALICE, summary=f"Meeting {i}", start=start.isoformat(),
                           end=(start + timedelta(minutes=30)).isoformat())
            model.add(call("HeartbeatDecision", {"notify": True, "message": f"Meeting {i} soon"}))
            before = await app.deps.usage.today_total(user)
            calls_before = len(model.requests)
            t = time.perf_counter()
            assert await runner.heartbeat(user, beat, now) == f"Meeting {i} soon"
            new.append((time.perf_counter() - t) * 1000)
            new_tokens = await app.deps.usage.today_total(user) - before
            new_calls = len(model.requests) - calls_before
        day = clock.now().date().isoformat()
        for i in range(10):
            start = clock.now() + timedelta(hours=1 + i)
            fake.add_event(ALICE, summary=f"Event {i}", start=start.isoformat(),
                           end=(start + timedelta(minutes=30)).isoformat())
        for i in range(20):
            fake.add_task(ALICE, title=f"Task {i}", due=f"{day}T00:00:00.000Z")
        for _ in range(repeat):
            await app.assistant.clear(user)
            _scripts(model, events=True)
            before = await app.deps.usage.today_total(user)
            calls_before = len(model.requests)
            t = time.perf_counter()
            answer = await runner._agent(user, "Morning briefing (bench)")
            brief.append((time.perf_counter() - t) * 1000)
            assert answer.ok, answer.text
            brief_tokens = await app.deps.usage.today_total(user) - before
            brief_calls = len(model.requests) - calls_before
        rows.append(("heartbeat, nothing new", statistics.median(quiet), 0, 0))
        rows.append(("heartbeat, an event in 20 min", statistics.median(new), new_calls, new_tokens))
        rows.append(("briefing, 10 events + 20 tasks", statistics.median(brief), brief_calls,
                     brief_tokens))
        await harness.server.stop()
        await app.stop()
    return rows


def _all_day():
    from datetime import time as clock_time

    return clock_time(0), clock_time(23, 59)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--delay-ms", type=int, default=0, help="fake model latency per call")
    add_record_option(parser, "system_jobs")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.repeat, args.delay_ms))
    print(f"# System jobs ({machine_line()}; fake model delay {args.delay_ms} ms, median of "
          f"{args.repeat})\n")
    print("| job | wall time (ms) | model calls | tokens |")
    print("|---|---:|---:|---:|")
    for name, ms, calls_made, tokens in rows:
        print(f"| {name} | {ms:.1f} | {calls_made} | {tokens:,} |")
    values = {key: ms for key, (_, ms, _, _) in zip(KEYS, rows, strict=True)}
    record_if_asked(args, "system_jobs", values, full={"delay_ms": 0})


if __name__ == "__main__":
    main()

"""Models: model calls and tokens per kind of work over a simulated day, and time to the
first token when the primary model endpoint is down.

    .venv/bin/python bench/models.py [--people 10] [--items 40] [--ttft-turns 5]
        [--timeout 2] [--only day,idle,ttft] [--record]

Two local fake OpenAI servers (HTTP + SSE, the real ChatOpenAI): `chat` (PANAGER_MODEL)
and `small` (`background_model`). Real PostgreSQL, the real scheduler worker on an
injected clock, the real google-api-python-client against the local fake Google.

- day: `--people` people, each with Google linked, a heartbeat every 30 minutes (all
  day), a 07:00 briefing and the 03:00 tidy-up over 12 memories; `--items` new calendar
  events and tasks each, appearing across the day. The worker runs every 30 minutes of
  the fake clock for 24 hours. Model calls and tokens (the fake's count: characters / 4)
  per kind of work, and on which endpoint each ran.
- idle: the same people, heartbeat and tidy-up on, nothing new, no briefing: model calls
  (must be 0).
- ttft: a turn's time from `run_turn` to the first streamed piece, the fallback
  answering at once: primary healthy; primary refusing connections; primary accepting
  but never answering (until `--timeout`); each with the circuit breaker closed and open.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from bench.common import bench_database, machine_line  # noqa: E402
from bench.results import add_record_option, record_if_asked  # noqa: E402

AREA = "models"


def _metric(label: str, unit: str = "", target: str = "") -> dict[str, str]:
    return {"label": label, "unit": unit, "better": "lower", "target": target, "compare": ""}


METRICS = {
    "day_background_calls": _metric(
        "Busy day, 10 people × 40 items: background model calls (heartbeat + tidy-up)"),
    "day_background_tokens": _metric("… their tokens"),
    "day_background_on_chat": _metric("… background calls that ran on the chat model",
                                      target="0"),
    "day_briefing_calls": _metric("… briefing model calls (the person's model)"),
    "idle_day_calls": _metric("Idle day (heartbeat + tidy-up on, nothing new): model calls",
                              target="0"),
    "ttft_healthy_ms": _metric("Time to first token, primary healthy", "ms"),
    "ttft_refused_ms": _metric("… primary refusing connections, circuit closed", "ms"),
    "ttft_refused_open_ms": _metric("… primary refusing connections, circuit open", "ms"),
    "ttft_hanging_ms": _metric("… primary hanging until the 2 s timeout, circuit closed", "ms"),
    "ttft_hanging_open_ms": _metric("… primary hanging, circuit open", "ms"),
}


def kind_of(body: dict) -> str:
    """Which kind of work a request to the fake model is."""
    choice = body.get("tool_choice") or {}
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if name == "HeartbeatDecision":
        return "heartbeat check"
    if name:
        return "nightly tidy-up"
    text = json.dumps(body.get("messages", ""))
    if "You compact a conversation" in text:
        return "compaction summary"
    if "Morning briefing" in text:
        return "briefing"
    return "chat turn"


class Tally:
    """Calls and tokens per (endpoint, kind), as the fake servers saw them."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.tokens: Counter[tuple[str, str]] = Counter()

    def handler(self, endpoint: str):
        from tests.fakes.openai_server import _estimate, text, tool_call

        def answer(body: dict):
            kind = kind_of(body)
            if kind == "heartbeat check":
                reply = tool_call("HeartbeatDecision", {"notify": True, "message": "Heads up."})
            elif kind == "nightly tidy-up":
                name = body["tool_choice"]["function"]["name"]
                reply = tool_call(name, {"pairs": [], "groups": []})
            else:
                reply = text("Today: a few meetings and tasks; nothing urgent.")
            out = reply.content + json.dumps([c["args"] for c in reply.tool_calls])
            self.calls[endpoint, kind] += 1
            self.tokens[endpoint, kind] += _estimate(body.get("messages", "")) + _estimate(out)
            return reply

        return answer


def write_home(home: Path, **config) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"skills": False, **config}))
    return home


async def day(people: int, items: int, idle: bool) -> Tally:
    """A simulated day (see the module doc); `idle`: nothing new, no briefing."""
    from datetime import time as clock_time

    from panager.app import App
    from panager.clock import FakeClock
    from panager.config import Settings
    from panager.frontends.web.server import start_web
    from tests.fakes.google_server import FakeGoogle
    from tests.fakes.openai_server import FakeOpenAI
    from tests.google_helpers import GoogleHarness, endpoints_of, google_settings
    from tests.scheduler_helpers import RecordingMessenger

    os.environ.setdefault("OAUTHLIB_INSECURE_TRANSPORT", "1")
    tally = Tally()
    async with bench_database() as url, FakeGoogle() as google, FakeOpenAI() as chat, \
            FakeOpenAI() as small:
        chat.handler, small.handler = tally.handler("chat"), tally.handler("small")
        home = write_home(Path(tempfile.mkdtemp()), background_model="small", models={
            "chat": {"base_url": chat.base_url}, "small": {"base_url": small.base_url}})
        clock = FakeClock(datetime(2026, 11, 21, 0, 0, tzinfo=UTC))
        settings = Settings(
            _env_file=None, database_url=url, home=home, timezone="UTC", access="open",
            openai_base_url=chat.base_url, openai_api_key="bench", PANAGER_MODEL="chat",
            PANAGER_EMBEDDING_MODEL="local", **google_settings(google),
        )
        app = await App.start(settings, clock=clock)
        app.deps.google.endpoints = endpoints_of(google)
        app.deps.messenger.add(RecordingMessenger())
        harness = GoogleHarness(app, google, await start_web(app), RecordingMessenger())
        jobs = app.deps.system_jobs
        persons = []
        for i in range(people):
            user = await app.deps.users.ensure(3000 + i, f"p{i}", display_name=f"P{i}")
            account = f"p{i}@example.com"
            assert (await harness.link(user, account=account))[0] == 200
            await jobs.set_heartbeat(user, timedelta(minutes=30), clock_time(0),
                                     clock_time(23, 59))
            if not idle:
                await jobs.set_briefing(user, clock_time(7, 0), "chat")
            if not idle:  # an idle day: nothing new to tidy either
                await app.deps.memory.save_many(
                    user.id, [f"fact {n} about person {i}" for n in range(12)], source="import")
            await jobs.ensure(user, "tidy", "03:00", "FREQ=DAILY")
            persons.append((user, account))
        plan = [] if idle else [
            (clock.now() + timedelta(hours=24 * (j + 0.5) / items), i, j)
            for i in range(people) for j in range(items)
        ]
        plan.sort()
        worker = app.make_worker(listen_url=None)
        for _ in range(48):
            now = clock.advance(minutes=30)
            while plan and plan[0][0] <= now:
                added, i, j = plan.pop(0)
                _, account = persons[i]
                if j % 2:
                    start = added + timedelta(hours=1)
                    google.add_event(account, summary=f"Meeting {j}", start=start.isoformat(),
                                     end=(start + timedelta(minutes=30)).isoformat())
                else:
                    google.add_task(account, title=f"Task {j}",
                                    due=f"{added.date().isoformat()}T00:00:00.000Z")
            while await worker.run_once():
                pass
        await harness.server.stop()
        await app.stop()
    return tally


async def ttft(turns: int, model_timeout: float) -> dict[str, float]:
    """Median ms from run_turn to the first streamed piece, per scenario (see module doc)."""
    from panager.app import App
    from panager.config import Settings
    from tests.fakes.openai_server import FakeOpenAI

    results: dict[str, float] = {}
    async with bench_database() as url, FakeOpenAI() as hanging, FakeOpenAI() as fallback:
        hanging.delay = 3600  # accepts, never answers
        fallback.default_reply.content = "The fallback answers at once."
        refused = _closed_port()
        healthy = FakeOpenAI()
        await healthy.start()
        cases = [("healthy", healthy.base_url), ("refused", refused),
                 ("hanging", hanging.base_url)]
        for case, primary in cases:
            for breaker_open in ([False] if case == "healthy" else [False, True]):
                home = write_home(
                    Path(tempfile.mkdtemp()), model_timeout_seconds=model_timeout,
                    breaker_failures=1 if breaker_open else 1000, breaker_cooldown_seconds=3600,
                    models={"primary": {"base_url": primary, "fallback": ["backup"]},
                            "backup": {"base_url": fallback.base_url}},
                )
                settings = Settings(
                    _env_file=None, database_url=url, home=home, timezone="UTC",
                    access="open", openai_base_url=primary, openai_api_key="bench",
                    PANAGER_MODEL="primary", PANAGER_EMBEDDING_MODEL="local",
                )
                app = await App.start(settings)
                user = await app.local_user()
                firsts: list[float] = []

                def first_piece(event, firsts=firsts) -> None:
                    if event.type == "message_delta":
                        firsts.append(time.perf_counter())

                app.emitter.subscribe(first_piece)
                async with app.pool.connection() as conn:
                    await conn.execute("DELETE FROM model_breakers")
                if breaker_open:  # one failed turn opens it (breaker_failures: 1)
                    await app.assistant.run_turn(user, "open the circuit")
                times = []
                for n in range(turns):
                    firsts.clear()
                    start = time.perf_counter()
                    result = await app.assistant.run_turn(user, f"question {n}")
                    assert result.ok, result.text
                    times.append((firsts[0] - start) * 1000)
                key = f"ttft_{case}" + ("_open" if breaker_open else "") + "_ms"
                results[key] = statistics.median(times)
                await app.stop()
        await healthy.stop()
    return results


def _closed_port() -> str:
    """A local address nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--items", type=int, default=40, help="new items per person a day")
    parser.add_argument("--ttft-turns", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=2.0, help="model_timeout_seconds")
    parser.add_argument("--only", default="day,idle,ttft")
    add_record_option(parser, AREA)
    args = parser.parse_args()
    only = set(args.only.split(","))
    values: dict[str, float] = {k: math.nan for k in METRICS}
    print(f"# Models ({machine_line()})\n")
    if "day" in only:
        tally = asyncio.run(day(args.people, args.items, idle=False))
        print(f"## A busy day: {args.people} people × {args.items} new items, heartbeat every "
              "30 min, 07:00 briefing, 03:00 tidy-up\n")
        print("| kind of work | endpoint | model calls | tokens | tokens per person |")
        print("|---|---|---:|---:|---:|")
        for (endpoint, kind), calls in sorted(tally.calls.items(), key=lambda kv: kv[0][1]):
            tokens = tally.tokens[endpoint, kind]
            print(f"| {kind} | {endpoint} | {calls:,} | {tokens:,} | "
                  f"{tokens // max(args.people, 1):,} |")
        background = ("heartbeat check", "nightly tidy-up", "compaction summary")
        values["day_background_calls"] = sum(
            c for (e, k), c in tally.calls.items() if k in background)
        values["day_background_tokens"] = sum(
            t for (e, k), t in tally.tokens.items() if k in background)
        values["day_background_on_chat"] = sum(
            c for (e, k), c in tally.calls.items() if k in background and e == "chat")
        values["day_briefing_calls"] = sum(
            c for (e, k), c in tally.calls.items() if k == "briefing")
        print(f"\nbackground calls on the chat model: {values['day_background_on_chat']}\n")
    if "idle" in only:
        tally = asyncio.run(day(args.people, 0, idle=True))
        values["idle_day_calls"] = sum(tally.calls.values())
        print(f"## An idle day ({args.people} people): {values['idle_day_calls']} model calls\n")
    if "ttft" in only:
        found = asyncio.run(ttft(args.ttft_turns, args.timeout))
        values.update(found)
        healthy = found["ttft_healthy_ms"]
        print(f"## Time to first token, primary down (median of {args.ttft_turns}; "
              f"model_timeout_seconds {args.timeout:g})\n")
        print("| primary | circuit | first token (ms) | × healthy |")
        print("|---|---|---:|---:|")
        for key, label in (("ttft_healthy_ms", "healthy"), ("ttft_refused_ms", "refusing"),
                           ("ttft_refused_open_ms", "refusing"),
                           ("ttft_hanging_ms", "hanging"), ("ttft_hanging_open_ms", "hanging")):
            circuit = "open" if "open" in key else ("closed" if key != "ttft_healthy_ms" else "—")
            print(f"| {label} | {circuit} | {found[key]:.0f} | {found[key] / healthy:.1f} |")
    record_if_asked(args, AREA, values, metrics=METRICS, title="Models",
                    history="Models",
                    full={"people": 10, "items": 40, "timeout": 2.0})


if __name__ == "__main__":
    main()

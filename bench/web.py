"""Web page render times with a full account, and the chat's first text vs the terminal's.

    .venv/bin/python bench/web.py [--requests 60] [--memories 1000] [--schedules 100] [--record]

A real app (PostgreSQL, the offline embedder, a zero-delay model) with one
user holding 1,000 memories, 100 schedules (a mix of one-shot, daily, weekly,
weekday, monthly and hourly rules, so the week and month views expand
hundreds of occurrences), 30 days of usage and a 40-message conversation.
Each page is fetched over loopback by a signed-in client; the time is the
whole request (server-side render plus the loopback HTTP round trip, so an
upper bound on the server's part). Target: p95 ≤ 50 ms for every page.
/admin/doctor is left out: it probes the model endpoint over the network.

Chat: the terminal shows a turn's text when its first text event arrives
(`message_end` today, `message_delta` once the model streams); the page shows
it when the same event reaches the browser as an SSE frame. Both are timed
from the start of the turn with the same zero-delay model; the difference is
the web path's own overhead (HTTP, the SSE frame). Target: ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import AIMessage

from bench.common import PolicyModel, bench_database, machine_line, percentile
from bench.results import add_record_option, record_if_asked

TARGET_MS = 50.0
CHAT_TARGET_MS = 100.0
RULES = [None, "FREQ=DAILY", "FREQ=WEEKLY;BYDAY=MO,WE", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
         "FREQ=MONTHLY;BYMONTHDAY=1", "FREQ=HOURLY;INTERVAL=6"]
TOPICS = ["dentist", "birthday", "flight", "allergy", "car", "garden", "book", "coffee",
          "meeting", "password", "gym", "doctor", "school", "holiday", "music"]


def answer(messages) -> AIMessage:
    """The model: a short text answer."""
    return AIMessage(content="Noted: " + str(messages[-1].content)[:40],
                     usage_metadata={"input_tokens": 50, "output_tokens": 10,
                                     "total_tokens": 60})


async def seed(app, user, memories: int, schedules: int) -> list:
    """Memories, schedules, usage and a conversation for `user`."""
    texts = [f"Fact {i}: my {TOPICS[i % len(TOPICS)]} note number {i} says {i * 7 % 101}"
             for i in range(memories)]
    for start in range(0, len(texts), 100):
        await app.deps.memory.save_many(user.id, texts[start:start + 100], source="tool")
    made = []
    for i in range(schedules):
        day, hour = 1 + i % 27, 6 + i % 14
        at = f"2027-01-{day:02d}T{hour:02d}:{(i * 7) % 60:02d}"
        made.append(await app.deps.scheduler.create(user, f"Reminder {i}: {TOPICS[i % 15]}",
                                                     at, repeat=RULES[i % len(RULES)]))
    today = app.clock.now().date()
    async with app.pool.connection() as conn:
        for i in range(1, 31):
            for model in ("gpt-4o-mini", "gpt-4o"):
                await conn.execute(
                    "INSERT INTO token_usage (user_id, day, model, total_tokens, calls) "
                    "VALUES (%s, %s, %s, %s, 1)", (user.id, today - timedelta(days=i), model,
                                                   1000 + i))
    for i in range(20):
        await app.assistant.run_turn(user, f"remember item {i}")
    return made


async def timed_get(session, url: str) -> float:
    started = time.perf_counter()
    async with session.get(url) as response:
        await response.read()
        assert response.status == 200, (url, response.status)
    return (time.perf_counter() - started) * 1000


async def first_web_text(session, base: str, csrf: str) -> float:
    """ms from the POST to the first text frame (message or delta) at the client."""
    started = time.perf_counter()
    first = None
    async with session.post(base + "/chat", data={"csrf": csrf, "text": "hello"},
                            headers={"X-Requested-With": "fetch"}) as response:
        async for line in response.content:
            if first is None and line.startswith((b"event: message", b"event: delta")):
                first = (time.perf_counter() - started) * 1000
    return first


async def first_terminal_text(app, user) -> float:
    """ms from calling run_turn to its first text event (what the terminal prints on)."""
    emitter = app.emitter.child()
    seen: list[float] = []
    started = time.perf_counter()

    def on(event) -> None:
        if event.type in ("message_delta", "message_end") and not seen:
            seen.append((time.perf_counter() - started) * 1000)

    emitter.subscribe(on)
    await app.assistant.run_turn(user, "hello", emitter=emitter)
    return seen[0]


async def main(args) -> None:
    import aiohttp

    from panager.app import App
    from panager.config import Settings
    from panager.frontends.web.server import start_web
    from panager.services.web_sessions import WebSessionService

    async with bench_database() as url:
        settings = Settings(_env_file=None, database_url=url, home=Path(tempfile.mkdtemp()),
                            access="open", timezone="Europe/Berlin", http_port=0)
        app = await App.start(settings, model=PolicyModel(policy=answer))
        try:
            user = await app.deps.users.ensure(5001, "bench", role="admin")
            started = time.perf_counter()
            scheds = await seed(app, user, args.memories, args.schedules)
            print(f"seeded {args.memories} memories, {len(scheds)} schedules, 30 days of usage, "
                  f"40 messages in {time.perf_counter() - started:.1f} s")
            server = await start_web(app)
            memory_id = (await app.deps.memory.list(user.id, 1))[0].id
            token = await WebSessionService(app.pool, app.clock).create_link(user.id)
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
                async with s.post(server.url + "/signin", data={"token": token}) as r:
                    body = await r.text()
                csrf = body.split('name="csrf" value="')[1].split('"')[0]
                worst = await run_pages(s, server.url, scheds[7].id, memory_id, args.requests)
                chat = await run_chat(app, user, s, server.url, csrf, args.chat)
        finally:
            await app.stop()
    print(machine_line())
    record_if_asked(args, "web", {"worst_page_p95_ms": worst,
                                  "chat_web_minus_terminal_p95_ms": chat},
                    full={"memories": 1000, "schedules": 100})


async def run_pages(session, base: str, schedule_id: str, memory_id: str, n: int) -> float:
    """Fetch every page n times; print p50/p95/max per page; return the worst p95."""
    pages = ["/", "/schedules", "/schedules?view=month", "/schedules?view=month&start=2027-01-01",
             f"/schedules/{schedule_id}", "/schedules/new", "/memories", "/memories?q={topic}",
             f"/memories/{memory_id}", "/memories/export.json", "/chat", "/usage",
             "/connections", "/admin/users", "/admin/invites", "/admin/usage",
             "/admin/scheduler"]
    print(f"\n{'page':<44} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  target p95 ≤ {TARGET_MS:.0f}")
    worst = 0.0
    for path in pages:
        times = []
        for i in range(n + 5):
            url = base + path.format(topic=f"{TOPICS[i % 15]} {i}")
            took = await timed_get(session, url)
            if i >= 5:
                times.append(took)
        p95 = percentile(times, 95)
        worst = max(worst, p95)
        mark = "ok" if p95 <= TARGET_MS else "OVER"
        print(f"{path:<44} {percentile(times, 50):8.1f} {p95:8.1f} {max(times):8.1f}  {mark}")
    print(f"worst p95: {worst:.1f} ms ({'within' if worst <= TARGET_MS else 'over'} target)")
    return worst


async def run_chat(app, user, session, base: str, csrf: str, n: int) -> float:
    """Time the first text on the terminal and the page, n turns each; return (web − terminal)
    p95."""
    web, term = [], []
    for _ in range(n):  # interleaved, so drift hits both alike
        term.append(await first_terminal_text(app, user))
        web.append(await first_web_text(session, base, csrf))
    diff = [w - t for w, t in zip(web, term, strict=True)]
    print(f"\n{'chat: first text':<44} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"{'terminal (run_turn → first text event)':<44} {percentile(term, 50):8.1f} "
          f"{percentile(term, 95):8.1f}")
    print(f"{'web page (POST → first SSE text frame)':<44} {percentile(web, 50):8.1f} "
          f"{percentile(web, 95):8.1f}")
    p95 = percentile(diff, 95)
    print(f"{'web − terminal':<44} {percentile(diff, 50):8.1f} {p95:8.1f}  target ≤ "
          f"{CHAT_TARGET_MS:.0f}: {'ok' if p95 <= CHAT_TARGET_MS else 'OVER'}")
    print(json.dumps({"chat_web_minus_terminal_p95_ms": round(p95, 1)}))
    return p95


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--chat", type=int, default=30)
    add_record_option(parser, "web")
    asyncio.run(main(parser.parse_args()))

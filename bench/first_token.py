"""Streamed answers: how soon the first words show, Discord edits, and the cost of streaming.

    .venv/bin/python bench/first_token.py [--answers 50] [--discord-users 5] [--telegram-users 5]
        [--overhead-turns 10] [--only terminal,discord,telegram,overhead] [--record]

The model is the local fake OpenAI server (HTTP + SSE, the real ChatOpenAI):
it waits 500 ms, then streams 300 tokens 20 ms apart. Real PostgreSQL (the
embedded server or DATABASE_URL's), the real graph and runner. Measured:

- terminal: the real `Repl` drawing with `LiveAnswer` on a rich console whose
  output is a recording terminal; time from the fake writing the first token to
  that token's text being written to the terminal. Answers one after another.
- Discord: the real discord.py bot against the local fake Discord; time from the
  first token to the first message holding answer text, and the number of edits
  per answer against the answer's duration (first token → final edit). Several
  users at once (`--discord-users`), 50 answers in all.
- Telegram: the real aiogram client against the local fake Bot API (long polling,
  editMessageText); the same measures as Discord (`--telegram-users` at once).
- final text: the streamed answer (every front end) compared byte for byte
  with the same answer produced with `stream: false`.
- overhead: whole `run_turn` time with streaming on vs `stream: false`, turns
  interleaved in the same run (same users, same database, same fake model).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.common import bench_database, machine_line, percentile
from bench.results import add_record_option, record_if_asked
from tests.fakes.openai_server import FakeOpenAI, Reply

TOKENS = 300
FIRST_WORD = "Streaming"
WORDS = [FIRST_WORD + " "] + [f"word{i} " if i % 12 else f"word{i}.\n\n" for i in range(1, TOKENS)]
ANSWER = "".join(WORDS)
THINK, GAP = 0.5, 0.02


class Recorder(io.StringIO):
    """A terminal that notes when the first word of an answer is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None

    def write(self, data: str) -> int:
        if self.first is None and FIRST_WORD in data:
            self.first = time.monotonic()
        return super().write(data)

    def isatty(self) -> bool:
        return True


def reply(body: dict) -> Reply:
    """The same model either way: streamed, or sent whole once all tokens exist."""
    if body.get("stream"):
        return Reply(content=ANSWER, pieces=WORDS, delay=THINK, piece_delay=GAP)
    return Reply(content=ANSWER, delay=THINK + (TOKENS - 1) * GAP)


def write_home(home: Path, **config) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"skills": False, **config}))
    return home


async def start_app(db_url: str, home: Path, base_url: str):
    from panager.app import App
    from panager.config import Settings

    settings = Settings(
        _env_file=None, database_url=db_url, home=home, timezone="UTC", access="open",
        openai_base_url=base_url, openai_api_key="bench",
    )
    return await App.start(settings)


async def terminal(app, fake: FakeOpenAI, answers: int) -> tuple[list[float], list[str]]:
    from rich.console import Console as RichConsole

    from panager.frontends.terminal.chat import Console, Repl

    user = await app.local_user()
    latencies, finals = [], []
    for i in range(answers):
        console = Console(interactive=True)
        out = Recorder()
        console.rich = RichConsole(file=out, force_terminal=True, width=100, height=40)
        repl = Repl(app, user, console)
        before = len(fake.first_piece_at)
        await repl.handle(f"question {i}")
        app.emitter._subscribers.remove(repl._on_event)
        latencies.append((out.first - fake.first_piece_at[before]) * 1000)
        finals.append(await last_answer(app, user))
    return latencies, finals


async def last_answer(app, user) -> str:
    from panager.agent.turns.threads import thread_values

    return (await thread_values(app.assistant, user))["messages"][-1].text


async def discord(app, fake: FakeOpenAI, answers: int, users: int) -> dict:
    from tests.discord_helpers import running_bot
    from tests.fakes.discord_server import FakeDiscord

    async with FakeDiscord() as dc:
        with dc.patch_discord():
            async with running_bot(app, dc):
                return await in_rounds(answers, users, 7000, lambda uid: one_dm(dc, fake, uid))


async def in_rounds(answers: int, users: int, first_id: int, one) -> dict:
    """`answers` answers, `users` people at once; `one(person id)` measures one answer."""
    firsts, edits, finals = [], [], []
    for round_ in range(0, answers, users):
        ids = [first_id + round_ + k for k in range(min(users, answers - round_))]
        for first, n_edits, seconds, text in await asyncio.gather(*(one(uid) for uid in ids)):
            firsts.append(first * 1000)
            edits.append((n_edits, seconds))
            finals.append(text)
    return {"first": firsts, "edits": edits, "finals": finals}


async def one_dm(dc, fake: FakeOpenAI, user_id: int) -> tuple[float, int, float, str]:
    await dc.send_dm(user_id, "tell me")
    await dc.wait_for(lambda: "".join(dc.shown_to(user_id)) == ANSWER, 60)
    sent = dc.messages_to(user_id)
    ids = {m["id"] for m in sent}
    edits = [e for e in dc.edits if e["id"] in ids]
    # the first piece of *this* answer: the latest stream start before its first post
    first_piece = max(t for t in fake.first_piece_at if t <= sent[0]["time"])
    done = max([e["time"] for e in edits] + [m["time"] for m in sent])
    text = "".join(dc.shown_to(user_id))
    return sent[0]["time"] - first_piece, len(edits), done - first_piece, text


async def telegram(app, fake: FakeOpenAI, answers: int, users: int) -> dict:
    from panager.frontends.telegram.api import make_bot
    from tests.fakes.telegram_server import FakeTelegram
    from tests.telegram_helpers import running_front

    async with contextlib.AsyncExitStack() as stack:
        tg = await stack.enter_async_context(FakeTelegram())
        await stack.enter_async_context(running_front(app, tg, bot=make_bot(tg.token, tg.base_url)))
        return await in_rounds(answers, users, 8000, lambda uid: one_telegram(tg, fake, uid))


async def one_telegram(tg, fake: FakeOpenAI, user_id: int) -> tuple[float, int, float, str]:
    tg.dm(user_id, "tell me")
    await tg.wait_for(lambda: "".join(tg.shown_to(user_id)) == ANSWER.strip(), 60)
    sent = tg.messages_to(user_id)
    ids = {m["message_id"] for m in sent}
    edits = [e for e in tg.edits if e["message_id"] in ids]
    first_piece = max(t for t in fake.first_piece_at if t <= sent[0]["time"])
    done = max([e["time"] for e in edits] + [m["time"] for m in sent])
    text = "".join(tg.shown_to(user_id))  # Telegram trims a message's outer whitespace
    return sent[0]["time"] - first_piece, len(edits), done - first_piece, text


async def overhead(stream_app, plain_app, turns: int, users: int) -> dict:
    times: dict[str, list[float]] = {"stream": [], "stream: false": []}
    people = [await stream_app.deps.users.ensure(9000 + k, f"u{k}") for k in range(users)]
    finals: dict[str, str] = {}
    for t in range(turns):
        order = [("stream", stream_app), ("stream: false", plain_app)]
        for name, app in order if t % 2 == 0 else order[::-1]:
            async def turn(user, app=app, t=t):
                start = time.perf_counter()
                result = await app.assistant.run_turn(user, f"turn {t}")
                return time.perf_counter() - start, result.text

            for seconds, text in await asyncio.gather(*(turn(u) for u in people)):
                times[name].append(seconds * 1000)
                finals[name] = text
    return {"times": times, "finals": finals}


def row(name: str, values: list[float], target: str) -> str:
    p50, p95 = percentile(values, 50), percentile(values, 95)
    return f"| {name} | {len(values)} | {p50:,.0f} | {p95:,.0f} | {target} |"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=50)
    parser.add_argument("--discord-users", type=int, default=5)
    parser.add_argument("--overhead-turns", type=int, default=6)
    parser.add_argument("--overhead-users", type=int, default=5)
    parser.add_argument("--telegram-users", type=int, default=5)
    parser.add_argument("--only", default="terminal,discord,telegram,overhead")
    add_record_option(parser, "first_token")
    args = parser.parse_args()
    only = set(args.only.split(","))
    home = Path(tempfile.mkdtemp(prefix="panager-bench-stream-"))
    async with FakeOpenAI() as fake, bench_database() as db_url:
        fake.handler = reply
        app = await start_app(db_url, write_home(home / "stream"), fake.base_url)
        plain = await start_app(db_url, write_home(home / "plain", stream=False), fake.base_url)
        try:
            began = time.perf_counter()
            none: dict = {"first": [], "edits": [], "finals": []}
            term, term_finals = (
                await terminal(app, fake, args.answers) if "terminal" in only else ([], [])
            )
            dc = await discord(app, fake, args.answers, args.discord_users) if "discord" in only else none
            tg = (
                await telegram(app, fake, args.answers, args.telegram_users)
                if "telegram" in only
                else none
            )
            over = await overhead(app, plain, args.overhead_turns, args.overhead_users)
            elapsed = time.perf_counter() - began
        finally:
            await app.stop()
            await plain.stop()
    values = report(args, term, term_finals, dc, tg, over, elapsed)
    record_if_asked(args, "first_token", values,
                    full={"discord_users": 5, "telegram_users": 5, "overhead_users": 5})


def edit_line(name: str, measured: dict) -> str:
    """Edits per answer against the answer's duration (about one edit a second)."""
    edits = [n for n, _ in measured["edits"]]
    seconds = [s for _, s in measured["edits"]]
    within = sum(n <= s + 2 for n, s in measured["edits"])
    return (
        f"{name} edits per answer: median {percentile(edits, 50):.0f}, max {max(edits)}; "
        f"answer duration median {percentile(seconds, 50):.1f} s; "
        f"answers within (seconds + 2) edits: {within}/{len(edits)}"
    )


def report(args, term, term_finals, dc, tg, over, elapsed) -> dict[str, float]:
    """Print the table and checks; return the dashboard's figures (the front ends measured)."""
    reference = over["finals"]["stream: false"]
    streamed = [*term_finals, *dc["finals"], over["finals"]["stream"]]
    same = all(t == reference for t in streamed)
    same = same and all(t == reference.strip() for t in tg["finals"])
    ratio = percentile(over["times"]["stream"], 50) / percentile(over["times"]["stream: false"], 50)
    print(machine_line())
    print(
        f"fake model: waits {THINK * 1000:.0f} ms, then {TOKENS} tokens {GAP * 1000:.0f} ms apart; "
        f"{args.answers} answers per front end; Discord {args.discord_users} and Telegram "
        f"{args.telegram_users} users at once; front ends: {args.only}; "
        f"run took {elapsed:.0f} s"
    )
    print()
    print("| measure | n | p50 (ms) | p95 (ms) | target |")
    print("|---|---|---|---|---|")
    if term:
        print(row("first token → terminal", term, "p95 ≤ 50 ms"))
    if dc["first"]:
        print(row("first token → Discord message", dc["first"], "p95 ≤ 1,200 ms"))
    if tg["first"]:
        print(row("first token → Telegram message", tg["first"], "p95 ≤ 1,200 ms"))
    print(row(f"whole turn, stream (×{args.overhead_users} users)", over["times"]["stream"], ""))
    print(row("whole turn, `stream: false`", over["times"]["stream: false"], ""))
    print()
    for name, measured in (("Discord", dc), ("Telegram", tg)):
        if measured["edits"]:
            print(edit_line(name, measured))
    print(f"final text byte-identical to the `stream: false` answer: {'yes' if same else 'NO'}")
    print(f"whole-turn overhead of streaming (p50 ÷ p50): {ratio:.3f} (target ≤ 1.05)")
    firsts = {"terminal_p95_ms": term, "discord_p95_ms": dc["first"],
              "telegram_p95_ms": tg["first"]}
    values = {key: percentile(found, 95) for key, found in firsts.items() if found}
    return {**values, "stream_overhead": ratio}


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())

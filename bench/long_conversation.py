"""A 1,000-turn conversation with compaction + checkpoint pruning ON vs OFF, in one run.

    .venv/bin/python bench/long_conversation.py [--turns 1000] [--window 8000]
    .venv/bin/python bench/long_conversation.py --small-window [--turns 200] [--delay 0.3]
    (--record: append the figures to bench/results/long_conversation.json, or with
    --small-window to small_windows.json)

Two Panager apps on the same real PostgreSQL server, each with its own user and
its own database (so OFF's half a gigabyte of checkpoints does not slow ON's
queries):

- ON: `context_window: <window>` with the default effects (`trim_tool_results`
  + `compact`) and checkpoint pruning;
- OFF: `context_window: 0` (no effects) and `checkpoint_pruning: false`.

Every turn: the user asks a question, the fake model (zero delay) calls a tool
that returns a 2 KB result, then answers. Turns of the two apps alternate, so
drift in the machine or the database hits both alike; background pruning is
awaited after each ON turn, outside the timed region. Reported at turns 10,
100 and 1,000 (or the chosen length): prompt tokens per model call
(approximate counter, system prompt included), database bytes for that user
(checkpoint rows + token_usage + memories), and the median per-turn latency
of the ten turns up to that point. Targets: ON prompts stay under the window
at every turn; ON bytes under 2 MB at turn 1,000; ON latency at turn 1,000
within 1.5× of turn 10.

`--small-window` runs three conversations one after the other, each with the
product's own tools (no Google client) and a fake model that waits `--delay`
seconds per call: the 8,000-token window with the workload above, and a
4,096-token window (the default of common local servers) with ~700-character
messages and answers, without and with a 2 KB tool result per turn. Reported:
summaries per 100 turns (target ≤ 20), the largest prompt including the tool
schemas (target ≤ the window), the fixed prompt (system prompt + schemas) and
the median turn latency.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from bench.common import (
    SUMMARY_REPLY,
    PolicyModel,
    bench_database,
    is_summary_request,
    machine_line,
    one_tool_call_policy,
)
from bench.results import add_record_option, record_if_asked

WORDS = (
    "meeting", "calendar", "project", "budget", "review", "report", "client", "design",
    "launch", "travel", "invoice", "agenda", "summary", "deadline", "draft", "notes",
    "update", "status", "estimate", "schedule", "team", "office",
)
# Stored bytes of the user's rows: pg_column_size of the big columns is their size as
# stored (compressed, out-of-line TOAST included); keys and the tuple header are added.
USER_BYTES = """
SELECT
  (SELECT COALESCE(sum(pg_column_size(checkpoint) + pg_column_size(metadata)
          + octet_length(thread_id || checkpoint_ns || checkpoint_id) + 64), 0)
     FROM checkpoints WHERE thread_id = %(t)s)
+ (SELECT COALESCE(sum(COALESCE(pg_column_size(blob), 0)
          + octet_length(thread_id || checkpoint_ns || channel || version || type) + 24), 0)
     FROM checkpoint_blobs WHERE thread_id = %(t)s)
+ (SELECT COALESCE(sum(pg_column_size(blob)
          + octet_length(thread_id || checkpoint_ns || checkpoint_id || task_id || channel) + 32), 0)
     FROM checkpoint_writes WHERE thread_id = %(t)s)
+ (SELECT COALESCE(sum(pg_column_size(u.*)), 0) FROM token_usage u WHERE user_id = %(u)s)
+ (SELECT COALESCE(sum(pg_column_size(m.*)), 0) FROM memories m WHERE user_id = %(u)s)
  AS bytes,
  (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s) AS checkpoints
"""


def document(seed: str, size: int = 2_000) -> str:
    """`size` characters of text-like content, different for every query (compresses like prose)."""
    rng = random.Random(seed)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS) if rng.random() < 0.7 else f"{rng.randrange(10**6)}")
    return " ".join(words)[:size]


@tool
async def lookup(query: str) -> str:
    """Look something up (returns a 2 KB document)."""
    return document(query)


def bench_tools(deps, user):
    """The tool of both apps."""
    return [lookup]


@dataclass
class Variant:
    """One app, its user and what was measured."""

    name: str
    app: object
    model: PolicyModel
    user: object = None
    latency: list[float] = field(default_factory=list)  # ms per turn
    prompts: list[list[int]] = field(default_factory=list)  # per turn: tokens of each call
    summary_calls: list[int] = field(default_factory=list)  # tokens of each summary request
    samples: dict[int, tuple[int, int]] = field(default_factory=dict)  # turn -> (bytes, ckpts)


_PRODUCT_FACTORIES: list = []  # the product's tool factories, kept before the bench's replace them


def chat_policy(with_tool: bool):
    """~700-character answers; with `with_tool`, one lookup call per user message first."""
    lookup_call = one_tool_call_policy("lookup", lambda text: {"query": text[:40]})

    def policy(messages):
        if is_summary_request(messages):
            return AIMessage(content=SUMMARY_REPLY)
        if with_tool and isinstance(messages[-1], HumanMessage):
            return lookup_call(messages)
        return AIMessage(content=document(f"answer {len(messages)}", 700))

    return policy


async def start_variant(
    name: str, url: str, config: dict, user_id: int, policy=None, **model_options
) -> Variant:
    """An App with `config` as its YAML runtime config, and its user (the bench's tool only,
    unless `count_tools` asks for the product's own tools to be offered and counted too)."""
    from panager.agent import tools as tools_pkg
    from panager.app import App
    from panager.config import Settings

    if not _PRODUCT_FACTORIES:
        _PRODUCT_FACTORIES.extend(tools_pkg.TOOL_FACTORIES)
    own = _PRODUCT_FACTORIES if model_options.get("count_tools") else []
    tools_pkg.TOOL_FACTORIES[:] = [*own, bench_tools]
    home = Path(tempfile.mkdtemp(prefix=f"panager-bench-{name}-"))
    (home / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    policy = policy or one_tool_call_policy("lookup", lambda text: {"query": text[:40]})
    model = PolicyModel(policy=policy, record=True, **model_options)
    settings = Settings(_env_file=None, database_url=url, home=home, timezone="UTC", access="open")
    app = await App.start(settings, model=model)
    variant = Variant(name, app, model)
    variant.user = await app.deps.users.ensure(user_id + 100, f"warm-up-{name}")
    for i in range(3):  # imports, caches, prepared statements: not part of turn 1
        await one_turn(variant, i)
    variant.user = await app.deps.users.ensure(user_id, f"bench-{name}")
    variant.latency, variant.prompts, variant.summary_calls = [], [], []
    return variant


async def one_turn(v: Variant, i: int, text: str | None = None) -> None:
    """Run turn i, timing it; then let background pruning finish (untimed)."""
    before = len(v.model.prompt_tokens)
    start = time.perf_counter()
    result = await v.app.assistant.run_turn(v.user, text or f"Question {i}: what is item {i}?")
    v.latency.append((time.perf_counter() - start) * 1000)
    if not result.ok:
        raise RuntimeError(f"{v.name} turn {i} failed: {result.text}")
    calls = list(zip(v.model.prompt_tokens[before:], v.model.summary_calls[before:], strict=True))
    v.prompts.append([tokens for tokens, summary in calls if not summary])
    v.summary_calls += [tokens for tokens, summary in calls if summary]
    runtime = v.app.deps.runtime
    if runtime.pruner is not None:
        await runtime.pruner.drain()


async def sample(v: Variant, turn: int) -> None:
    """Database bytes and checkpoint rows of the variant's user after `turn` turns."""
    async with v.app.pool.connection() as conn:
        params = {"t": v.user.thread_id, "u": v.user.id}
        row = await (await conn.execute(USER_BYTES, params)).fetchone()
    v.samples[turn] = (int(row["bytes"]), int(row["checkpoints"]))


def window_median(values: list[float], turn: int) -> float:
    """Median of the ten turns ending at `turn` (1-based)."""
    return statistics.median(values[max(turn - 10, 0) : turn])


def report(
    variants: list[Variant], points: list[int], window: int
) -> tuple[list[str], dict[str, float]]:
    """The markdown table and the target checks; the dashboard's figures (ON at the last turn)."""
    on, off = variants
    lines = [
        f"| measure | turn | {on.name} | {off.name} |",
        "|---|---:|---:|---:|",
    ]
    for turn in points:
        lines.append(
            f"| prompt tokens per model call (max in the turn) | {turn:,} | "
            f"{max(on.prompts[turn - 1]):,} | {max(off.prompts[turn - 1]):,} |"
        )
    for turn in points:
        (b_on, c_on), (b_off, c_off) = on.samples[turn], off.samples[turn]
        lines.append(
            f"| database bytes for the user (checkpoints kept) | {turn:,} | "
            f"{b_on / 1024:,.0f} KiB ({c_on}) | {b_off / 1024:,.0f} KiB ({c_off}) |"
        )
    for turn in points:
        lines.append(
            f"| per-turn latency, median of turns {max(turn - 9, 1)}–{turn} (ms) | {turn:,} | "
            f"{window_median(on.latency, turn):.1f} | {window_median(off.latency, turn):.1f} |"
        )
    last, first = points[-1], points[0]
    max_on = max(max(p) for p in on.prompts)
    max_summary = max(on.summary_calls, default=0)
    ratio = window_median(on.latency, last) / window_median(on.latency, first)
    lines += [
        "",
        f"- largest prompt of any {on.name} model call: {max_on:,} tokens (window {window:,}); "
        f"compaction summary requests: {len(on.summary_calls)}, largest {max_summary:,} tokens"
        f" — {'OK' if max(max_on, max_summary) < window else 'OVER'}",
        f"- {on.name} database bytes at turn {last:,}: {on.samples[last][0] / 1e6:.2f} MB "
        f"(target < 2 MB) — {'OK' if on.samples[last][0] < 2e6 else 'OVER'}",
        f"- {on.name} latency turn {last:,} ÷ turn {first}: {ratio:.2f} (target ≤ 1.5) — "
        f"{'OK' if ratio <= 1.5 else 'OVER'}",
        f"- {on.name} median latency over the last 100 turns: "
        f"{statistics.median(on.latency[-100:]):.1f} ms (÷ turn {first}: "
        f"{statistics.median(on.latency[-100:]) / window_median(on.latency, first):.2f}); "
        f"{off.name}: {statistics.median(off.latency[-100:]):.1f} ms",
        f"- {off.name} at turn {last:,}: {off.samples[last][0] / 1e6:.1f} MB, latency ÷ turn "
        f"{first}: {window_median(off.latency, last) / window_median(off.latency, first):.2f}",
        f"- total wall time: {on.name} {sum(on.latency) / 1000:.0f} s, "
        f"{off.name} {sum(off.latency) / 1000:.0f} s",
    ]
    values = {"db_mb_1000": on.samples[last][0] / 1e6, "latency_ratio": ratio,
              "largest_prompt": max_on}
    return lines, values


async def measure(turns: int, window: int) -> tuple[list[str], dict[str, float]]:
    """Run both conversations and return the report."""
    points = sorted({p for p in (10, 100, 1_000, turns) if p <= turns})
    async with bench_database() as url_on, bench_database() as url_off:
        on = await start_variant(
            "ON", url_on, {"context_window": window, "checkpoint_pruning": True}, 11
        )
        off = await start_variant(
            "OFF", url_off, {"context_window": 0, "checkpoint_pruning": False}, 12
        )
        try:
            for i in range(1, turns + 1):
                for v in (on, off) if i % 2 else (off, on):
                    await one_turn(v, i)
                if i in points:
                    for v in (on, off):
                        await sample(v, i)
                if i % 100 == 0:
                    print(f"  … turn {i}", file=sys.stderr, flush=True)
        finally:
            for v in (on, off):
                await v.app.stop()
    return report([on, off], points, window)


SMALL_RUNS = (  # name, window, policy (with a tool call?), ~700-character user messages?
    ("8,000, 2 KB tool results", 8_000, None, False),
    ("4,096, 700-char turns", 4_096, False, True),
    ("4,096, 700-char turns + 2 KB tool results", 4_096, True, True),
)


async def small_window_run(
    name: str, window: int, with_tool: bool | None, chat: bool, turns: int, delay: float
) -> Variant:
    """One conversation of `turns` turns (`with_tool` None: the 8,000 run's policy)."""
    async with bench_database() as url:
        policy = None if with_tool is None else chat_policy(with_tool)
        config = {"context_window": window, "checkpoint_pruning": True, "daily_token_budget": 0}
        v = await start_variant(name, url, config, 21, policy, delay=delay, count_tools=True)
        try:
            for i in range(1, turns + 1):
                await one_turn(v, i, document(f"message {i}", 700) if chat else None)
        finally:
            await v.app.stop()
    return v


SMALL_KEYS = {  # run → its figure in bench/results/small_windows.json
    "4,096, 700-char turns": "summaries_4096",
    "4,096, 700-char turns + 2 KB tool results": "summaries_4096_tool",
}


def small_window_report(
    runs: list[tuple[str, int, Variant]], turns: int
) -> tuple[list[str], dict[str, float]]:
    """One table row per run, and the target checks of the 4,096 runs; the dashboard's figures
    (summaries per 100 turns of the 4,096 runs)."""
    values = {}
    lines = [
        "| run (window, workload) | model calls | summaries | per 100 turns | largest prompt "
        "(tokens) | largest summary request | median turn (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, _window, v in runs:
        calls = sum(len(p) for p in v.prompts) + len(v.summary_calls)
        largest = max(max(p) for p in v.prompts)
        lines.append(
            f"| {name} | {calls:,} | {len(v.summary_calls)} | "
            f"{100 * len(v.summary_calls) / turns:.1f} | {largest:,} | "
            f"{max(v.summary_calls, default=0):,} | {statistics.median(v.latency):,.0f} |"
        )
    lines.append("")
    for name, window, v in runs:
        rate = 100 * len(v.summary_calls) / turns
        if name in SMALL_KEYS:
            values[SMALL_KEYS[name]] = rate
        largest = max(max(max(p) for p in v.prompts), max(v.summary_calls, default=0))
        lines.append(
            f"- {name}: {rate:.1f} summaries per 100 turns (target ≤ 20) — "
            f"{'OK' if rate <= 20 else 'OVER'}; largest request {largest:,} tokens "
            f"(window {window:,}) — {'OK' if largest <= window else 'OVER'}; first prompt "
            f"{v.prompts[0][0]:,} tokens"
        )
    return lines, values


async def measure_small(turns: int, delay: float) -> tuple[list[str], dict[str, float]]:
    """The small-window runs, one after the other (their latencies do not mix)."""
    runs = []
    for name, window, with_tool, chat in SMALL_RUNS:
        print(f"  … {name}", file=sys.stderr, flush=True)
        run = await small_window_run(name, window, with_tool, chat, turns, delay)
        runs.append((name, window, run))
    return small_window_report(runs, turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=None, help="default 1,000 (small: 200)")
    parser.add_argument("--window", type=int, default=8_000, help="ON's context_window")
    parser.add_argument("--small-window", action="store_true", help="the 4,096-token runs")
    parser.add_argument("--delay", type=float, default=0.3, help="seconds per model call (small)")
    add_record_option(parser, "long_conversation", "small_windows")
    args = parser.parse_args()
    if args.small_window:
        args.turns = turns = args.turns or 200
        lines, values = asyncio.run(measure_small(turns, args.delay))
        print(machine_line())
        print(f"{turns:,} turns per run; fake model {args.delay * 1000:.0f} ms per call; the "
              "product's tools (no Google client) plus a lookup tool; default effects, pruning.")
        print()
        print("\n".join(lines))
        record_if_asked(args, "small_windows", values, full={"turns": 200})
        return
    args.turns = args.turns or 1_000
    lines, values = asyncio.run(measure(args.turns, args.window))
    print(machine_line())
    print(f"{args.turns:,} turns, each with a 2 KB tool result; ON: context_window "
          f"{args.window:,}, default effects, pruning; OFF: no effects, no pruning.")
    print()
    print("\n".join(lines))
    record_if_asked(args, "long_conversation", values, full={"turns": 1_000, "window": 8_000})


if __name__ == "__main__":
    main()

"""Per-turn latency of Panager vs `langchain.agents.create_agent`, in the same run.

    .venv/bin/python bench/turn_overhead.py [--turns 200] [--users 50] [--user-turns 4] [--record]

Every agent gets the same zero-delay fake model (one tool call, then a text
answer), the same tool, and the same `AsyncPostgresSaver` on the same pool
(a real PostgreSQL: the embedded one, or DATABASE_URL's). Rows:

- `create_agent`: `agent.ainvoke({"messages": [msg]}, config)`.
- `panager graph`: our graph (`build_graph`) on the same checkpointer, invoked
  as the runner invokes it (runtime context, durability, usage recording) but
  with compaction off, so its thread grows exactly like create_agent's: the
  pure per-turn overhead of the graph. Shown twice: with the runner's
  checkpoint durability ("exit": one checkpoint write per turn) and with
  LangGraph's default ("async", create_agent's: a write after every step).
- `panager graph, taint checks off`: the same graph built with
  `GraphConfig(taint_checks=False)` — no taint scan of the model's input and no
  confirm node — so the cost of outside-content tracking is the ratio of the
  two rows (target ≤ 1.05; printed below the tables).
- `panager run_turn`: the whole `Assistant.run_turn` path as front ends call it,
  with the default runtime (per-user lock, thread repair, memory recall, usage,
  events, session recording, trim + compaction, checkpoint pruning).

Shapes: one user × N sequential turns (variants interleaved turn by turn, so
drift in the database or the machine hits all alike), and M users × K turns
at once (each variant in turn, repeated in rotating order). Work Panager leaves
running in the background after a reply (checkpoint pruning) is awaited
between measured turns, outside the timed region, so it never lands in another
variant's numbers. Prints p50/p95 (ms) and ours ÷ create_agent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from bench.common import (
    PolicyModel,
    bench_database,
    machine_line,
    one_tool_call_policy,
    percentile,
)
from bench.results import add_record_option, record_if_asked

Turn = Callable[[int, str], Awaitable[None]]
ROUNDS = 3


@tool
async def lookup(query: str) -> str:
    """Look something up (returns a small JSON document)."""
    return json.dumps({"query": query, "answer": "42", "source": "bench"})


def bench_tools(deps, user):
    """The one tool every agent gets, as a Panager tool factory."""
    return [lookup]


def make_model() -> PolicyModel:
    """The shared fake model: call `lookup` for a user message, then answer."""
    return PolicyModel(policy=one_tool_call_policy("lookup", lambda text: {"query": text[:30]}))


async def build_app(url: str, model: PolicyModel, home: Path):
    """A Panager App on `url` whose only tool is `lookup`."""
    from panager.agent import tools as tools_pkg
    from panager.app import App
    from panager.config import Settings

    tools_pkg.TOOL_FACTORIES[:] = [bench_tools]
    settings = Settings(
        _env_file=None, database_url=url, home=home, timezone="UTC", access="open"
    )
    return await App.start(settings, model=model)


class Users:
    """Registered users by bench id (usage rows reference users)."""

    def __init__(self, app, base: int) -> None:
        self.app, self.base, self.known = app, base, {}

    async def get(self, uid: int):
        if uid not in self.known:
            self.known[uid] = await self.app.deps.users.ensure(self.base + uid, f"b{self.base + uid}")
        return self.known[uid]


def create_agent_turn(app, model) -> Turn:
    """A turn of LangChain's create_agent on the app's checkpointer."""
    from langchain.agents import create_agent

    agent = create_agent(model, [lookup], checkpointer=app.checkpointer)

    async def turn(uid: int, text: str) -> None:
        config = {"configurable": {"thread_id": f"ca-{uid}"}}
        await agent.ainvoke({"messages": [HumanMessage(text)]}, config)

    return turn


def graph_turn(app, taint_checks: bool = True, **invoke_options) -> Turn:
    """A turn of our graph with compaction off, invoked as the runner invokes it."""
    import uuid
    from dataclasses import replace

    from panager.agent.graph.build import build_graph
    from panager.agent.graph.effects.registry import UsageRecorder
    from panager.agent.graph.state import TurnContext

    base = 2_000_000 if not invoke_options else 4_000_000
    base += 0 if taint_checks else 3_000_000
    assistant, users = app.assistant, Users(app, base)
    config = app.graph_config  # the app's graph, minus recall, compaction and the auth hook
    graph = build_graph(
        replace(
            config,
            effects=[UsageRecorder(app.deps.usage)],
            recall=None,
            on_auth_required=None,
            on_overflow=None,
            skills_text=None,
            context_window=None,
            taint_checks=taint_checks,
        )
    )

    async def turn(uid: int, text: str) -> None:
        user = await users.get(uid)
        ctx = TurnContext(user=user, tools=[lookup], model=app.model, user_text=text)
        message = HumanMessage(text, id=str(uuid.uuid4()))
        await graph.ainvoke(
            {"messages": [message], "model_calls": 0, "unattended": False},
            config=assistant.config_for(user),
            context=ctx,
            **{**assistant.invoke_options, **invoke_options},
        )

    return turn


def run_turn_turn(app) -> Turn:
    """A turn of the full `Assistant.run_turn` path."""
    users = Users(app, 3_000_000)

    async def turn(uid: int, text: str) -> None:
        result = await app.assistant.run_turn(await users.get(uid), text)
        if not result.ok:
            raise RuntimeError(result.text)

    return turn


async def settle(app) -> None:
    """Wait for Panager's background work (checkpoint pruning) to finish."""
    runtime = app.deps.runtime
    if runtime.pruner is not None:
        await runtime.pruner.drain()


async def timed(turn: Turn, uid: int, text: str) -> float:
    start = time.perf_counter()
    await turn(uid, text)
    return (time.perf_counter() - start) * 1000


async def sequential(app, variants: dict[str, Turn], turns: int) -> dict[str, list[float]]:
    """One user per variant, `turns` turns each, interleaved in rotating order."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(turns):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            out[name].append(await timed(variants[name], 1, f"question number {i}"))
            await settle(app)
    return out


async def concurrent(
    app, variants: dict[str, Turn], users: int, turns: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """`users` users each sending `turns` messages at once; per variant, ROUNDS rounds."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    wall: dict[str, float] = dict.fromkeys(variants, 0.0)
    names = list(variants)

    async def one_user(turn: Turn, uid: int) -> list[float]:
        return [await timed(turn, uid, f"question {i}") for i in range(turns)]

    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            first = 1_000 * (r + 1)
            start = time.perf_counter()
            results = await asyncio.gather(
                *(one_user(variants[name], first + u) for u in range(users))
            )
            await settle(app)
            wall[name] += time.perf_counter() - start
            out[name] += [x for r_ in results for x in r_]
    return out, wall


def table(results: dict[str, list[float]], wall: dict[str, float] | None = None) -> list[str]:
    """Markdown rows: p50, p95 and the ratio to create_agent."""
    base = results["create_agent"]
    head = "| agent | turns | p50 ms | p95 ms | p50 ratio | p95 ratio |"
    lines = [head + (" turns/s |" if wall else ""), "|---|---:|---:|---:|---:|---:|"]
    lines[1] += "---:|" if wall else ""
    for name, values in results.items():
        p50, p95 = percentile(values, 50), percentile(values, 95)
        r50, r95 = p50 / percentile(base, 50), p95 / percentile(base, 95)
        row = f"| {name} | {len(values)} | {p50:.1f} | {p95:.1f} | {r50:.2f} | {r95:.2f} |"
        if wall:
            row += f" {len(values) / wall[name]:.0f} |"
        lines.append(row)
    return lines


async def paired(app, on: Turn, off: Turn, users: int, turns: int) -> dict[str, list[float]]:
    """Taint checks on and off at the same time: half the users each, ROUNDS rounds, so a
    load swing of the machine hits both alike (the per-variant windows above do not)."""
    out: dict[str, list[float]] = {"on": [], "off": []}
    half = max(users // 2, 1)

    async def one_user(turn: Turn, uid: int) -> list[float]:
        return [await timed(turn, uid, f"question {i}") for i in range(turns)]

    for r in range(ROUNDS):
        first = 50_000 * (r + 1)
        results = await asyncio.gather(
            *(one_user(on, first + u) for u in range(half)),
            *(one_user(off, first + half + u) for u in range(half)),
        )
        await settle(app)
        out["on"] += [x for r_ in results[:half] for x in r_]
        out["off"] += [x for r_ in results[half:] for x in r_]
    return out


def taint_line(alone: dict[str, list[float]], together: dict[str, list[float]]) -> str:
    """Taint checks on ÷ off, p50: sequential (interleaved) and concurrent (paired)."""
    on = percentile(alone["panager graph"], 50)
    seq = on / percentile(alone["panager graph, taint checks off"], 50)
    conc = percentile(together["on"], 50) / percentile(together["off"], 50)
    return (f"Taint checks on ÷ off (p50): sequential {seq:.3f}, concurrent (on and off "
            f"users at once, {ROUNDS} rounds) {conc:.3f} (target ≤ 1.05)")


def figures(alone: dict[str, list[float]], together: dict[str, list[float]]) -> dict[str, float]:
    """The dashboard's figures: graph ÷ create_agent (p50) in both shapes, taint on ÷ off."""
    def ratio(results: dict[str, list[float]], name: str, base: str) -> float:
        return percentile(results[name], 50) / percentile(results[base], 50)

    return {"graph_p50_ratio_seq": ratio(alone, "panager graph", "create_agent"),
            "graph_p50_ratio_conc": ratio(together, "panager graph", "create_agent"),
            "taint_on_off_seq": ratio(alone, "panager graph", "panager graph, taint checks off")}


async def measure(args) -> tuple[list[str], dict[str, float]]:
    """Run both shapes and return the report lines and the dashboard's figures."""
    model = make_model()
    async with bench_database() as url:
        app = await build_app(url, model, Path(tempfile.mkdtemp(prefix="panager-bench-")))
        try:
            variants = {
                "create_agent": create_agent_turn(app, model),
                "panager graph": graph_turn(app),
                "panager graph, durability=async": graph_turn(app, durability="async"),
                "panager graph, taint checks off": graph_turn(app, taint_checks=False),
                "panager run_turn": run_turn_turn(app),
            }
            for turn in variants.values():  # warm-up: imports, caches, prepared plans
                for i in range(3):
                    await turn(999, f"warm-up {i}")
            await settle(app)
            lines = [f"**1 user × {args.turns} turns** (sequential)", ""]
            alone = await sequential(app, variants, args.turns)
            lines += table(alone)
            results, wall = await concurrent(app, variants, args.users, args.user_turns)
            lines += ["", f"**{args.users} users × {args.user_turns} turns** (concurrent, "
                      f"{ROUNDS} rounds)", ""]
            lines += table(results, wall)
            both = await paired(app, variants["panager graph"],
                                variants["panager graph, taint checks off"],
                                args.users, args.user_turns)
            lines += ["", taint_line(alone, both)]
        finally:
            await app.stop()
    return lines, figures(alone, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--user-turns", type=int, default=4)
    add_record_option(parser, "turn_overhead")
    args = parser.parse_args()
    lines, values = asyncio.run(measure(args))
    print(machine_line())
    print()
    print("\n".join(lines))
    record_if_asked(args, "turn_overhead", values,
                    full={"turns": 200, "users": 50, "user_turns": 4})


if __name__ == "__main__":
    main()

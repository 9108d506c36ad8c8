"""MCP tools: what a call costs next to a native tool, and what their schemas cost per prompt.

1. Call overhead, one run: a native Panager tool (`@tool`, framed result) against the
   same tool served by the test MCP server (tests/fakes/mcp_servers.py) over stdio and
   over streamable HTTP, each called through its langchain tool (`ainvoke`, what the
   graph's tools node does), rounds interleaved so all three share the machine's state.
2. Prompt size with 0 / 20 / 50 MCP tools: one real graph turn (scripted model) whose
   first request is measured — messages (system prompt, history) and tool definitions
   as the OpenAI API receives them (`convert_to_openai_tool`), tokens estimated as
   characters / 4 (langchain's `count_tokens_approximately`; no tokenizer is
   downloaded). The MCP tools are shaped like a real server's (GitHub's: a sentence or
   two of description, 2–6 described parameters). With `--on-demand`, the same turn
   with the MCP tools behind `tool_search` (offered only its definition until a search
   loads matches).

    python bench/tools.py [--calls 200] [--on-demand] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import bench_database, machine_line  # noqa: E402
from bench.results import add_record_option, record_if_asked  # noqa: E402

FAKE = str(ROOT / "tests" / "fakes" / "mcp_servers.py")
VERBS = ["search", "get", "list", "create", "update", "delete", "merge", "comment on", "close",
         "assign"]
NOUNS = ["issues", "pull requests", "repositories", "branches", "commits", "files", "releases",
         "labels", "milestones", "workflows", "gists", "discussions", "reviews", "tags", "forks"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, FAKE, "http", str(port)],
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}/mcp"


def native_echo():
    from panager.agent.graph.tool import ORDINARY, tool
    from panager.framing import frame

    @tool(classify=ORDINARY)
    async def echo(text: str) -> str:
        """Echo the text back."""
        return frame("native tool echo", f"echo: {text}")

    return echo


async def call_overhead(calls: int) -> list[tuple[str, float, float]]:
    from panager.agent.tools.mcp import mcp_tool
    from panager.db.pool import open_pool
    from panager.mcp_config import McpServerConfig
    from panager.services.mcp.hub import McpHub
    from panager.services.mcp.pins import PinStore

    proc, url = start_http_server()
    async with bench_database() as db:
        pool = await open_pool(db, max_size=4)
        servers = {
            "stdio": McpServerConfig(command=sys.executable, args=[FAKE, "stdio"], users="all"),
            "http": McpServerConfig(url=url, users="all"),
        }
        hub = McpHub(servers, PinStore(pool), home=Path(tempfile.mkdtemp()))
        try:
            await hub.start(wait=60)
            offers = {o.server: o for o in hub.offered(frozenset(), True) if o.tool.name == "echo"}
            tools = {"native": native_echo(), **{k: mcp_tool(hub, o) for k, o in offers.items()}}
            times: dict[str, list[float]] = {k: [] for k in tools}
            for made in tools.values():  # warm up
                await made.ainvoke({"text": "warm"})
            for i in range(calls):
                for name, made in tools.items():
                    t = time.perf_counter()
                    await made.ainvoke({"text": f"hello {i}"})
                    times[name].append((time.perf_counter() - t) * 1000)
        finally:
            await hub.stop()
            await pool.close()
            proc.terminate()
    rows = []
    for name, values in times.items():
        values.sort()
        rows.append((name, statistics.median(values), values[int(len(values) * 0.95) - 1]))
    return rows


def github_like_tools(count: int):
    """`count` MCP tools shaped like a real server's, as Panager would offer them."""
    from panager.agent.tools.mcp import mcp_tool
    from panager.services.mcp.hub import OfferedTool
    from panager.services.mcp.listing import listed_tool

    made = []
    for i in range(count):
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS) + i) % len(NOUNS)]
        name = f"{verb.replace(' ', '_')}_{noun.replace(' ', '_')}_{i}"
        props = {
            "owner": {"type": "string", "description": "Repository owner (user or organisation)"},
            "repo": {"type": "string", "description": "Repository name"},
            "query": {"type": "string", "description": f"Text to match in {noun}"},
            "state": {"type": "string", "enum": ["open", "closed", "all"],
                      "description": "Filter by state"},
            "perPage": {"type": "number", "description": "Results per page (max 100)"},
            "labels": {"type": "array", "items": {"type": "string"},
                       "description": "Labels to filter by"},
        }
        keep = dict(list(props.items())[: 2 + i % 5])
        raw = {
            "name": name,
            "description": f"{verb.capitalize()} {noun} in a GitHub repository. Use this to "
                           f"{verb} {noun} by owner and name; results are paginated.",
            "inputSchema": {"type": "object", "properties": keep, "required": ["owner", "repo"]},
        }
        listed = listed_tool(raw, "github")
        assert listed is not None
        offer = OfferedTool("github", f"mcp__github__{name}"[:64], listed, False)
        made.append(mcp_tool(None, offer))  # type: ignore[arg-type]  # never called here
    return made


async def prompt_sizes(on_demand: bool) -> list[tuple[str, int, int, int]]:
    from langchain_core.messages.utils import count_tokens_approximately
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from panager.agent import tools as tool_registry
    from panager.app import App
    from panager.config import Settings
    from tests.fakes.scripted_model import ScriptedChatModel

    rows = []
    async with bench_database() as db:
        home = Path(tempfile.mkdtemp())
        model = ScriptedChatModel(default="ok")
        settings = Settings(_env_file=None, database_url=db, home=home, timezone="UTC")
        app = await App.start(settings, model=model)
        user = await app.local_user()
        try:
            for count in (0, 20, 50):
                extra = github_like_tools(count)
                variants = [("eager", extra)]
                if on_demand and count:
                    from panager.agent.tools.search import search_tool

                    variants.append(("tool_search", [search_tool(extra)]))
                for label, offered in variants:
                    tool_registry.TOOL_FACTORIES.append(lambda deps, u, t=offered: list(t))
                    try:
                        await app.assistant.run_turn(user, f"what is on today? ({count} {label})")
                    finally:
                        tool_registry.TOOL_FACTORIES.pop()
                    messages = model.requests[-1]
                    defs = [convert_to_openai_tool(t) for t in model.bound_tools]
                    tool_tokens = len(json.dumps(defs, ensure_ascii=False)) // 4
                    rows.append((f"{count} MCP tools ({label})", len(defs),
                                 count_tokens_approximately(messages), tool_tokens))
        finally:
            await app.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--on-demand", action="store_true")
    add_record_option(parser, "tools")
    args = parser.parse_args()
    overhead = asyncio.run(call_overhead(args.calls))
    native = overhead[0][1]
    print(f"# MCP call overhead ({machine_line()}; {args.calls} calls each, interleaved)\n")
    print("| tool | p50 (ms) | p95 (ms) | p50 / native |")
    print("|---|---:|---:|---:|")
    for name, p50, p95 in overhead:
        print(f"| {name} | {p50:.3f} | {p95:.3f} | {p50 / native:.1f}× |")
    sizes = asyncio.run(prompt_sizes(args.on_demand))
    print("\n# Prompt size of one turn's first model call (tokens ≈ characters / 4)\n")
    print("| offered | tool definitions | messages (tokens) | tool definitions (tokens) "
          "| tools' share |")
    print("|---|---:|---:|---:|---:|")
    for label, n, messages, tools in sizes:
        share = tools / (messages + tools)
        print(f"| {label} | {n} | {messages:,} | {tools:,} | {share:.0%} |")
    values = {f"{name}_p50_ms": p50 for name, p50, _ in overhead if name in ("stdio", "http")}
    for label, _, _, tools in sizes:
        if label == "50 MCP tools (tool_search)":  # with --on-demand only
            values["tool_search_50_tokens"] = tools
    record_if_asked(args, "tools", values)


if __name__ == "__main__":
    main()

"""`tool_search`: tools on demand, for people offered more than a prompt should carry.

Fifty MCP tool definitions are some 6,000 tokens in every model call (BENCHMARKS.md,
"MCP tools"). Above `mcp_tool_search_above` tools, a person is offered this one tool
instead: it ranks the deferred tools by the words of the query in their names and
descriptions and adds the best matches to the turn's tool list, so the next model
call can call them. It answers with the names only — the descriptions reach the model
as tool definitions, as when offered eagerly, so a search does not make the turn
carry outside content it would not carry otherwise. Small context windows defer some
built-in tools behind it too (offer.py); its description then names what it holds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.tools import BaseTool

from panager.agent.graph.tool import ORDINARY, tool

TURN_TOOLS_KEY = "panager_turn_tools"  # metadata: attach(turn's tool list) before the turn
DEFERRED_KEY = "panager_deferred"  # metadata: the tools this search can load
TOOL_SEARCH = "tool_search"
_WORD = re.compile(r"[a-z0-9]+")
MAX_LOADED = 10


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def rank(tools: Sequence[BaseTool], query: str) -> list[BaseTool]:
    """Tools sharing words with `query`, most shared first (name matches count double)."""
    wanted = _words(query)
    scored = []
    for made in tools:
        in_name = len(wanted & _words(made.name))
        in_text = len(wanted & _words(made.description or ""))
        if in_name or in_text:
            scored.append((-(2 * in_name + in_text), made.name, made))
    return [made for *_, made in sorted(scored, key=lambda s: (s[0], s[1]))]


def search_tool(deferred: Sequence[BaseTool], about: Sequence[str] = ()) -> BaseTool:
    """A `tool_search` over `deferred`; `build_tools` attaches the turn's tool list to it.
    `about`: what the deferred tools cover, named in a shorter description with no `limit`
    (small windows, offer.py); without it, the search over MCP tools."""
    turn: list[list[BaseTool]] = []

    def load(query: str, limit: int) -> dict:
        matches = rank(deferred, query)[: max(1, min(limit, MAX_LOADED))]
        if turn:
            present = {t.name for t in turn[0]}
            turn[0].extend(m for m in matches if m.name not in present)
        return {
            "loaded": [m.name for m in matches],
            "available": len(deferred),
            "note": "no tool matched; try other words" if not matches else "callable now",
        }

    @tool(classify=ORDINARY)
    async def tool_search(query: str, limit: int = 5) -> dict:
        """Find more tools by what they do (e.g. "github issues", "wiki page") among the
        tools of the MCP servers this instance connects to. The matches become callable
        from your next step; call them then by the names returned."""
        return load(query, limit)

    @tool(classify=ORDINARY)
    async def tool_search_compact(query: str) -> dict:
        """Load more tools by what they do."""
        return load(query, MAX_LOADED)

    def attach(offered: list[BaseTool]) -> None:
        """The list this turn offers (the last one attached wins)."""
        turn[:] = [offered]

    made = tool_search
    if about:
        made = tool_search_compact
        made.name = TOOL_SEARCH
        made.description = f"Load more tools (usable next step) for: {'; '.join(about)}."
    made.metadata = {**(made.metadata or {}), TURN_TOOLS_KEY: attach, DEFERRED_KEY: list(deferred)}
    return made

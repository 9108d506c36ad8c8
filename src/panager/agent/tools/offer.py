"""What a turn offers in a small context window: a compact core, the rest on request.

The system prompt and the tool schemas go with every model call. At a 4,096-token
window (the default of common local servers) the full set — schedules, memory,
documents, web, profile, Google — took about 35% of it before the first word of
history (BENCHMARKS.md, "Small context windows"). So, in a window where the offered
schemas take more than FIXED_SHARE of it (calendar.py: the calendar eight go behind
`google_load` first), the tools a turn rarely needs are deferred behind one
`tool_search`: the person's documents, the web, Gmail, the profile's long-form
update and any MCP server's tools (an MCP `tool_search` is merged into this one). The
core stays: time zone, schedules, memory, and Google's `google_connect` or
`google_load`. A deferred tool is still run when the model calls it by name (it
is unlisted, like Google's eight), and `tool_search` adds the matching ones to
the turn's list for the next call. Large windows offer everything, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.tools import BaseTool

from panager.agent.graph.history import schema_tokens
from panager.agent.tools.calendar import FIXED_SHARE, PROMPT_TOKENS
from panager.agent.tools.mcp import SOURCE_KEY
from panager.agent.tools.search import DEFERRED_KEY, TOOL_SEARCH, search_tool

# Built-in tools a turn rarely needs, by group (the group names go into tool_search's
# description, so the model knows what it can load).
_DOCUMENTS, _WEB, _MAIL = "documents the user sent", "web pages and search", "email (Gmail)"
DEFERRABLE = {
    "document_search": _DOCUMENTS,
    "document_list": _DOCUMENTS,
    "document_forget": _DOCUMENTS,
    "web_fetch": _WEB,
    "web_search": _WEB,
    "profile_update": "profile sections",
    "schedule_cancel": "cancelling schedules",
    "memory_forget": "deleting memories",
    "email_search": _MAIL,
    "email_read": _MAIL,
    "email_draft": _MAIL,
    "email_send": _MAIL,
}
MCP_GROUP = "MCP server tools"


def fits(tools: Sequence[BaseTool], window: int | None) -> bool:
    """Whether the schemas of `tools` and the prompt take at most FIXED_SHARE of `window`."""
    return window is None or schema_tokens(tools) <= FIXED_SHARE * window - PROMPT_TOKENS


def _group(made: BaseTool) -> str | None:
    """The deferrable group of a tool (None: part of the core)."""
    if made.name in DEFERRABLE:
        return DEFERRABLE[made.name]
    source = str((made.metadata or {}).get(SOURCE_KEY) or "")
    return MCP_GROUP if source.startswith("MCP server") else None


def compact_core(
    offered: list[BaseTool], unlisted: list[BaseTool], window: int | None
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted) for `window`: unchanged when they fit, else the core plus one
    `tool_search` over the deferred tools, which stay callable (unlisted)."""
    if fits(offered, window):
        return offered, unlisted
    core: list[BaseTool] = []
    deferred: list[BaseTool] = []
    groups: list[str] = []
    for made in offered:
        group = _group(made)
        if group is None:
            core.append(made)
            continue
        if group not in groups:
            groups.append(group)
        if made.name == TOOL_SEARCH:  # MCP's own search: its tools join ours
            deferred.extend((made.metadata or {}).get(DEFERRED_KEY) or [])
        else:
            deferred.append(made)
    if not deferred:
        return offered, unlisted
    core.append(search_tool(deferred, about=groups))
    offered[:] = core  # in place: google_load adds Google's tools to this very list
    return offered, [*unlisted, *deferred]

"""What a turn offers: the calendar and task tools only where they can work, and in a
small context window a compact core, the rest on request.

The calendar and task eight are offered from the person's capabilities, read once per turn
(`offered_calendar_tools`): not at all without a provider, as the one argument-free
`google_connect` to a person who has connected nothing that serves them, and behind
`google_load` where the window is so small that all schemas would take more than a quarter
of it. They still run if the model calls one anyway (unlisted), which ends in the same
link, reason or result.

The system prompt and the tool schemas go with every model call. At a 4,096-token
window (the default of common local servers) the full set — schedules, memory,
documents, web, profile, Google — took about 35% of it before the first word of
history (BENCHMARKS.md, "Small context windows"). So, in a window where the offered
schemas take more than FIXED_SHARE of it (the calendar eight go behind `google_load`
first), the tools a turn rarely needs are deferred behind one
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

from panager.agent.deps import AgentDeps
from panager.agent.graph.history import schema_tokens
from panager.agent.graph.tool import ORDINARY, tool
from panager.agent.tools.mcp import SOURCE_KEY
from panager.agent.tools.provided import accounts_of
from panager.agent.tools.search import DEFERRED_KEY, TOOL_SEARCH, search_tool
from panager.errors import ToolError
from panager.services.accounts.provider import GOOGLE, Capability
from panager.services.accounts.service import NOT_CONFIGURED, Connected
from panager.services.users import User

GOOGLE_TOOL_NAMES = frozenset(
    {
        "task_list",
        "task_create",
        "task_update",
        "task_delete",
        "calendar_list_events",
        "calendar_create_event",
        "calendar_update_event",
        "calendar_delete_event",
    }
)
CALENDAR_TOOL_NAMES = GOOGLE_TOOL_NAMES  # the eight, whichever provider serves them
GOOGLE_CONNECT = "google_connect"  # offered instead of the eight until Google is linked
GOOGLE_LOAD = "google_load"  # offered instead of the eight where the window is small
FIXED_SHARE = 0.25  # of a small window: the most the system prompt and tool schemas may take
PROMPT_TOKENS = 250  # the system prompt's own text (persona, time), for that share
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


# -- what a turn offers -----------------------------------------------------------------------


def google_connect_tool(deps: AgentDeps, user: User) -> BaseTool:
    """`google_connect`: the link to connect Google, for a person who has not linked it."""

    @tool(classify=ORDINARY)
    async def google_connect() -> dict:
        """Connect the user's Google account (for Calendar and Tasks): they get a link."""
        google = accounts_of(deps).provider(GOOGLE)
        if google is None:
            raise ToolError(NOT_CONFIGURED)
        await google.require(user.id, Capability.CALENDAR_READ)  # the link, unless linked
        return {"ok": True, "note": "Google is already connected."}

    return google_connect


def google_load_tool(offered: list[BaseTool], google: Sequence[BaseTool]) -> BaseTool:
    """`google_load`: adds the calendar and task tools to `offered` (this turn's list)."""

    @tool(classify=ORDINARY)
    async def google_load() -> dict:
        """Load the calendar and task tools; call it first for any calendar or task
        request."""
        offered.extend(t for t in google if t not in offered)
        return {"ok": True, "loaded": [t.name for t in google]}

    return google_load


def offered_calendar_tools(
    deps: AgentDeps, user: User, tools: list[BaseTool], connected: Connected,
    window: int | None = None,
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted): `tools` with the eight offered only where they can work (the
    person's `connected` capabilities, read once this turn) and, in a `window` too small for
    every schema, only once the model asks for them."""
    offers = deps.accounts is not None and deps.accounts.offers(Capability.CALENDAR_READ)
    linked = offers and bool(connected.capabilities & {Capability.CALENDAR_READ,
                                                       Capability.TASKS_READ})
    room = FIXED_SHARE * window - PROMPT_TOKENS if window else None
    if linked and (room is None or schema_tokens(tools) <= room):
        return tools, []
    offered = [t for t in tools if t.name not in CALENDAR_TOOL_NAMES]
    unlisted = [t for t in tools if t.name in CALENDAR_TOOL_NAMES]
    if linked:
        offered.append(google_load_tool(offered, unlisted))
    elif offers:
        offered.append(google_connect_tool(deps, user))
    return offered, unlisted

"""Per-user tools. Each domain module has a factory `(deps, user) -> list[BaseTool]`.

Tools close over the user: no tool takes a user id, so nothing the model
writes can reach another user's data. Tools are thin: validate arguments,
call a service, return a compact dict (serialised to JSON for the model), and
raise `ToolError` with what was wrong and what is valid.
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.tools.calendar import calendar_tools
from panager.agent.tools.documents import document_tools
from panager.agent.tools.mail import mail_tools, offered_mail_tools
from panager.agent.tools.mcp import SOURCE_KEY, mcp_tools
from panager.agent.tools.memory import memory_tools
from panager.agent.tools.messaging import messaging_tools
from panager.agent.tools.offer import compact_core, offered_calendar_tools
from panager.agent.tools.profile import profile_tools
from panager.agent.tools.schedule import schedule_tools
from panager.agent.tools.search import DEFERRED_KEY, TURN_TOOLS_KEY
from panager.agent.tools.tasks import task_tools
from panager.agent.tools.web import web_tools
from panager.services.accounts.service import Connected
from panager.services.users import User

ToolFactory = Callable[[AgentDeps, User], list[BaseTool]]

TOOL_FACTORIES: list[ToolFactory] = [
    profile_tools,
    schedule_tools,
    memory_tools,
    document_tools,
    task_tools,
    calendar_tools,
    mail_tools,
    messaging_tools,
    web_tools,
]  # MCP servers' tools come from `mcp_tools`, which reads the person's identities


def build_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """`user`'s built-in tools, bound to them by closure (with MCP's: `all_tools`)."""
    return _finished([made for factory in TOOL_FACTORIES for made in factory(deps, user)])


async def all_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """All tools available to `user` now: the built-in ones and the MCP servers' tools
    their identities are permitted (read from the database at each call)."""
    built_in = [made for factory in TOOL_FACTORIES for made in factory(deps, user)]
    return _finished(built_in + await mcp_tools(deps, user))


def _finished(tools: list[BaseTool]) -> list[BaseTool]:
    for made in tools:  # docstring indentation and line breaks are tokens the model pays for
        made.description = " ".join(made.description.split())
    _attach_turn_tools(tools)
    return tools


def _attach_turn_tools(tools: list[BaseTool]) -> None:
    """Point tool_search at the list the turn offers, so the tools it loads join it."""
    for made in list(tools):
        attach = (made.metadata or {}).get(TURN_TOOLS_KEY)
        if callable(attach):
            attach(tools)


async def tools_for_turn(
    deps: AgentDeps, user: User, window: int | None = None
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted) for one turn in a context `window` (tokens): only tools that can
    work are offered (the person's capabilities, asked once), and a small window gets a
    compact core (offer.py); the unlisted ones still run when called (link, reason or
    result)."""
    connected = await deps.accounts.connected(user.id) if deps.accounts else Connected()
    tools, no_scope = offered_mail_tools(connected, await all_tools(deps, user), [])
    offered, unlisted = offered_calendar_tools(deps, user, tools, connected, window)
    unlisted.extend(no_scope)
    offered, unlisted = compact_core(offered, unlisted, window)
    _attach_turn_tools(offered)
    return offered, [*unlisted, *deferred_behind(offered, unlisted)]


def deferred_behind(*lists: list[BaseTool]) -> list[BaseTool]:
    """The tools a `tool_search` among `lists` can load and none of them holds: callable
    by name (unlisted), so a call the search loaded still runs when the turn is resumed
    with freshly built tools (an approved question), or approved later as a proposal."""
    present = {t.name for tools in lists for t in tools}
    found: list[BaseTool] = []
    for tools in lists:
        for made in tools:
            for deferred in (made.metadata or {}).get(DEFERRED_KEY) or []:
                if deferred.name not in present:
                    present.add(deferred.name)
                    found.append(deferred)
    return found


async def callable_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """Every tool a call of `user`'s may name: `all_tools` and those behind a search."""
    tools = await all_tools(deps, user)
    return [*tools, *deferred_behind(tools)]


async def tools_by_source(deps: AgentDeps, user: User) -> list[tuple[str, list[str]]]:
    """`user`'s tool names grouped by where they come from (built-in domains, MCP servers)."""
    made_by = [(f.__module__, made) for f in TOOL_FACTORIES for made in f(deps, user)]
    made_by += [(mcp_tools.__module__, made) for made in await mcp_tools(deps, user)]
    groups: dict[str, list[str]] = {}
    for module, made in made_by:
        domain = module.rsplit(".", 1)[-1]
        source = (made.metadata or {}).get(SOURCE_KEY) or f"built-in: {domain}"
        deferred = (made.metadata or {}).get(DEFERRED_KEY) or []
        shown = [made.name, *(t.name for t in deferred)]
        groups.setdefault(str(source), []).extend(shown)
    return list(groups.items())

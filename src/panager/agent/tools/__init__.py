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
from panager.agent.tools.google import google_tools, offered_google_tools
from panager.agent.tools.memory import memory_tools
from panager.agent.tools.messaging import messaging_tools
from panager.agent.tools.profile import profile_tools
from panager.agent.tools.schedule import schedule_tools
from panager.agent.tools.web import web_tools
from panager.services.users import User

ToolFactory = Callable[[AgentDeps, User], list[BaseTool]]

TOOL_FACTORIES: list[ToolFactory] = [
    profile_tools,
    schedule_tools,
    memory_tools,
    google_tools,
    messaging_tools,
    web_tools,
]


def build_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """All tools available to `user`, bound to them by closure."""
    tools: list[BaseTool] = []
    for factory in TOOL_FACTORIES:
        tools.extend(factory(deps, user))
    for made in tools:  # docstring indentation and line breaks are tokens the model pays for
        made.description = " ".join(made.description.split())
    return tools


async def tools_for_turn(
    deps: AgentDeps, user: User, window: int | None = None
) -> tuple[list[BaseTool], list[BaseTool]]:
    """(offered, unlisted) for one turn in a context `window` (tokens): only tools that can
    work are offered; the unlisted ones still run when called (link, reason or result)."""
    return await offered_google_tools(deps, user, build_tools(deps, user), window)

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
from panager.agent.tools.documents import document_tools
from panager.agent.tools.google import google_tools
from panager.agent.tools.memory import memory_tools
from panager.agent.tools.messaging import messaging_tools
from panager.agent.tools.profile import profile_tools
from panager.agent.tools.schedule import schedule_tools
from panager.services.users import User

ToolFactory = Callable[[AgentDeps, User], list[BaseTool]]

TOOL_FACTORIES: list[ToolFactory] = [
    profile_tools,
    schedule_tools,
    memory_tools,
    document_tools,
    google_tools,
    messaging_tools,
]


def build_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """All tools available to `user`, bound to them by closure."""
    tools: list[BaseTool] = []
    for factory in TOOL_FACTORIES:
        tools.extend(factory(deps, user))
    return tools

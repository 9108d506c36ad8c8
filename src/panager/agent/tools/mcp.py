"""`mcp__<server>__<tool>`: the MCP tools this person is permitted, as langchain tools.

Each is a `StructuredTool` whose schema is the server's (repaired) JSON schema, its
parameter descriptions capped, and whose description is the server's text, capped. Only
tools the operator approved are offered, and approved text counts as the operator's
(plain); a tool offered on an old first-listing pin, never reviewed, has its description
and parameter descriptions framed as outside content, so a call that is sent them is
tainted (agent/graph/taint.py checks tool definitions too). Every
result is outside content, framed once here with the server and tool as its source;
so is any text of the server's in an error (an `isError` result, a JSON-RPC error
message, why it is down), while Panager's own words (a timeout) stay plain. Classes
(SPEC §2): in a tainted call an MCP call is consequential unless the operator marked
the server `read_only: true` — the server's own `readOnlyHint` is not enough, since the
arguments of a "read" still leave the instance. Who gets which server follows its
`users:` (ids in the `PANAGER_ADMIN_IDS` syntax), matched against every identity the
person has now (Discord, Telegram, the terminal as `local`), and `admins` against the
same rights as everywhere else (`AccessService.standing`), read at every turn, never
decided from the person id; a tool not offered to this person does not exist in their
turn, so a call to it is an unknown-tool error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    ToolClass,
    declare,
    shown_block,
    shown_text,
)
from panager.agent.tools.search import search_tool
from panager.errors import ToolError
from panager.framing import frame
from panager.mcp_config import LOCAL
from panager.services.mcp.hub import McpError, McpHub, OfferedTool
from panager.services.mcp.schemas import offered_schema
from panager.services.users import User

SOURCE_KEY = "panager_source"


def identity_keys(identities: Iterable[tuple[str, int]]) -> frozenset[str]:
    """The keys a `users:` list may name a person with these identities by."""
    return frozenset(
        LOCAL if platform == "terminal" else f"{platform}:{number}"
        for platform, number in identities
    )


async def mcp_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """This person's MCP tools (none when no server is configured or permitted)."""
    hub = deps.mcp
    if hub is None:
        return []
    standing = await deps.access.standing(user.id)
    offered = hub.offered(identity_keys(standing.identities), standing.admin)
    made = [mcp_tool(hub, o) for o in offered]
    above = deps.config.mcp_tool_search_above
    if above is not None and len(made) > above:
        search = search_tool(made)  # on demand: the schemas would dominate every prompt
        search.metadata = {**(search.metadata or {}), SOURCE_KEY: "MCP servers, on demand"}
        return [search]
    return list(made)


def _classifier(read_only: bool) -> Callable[[Mapping[str, Any], CallView], ToolClass]:
    def classify(args: Mapping[str, Any], view: CallView) -> ToolClass:
        return ORDINARY if read_only or not view.tainted else CONSEQUENTIAL

    return classify


def _describer(offer: OfferedTool) -> Callable[[Mapping[str, Any]], str]:
    def describe(args: Mapping[str, Any]) -> str:
        marked = "marked read_only" if offer.read_only else "not marked read_only"
        lines = [f"Call the tool {shown_text(offer.tool.name)} on MCP server "
                 f"{shown_text(offer.server)} ({marked}: it may change things there) with "
                 + ("these arguments, each whole:" if args else "no arguments")]
        for key, value in args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"{shown_text(str(key))} =\n{shown_block(text)}")
        return "\n".join(lines)

    return describe


def error_text(source: str, exc: McpError) -> str:
    """A failed call for the model: Panager's words plain, whatever the server said framed
    (an `isError` result, a JSON-RPC error, why it is down), so it taints like a result."""
    if exc.said is None:
        return str(exc)
    return f"{exc}: {frame(source, exc.said)}"


def mcp_tool(hub: McpHub, offer: OfferedTool) -> BaseTool:
    """One offered MCP tool as a langchain tool, declared and framed."""
    source = f"MCP server {offer.server} tool {offer.tool.name}"

    async def run(**arguments: Any) -> str:
        try:
            text = await hub.call(offer, arguments)
        except McpError as exc:
            raise ToolError(error_text(source, exc)) from None
        return frame(source, text)

    words = f"MCP server {offer.server} tool description"
    wrap = None if offer.reviewed else (lambda text: frame(words, text))
    made = StructuredTool.from_function(
        coroutine=run,
        name=offer.name,
        description=offer.description if offer.reviewed else frame(words, offer.description),
        args_schema=offered_schema(offer.tool.schema, wrap),
        metadata={SOURCE_KEY: f"MCP server {offer.server}"},
    )
    return declare(made, _classifier(offer.read_only), _describer(offer))

"""/tools: the tools this person has, grouped by where they come from."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, command
from panager.agent.tools import tools_by_source


@command("tools", "/tools", "list the tools you have, by source (built-in, MCP servers)")
async def tools_command(ctx: CommandContext, args: str) -> str:
    """Each source with its tool names; MCP servers the operator set up are named."""
    if ctx.deps.mcp is not None:
        await ctx.deps.mcp.refresh()
    groups = await tools_by_source(ctx.deps, ctx.user)
    if not groups:
        return "You have no tools in this instance."
    lines = ["Your tools, by source:"]
    for source, names in groups:
        lines.append(f"{source} ({len(names)}): " + ", ".join(sorted(names)))
    return "\n".join(lines)

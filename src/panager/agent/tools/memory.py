"""Memory tools: save, search, update and forget the user's long-term memories (SPEC §2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.tools.base import CONSEQUENTIAL, ORDINARY, tool
from panager.errors import ToolError
from panager.services.memory.service import (
    MAX_SEARCH_LIMIT,
    MemoryHit,
    MemoryInputError,
    MemoryUnavailable,
)
from panager.services.users import User


@contextmanager
def _as_tool_errors() -> Iterator[None]:
    """Service input errors and outages become errors the model can read and act on."""
    try:
        yield
    except (MemoryInputError, MemoryUnavailable) as exc:
        raise ToolError(str(exc)) from None


def _brief(hit: MemoryHit, score: bool = False) -> dict:
    item: dict[str, Any] = {
        "id": hit.id,
        "content": hit.content,
        "category": hit.category,
        "saved": f"{hit.created_at:%Y-%m-%d}",
    }
    if hit.updated_at.date() != hit.created_at.date():
        item["updated"] = f"{hit.updated_at:%Y-%m-%d}"
    if hit.previous is not None:
        item["was"] = hit.previous
    if score:
        item["score"] = round(hit.score, 4)
    return item


def _related(hit: MemoryHit) -> dict:
    return {"id": hit.id, "content": hit.content, "date": f"{hit.updated_at:%Y-%m-%d}"}


def memory_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The memory tools, bound to `user`; none when the memory service is not installed."""
    service = deps.memory
    if service is None:
        return []

    @tool(classify=ORDINARY)
    async def memory_save(content: str, category: str = "general") -> dict:
        """Save a lasting fact about the user as one self-contained sentence; category e.g.
        general, people, preferences. If `related` come back and the user corrected one,
        update or forget that one."""
        with _as_tool_errors():
            result = await service.save(user.id, content, category)
        status = "already saved" if result.merged else "saved"
        reply: dict[str, Any] = {"ok": True, "status": status, "memory": _brief(result.memory)}
        if result.related:
            reply["related"] = [_related(h) for h in result.related]
            reply["note"] = (
                "Saved as a new memory. If it corrects a related one, update or forget "
                "that one; if both are true, keep both."
            )
        return reply

    @tool(classify=ORDINARY)
    async def memory_search(query: str, limit: int = 5) -> dict:
        """Search the user's memories by meaning and keywords (limit 1-50)."""
        if limit < 1:
            raise ToolError(f"limit must be between 1 and {MAX_SEARCH_LIMIT}; got {limit}.")
        with _as_tool_errors():
            hits = await service.search(user.id, query, min(limit, MAX_SEARCH_LIMIT))
        reply = {"query": query, "results": [_brief(h, score=True) for h in hits]}
        if limit > MAX_SEARCH_LIMIT:
            reply["note"] = f"limit is at most {MAX_SEARCH_LIMIT}; asked for {limit}."
        return reply

    @tool(classify=ORDINARY)
    async def memory_update(memory_id: str, content: str) -> dict:
        """Replace a memory's text by its id when the fact changed."""
        with _as_tool_errors():
            result = await service.update(user.id, memory_id, content)
        if result is None:
            raise ToolError(
                f"No memory with id {memory_id!r}. Use memory_search to find the id of the "
                "memory to update."
            )
        return {"ok": True, "status": "updated", "memory": _brief(result.memory)}

    @tool(classify=CONSEQUENTIAL)
    async def memory_forget(memory_id: str) -> dict:
        """Delete a memory by its id."""
        with _as_tool_errors():
            gone = await service.forget(user.id, memory_id)
        if gone is None:
            raise ToolError(
                f"No memory with id {memory_id!r}. Use memory_search to find the id of the "
                "memory to forget."
            )
        return {"ok": True, "forgotten": _brief(gone)}

    return [memory_save, memory_search, memory_update, memory_forget]

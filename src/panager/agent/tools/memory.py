"""Memory tools: save, search, update and forget the user's long-term memories (SPEC §2)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.taint import CALL_TAINTED
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    Lookup,
    ToolClass,
    looks_up,
    shown_block,
    shown_text,
    tool,
)
from panager.errors import ToolError
from panager.framing import frame
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


OUTSIDE_MEMORY = "memory saved while reading outside content"


def _brief(hit: MemoryHit, score: bool = False) -> dict:
    """A memory for the model; one written from outside content is framed again (reading
    it back taints the call, so nothing launders through memory)."""
    item: dict[str, Any] = {
        "id": hit.id,
        "content": frame(OUTSIDE_MEMORY, hit.content) if hit.tainted else hit.content,
        "category": hit.category,
        "saved": f"{hit.created_at:%Y-%m-%d}",
    }
    if hit.updated_at.date() != hit.created_at.date():
        item["updated"] = f"{hit.updated_at:%Y-%m-%d}"
    if hit.previous is not None:
        # the replaced text keeps its own mark: framed when it was written from outside content
        was = hit.previous
        item["was"] = frame(OUTSIDE_MEMORY, was) if hit.previous_tainted else was
    if score:
        item["score"] = round(hit.score, 4)
    return item


def _related(hit: MemoryHit) -> dict:
    content = frame(OUTSIDE_MEMORY, hit.content) if hit.tainted else hit.content
    return {"id": hit.id, "content": content, "date": f"{hit.updated_at:%Y-%m-%d}"}


async def _ensure_tidy(deps: AgentDeps, user: User) -> None:
    """A person with memories gets the nightly tidy-up (once; agent/flows/tidy.py)."""
    if deps.config.memory_tidy and deps.system_jobs is not None:
        await deps.system_jobs.ensure(user, "tidy", deps.config.memory_tidy_at, "FREQ=DAILY")


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
            result = await service.save(user.id, content, category, tainted=CALL_TAINTED.get())
        await _ensure_tidy(deps, user)
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

    @tool(classify=update_class, describe=describe_update)
    async def memory_update(memory_id: str, content: str) -> dict:
        """Replace a memory's text by its id when the fact changed."""
        with _as_tool_errors():
            result = await service.update(
                user.id, memory_id, content, tainted=CALL_TAINTED.get()
            )
        if result is None:
            raise ToolError(
                f"No memory with id {memory_id!r}. Use memory_search to find the id of the "
                "memory to update."
            )
        return {"ok": True, "status": "updated", "memory": _brief(result.memory)}

    @tool(classify=CONSEQUENTIAL, describe=describe_forget)
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

    described_by_lookups(service, user, memory_forget, memory_update)
    return [memory_save, memory_search, memory_update, memory_forget]


def update_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """Replacing a memory's text overwrites what the person told Panager: consequential in a
    tainted call (outside text could have written the new text) and in a run with nobody
    present (SPEC §2); ordinary when the person is there and nothing outside was read."""
    return CONSEQUENTIAL if view.tainted or view.unattended else ORDINARY


def describe_update(args: Mapping[str, Any]) -> str:
    """The replacement a confirmation question shows."""
    return (
        f"Replace the text of the memory with id {shown_text(str(args.get('memory_id', '')))} "
        f"with:\n{shown_block(str(args.get('content', '')))}"
    )


def described_by_lookups(
    service: Any, user: User, memory_forget: BaseTool, memory_update: BaseTool
) -> None:
    """Questions name the memory by its whole current text, dates and outside-content mark."""

    async def current(args: Mapping[str, Any]) -> list[str]:
        ident = str(args.get("memory_id", ""))
        with _as_tool_errors():
            hit = await service.get(user.id, ident)
        if hit is None:
            raise ToolError("there is no such memory of yours")
        mark = " — saved while reading outside content" if hit.tainted else ""
        return [
            f"the memory saved {hit.created_at:%Y-%m-%d}, last changed "
            f"{hit.updated_at:%Y-%m-%d} (category {shown_text(hit.category)}{mark}):",
            shown_block(hit.content),
            f"(memory id {shown_text(ident)})",
        ]

    async def describe_forget_now(args: Mapping[str, Any]) -> str:
        lines = await current(args)
        return "\n".join(["Forget (delete) " + lines[0], *lines[1:]])

    async def describe_update_now(args: Mapping[str, Any]) -> str:
        lines = await current(args)
        return "\n".join(["Change " + lines[0], *lines[1:], "to:",
                          shown_block(str(args.get("content", "")))])

    def thing(args: Mapping[str, Any]) -> str:
        return f"memory {shown_text(str(args.get('memory_id', '')))}"

    looks_up(memory_forget, Lookup(describe_forget_now, thing, "the database"))
    looks_up(memory_update, Lookup(describe_update_now, thing, "the database"))


def describe_forget(args: Mapping[str, Any]) -> str:
    """The deletion a confirmation question shows."""
    return f"Forget (delete) the memory with id {shown_text(str(args.get('memory_id', '')))}"

"""Reading and changing a user's checkpointed thread outside a turn (slash commands).

Every change runs under the user's turn lock, so it never interleaves with a
running turn. Updates go through `aupdate_state`, so reducers apply:
`RemoveMessage`s delete, messages with a known id replace, new ones append.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AnyMessage

from panager.agent.history import repair_tool_pairs


async def thread_values(assistant: Any, user: Any) -> dict[str, Any]:
    """The user's checkpointed state (empty dict for a new conversation)."""
    snapshot = await assistant.graph.aget_state(assistant.config_for(user))
    return dict(snapshot.values or {})


async def update_thread(assistant: Any, user: Any, values: dict[str, Any]) -> None:
    """Apply a partial state update to the user's thread, under the turn lock."""
    async with assistant.user_lock(user.id):
        await assistant.graph.aupdate_state(assistant.config_for(user), values)


async def replace_thread(
    assistant: Any, user: Any, messages: Sequence[AnyMessage], summary: str | None
) -> int:
    """Start a new conversation holding `messages` (tool pairs repaired); returns the count."""
    repaired = repair_tool_pairs(messages)
    async with assistant.user_lock(user.id):
        if assistant.graph.checkpointer is not None:
            await assistant.graph.checkpointer.adelete_thread(user.thread_id)
        values = {"messages": repaired, "summary": summary or "", "loaded_skills": []}
        await assistant.graph.aupdate_state(assistant.config_for(user), values)
    return len(repaired)

"""A user's conversation thread: its LangGraph config, its turn lock, and edits outside a turn.

`Threads` names the thread of a user (`thread_id = str(user.id)`) and the lock
that keeps one turn at a time per user. The helpers below read and change a
thread outside a turn (slash commands, relayed messages); every change runs
under the user's turn lock, so it never interleaves with a running turn.
Updates go through `aupdate_state`, so reducers apply: `RemoveMessage`s
delete, messages with a known id replace, new ones append.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph

from panager.agent.graph.history import repair_tool_pairs

if TYPE_CHECKING:
    from panager.agent.turns.turnlock import TurnLocks
    from panager.services.users import User


class ThreadOwner(Protocol):
    """Anything that knows the graph, a user's thread config and their turn lock."""

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled agent graph (its checkpointer holds the threads)."""
        ...

    def config_for(self, user: User) -> RunnableConfig:
        """LangGraph config for the user's thread."""
        ...

    def user_lock(self, user_id: int) -> AbstractAsyncContextManager[None]:
        """The user's turn lock."""
        ...


@dataclass(frozen=True)
class Threads:
    """The graph's threads, one per user, and the per-user turn locks."""

    graph: CompiledStateGraph[Any, Any, Any, Any]
    locks: TurnLocks
    max_iterations: int = 10

    def config_for(self, user: User) -> RunnableConfig:
        """LangGraph config for the user's thread (recursion limit from max_iterations)."""
        limit = 2 * self.max_iterations + 6
        return {"configurable": {"thread_id": user.thread_id}, "recursion_limit": limit}

    def user_lock(self, user_id: int, *, wait: bool = True) -> AbstractAsyncContextManager[None]:
        """One turn at a time per user: in this process and, via an advisory lock, across all.

        `wait=False` raises UserBusy instead of waiting for a running turn."""
        return self.locks.hold(user_id, wait=wait)


async def thread_values(owner: ThreadOwner, user: User) -> dict[str, Any]:
    """The user's checkpointed state (empty dict for a new conversation)."""
    snapshot = await owner.graph.aget_state(owner.config_for(user))
    return dict(snapshot.values or {})


# Whether the newest checkpoint of a thread holds an open interrupt (a question): one
# indexed look-up in the checkpointer's own tables, much cheaper than reading the state.
OPEN_QUESTION = """
SELECT EXISTS (
    SELECT 1 FROM checkpoint_writes w
     WHERE w.thread_id = %(t)s AND w.checkpoint_ns = '' AND w.channel = '__interrupt__'
       AND w.checkpoint_id = (SELECT max(c.checkpoint_id) FROM checkpoints c
                               WHERE c.thread_id = %(t)s AND c.checkpoint_ns = '')
) AS asking
"""


async def thread_asking(owner: ThreadOwner, user: User) -> bool:
    """Whether the user's thread waits on a question (an open LangGraph interrupt)."""
    snapshot = await owner.graph.aget_state(owner.config_for(user))
    return bool(snapshot.interrupts)


async def update_thread(
    owner: ThreadOwner, user: User, values: dict[str, Any], *, unless_asking: bool = False
) -> bool:
    """Apply a partial state update to the user's thread, under the turn lock; True when
    applied. `unless_asking`: not while the thread waits on a question (an update would
    drop the open interrupt)."""
    async with owner.user_lock(user.id):
        if unless_asking and await thread_asking(owner, user):
            return False
        await owner.graph.aupdate_state(owner.config_for(user), values)
    return True


async def replace_thread(
    owner: ThreadOwner,
    user: User,
    messages: Sequence[AnyMessage],
    summary: str | None,
    *,
    summary_tainted: bool,
) -> int:
    """Start a new conversation holding `messages` (tool pairs repaired, their taint marks
    kept) and `summary` (with its flag: a tainted one comes back framed); returns the count."""
    repaired = repair_tool_pairs(messages)
    async with owner.user_lock(user.id):
        checkpointer = owner.graph.checkpointer
        if isinstance(checkpointer, BaseCheckpointSaver):  # not None (nor a subgraph's bool)
            await checkpointer.adelete_thread(user.thread_id)
        values = {
            "messages": repaired,
            "summary": summary or "",
            "summary_tainted": bool(summary) and summary_tainted,
            "loaded_skills": [],
        }
        await owner.graph.aupdate_state(owner.config_for(user), values)
    return len(repaired)

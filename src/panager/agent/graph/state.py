"""Graph state (checkpointed) and the per-turn context (not checkpointed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AnyMessage
from langchain_core.tools import BaseTool
from langgraph.graph.message import add_messages

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from panager.agent.graph.events import EventEmitter, EventType
    from panager.services.users import User


class AgentState(TypedDict):
    """Checkpointed conversation state of one user (thread_id = str(user_id))."""

    messages: Annotated[list[AnyMessage], add_messages]
    summary: NotRequired[str]  # running summary of compacted (removed) history
    compactions: NotRequired[int]  # summaries made for this thread (shown by /debug)
    last_compaction: NotRequired[str]  # ISO time of the latest one
    loaded_skills: NotRequired[list[str]]
    model_calls: NotRequired[int]  # model calls in the current turn (reset by each input)
    summary_tainted: NotRequired[bool]  # the summary was written from outside content
    unattended: NotRequired[bool]  # nobody is present in this run (set by each input)
    # The describe node's words for the last reply's asked calls: {"reply": id, "words":
    # {call id: words}, "keys": {call id: the key what was shown is recorded under}}.
    described: NotRequired[dict[str, Any]]


# True while a turn started by the scheduler runs (tools read it: a scheduled agent run
# may not create further agent schedules, so injected text cannot make itself standing).
SCHEDULED_RUN: ContextVar[bool] = ContextVar("panager_scheduled_run", default=False)

# Recall hook: (user, query) -> quoted memory lines for the system prompt.
Recall = Callable[["User", str], Awaitable[Sequence[Any]]]


@dataclass
class TurnContext:
    """Everything one run of the graph needs that must not be checkpointed.

    Passed as LangGraph's runtime context; tools were built for `user` by
    closure, so the model can never name another user.
    """

    user: User
    tools: Sequence[BaseTool] = ()  # offered to the model (their schemas are sent)
    # Not offered, but run if the model calls one anyway: Google's tools where they cannot
    # work yet (not linked, not configured), so a stray call still gets the link or the reason.
    unlisted_tools: Sequence[BaseTool] = ()
    emitter: EventEmitter | None = None
    model: BaseChatModel | None = None  # per-user override; None means the graph's default
    is_system_trigger: bool = False
    system_instruction: str | None = None  # what the scheduler asked for, for system triggers
    user_text: str | None = None  # the user's original message this turn (pending replay)
    # Nobody is present (scheduled runs, heartbeats, webhooks): no consequential call runs;
    # each becomes a proposal the person approves later (agent/graph/confirm.py).
    unattended: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# Any: an event carries free-form data
async def emit_event(ctx: TurnContext, type_: EventType, **data: Any) -> None:
    """Emit an event to the run's emitter (`ctx.emitter`), if the run has one."""
    if ctx.emitter is not None:
        await ctx.emitter(type_, ctx.user.id, **data)

"""The graph's typed configuration: `GraphConfig`, its `GraphLimits`, the types of its
hooks, and `plain_invoke` (the default model call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver

from panager.agent.graph.confirm_node import ProposalStore
from panager.agent.graph.effects import Effect, ModelCall
from panager.agent.graph.state import Recall, TurnContext
from panager.clock import Clock, SystemClock
from panager.errors import AuthRequired
from panager.model_retries import TextSink

ModelInvoker = Callable[[BaseChatModel, Sequence[BaseTool], list[AnyMessage]], Awaitable[AIMessage]]
# Like ModelInvoker, streaming the reply's text into the sink (llm.stream_with_retries).
StreamInvoker = Callable[
    [BaseChatModel, Sequence[BaseTool], list[AnyMessage], TextSink], Awaitable[AIMessage]
]
AuthHandler = Callable[[TurnContext, AuthRequired], Awaitable[str | None]]
# Called when the API refuses the prompt as too long: shrink `call` (attempt 1, 2, …).
OverflowHandler = Callable[[ModelCall, int], Awaitable[None]]
# The person's profile sections for the system prompt (once per turn).
ProfileLoader = Callable[[Any], Awaitable[Mapping[str, str]]]
# The prompt sections of the skills loaded into the thread (by name).
SkillsText = Callable[[Sequence[str]], Sequence[str]]


async def plain_invoke(
    model: BaseChatModel, tools: Sequence[BaseTool], messages: list[AnyMessage]
) -> AIMessage:
    """Bind tools (if any) and call the model once."""
    bound = model.bind_tools(list(tools)) if tools else model
    return await bound.ainvoke(messages)


@dataclass(frozen=True)
class GraphLimits:
    """How far one turn may go."""

    max_iterations: int = 10  # model calls per turn; the last one gets no tools
    history_max_tokens: int = 12_000  # trim_messages budget for the history sent
    max_tool_result_chars: int = 20_000  # longer tool results are truncated
    overflow_retries: int = 2  # compactions + retries after a context-length refusal


@dataclass(frozen=True)
class GraphConfig:
    """Everything the graph uses, named and typed; built before the graph, never changed.

    The app assembles it from its services (app.py); tests pass only what they need.
    Per-run data (the user, their tools, the emitter, a per-user model) arrives as
    `TurnContext`, not here.
    """

    model: BaseChatModel | None  # the default model; a user's /model choice rides on the turn
    checkpointer: BaseCheckpointSaver | None = None
    effects: Sequence[Effect] = ()  # run in order before and after each model call
    recall: Recall | None = None  # memories for the system prompt (once per turn)
    on_auth_required: AuthHandler | None = None  # a tool needs a linked account: the link
    on_overflow: OverflowHandler | None = None  # the prompt was too long: shrink the call
    skills_text: SkillsText | None = None  # prompt sections of the loaded skills
    profile: ProfileLoader | None = None  # the person's standing profile (every prompt)
    invoke: ModelInvoker = plain_invoke  # how the model is called (retries live in llm.py)
    # The streamed call (text as message_delta events); None: `invoke` only (stream: false).
    stream_invoke: StreamInvoker | None = None
    clock: Clock = field(default_factory=SystemClock)
    limits: GraphLimits = GraphLimits()
    context_window: int | None = None  # tokens; None when unknown (compaction decides)
    # Taint tracking and the confirm node (SPEC §2); off only to measure what they cost.
    taint_checks: bool = True
    lookup_budget: float | None = None  # seconds a question's read may take (None: 5)
    proposals: ProposalStore | None = None  # where unattended runs hold consequential calls

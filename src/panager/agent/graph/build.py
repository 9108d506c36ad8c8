"""The graph: START → agent → (tool calls? → tools → agent | END).

`build_graph` is the one factory. Nodes are small functions returning partial
state updates; per-run data (the user, their closure-bound tools, the event
emitter) arrives as LangGraph's runtime context (`TurnContext`), never in the
checkpointed state. Tool calls of one model reply run concurrently with
`asyncio.gather`; every call gets exactly one result, errors included.

This module holds the agent node, the routing and `build_graph`; the tools node is
in agent/graph/tools_node.py, the confirm node in agent/graph/confirm_node.py, and what the
graph is built from (`GraphConfig`) in agent/graph/config.py.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from panager.agent.graph.attachments import with_images
from panager.agent.graph.config import GraphConfig
from panager.agent.graph.confirm_node import (
    UNPARSED_CALLS,
    ConfirmNode,
    DescribeNode,
    needs_confirm,
    route_after_confirm,
)
from panager.agent.graph.effects import ModelCall
from panager.agent.graph.history import memo_counter, trim_history
from panager.agent.graph.interrupted import RUNNING_CALL_TAINTED
from panager.agent.graph.prompts import OUTSIDE_SECTION, build_system_prompt
from panager.agent.graph.state import AgentState, TurnContext, emit_event
from panager.agent.graph.taint import call_tainted, mark
from panager.agent.graph.tools_node import ToolsNode
from panager.errors import ContextOverflow, ModelUnavailable

log = logging.getLogger(__name__)

FINAL_ANSWER_NOTE = (
    "You have reached the limit of tool calls for this message. Do not call tools; give the "
    "user your best answer now from what you have, and say what is left undone."
)
OVERFLOW_MESSAGE = (
    "This conversation is too long for the model even after compacting it. Your message is "
    "kept; send /compact or /clear and try again."
)


def _latest_human_text(messages: Sequence[AnyMessage]) -> str:
    for msg in reversed(messages):
        if isinstance(msg, HumanMessage):
            return msg.text if hasattr(msg, "text") else str(msg.content)
    return ""


def unique_call_ids(response: AIMessage) -> AIMessage:
    """The reply with a distinct id on every tool call: a repeated or missing one replaced.

    Some OpenAI-compatible servers give every call of a reply the same id. Answers to a
    question, tool results and declines are all keyed by call id, so two calls sharing
    one would be approved, answered or declined together ("Approve only 2" approving
    call 1 too). Ids that are already distinct are kept as the provider wrote them."""
    seen: set[str] = set()
    changed = False

    def distinct(ident: str | None) -> str:
        nonlocal changed
        if not ident or ident in seen:
            ident, changed = f"call_{uuid.uuid4().hex[:24]}", True
        seen.add(ident)
        return ident

    calls = [{**c, "id": distinct(c.get("id"))} for c in response.tool_calls]
    invalid = [  # one without an id is dropped later (promote_unparsed_calls)
        {**c, "id": distinct(c["id"])} if c.get("id") else c for c in response.invalid_tool_calls
    ]
    if not changed:
        return response
    return response.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def promote_unparsed_calls(response: AIMessage) -> AIMessage:
    """Tool calls whose arguments were not valid JSON, made ordinary calls with no arguments.

    langchain keeps them apart (`invalid_tool_calls`), so the graph would end the turn
    with an empty answer and leave calls no tool message answers (which OpenAI then
    refuses on every later request). As plain calls, each gets an error result like any
    bad input; their raw arguments (possibly huge) are not kept in the thread."""
    unparsed = [c for c in response.invalid_tool_calls if c.get("id")]
    if not unparsed:
        return response
    calls: list[ToolCall] = [
        {"name": c.get("name") or "unknown", "args": {}, "id": c["id"], "type": "tool_call"}
        for c in unparsed
    ]
    marks = {**response.additional_kwargs, UNPARSED_CALLS: {c["id"]: True for c in unparsed}}
    return response.model_copy(
        update={
            "tool_calls": [*response.tool_calls, *calls],
            "invalid_tool_calls": [],
            "additional_kwargs": marks,
        }
    )


class Graph:
    """The agent node of the graph, as bound methods over one `GraphConfig`."""

    def __init__(self, config: GraphConfig) -> None:
        self.config = config

    # -- agent node -------------------------------------------------------------------------

    async def agent(self, state: AgentState, runtime: Runtime[TurnContext]) -> dict:
        """Call the model once with the prompt, trimmed history and the user's tools."""
        ctx = runtime.context
        iteration = state.get("model_calls", 0) + 1
        call = self._model_call(state, ctx, iteration)
        base = await self._system_prompt(state, ctx, call, with_summary=False)
        call.system_tokens = call.count_tokens([SystemMessage(base)])  # for compaction's estimate
        for effect in self.config.effects:
            await effect.before_model(call)
            if call.stop_reply:
                return await self._stop(call, ctx, iteration)
        await emit_event(ctx, "turn_start", iteration=iteration)
        call.phase, call.response = "after", await self._call_model(state, ctx, call)
        for effect in self.config.effects:
            await effect.after_model(call)
        response = call.response
        await self._emit_message_end(ctx, response, iteration)
        return {
            "messages": [*call.state_updates, response],
            "model_calls": iteration,
            **call.state_patch,
        }

    async def _call_model(self, state: AgentState, ctx: TurnContext, call: ModelCall) -> AIMessage:
        """One model call; a context-length refusal shrinks the call (on_overflow) and retries."""
        last_round = call.iteration >= self.config.limits.max_iterations
        attempt = 0
        while True:
            messages = await self._model_messages(state, ctx, call, last_round)
            tainted = self.config.taint_checks and call_tainted(
                str(messages[0].content), messages[1:], [] if last_round else ctx.tools
            )
            ctx.extra[RUNNING_CALL_TAINTED] = tainted  # for an answer cut off mid-stream
            try:
                response = await self._invoke(ctx, call, [] if last_round else ctx.tools, messages)
            except ContextOverflow:
                attempt += 1
                if self.config.on_overflow is None or attempt > self.config.limits.overflow_retries:
                    raise ModelUnavailable(OVERFLOW_MESSAGE) from None
                log.info("context overflow for user %s; compacting (%d)", ctx.user.id, attempt)
                await self.config.on_overflow(call, attempt)
                continue
            response = promote_unparsed_calls(unique_call_ids(response))
            if last_round and response.tool_calls:
                response = AIMessage(
                    content=response.text or "I stopped here: too many steps for one message."
                )
            return mark(response, tainted)

    async def _invoke(
        self, ctx: TurnContext, call: ModelCall, tools: Sequence[BaseTool], messages: list
    ) -> AIMessage:
        """The model call: streamed as message_delta events when streaming is on."""
        model = call.model
        assert model is not None  # the runner refuses turns when there is no model
        stream = self.config.stream_invoke
        if stream is None or ctx.emitter is None:
            return await self.config.invoke(model, tools, messages)
        return await stream(model, tools, messages, TextEvents(ctx, call.iteration))

    async def _model_messages(
        self, state: AgentState, ctx: TurnContext, call: ModelCall, last_round: bool
    ) -> list[AnyMessage]:
        """System prompt (with effects' notes) + the trimmed history."""
        system = await self._system_prompt(state, ctx, call)
        notes = [*call.system_notes, *([FINAL_ANSWER_NOTE] if last_round else [])]
        history = trim_history(
            call.model_input,
            self.config.limits.history_max_tokens,
            max_tool_chars=self.config.limits.max_tool_result_chars,
            token_counter=call.count_tokens,
        )
        tools = [] if last_round else ctx.tools
        if self.config.taint_checks and call_tainted(system, history, tools):
            notes.append(OUTSIDE_SECTION)
        system = "\n\n".join([system, *notes])
        return [SystemMessage(system), *with_images(history, ctx.extra.get("images") or {})]

    def _model_call(self, state: AgentState, ctx: TurnContext, iteration: int) -> ModelCall:
        messages = list(state["messages"])
        last_input = next(
            (
                m.usage_metadata.get("input_tokens")
                for m in reversed(messages)
                if isinstance(m, AIMessage) and m.usage_metadata
            ),
            None,
        )
        model = ctx.model or self.config.model
        counter = memo_counter()
        return ModelCall(
            phase="before",
            iteration=iteration,
            messages=messages,
            model_input=messages,
            model_name=_model_name(model),
            turn=ctx,
            state=dict(state),
            last_input_tokens=last_input,
            context_window=self.config.context_window,
            model=model,
            count_tokens=counter,
        )

    async def _stop(self, call: ModelCall, ctx: TurnContext, iteration: int) -> dict:
        reply = AIMessage(content=call.stop_reply or "")
        await emit_event(ctx, "turn_start", iteration=iteration)
        await self._emit_message_end(ctx, reply, iteration)
        return {
            "messages": [*call.state_updates, reply],
            "model_calls": iteration,
            **call.state_patch,
        }

    async def _system_prompt(
        self, state: AgentState, ctx: TurnContext, call: ModelCall, *, with_summary: bool = True
    ) -> str:
        latest = _latest_human_text(call.model_input)
        memories: Sequence[Any] = ctx.extra.get("recalled", ())
        if self.config.recall is not None and latest and "recalled" not in ctx.extra:
            try:  # once per turn (first model call); later calls and retries reuse it
                memories = await self.config.recall(ctx.user, latest)
            except Exception:
                log.exception("memory recall failed; answering without memories")
        ctx.extra["recalled"] = memories
        profile = await self._profile(ctx)
        loaded = list(state.get("loaded_skills") or [])
        skills = self.config.skills_text(loaded) if self.config.skills_text else ()
        return build_system_prompt(
            now=self.config.clock.now(),
            zone_name=ctx.user.timezone,
            user_name=ctx.user.name,
            latest_text=latest,
            memories=memories,
            skills=skills,
            summary=call.summary if with_summary else None,
            summary_tainted=bool(
                call.state_patch.get("summary_tainted", state.get("summary_tainted"))
            ),
            system_trigger=ctx.system_instruction,
            is_system_trigger=ctx.is_system_trigger,
            relays=any(getattr(m, "name", None) == "relay" for m in call.model_input),
            profile=profile,
            memory=self.config.recall is not None,
        )

    async def _profile(self, ctx: TurnContext) -> Mapping[str, str]:
        """The profile, read once per turn (later calls of the turn reuse it)."""
        if "profile" not in ctx.extra:
            loaded: Mapping[str, str] = {}
            if self.config.profile is not None:
                try:
                    loaded = await self.config.profile(ctx.user)
                except Exception:
                    log.exception("profile read failed; answering without it")
            ctx.extra["profile"] = loaded
        return ctx.extra["profile"]

    async def _emit_message_end(
        self, ctx: TurnContext, response: AIMessage, iteration: int
    ) -> None:
        await emit_event(
            ctx,
            "message_end",
            iteration=iteration,
            model=_model_name(ctx.model or self.config.model),
            id=response.id,
            tool_calls=[c["name"] for c in response.tool_calls],
            calls=[{k: c[k] for k in ("id", "name", "args")} for c in response.tool_calls],
            usage=dict(response.usage_metadata or {}),
            text=response.text,
        )
        if not response.tool_calls:
            await emit_event(ctx, "turn_end", iteration=iteration)


class TextEvents:
    """A streamed reply's text as `message_delta` / `message_reset` events of the turn."""

    def __init__(self, ctx: TurnContext, iteration: int) -> None:
        self.ctx = ctx
        self.iteration = iteration
        self.shown = False

    async def delta(self, text: str) -> None:
        """Emit the new piece of text."""
        self.shown = True
        if self.ctx.emitter is not None:
            user_id, iteration = self.ctx.user.id, self.iteration
            await self.ctx.emitter("message_delta", user_id, iteration=iteration, text=text)

    async def reset(self, restarted_on: str | None = None) -> None:
        """Tell front ends to drop this iteration's text (only when some was emitted);
        `restarted_on`: the fallback model that writes the answer again."""
        if self.shown and self.ctx.emitter is not None:
            self.shown = False
            await self.ctx.emitter(
                "message_reset", self.ctx.user.id, iteration=self.iteration,
                restarted_on=restarted_on,
            )


def _model_name(model: BaseChatModel | None) -> str:
    if model is None:
        return "none"
    return str(
        getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
    )


def route_after_agent(state: AgentState) -> str:
    """Tools when the last reply asked for them, else the end of the turn."""
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def route_checked(state: AgentState) -> str:
    """As `route_after_agent`, through the describe and confirm nodes when the reply is
    tainted or nobody is present."""
    route = route_after_agent(state)
    return "describe" if route == "tools" and needs_confirm(state) else route


def route_after_tools(state: AgentState) -> str:
    """Back to the agent, unless the tools node ended the turn with a reply (link)."""
    return END if isinstance(state["messages"][-1], AIMessage) else "agent"


def build_graph(
    config: GraphConfig,
) -> CompiledStateGraph[AgentState, TurnContext, AgentState, AgentState]:
    """Compile the agent graph: START → agent → (describe → confirm? → tools → agent)* → END."""
    nodes = Graph(config)
    builder = StateGraph(AgentState, context_schema=TurnContext)
    builder.add_node("agent", nodes.agent)
    builder.add_node("tools", ToolsNode(config))
    builder.add_edge(START, "agent")
    if config.taint_checks:
        builder.add_node("describe", DescribeNode(config.lookup_budget))
        builder.add_node(
            "confirm", ConfirmNode(config.clock, config.proposals, config.lookup_budget)
        )
        builder.add_conditional_edges("agent", route_checked, ["describe", "tools", END])
        builder.add_edge("describe", "confirm")
        builder.add_conditional_edges("confirm", route_after_confirm, ["tools", "agent"])
    else:
        builder.add_conditional_edges("agent", route_after_agent, ["tools", END])
    builder.add_conditional_edges("tools", route_after_tools, ["agent", END])
    return builder.compile(checkpointer=config.checkpointer)

"""The graph's `describe` and `confirm` nodes, between `agent` and `tools` (agent/graph/confirm.py).

`describe` runs first and does the I/O a question needs: it reads what each held call
acts on (the memory's text, the event's title and times, the recipient's display name,
a draft as Gmail holds it…; `graph/tool.question_words`, at most `LOOKUP_BUDGET` seconds
a read) and writes the words into the state (`described`). The confirm node only reads
them, so on resume, when it runs again from its start, it asks nothing twice.

It runs only for a reply written by a tainted model call, or in a run with
nobody present (`route_after_agent`). It classifies the reply's open calls;
the consequential ones either wait for one question (`interrupt`) — on resume
the node runs again from its start, so everything before `interrupt()` is
deterministic and writes nothing — or, unattended, become stored proposals.
Denied and held calls get their tool result here; the tools node runs the
rest. Nothing here runs inside the tools' `asyncio.gather` (an interrupt there
would be swallowed by the per-call error handling and re-run sibling calls).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from panager.agent.graph.confirm import (
    APPROVE,
    CHANGED,
    CHANGED_NOTE,
    DENY,
    PROPOSED,
    QUESTION_TTL,
    UNATTENDED,
    PendingCall,
    Question,
    declined_message,
    new_proposal_id,
    question_key,
    unanswered_calls,
)
from panager.agent.graph.state import AgentState, TurnContext
from panager.agent.graph.taint import CALL_TAINTED, latest_person_text, marked, person_text
from panager.agent.graph.tool import (
    ALWAYS_ASKED,
    CONSEQUENTIAL,
    CallView,
    asks_always,
    classify_call,
    describe_call,
    question_words,
)
from panager.clock import Clock

log = logging.getLogger(__name__)
UNPARSED_CALLS = "panager_unparsed_calls"  # additional_kwargs: ids of calls with bad JSON
PROPOSALS_KEY = "proposals"  # TurnContext.extra: the PendingCalls held in this run


class ProposalStore(Protocol):
    """Where held calls of unattended runs go (services/proposals.ProposalService)."""

    async def create(
        self,
        user_id: int,
        proposal_id: str,
        tool: str,
        args: dict[str, Any],
        description: str,
        now: Any,  # Any: a datetime from the graph's clock
        tainted: bool = True,
    ) -> None:
        """Store a held call under a new id (a taken id raises); `tainted`: the reply
        that made the call was written in a tainted model call."""
        ...


def held_calls(
    tools: Sequence[BaseTool],
    reply: AIMessage,
    calls: Sequence[ToolCall],
    view: CallView,
) -> list[tuple[ToolCall, BaseTool]]:
    """The calls of `reply` that are consequential (unknown tools and bad JSON excluded:
    they only produce an error result)."""
    by_name = {t.name: t for t in tools}
    unparsed: Mapping[str, Any] = reply.additional_kwargs.get(UNPARSED_CALLS) or {}
    held = []
    for call in calls:
        tool = by_name.get(call["name"])
        if tool is None or call["id"] in unparsed or not isinstance(call.get("args"), dict):
            continue
        if classify_call(tool, call["args"], view) == CONSEQUENTIAL:
            held.append((call, tool))
    return held


def calls_to_ask(
    state: AgentState, ctx: TurnContext
) -> tuple[AIMessage | None, list[tuple[ToolCall, BaseTool]]]:
    """The last reply and its open calls that wait for the person (a question, or held as
    proposals when nobody is present); none when the reply runs freely."""
    messages = list(state["messages"])
    reply, open_calls = unanswered_calls(messages)
    if reply is None or not open_calls:
        return reply, []
    tainted = marked(reply)
    if not (tainted or ctx.unattended or _always_asked(open_calls)):
        return reply, []
    view = CallView(person_text(messages), tainted, ctx.unattended,
                    latest_text=latest_person_text(messages))
    held = held_calls([*ctx.tools, *ctx.unlisted_tools], reply, open_calls, view)
    if not (tainted or ctx.unattended):  # only the calls asked about every time
        held = [(c, t) for c, t in held if asks_always(t)]
    return reply, held


def shown_key(call_id: str) -> str:
    """The key what a question showed is recorded under (`mail_shown`): the call id made
    unique, since local servers number calls `call_0`, `call_1`… in every reply."""
    return f"{call_id}~{secrets.token_hex(8)}"


class DescribeNode:
    """Resolves the words of each call that will be asked about, before `confirm`."""

    def __init__(self, budget: float | None = None) -> None:
        self.budget = budget

    async def __call__(self, state: AgentState, runtime: Runtime[TurnContext]) -> dict:
        ctx = runtime.context
        reply, held = calls_to_ask(state, ctx)
        if reply is None or not held or ctx.unattended:  # proposals are described when held
            return {}
        keys = {str(c["id"]): shown_key(str(c["id"])) for c, _ in held}
        tainted = CALL_TAINTED.set(marked(reply))  # "written while reading outside content"
        try:
            words = await asyncio.gather(
                *(question_words(t, c["name"], c["args"], keys[str(c["id"])], self.budget)
                  for c, t in held)
            )
        finally:
            CALL_TAINTED.reset(tainted)
        words_by_id = {str(c["id"]): w for (c, _), w in zip(held, words, strict=True)}
        return {"described": {"reply": reply.id, "keys": keys,
                              "words": words_by_id}}


def described_for(state: AgentState, reply: AIMessage) -> Mapping[str, Any]:
    """What the describe node wrote for `reply` (empty when it wrote nothing for it)."""
    described = state.get("described") or {}
    return described if described.get("reply") == reply.id else {}


class ConfirmNode:
    """Asks before a tainted reply's consequential calls; holds them when nobody is there.

    Everything before `interrupt()` is pure: the words come from the state."""

    def __init__(self, clock: Clock, proposals: ProposalStore | None = None,
                 budget: float | None = None) -> None:
        self.clock = clock
        self.proposals = proposals
        self.budget = budget

    async def __call__(self, state: AgentState, runtime: Runtime[TurnContext]) -> dict:
        ctx = runtime.context
        reply, held = calls_to_ask(state, ctx)
        if reply is None or not held:
            return {}
        if ctx.unattended:
            return {"messages": await self._propose(ctx, held, marked(reply))}
        words: Mapping[str, str] = described_for(state, reply).get("words") or {}
        question = Question(
            key=question_key(reply.id, [c for c, _ in held]),
            calls=tuple(
                PendingCall(
                    str(c["id"]),
                    c["name"],
                    words.get(str(c["id"])) or describe_call(t, c["name"], c["args"]),
                )
                for c, t in held
            ),
            expires_at=self.clock.now() + QUESTION_TTL,
        )
        answer = interrupt(question.payload())  # the first run stops here; a resume returns
        while isinstance(answer, dict) and isinstance(answer.get(CHANGED), dict):
            question = asked_again(question, answer[CHANGED], self.clock.now(), reply.id)
            answer = interrupt(question.payload())  # the words come from the resume: pure
        decisions: Mapping[str, Any] = answer if isinstance(answer, dict) else {}
        declined: list[AnyMessage] = [
            declined_message(c, str(decisions.get(str(c["id"]), DENY)))
            for c, _ in held
            if decisions.get(str(c["id"])) != APPROVE
        ]
        return {"messages": declined} if declined else {}

    async def _propose(
        self, ctx: TurnContext, held: Sequence[tuple[ToolCall, BaseTool]], tainted: bool
    ) -> list[AnyMessage]:
        """Store each held call as a proposal with the reply's taint (the approved call
        runs with it, as a call approved in a question does); its result says it waits."""
        results: list[AnyMessage] = []
        store = self.proposals
        for call, tool in held:
            text = UNATTENDED
            if store is not None:
                ident = new_proposal_id()
                marked_as = CALL_TAINTED.set(tainted)  # the words say what approval runs
                try:
                    words = await question_words(
                        tool, call["name"], call["args"], ident, self.budget
                    )
                finally:
                    CALL_TAINTED.reset(marked_as)
                try:
                    await store.create(
                        ctx.user.id, ident, call["name"], dict(call["args"]), words,
                        self.clock.now(), tainted,
                    )
                except Exception:
                    log.exception("could not store a proposal for user %s", ctx.user.id)
                else:
                    ctx.extra.setdefault(PROPOSALS_KEY, []).append(
                        PendingCall(ident, call["name"], words)
                    )
                    text = PROPOSED
            results.append(
                ToolMessage(
                    content=text, tool_call_id=call["id"], name=call["name"], status="error",
                    additional_kwargs={"panager_declined": "unattended"},
                )
            )
        return results


def asked_again(
    question: Question, changed: Mapping[str, Any], now: Any, reply_id: str | None
) -> Question:
    """The question again, the calls whose object changed shown with their new words."""
    calls = tuple(
        PendingCall(c.id, c.tool, CHANGED_NOTE + str(changed[c.id]))
        if c.id in changed else c
        for c in question.calls
    )
    seed = question.key + json.dumps(dict(changed), sort_keys=True, ensure_ascii=False)
    key = question_key(reply_id, (), seed)  # the first key names the calls already
    return Question(key, calls, now + QUESTION_TTL)


def route_after_confirm(state: AgentState) -> str:
    """The tools node when calls are left to run; back to the model when none is."""
    _, open_calls = unanswered_calls(state["messages"])
    return "tools" if open_calls else "agent"


def _always_asked(calls: Sequence[ToolCall]) -> bool:
    return any(call["name"] in ALWAYS_ASKED for call in calls)


def needs_confirm(state: AgentState) -> bool:
    """Whether the last reply must pass the confirm node (tainted, nobody present, or a
    call of a tool asked about every time)."""
    last = state["messages"][-1]
    return isinstance(last, AIMessage) and (
        marked(last) or bool(state.get("unattended")) or _always_asked(last.tool_calls)
    )


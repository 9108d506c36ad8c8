"""What the runner does with open questions and proposals (agent/graph/confirm.py has the model).

`decline` closes a question the person did not answer (they wrote something
else, or it expired before a scheduled run came): every open call of the reply
gets a "declined" result, so the model reads why nothing happened. `offer`
records the calls an unattended run held as offered on its answer. `approve`
runs one stored proposal, exactly once (the row is taken atomically first),
and only when the press names the answer it was offered on: anything else (a
typed `/approve ID`, a button of another message) shows the stored description
and asks again, offered on that new question. It runs with the taint of the run
that held it: the person approved this one call, not whatever it stores, so an
agent schedule approved from a tainted run is stored tainted, as when the same
call is approved in a question (agent/graph/tools_node.py). `deny` refuses one;
`waiting` lists what waits.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AnyMessage

from panager.agent.graph.confirm import (
    APPROVE,
    CHANGED_NOTE,
    PendingCall,
    Question,
    declined_message,
    offer_key,
    question_text,
    unanswered_calls,
)
from panager.agent.graph.taint import CALL_TAINTED, TAINT_KEY, marked
from panager.agent.graph.tool import (
    CURRENT_CALL,
    LOOKUP_KEY,
    Lookup,
    clean_args,
    question_words,
)
from panager.agent.tools import callable_tools
from panager.agent.turns.result import TurnOwner, TurnResult
from panager.errors import AuthRequired, ToolError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from panager.agent.graph.state import TurnContext
    from panager.services.proposals import Offer, Proposal
    from panager.services.users import User

log = logging.getLogger(__name__)

NO_QUESTION = "There is no open question to answer (it was answered, declined or replaced)."
NO_PROPOSALS = "Approving held actions is not available on this instance."
UNKNOWN_PROPOSAL = "No action {id!r} of yours is waiting for approval."
TAKEN = "That action was already approved (it runs only once)."
DECIDED = {
    "approved": TAKEN,
    "failed": "That action was approved and failed; it is not tried again.",
    "denied": "That action was denied; it will not run.",
    "expired": "That action expired without being approved; ask again if you still want it.",
}
ASK_AGAIN = (
    "This is the action that waits for your approval (held {age} ago, expires in "
    "{left}):\n\n{description}\n\nApprove or deny it."
)
CHANGED = (
    "What this action would act on changed since it was held {age} ago, so it did not run. "
    "This is what it would do now (expires in {left}):\n\n{description}\n\nApprove or deny it."
)
NOTHING_WAITS = "Nothing is waiting for your approval."
DENIED = "Denied; it will not run: {description}"
RESULT_CHARS = 500


def shown(question: Question, reply: AnyMessage | None = None) -> str:
    """What a turn that stopped to ask shows: the model's words so far, then the question."""
    said = reply.text if isinstance(reply, AIMessage) and reply.text else ""
    text = question_text(question)
    return f"{said.strip()}\n\n{text}" if said.strip() else text


async def decline(assistant: TurnOwner, user: User, question: Question, reason: str) -> int:
    """Answer every open call of the asking reply as declined; returns how many.

    Runs under the user's lock (the caller holds it). The update is made as the
    tools node, so the graph's next step is the model, which reads the results."""
    config = assistant.config_for(user)
    snapshot = await assistant.graph.aget_state(config)
    _, open_calls = unanswered_calls((snapshot.values or {}).get("messages", []))
    results = [declined_message(call, reason) for call in open_calls]
    if results:
        await assistant.graph.aupdate_state(config, {"messages": results}, as_node="tools")
    log.info("declined question %s of user %s (%s)", question.key, user.id, reason)
    return len(results)


async def offer(
    assistant: TurnOwner, user: User, state: dict, held: Sequence[PendingCall]
) -> tuple[Offer, ...]:
    """Record the calls a run held as offered on its answer (the last message)."""
    deps = assistant.deps
    if deps.proposals is None or not held:
        return ()
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    key = offer_key(getattr(last, "id", None))
    return await deps.proposals.offer(user.id, [c.id for c in held], key, deps.clock.now())


def _duration(delta: timedelta) -> str:
    minutes = max(int(delta.total_seconds() // 60), 0)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"


def _timing(proposal: Proposal, now: datetime) -> tuple[str, str]:
    return _duration(now - proposal.created_at), _duration(proposal.expires_at - now)


async def _settled(assistant: TurnOwner, user: User, ident: str) -> TurnResult | Proposal:
    """The user's proposal when it still waits, else why it cannot be decided."""
    deps = assistant.deps
    if deps.proposals is None:
        return TurnResult(NO_PROPOSALS, ok=False)
    proposal = await deps.proposals.get(user.id, ident)
    if proposal is None:
        return TurnResult(UNKNOWN_PROPOSAL.format(id=ident), ok=False)
    state = proposal.state(deps.clock.now())
    if state != "pending":
        return TurnResult(DECIDED.get(state, TAKEN), ok=False)
    return proposal


async def ask_again(
    assistant: TurnOwner, user: User, proposal: Proposal, template: str = ASK_AGAIN
) -> TurnResult:
    """Show the stored description and ask again: offered on this new question only."""
    deps = assistant.deps
    assert deps.proposals is not None
    now = deps.clock.now()
    offers = await deps.proposals.offer(user.id, [proposal.id], offer_key(None), now)
    if not offers:
        return TurnResult(DECIDED["expired"], ok=False)
    age, left = _timing(proposal, now)
    text = template.format(age=age, left=left, description=proposal.description)
    return TurnResult(text, offers=offers)


async def approve(
    assistant: TurnOwner, user: User, proposal_id: str, on: str | None = None
) -> TurnResult:
    """Run the held call `proposal_id` of `user` once, when `on` names where it was offered;
    without that (typed, or a button of another message) ask again. A second approval is
    refused."""
    deps = assistant.deps
    ident = proposal_id.strip()
    found = await _settled(assistant, user, ident)
    if isinstance(found, TurnResult):
        return found
    if on is None or found.offered_on != on:
        return await ask_again(assistant, user, found)
    assert deps.proposals is not None
    now_words = await described_now(assistant, user, found)
    if now_words is not None and now_words != found.description:  # checked again at use
        await deps.proposals.redescribe(user.id, ident, now_words)
        return await ask_again(assistant, user, replace(found, description=now_words), CHANGED)
    proposal = await deps.proposals.take(user.id, ident, deps.clock.now(), on)
    if proposal is None:  # decided or expired in between
        again = await _settled(assistant, user, ident)
        return again if isinstance(again, TurnResult) else TurnResult(TAKEN, ok=False)
    tool = {t.name: t for t in await callable_tools(deps, user)}.get(proposal.tool)
    outcome: Any
    try:
        if tool is None:
            raise ToolError(f"the tool {proposal.tool} is not available now")
        async with assistant.user_lock(user.id):
            running = CURRENT_CALL.set(proposal.id)
            tainted = CALL_TAINTED.set(proposal.tainted)
            try:
                outcome = await tool.ainvoke(clean_args(proposal.args))
            finally:
                CALL_TAINTED.reset(tainted)
                CURRENT_CALL.reset(running)
            await _note(assistant, user, proposal.id, proposal.description)
    except AuthRequired as exc:
        await deps.proposals.failed(user.id, ident)
        return TurnResult(f"{exc.message} Connect it here: {exc.link}", ok=False,
                          link={"url": exc.link, "label": f"Connect {exc.provider}"})
    except ToolError as exc:
        await deps.proposals.failed(user.id, ident)
        return TurnResult(f"Approved, but it failed: {exc}", ok=False)
    except Exception:
        log.exception("approved proposal %s of user %s failed", ident, user.id)
        await deps.proposals.failed(user.id, ident)
        return TurnResult("Approved, but it failed unexpectedly; nothing more was tried.",
                          ok=False)
    log.info("user %s approved proposal %s (%s): %s", user.id, ident, proposal.tool,
             str(outcome)[:RESULT_CHARS])
    return TurnResult(f"Done: {proposal.description}")


async def described_now(assistant: TurnOwner, user: User, proposal: Proposal) -> str | None:
    """The held call's words from its object as it is now (None: its words cannot change —
    a call described from its arguments alone, or a send whose draft digest is checked
    when it runs)."""
    tool = {t.name: t for t in await callable_tools(assistant.deps, user)}.get(proposal.tool)
    if tool is None or not isinstance((tool.metadata or {}).get(LOOKUP_KEY), Lookup):
        return None
    tainted = CALL_TAINTED.set(proposal.tainted)
    try:
        return await question_words(tool, proposal.tool, proposal.args, proposal.id)
    finally:
        CALL_TAINTED.reset(tainted)


async def changed_since_asked(
    assistant: TurnOwner, user: User, ctx: TurnContext, question: Question,
    decisions: Mapping[str, str],
) -> dict[str, str]:
    """The approved calls of `question` whose object changed since it was asked: their
    words now ({call id: words}); empty when none did (or none can be read again)."""
    snapshot = await assistant.graph.aget_state(assistant.config_for(user))
    reply, open_calls = unanswered_calls((snapshot.values or {}).get("messages", []))
    if reply is None:
        return {}
    args = {str(c["id"]): c for c in open_calls}
    by_name = {t.name: t for t in (*ctx.unlisted_tools, *ctx.tools)}
    changed: dict[str, str] = {}
    tainted = CALL_TAINTED.set(marked(reply))
    try:
        for asked in question.calls:
            tool, called = by_name.get(asked.tool), args.get(asked.id)
            if decisions.get(asked.id) != APPROVE or tool is None or called is None:
                continue
            if not isinstance((tool.metadata or {}).get(LOOKUP_KEY), Lookup):
                continue
            words = await question_words(tool, asked.tool, called["args"], asked.id)
            shown = asked.description.removeprefix(CHANGED_NOTE)
            if words != shown:
                changed[asked.id] = words
    finally:
        CALL_TAINTED.reset(tainted)
    return changed


async def approve_shown(assistant: TurnOwner, user: User, proposal_id: str) -> TurnResult:
    """Approve a held call from a place that showed it whole with its stored description
    (the web page's "Waiting for your approval" panel): offered there, then approved."""
    ident = proposal_id.strip()
    found = await _settled(assistant, user, ident)
    if isinstance(found, TurnResult):
        return found
    assert assistant.deps.proposals is not None
    offers = await assistant.deps.proposals.offer(
        user.id, [ident], offer_key(None), assistant.deps.clock.now()
    )
    if not offers:
        return TurnResult(DECIDED["expired"], ok=False)
    return await approve(assistant, user, ident, offers[0].on)


async def deny(assistant: TurnOwner, user: User, proposal_id: str) -> TurnResult:
    """Refuse the held call `proposal_id` of `user`: it never runs."""
    deps = assistant.deps
    ident = proposal_id.strip()
    found = await _settled(assistant, user, ident)
    if isinstance(found, TurnResult):
        return found
    assert deps.proposals is not None
    denied = await deps.proposals.deny(user.id, ident, deps.clock.now())
    if denied is None:
        again = await _settled(assistant, user, ident)
        return again if isinstance(again, TurnResult) else TurnResult(TAKEN, ok=False)
    log.info("user %s denied proposal %s (%s)", user.id, ident, denied.tool)
    return TurnResult(DENIED.format(description=denied.description))


async def waiting(assistant: TurnOwner, user: User) -> list[tuple[Proposal, str, str]]:
    """What waits for the person's approval: each proposal with its age and time left."""
    deps = assistant.deps
    if deps.proposals is None:
        return []
    now = deps.clock.now()
    return [(p, *_timing(p, now)) for p in await deps.proposals.pending(user.id, now)]


def waiting_text(items: Sequence[tuple[Proposal, str, str]]) -> str:
    """`/approve` alone: what waits, with `/approve ID` and `/deny ID` for each."""
    if not items:
        return NOTHING_WAITS
    lines = ["Waiting for your approval (newest first):"]
    for proposal, age, left in items:
        lines.append(f"• {proposal.description}\n  held {age} ago, expires in {left} — "
                     f"/approve {proposal.id} to see it again and decide, /deny {proposal.id}")
    return "\n".join(lines)


async def _note(assistant: TurnOwner, user: User, ident: str, description: str) -> None:
    """Tell the thread what the person approved (skipped while a question is open)."""
    config = assistant.config_for(user)
    snapshot = await assistant.graph.aget_state(config)
    if snapshot.interrupts:
        return
    note = AIMessage(
        content=f"(The user approved a held action and it ran: {description})",
        additional_kwargs={TAINT_KEY: True, "panager_proposal": ident},
        id=str(uuid.uuid4()),
    )
    await assistant.graph.aupdate_state(config, {"messages": [note]}, as_node="agent")

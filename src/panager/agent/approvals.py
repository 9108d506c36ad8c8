"""What the runner does with open questions and proposals (agent/confirm.py has the model).

`decline` closes a question the person did not answer (they wrote something
else, or it expired before a scheduled run came): every open call of the reply
gets a "declined" result, so the model reads why nothing happened. `approve`
runs one stored proposal, exactly once (the row is taken atomically first),
with the taint of the run that held it: the person approved this one call, not
whatever it stores, so an agent schedule approved from a tainted run is stored
tainted, as when the same call is approved in a question (agent/tools_node.py).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AnyMessage

from panager.agent.confirm import Question, declined_message, question_text, unanswered_calls
from panager.agent.taint import CALL_TAINTED, TAINT_KEY
from panager.agent.tools import all_tools
from panager.agent.tools.base import CURRENT_CALL, clean_args
from panager.errors import AuthRequired, ToolError

if TYPE_CHECKING:
    from panager.agent.runner import Assistant, TurnResult
    from panager.services.users import User

log = logging.getLogger(__name__)

NO_QUESTION = "There is no open question to answer (it was answered, declined or replaced)."
NO_PROPOSALS = "Approving held actions is not available on this instance."
UNKNOWN_PROPOSAL = "No action {id!r} of yours is waiting for approval."
TAKEN = "That action was already approved (it runs only once)."
RESULT_CHARS = 500


def shown(question: Question, reply: AnyMessage | None = None) -> str:
    """What a turn that stopped to ask shows: the model's words so far, then the question."""
    said = reply.text if isinstance(reply, AIMessage) and reply.text else ""
    text = question_text(question)
    return f"{said.strip()}\n\n{text}" if said.strip() else text


async def decline(assistant: Assistant, user: User, question: Question, reason: str) -> int:
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


async def approve(assistant: Assistant, user: User, proposal_id: str) -> TurnResult:
    """Run the held call `proposal_id` of `user` once; a second approval is refused."""
    from panager.agent.runner import TurnResult

    deps = assistant.deps
    if deps.proposals is None:
        return TurnResult(NO_PROPOSALS, ok=False)
    ident = proposal_id.strip()
    proposal = await deps.proposals.take(user.id, ident, deps.clock.now())
    if proposal is None:
        known = await deps.proposals.get(user.id, ident)
        return TurnResult(TAKEN if known else UNKNOWN_PROPOSAL.format(id=ident), ok=False)
    tool = {t.name: t for t in await all_tools(deps, user)}.get(proposal.tool)
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


async def _note(assistant: Assistant, user: User, ident: str, description: str) -> None:
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

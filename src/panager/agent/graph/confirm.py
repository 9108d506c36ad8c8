"""Questions to the person before consequential calls, and proposals from unattended runs.

A reply written by a tainted model call (see `agent/graph/taint.py`) may hold calls
that outside text chose. The graph's `confirm` node classifies each call of
such a reply (`graph/tool.classify_call`); the consequential ones wait for ONE
question — LangGraph's `interrupt(payload)`, the payload being a `Question`
as plain JSON — and the run resumes with `Command(resume={call_id: "approve"
| "deny"})`. The app reads the question back from the checkpoint
(`pending_question`) under the person's lock and checks an answer against it
before resuming (`check_answer`): LangGraph itself accepts any resume value.

In a run with nobody present (`TurnContext.unattended`) no consequential call
runs; each becomes a stored proposal (`services/proposals.py`). The model is
never told its id; the runner offers the held calls on the run's answer
(`offer_key`) and the delivery carries them as `Offer`s beside the text
(`held_text` only lists their descriptions): front ends draw Approve/Deny from
those offers, never from text.

`question_text` is the one plain-text rendering every front end shows (their
buttons come on top).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from panager.agent.graph.tool import ALWAYS_ASKED

QUESTION_TTL = timedelta(minutes=10)  # an answer after this counts as Deny
Decision = Literal["approve", "deny"]
APPROVE: Decision = "approve"
DENY: Decision = "deny"
EXPIRED = "expired"  # resume value of a call whose question was answered too late
NEW_MESSAGE = "new_message"  # the person wrote instead of answering
# Resume value {CHANGED: {call id: words}}: what approved calls act on changed since the
# question was asked; the confirm node asks again with these words (agent/turns/approvals.py).
CHANGED = "panager_changed"
CHANGED_NOTE = "(changed since you were asked; this is what it would do now) "

DECLINED = {
    DENY: "The person declined this call when asked; it did not run. Do not try it again "
    "unless they ask for it themselves.",
    EXPIRED: "The person did not answer the question about this call within 10 minutes, so "
    "it did not run. Do not try it again unless they ask for it themselves.",
    NEW_MESSAGE: "The person sent a new message instead of approving this call, so it did "
    "not run (declined). Do not try it again unless they ask for it themselves.",
}
PROPOSED = (
    "Not run: nobody is present in this run, so this call is held for the person's "
    "approval. Tell them briefly what waits; they approve it from your answer."
)
UNATTENDED = "Not run: nobody is present in this run to approve it."


@dataclass(frozen=True)
class PendingCall:
    """One call waiting for the person."""

    id: str  # tool_call_id (or proposal id for proposals)
    tool: str  # tool name
    description: str  # plain words, from describe_call


@dataclass(frozen=True)
class Question:
    """What a front end shows: one question, buttons per call."""

    key: str  # short id (<= 32 chars) of this question, fits callback_data
    calls: tuple[PendingCall, ...]
    expires_at: datetime  # after this an answer counts as Deny (10 minutes)
    kind: Literal["confirm", "proposal"] = "confirm"

    def expired(self, now: datetime) -> bool:
        """Whether an answer now counts as Deny."""
        return now >= self.expires_at

    def payload(self) -> dict[str, Any]:
        """The question as the plain JSON the interrupt (and so the checkpoint) holds."""
        return {
            "key": self.key,
            "kind": self.kind,
            "expires_at": self.expires_at.isoformat(),
            "calls": [
                {"id": c.id, "tool": c.tool, "description": c.description} for c in self.calls
            ],
        }

    @classmethod
    def from_payload(cls, value: Any) -> Question | None:  # Any: read back from a checkpoint
        """The question an interrupt holds; None when it is not one of ours."""
        if not isinstance(value, dict) or not isinstance(value.get("calls"), list):
            return None
        try:
            calls = tuple(
                PendingCall(str(c["id"]), str(c["tool"]), str(c["description"]))
                for c in value["calls"]
            )
            expires = datetime.fromisoformat(str(value["expires_at"]))
            if value.get("kind") == "proposal":
                return cls(str(value["key"]), calls, expires, "proposal")
            return cls(str(value["key"]), calls, expires, "confirm")
        except (KeyError, TypeError, ValueError):
            return None


def question_key(reply_id: str | None, calls: Iterable[ToolCall], again: str = "") -> str:
    """A short id for the question about this reply (the same on every re-run of the node);
    `again`: the changed words of a question asked again (another key)."""
    seed = "|".join([reply_id or "", *(str(c.get("id")) for c in calls), again])
    return "q" + hashlib.sha256(seed.encode()).hexdigest()[:15]


def new_proposal_id() -> str:
    """A fresh id for a held call: random, never derived from the model's call id, which
    some providers reuse across replies (`{tool}:{n}` restarting at 0 each turn), so an
    Approve always names the one call it was shown with."""
    return "p" + secrets.token_hex(6)


def question_text(q: Question) -> str:
    """The question in plain words: what each call would do. Shared by every front end."""
    if q.kind == "proposal":
        head = "Nothing was done yet; these wait for your approval:"
    elif all(call.tool in ALWAYS_ASKED for call in q.calls):
        head = (
            "Before I go on I need your OK for "
            + ("this" if len(q.calls) == 1 else "each of these")
            + " (sending mail is always asked; check exactly what would go out):"
        )
    else:
        head = (
            "Before I go on: text I read that did not come from you (a calendar entry, a "
            "relayed message, …) is involved, so I need your OK for "
            + ("this:" if len(q.calls) == 1 else "each of these:")
        )
    lines = [head, ""]
    for number, call in enumerate(q.calls, 1):
        lines.append(f"{number}. {call.description}")
    if q.kind == "confirm":
        lines += ["", "Approve or deny. No answer within 10 minutes counts as deny."]
    return "\n".join(lines)


def held_text(descriptions: Sequence[str]) -> str:
    """The part of a delivered answer that lists the held calls (numbered as their buttons
    are); the buttons themselves come from the offers, never from this text."""
    if not descriptions:
        return ""
    lines = ["", "", "Waiting for your approval (not done):"]
    lines += [f"{n}. {text}" for n, text in enumerate(descriptions, 1)]
    return "\n".join(lines)


def offer_key(message_id: str | None) -> str:
    """The `Offer.on` key of an answer: short (it rides in a button's data), the same for
    the same message (the web chat finds a message's offers by it)."""
    if not message_id:
        return "a" + secrets.token_hex(8)
    return "m" + hashlib.sha256(message_id.encode()).hexdigest()[:16]


def pending_question(interrupts: Sequence[Any]) -> Question | None:
    """The question a thread waits on, from its snapshot's `interrupts` (None: none)."""
    for item in interrupts:
        question = Question.from_payload(getattr(item, "value", None))
        if question is not None:
            return question
    return None


def check_answer(
    q: Question, key: str, decisions: Mapping[str, str], now: datetime
) -> dict[str, str] | str:
    """The resume value for an answer to `q`, or why the answer is refused.

    Every call gets a decision: ids the answer does not name are denied; after the
    question expired every call counts as denied (`EXPIRED`)."""
    if key != q.key:
        return "That question is no longer open (it was answered or replaced)."
    ids = {c.id for c in q.calls}
    unknown = [i for i in decisions if i not in ids]
    if unknown:
        return "That answer names a call this question does not hold; nothing was run."
    bad = [v for v in decisions.values() if v not in (APPROVE, DENY)]
    if bad:
        return "An answer is approve or deny."
    if q.expired(now):
        return {c.id: EXPIRED for c in q.calls}
    return {c.id: APPROVE if decisions.get(c.id) == APPROVE else DENY for c in q.calls}


def declined_message(call: ToolCall | Mapping[str, Any], reason: str) -> ToolMessage:
    """The result of a call the person did not approve."""
    return ToolMessage(
        content=DECLINED.get(reason, DECLINED[DENY]),
        tool_call_id=str(call["id"]),
        name=call.get("name"),
        status="error",
        additional_kwargs={"panager_declined": reason},
    )


def unanswered_calls(messages: Sequence[AnyMessage]) -> tuple[AIMessage | None, list[ToolCall]]:
    """The last AI reply and those of its calls no tool result follows yet."""
    for at in range(len(messages) - 1, -1, -1):
        reply = messages[at]
        if isinstance(reply, AIMessage):
            done = {m.tool_call_id for m in messages[at + 1 :] if isinstance(m, ToolMessage)}
            return reply, [c for c in reply.tool_calls if c["id"] not in done]
    return None, []

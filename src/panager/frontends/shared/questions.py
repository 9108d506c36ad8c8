"""Approve/Deny buttons on any chat front end: what they carry and what a press does.

A button carries everything needed to act in its data — the question key and
the call's position (`pnq:<key>:<n|*>:<a|d>`), or the proposal id and the
answer it was offered on (`pnp:<id>:<on>:<a|d>`) — at most 64 bytes
(Telegram's `callback_data` limit; Discord's `custom_id` allows 100). So a
press is handled by whichever process receives it, after a restart too
(nothing is kept in memory). A press acts only on the presser's own thread
and proposals: the question is read from *their* checkpoint and the key must
match it, so a button cannot answer for anyone else. Held calls get buttons
only from `Offer`s (the relation of a proposal to the answer it was offered
on), never from text; an Approve whose proposal was not offered on that
answer (an older button, a re-offered call) shows the description again and
asks. The text of every question is `agent.confirm.question_text`; the
buttons come on top, built by each platform from `ButtonSpec`s
(frontends/discord/questions.py, frontends/telegram/questions.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from panager.agent.graph.confirm import APPROVE, DENY, Question

if TYPE_CHECKING:
    from panager.agent.turns.result import TurnResult
    from panager.app import App
    from panager.services.proposals import Offer
    from panager.services.users import User

QUESTION_PREFIX, PROPOSAL_PREFIX = "pnq", "pnp"
MAX_CALL_BUTTONS = 10  # "Approve only n" buttons
NOT_YOURS = "That button is not for you (or the question is no longer open)."
Style = Literal["approve", "deny", "plain"]


@dataclass(frozen=True)
class ButtonSpec:
    """One button, platform-neutral: its label, its data and how it looks."""

    label: str
    data: str
    style: Style = "plain"


def question_buttons(question: Question) -> list[ButtonSpec]:
    """Approve/Deny for one call; "Approve only n", "Approve all" and "Deny all" for more."""
    key = question.key
    if len(question.calls) == 1:
        return [
            ButtonSpec("Approve", f"{QUESTION_PREFIX}:{key}:0:a", "approve"),
            ButtonSpec("Deny", f"{QUESTION_PREFIX}:{key}:*:d", "deny"),
        ]
    only = [
        ButtonSpec(f"Approve only {n + 1}", f"{QUESTION_PREFIX}:{key}:{n}:a")
        for n in range(min(len(question.calls), MAX_CALL_BUTTONS))
    ]
    return [
        *only,
        ButtonSpec("Approve all", f"{QUESTION_PREFIX}:{key}:*:a", "approve"),
        ButtonSpec("Deny all", f"{QUESTION_PREFIX}:{key}:*:d", "deny"),
    ]


def proposal_buttons(offers: Sequence[Offer]) -> list[ButtonSpec]:
    """Approve and Deny per held call offered on an answer (empty: none offered)."""
    shown = offers[:MAX_CALL_BUTTONS]
    specs = []
    for n, offer in enumerate(shown, 1):
        suffix = "" if len(shown) == 1 else f" {n}"
        data = f"{PROPOSAL_PREFIX}:{offer.id}:{offer.on}"
        specs += [ButtonSpec(f"Approve{suffix}", f"{data}:a", "approve"),
                  ButtonSpec(f"Deny{suffix}", f"{data}:d", "deny")]
    return specs


def decisions_for(question: Question, which: str, verdict: str) -> dict[str, str]:
    """The answer a button means: one call approved (the rest denied), or all of them."""
    if which == "*":
        return {c.id: APPROVE if verdict == "a" else DENY for c in question.calls}
    index = int(which)
    return {c.id: APPROVE if n == index else DENY for n, c in enumerate(question.calls)}


def ours(data: str) -> bool:
    """Whether a button's data is one of these buttons."""
    return data.startswith((f"{QUESTION_PREFIX}:", f"{PROPOSAL_PREFIX}:"))


async def press(app: App, user: User, data: str) -> TurnResult | None:
    """Act on a pressed button for `user` (the caller holds their conversation lock);
    None when the button is not theirs, stale or malformed."""
    if user.status != "active":
        return None
    parts = data.split(":")
    if parts[0] == PROPOSAL_PREFIX and len(parts) == 4 and parts[3] == "d":
        return await app.assistant.deny_proposal(user, parts[1])
    if parts[0] == PROPOSAL_PREFIX and len(parts) == 4 and parts[3] == "a":
        return await app.assistant.approve_proposal(user, parts[1], parts[2])
    if parts[0] == PROPOSAL_PREFIX and len(parts) == 2:  # a button from before offers: ask
        return await app.assistant.approve_proposal(user, parts[1])
    if parts[0] == QUESTION_PREFIX and len(parts) == 4:
        return await _answer(app, user, parts[1], parts[2], parts[3])
    return None


async def _answer(app: App, user: User, key: str, which: str, verdict: str) -> TurnResult | None:
    question = await app.assistant.pending_question(user)
    if question is None or question.key != key or verdict not in ("a", "d"):
        return None
    if which != "*" and not (which.isdigit() and int(which) < len(question.calls)):
        return None
    return await app.assistant.answer(user, key, decisions_for(question, which, verdict))

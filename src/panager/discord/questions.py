"""Approve/Deny buttons in Discord: questions before consequential calls, held proposals.

The buttons carry everything needed to act in their `custom_id` — the question
key and the call's position (`pnq:<key>:<n|*>:<a|d>`), or the proposal id
(`pnp:<id>`) — so a press is handled by whichever process receives it, after a
restart too (no view is registered in memory). A press acts only on the
presser's own thread and proposals: the question is read from *their*
checkpoint and the key must match it, so a button cannot answer for anyone
else. The text of every question is `agent.confirm.question_text`; the buttons
come on top.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import discord

from panager.agent.confirm import APPROVE, DENY, Question
from panager.discord.replies import send_reply

if TYPE_CHECKING:
    import asyncio

    from panager.agent.runner import TurnResult
    from panager.app import App
    from panager.services.users import User

log = logging.getLogger(__name__)

QUESTION_PREFIX, PROPOSAL_PREFIX = "pnq", "pnp"
MAX_CALL_BUTTONS = 10  # "Approve only n" buttons; Discord allows 25 per message
NOT_YOURS = "That button is not for you (or the question is no longer open)."


def question_view(question: Question) -> discord.ui.View:
    """Approve/Deny for one call; "Approve only n", "Approve all" and "Deny all" for more."""
    view = discord.ui.View(timeout=None)
    key = question.key
    approve, deny = discord.ButtonStyle.success, discord.ButtonStyle.danger
    if len(question.calls) == 1:
        view.add_item(discord.ui.Button(label="Approve", style=approve,
                                        custom_id=f"{QUESTION_PREFIX}:{key}:0:a"))
        view.add_item(discord.ui.Button(label="Deny", style=deny,
                                        custom_id=f"{QUESTION_PREFIX}:{key}:*:d"))
        return view
    for n in range(min(len(question.calls), MAX_CALL_BUTTONS)):
        view.add_item(discord.ui.Button(label=f"Approve only {n + 1}",
                                        custom_id=f"{QUESTION_PREFIX}:{key}:{n}:a"))
    view.add_item(discord.ui.Button(label="Approve all", style=approve,
                                    custom_id=f"{QUESTION_PREFIX}:{key}:*:a"))
    view.add_item(discord.ui.Button(label="Deny all", style=deny,
                                    custom_id=f"{QUESTION_PREFIX}:{key}:*:d"))
    return view


def proposal_view(ids: Sequence[str]) -> discord.ui.View | None:
    """One Approve button per held call of a delivered answer (None: no proposals)."""
    if not ids:
        return None
    view = discord.ui.View(timeout=None)
    for n, ident in enumerate(ids[:MAX_CALL_BUTTONS], 1):
        label = "Approve" if len(ids) == 1 else f"Approve {n}"
        view.add_item(discord.ui.Button(label=label, style=discord.ButtonStyle.success,
                                        custom_id=f"{PROPOSAL_PREFIX}:{ident}"))
    return view


def decisions_for(question: Question, which: str, verdict: str) -> dict[str, str]:
    """The answer a button means: one call approved (the rest denied), or all of them."""
    if which == "*":
        return {c.id: APPROVE if verdict == "a" else DENY for c in question.calls}
    index = int(which)
    return {c.id: APPROVE if n == index else DENY for n, c in enumerate(question.calls)}


def custom_id_of(interaction: discord.Interaction) -> str:
    """The pressed component's custom_id ("" for anything else)."""
    data: Any = interaction.data or {}
    return str(data.get("custom_id", ""))


def ours(custom_id: str) -> bool:
    """Whether a component's custom_id is one of these buttons."""
    return custom_id.startswith((f"{QUESTION_PREFIX}:", f"{PROPOSAL_PREFIX}:"))


async def handle_press(app: App, interaction: discord.Interaction, lock: asyncio.Lock) -> None:
    """Answer a pressed button for the person who pressed it (under their conversation lock)."""
    custom_id = custom_id_of(interaction)
    await interaction.response.defer()
    user = await app.deps.users.get(interaction.user.id)
    channel = interaction.channel
    if user is None or user.status != "active" or channel is None:
        await interaction.followup.send(NOT_YOURS, ephemeral=True)
        return
    parts = custom_id.split(":")
    result: TurnResult | None = None
    async with lock:
        if parts[0] == PROPOSAL_PREFIX and len(parts) == 2:
            result = await app.assistant.approve_proposal(user, parts[1])
        elif parts[0] == QUESTION_PREFIX and len(parts) == 4:
            result = await _answer(app, user, parts[1], parts[2], parts[3])
    if result is None:
        await interaction.followup.send(NOT_YOURS, ephemeral=True)
        return
    await _close_buttons(interaction, result)
    assert isinstance(channel, discord.abc.Messageable)
    await send_answer(channel, result)


async def _answer(app: App, user: User, key: str, which: str, verdict: str) -> TurnResult | None:
    question = await app.assistant.pending_question(user)
    if question is None or question.key != key:
        return None
    if which != "*" and not (which.isdigit() and int(which) < len(question.calls)):
        return None
    decisions = decisions_for(question, which, verdict)
    return await app.assistant.answer(user, key, decisions)


async def _close_buttons(interaction: discord.Interaction, result: TurnResult) -> None:
    """The pressed message loses its buttons (the answer is given; a new question, if
    any, comes with its own)."""
    try:
        await interaction.edit_original_response(view=None)
    except discord.HTTPException as exc:
        log.info("could not remove the buttons of a question: %s", exc)


async def send_answer(channel: discord.abc.Messageable, result: TurnResult) -> None:
    """Post a turn's result: the question's buttons when it asks; no link previews when
    the answer was written with outside content."""
    view = question_view(result.question) if result.question is not None else None
    await send_reply(channel, result.text, link=result.link, view=view,
                     suppress_embeds=result.tainted)

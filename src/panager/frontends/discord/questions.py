"""Approve/Deny buttons in Discord (the shared rules: frontends/shared/questions.py).

A button's `custom_id` is the shared button data, so a press is handled by
whichever process receives it, after a restart too (no view is registered in
memory).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import discord

from panager.agent.graph.confirm import Question
from panager.frontends.discord.replies import send_reply
from panager.frontends.shared.questions import (
    NOT_YOURS,
    ButtonSpec,
    ours,
    press,
    proposal_buttons,
    question_buttons,
)

if TYPE_CHECKING:
    import asyncio

    from panager.agent.turns.result import TurnResult
    from panager.app import App
    from panager.services.proposals import Offer

__all__ = ["custom_id_of", "handle_press", "ours", "proposal_view", "question_view"]

log = logging.getLogger(__name__)

STYLES = {
    "approve": discord.ButtonStyle.success,
    "deny": discord.ButtonStyle.danger,
    "plain": discord.ButtonStyle.secondary,
}


def _view(specs: Sequence[ButtonSpec]) -> discord.ui.View | None:
    if not specs:
        return None
    view = discord.ui.View(timeout=None)
    for spec in specs:
        view.add_item(discord.ui.Button(label=spec.label, style=STYLES[spec.style],
                                        custom_id=spec.data))
    return view


def question_view(question: Question) -> discord.ui.View:
    """The question's buttons as a Discord view."""
    view = _view(question_buttons(question))
    assert view is not None
    return view


def proposal_view(offers: Sequence[Offer]) -> discord.ui.View | None:
    """Approve and Deny per held call offered on an answer (None: none offered)."""
    return _view(proposal_buttons(offers))


def custom_id_of(interaction: discord.Interaction) -> str:
    """The pressed component's custom_id ("" for anything else)."""
    data: Any = interaction.data or {}
    return str(data.get("custom_id", ""))


async def handle_press(app: App, interaction: discord.Interaction, lock: asyncio.Lock) -> None:
    """Answer a pressed button for the person who pressed it (under their conversation lock)."""
    await interaction.response.defer()
    person = await app.deps.users.person_id("discord", interaction.user.id)
    user = await app.deps.users.get(person) if person is not None else None
    channel = interaction.channel
    result: TurnResult | None = None
    if user is not None and channel is not None:
        async with lock:
            result = await press(app, user, custom_id_of(interaction))
    if result is None:
        await interaction.followup.send(NOT_YOURS, ephemeral=True)
        return
    try:  # the pressed message loses its buttons (a new question comes with its own)
        await interaction.edit_original_response(view=None)
    except discord.HTTPException as exc:
        log.info("could not remove the buttons of a question: %s", exc)
    assert isinstance(channel, discord.abc.Messageable)
    await send_answer(channel, result)


async def send_answer(channel: discord.abc.Messageable, result: TurnResult) -> None:
    """Post a turn's result: the question's buttons when it asks (or the held calls it
    offers); no link previews when the answer was written with outside content."""
    view = question_view(result.question) if result.question is not None else None
    view = view or proposal_view(result.offers)
    await send_reply(channel, result.text, link=result.link, view=view,
                     suppress_embeds=result.tainted)

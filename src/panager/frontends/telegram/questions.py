"""Approve/Deny buttons in Telegram (the shared rules: frontends/shared/questions.py).

A button's `callback_data` is the shared button data (≤ 64 bytes). A press is
stored and handled in line with the person's messages (frontends/telegram/buttons.py
checks who pressed it); it acts on the presser's own thread only, then the
pressed message loses its keyboard and the answer follows as a new message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

from panager.frontends.shared.questions import (
    NOT_YOURS,
    PROPOSAL_PREFIX,
    QUESTION_PREFIX,
    ButtonSpec,
    press,
    proposal_buttons,
    question_buttons,
)
from panager.frontends.shared.streaming import StreamedReply
from panager.frontends.telegram.buttons import Buttons
from panager.frontends.telegram.host import TelegramHost, row_surface

if TYPE_CHECKING:
    from panager.agent.graph.confirm import Question
    from panager.agent.turns.result import TurnResult
    from panager.services.inbox import InboxMessage
    from panager.services.proposals import Offer
    from panager.services.users import User

log = logging.getLogger(__name__)

MARK = {"approve": "✅ ", "deny": "✖️ ", "plain": ""}


def keyboard(specs: Sequence[ButtonSpec]) -> InlineKeyboardMarkup | None:
    """The buttons, two to a row (None: no buttons)."""
    if not specs:
        return None
    buttons = [
        InlineKeyboardButton(text=MARK[s.style] + s.label,
                             callback_data=Buttons.data(*s.data.split(":", 1)))
        for s in specs
    ]
    return InlineKeyboardMarkup(inline_keyboard=[buttons[i : i + 2]
                                                 for i in range(0, len(buttons), 2)])


def question_keyboard(question: Question) -> InlineKeyboardMarkup | None:
    """The question's buttons as an inline keyboard."""
    return keyboard(question_buttons(question))


def proposal_keyboard(offers: Sequence[Offer]) -> InlineKeyboardMarkup | None:
    """Approve and Deny per held call offered on an answer (None: none offered)."""
    return keyboard(proposal_buttons(offers))


def result_keyboard(result: TurnResult) -> InlineKeyboardMarkup | None:
    """The buttons a turn's answer carries: its question's if it asks, else those of the
    held calls it offers."""
    if result.question is not None:
        return question_keyboard(result.question)
    return proposal_keyboard(result.offers)


async def handle_press(front: TelegramHost, user: User, row: InboxMessage, rest: str
                       ) -> str:
    """A pressed Approve/Deny (its prefix is in the row's data): act, then post the answer."""
    data = str((row.payload or {}).get("data") or "")
    result = await press(front.app, user, data)
    if result is None:
        return NOT_YOURS
    message_id = (row.payload or {}).get("message_id")
    if isinstance(message_id, int):
        try:  # the pressed message loses its buttons (a new question comes with its own)
            await front.bot.edit_message_reply_markup(
                chat_id=row.channel_id, message_id=message_id, reply_markup=None
            )
        except Exception as exc:
            log.info("could not remove the buttons of a question: %s", exc)
    surface = row_surface(front, row, previews=False)
    await StreamedReply(surface).finish(
        result.text, result.link, buttons=result_keyboard(result), previews=not result.tainted
    )
    return ""


def register(buttons: Buttons) -> None:
    """Question and proposal presses go to `handle_press`."""
    buttons.register(QUESTION_PREFIX, handle_press)
    buttons.register(PROPOSAL_PREFIX, handle_press)

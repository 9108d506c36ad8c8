"""Delivering reminders and scheduled answers to Telegram people.

`TelegramMessenger` is added to `app.deps.messenger` (a FanoutMessenger), so
the scheduler and the OAuth replay reach a person on Telegram without knowing
about it. A person's private chat is their Telegram id (identities). It only
needs the Bot API, so it works in any process that has the token.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiogram.exceptions import TelegramAPIError

from panager.frontends.shared.streaming import StreamedReply
from panager.frontends.telegram.questions import proposal_keyboard
from panager.frontends.telegram.surface import TelegramSurface

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aiogram import Bot

    from panager.services.proposals import Offer
    from panager.services.users import User, UserService

log = logging.getLogger(__name__)


class TelegramMessenger:
    """Sends a message to a person's Telegram chat, when they have one."""

    platform = "telegram"

    def __init__(self, bot: Bot, users: UserService) -> None:
        self.bot = bot
        self.users = users

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Deliver `text` (and a link button, or Approve and Deny per held call offered
        on it — from `offers` only); False when the person has no Telegram chat. Never with link
        previews: a proactive answer may have been written from outside content."""
        if user.status == "blocked":
            return False
        chats = [
            pid for platform, pid in await self.users.identities(user.id) if platform == "telegram"
        ]
        if not chats:
            return False
        surface = TelegramSurface(self.bot, chats[0], previews=False)
        try:
            buttons = None if link else proposal_keyboard(offers)
            await StreamedReply(surface).finish(text, link, buttons=buttons)
        except TelegramAPIError as exc:
            log.warning("could not message person %s on Telegram: %s", user.id, exc)
            return False
        return True

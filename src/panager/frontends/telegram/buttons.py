"""Inline-keyboard button presses: checked for who pressed, then handed to their handler.

A button's `callback_data` (at most 64 bytes) is a short id only:
`<prefix>:<id>…`, never data the handler trusts. A press arrives as an update
like any message (stored, exactly once, in line with the person's messages).
Before anything runs, the presser is admitted like a sender and must be the
person of the chat the button is in; otherwise the press is refused with a
short notice and nothing happens. Telegram wants every press answered
(`answerCallbackQuery`), so each one is, also when refused or stale.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from panager.frontends.telegram.host import TelegramHost
    from panager.services.inbox import InboxMessage
    from panager.services.users import User

log = logging.getLogger(__name__)

MAX_CALLBACK_DATA = 64
NOT_YOURS = "This button isn't for you."
STALE = "This button is no longer active."
# (front end, presser, the press's row, the data after the prefix) -> the notice to show
ButtonHandler = Callable[["TelegramHost", "User", "InboxMessage", str], Awaitable[str]]


class Buttons:
    """The handlers of button presses, by the prefix of their callback data."""

    def __init__(self, front: TelegramHost) -> None:
        self.front = front
        self.handlers: dict[str, ButtonHandler] = {}

    def register(self, prefix: str, handler: ButtonHandler) -> None:
        """Presses whose data starts with `<prefix>:` go to `handler`."""
        self.handlers[prefix] = handler

    @staticmethod
    def data(prefix: str, ident: str) -> str:
        """The callback data of a button (raises when it would not fit Telegram's 64 bytes)."""
        data = f"{prefix}:{ident}"
        if len(data.encode()) > MAX_CALLBACK_DATA:
            raise ValueError("callback data over 64 bytes")
        return data

    async def press(self, row: InboxMessage) -> None:
        """Check who pressed, run the handler, answer the press."""
        payload = row.payload or {}
        notice = await self._outcome(row, str(payload.get("data") or ""))
        try:
            await self.front.bot.answer_callback_query(
                str(payload.get("callback_id") or ""), text=notice[:200] or None
            )
        except Exception as exc:  # an expired query: the press was still handled
            log.info("could not answer a button press: %s", exc)

    async def _outcome(self, row: InboxMessage, data: str) -> str:
        access = self.front.app.deps.access
        admission = await access.admit_identity(
            "telegram", row.user_id, row.username, row.display_name
        )
        if not admission.allowed:
            return admission.refusal or NOT_YOURS
        if row.channel_id != row.user_id:  # a private chat's id is its person's id
            return NOT_YOURS
        prefix, _, rest = data.partition(":")
        handler = self.handlers.get(prefix)
        if handler is None:
            return STALE
        return await handler(self.front, admission.user, row, rest)

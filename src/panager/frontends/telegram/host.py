"""What the parts of the Telegram front end use of the whole: the bot, the inbox, notices.

`TelegramFrontEnd` (bot.py) is the one host; chat.py, buttons.py and
questions.py are written against `TelegramHost`, so they sit below bot.py and
a reader following their types does not climb back into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from panager.frontends.telegram.surface import TelegramSurface

if TYPE_CHECKING:
    from aiogram import Bot

    from panager.app import App
    from panager.services.inbox import InboxMessage, InboxService


class TelegramHost(Protocol):
    """The running Telegram front end, as its parts see it."""

    app: App
    bot: Bot
    inbox: InboxService

    async def tell(self, chat_id: int, text: str) -> None:
        """A short plain notice; failures are logged, never raised."""
        ...

    async def download(self, file_id: str, cap: int | None = None) -> bytes | None:
        """A file's bytes; None when it cannot be fetched or is larger than `cap`."""
        ...


def row_surface(host: TelegramHost, row: InboxMessage, *, previews: bool) -> TelegramSurface:
    """The messages of one reply in the chat of a stored update, remembered on its row (so a
    reply resumed after a crash edits what was already posted)."""

    async def remember(posted: list[int]) -> None:
        await host.inbox.remember(row.message_id, {"posted": posted})

    return TelegramSurface(
        host.bot,
        row.channel_id,
        previews=previews,
        posted=(row.payload or {}).get("posted"),
        remember=remember,
    )

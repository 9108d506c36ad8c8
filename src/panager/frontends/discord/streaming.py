"""Discord as a streaming surface (frontends/shared/streaming.py): messages, nonces, link buttons.

Message n of an answer is sent with the nonce `<message id>.<n>`, as
`send_reply` does: a turn run again after a crash gets the message it posted
before back from Discord (not a second one), and it is brought up to date by
an edit — so the person ends with one copy of the answer. The first message
quotes the question when the person has written more since.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from panager.frontends.discord.replies import button_url_ok, link_view, nonce
from panager.frontends.shared.chunking import split_message
from panager.frontends.shared.streaming import StreamedReply

DISCORD_LIMIT = 2000
ReferenceFactory = Callable[[], Awaitable[discord.MessageReference | None]]


class DiscordSurface:
    """One answer's messages in a Discord channel."""

    def __init__(
        self,
        channel: discord.abc.Messageable,
        *,
        nonce_base: int | str | None = None,
        reference: ReferenceFactory | None = None,
    ) -> None:
        self.channel = channel
        self.nonce_base = nonce_base
        self.reference = reference

    def split(self, text: str) -> list[str]:
        """Chunks under Discord's 2,000 characters."""
        return split_message(text, DISCORD_LIMIT)

    def button_ok(self, url: str) -> bool:
        """Discord link buttons take http(s) URLs up to 512 characters."""
        return button_url_ok(url)

    async def send(
        self, i: int, text: str, link: dict | None, *, buttons: Any = None, previews: bool = False
    ) -> discord.Message:
        """Post message `i` (nonce `<base>.<i>`; a copy posted before a crash is reused)."""
        kwargs: dict = _view(link, buttons)
        if not previews:
            kwargs["suppress_embeds"] = True
        if self.nonce_base is not None:
            kwargs["nonce"] = nonce(self.nonce_base, i)
        if i == 0 and self.reference is not None:
            reference = await self.reference()
            if reference is not None:
                kwargs.update(reference=reference, mention_author=False)
        message = await self.channel.send(text, **kwargs)
        if message.content != text:  # posted before a restart (same nonce): bring it up to date
            message = await self.edit(message, i, text, link, buttons=buttons)
        return message

    async def edit(
        self,
        message: discord.Message,
        i: int,
        text: str,
        link: dict | None,
        *,
        buttons: Any = None,
        previews: bool | None = None,
    ) -> discord.Message:
        """Replace message `i`'s text (and set its link button or `buttons`)."""
        kwargs = _view(link, buttons)
        if previews is not None:
            kwargs["suppress"] = not previews
        return await message.edit(content=text, **kwargs) or message

    async def delete(self, message: discord.Message) -> None:
        """Delete a message the answer outgrew."""
        with contextlib.suppress(discord.HTTPException):
            await message.delete()


def _view(link: dict | None, buttons: Any = None) -> dict:
    view = buttons or link_view(link)
    return {"view": view} if view is not None else {}


def streamed_reply(
    channel: discord.abc.Messageable,
    *,
    nonce_base: int | str | None = None,
    reference: ReferenceFactory | None = None,
    interval: float = 1.0,
    first_after: float = 1.0,
) -> StreamedReply[discord.Message]:
    """A StreamedReply posting into a Discord channel."""
    surface = DiscordSurface(channel, nonce_base=nonce_base, reference=reference)
    return StreamedReply(surface, interval=interval, first_after=first_after)

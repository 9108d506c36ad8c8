"""Discord as a conversation of the shared answerer (adapters/answering.py).

`DiscordChat` is one stored DM's channel: replies in chunks with the link
button last and nonces derived from the message id, the typing indicator, the
tool-status message and the streamed answer. `DiscordAnswerer` adds what only
Discord has: slash commands picked in Discord's command UI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord

from panager.adapters.answering import ATTACHMENT_NOTE, OPEN_COMMANDS, Answerer, Incoming
from panager.discord.replies import nonce, send_followup, send_reply
from panager.discord.status import StatusMessage, typing
from panager.discord.streaming import streamed_reply

if TYPE_CHECKING:
    import asyncio
    from contextlib import AbstractAsyncContextManager

    from panager.adapters.streaming import StreamedReply
    from panager.agent.runner import TurnResult
    from panager.app import App
    from panager.services.inbox import InboxMessage, InboxService
    from panager.services.users import User

__all__ = ["ATTACHMENT_NOTE", "DiscordAnswerer", "DiscordChat", "incoming"]


def incoming(row: InboxMessage) -> Incoming:
    """A stored Discord DM as the shared answerer sees it."""
    return Incoming.from_row("discord", row)


class DiscordChat:
    """The DM channel of one stored message."""

    def __init__(
        self,
        channel: discord.PartialMessageable,
        row: InboxMessage,
        inbox: InboxService,
        status_interval: float,
    ) -> None:
        self.channel = channel
        self.row = row
        self.inbox = inbox
        self.status_interval = status_interval

    async def reply(self, text: str, link: dict | None = None) -> None:
        """Post the reply in chunks (nonces `<message id>.<n>`)."""
        await send_reply(self.channel, text, link=link, nonce_base=self.row.message_id)

    async def attachments(self, user: User) -> None:
        """Discord files are not read yet: say so."""
        await self.channel.send(ATTACHMENT_NOTE, nonce=nonce(self.row.message_id, "a"))

    def typing(self) -> AbstractAsyncContextManager[None]:
        """Discord's typing indicator."""
        return typing(self.channel)

    def progress(self) -> StatusMessage:
        """The tool-status message."""
        return StatusMessage(
            self.channel, interval=self.status_interval, nonce=nonce(self.row.message_id, "s")
        )

    def stream(self, interval: float, first_after: float) -> StreamedReply[discord.Message]:
        """The answer's messages, quoting the question when the person wrote more since."""
        return streamed_reply(
            self.channel,
            nonce_base=self.row.message_id,
            reference=self._reference,
            interval=interval,
            first_after=first_after,
        )

    async def finish(self, reply: StreamedReply[discord.Message], result: TurnResult) -> None:
        """The final text with the link button last."""
        await reply.finish(result.text, result.link)

    async def _reference(self) -> discord.MessageReference | None:
        if not await self.inbox.queued_count(self.row.user_id):
            return None
        return discord.MessageReference(
            message_id=self.row.message_id, channel_id=self.row.channel_id, fail_if_not_exists=False
        )


class DiscordAnswerer(Answerer):
    """The shared answerer plus Discord's command picker."""

    def __init__(self, app: App, inbox: InboxService, *, status_interval: float = 1.0) -> None:
        super().__init__(app, "discord")
        self.inbox = inbox
        self.status_interval = status_interval

    async def answer_row(self, row: InboxMessage, channel: discord.PartialMessageable) -> None:
        """Answer one stored DM in its channel."""
        chat = DiscordChat(channel, row, self.inbox, self.status_interval)
        await self.answer(incoming(row), chat)

    async def interaction(
        self, interaction: discord.Interaction, name: str, args: str, lock: asyncio.Lock
    ) -> None:
        """Answer a deferred slash command from the command picker (under the user's lock)."""
        person = interaction.user
        admission = await self.access.admit(person.id, person.name, person.global_name)
        open_command = name in OPEN_COMMANDS and admission.user.status != "blocked"
        if not admission.allowed and not open_command:
            await send_followup(interaction, admission.refusal or "")
            return
        async with lock:
            reply = await self.run_command(
                admission.user, f"/{name} {args}".strip(), ("discord", person.id)
            )
        await send_followup(interaction, reply.text, link=reply.link)

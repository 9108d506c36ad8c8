"""Discord as a conversation of the shared answerer (frontends/shared/answering.py).

`DiscordChat` is one stored DM's channel: replies in chunks with the link
button last and nonces derived from the message id, the typing indicator, the
tool-status message, the streamed answer (Approve/Deny buttons on a question,
no link previews when the answer was written from outside content) and the
DM's files fetched from Discord's CDN (frontends/discord/attachments.py).
`DiscordAnswerer` adds what only Discord has: slash commands picked in
Discord's command UI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord

from panager.frontends.discord.attachments import DiscordAttachments
from panager.frontends.discord.questions import proposal_view, question_view
from panager.frontends.discord.replies import nonce, send_followup, send_reply
from panager.frontends.discord.status import StatusMessage, typing
from panager.frontends.discord.streaming import streamed_reply
from panager.frontends.shared.answering import ATTACHMENT_NOTE, OPEN_COMMANDS, Answerer, Incoming

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence
    from contextlib import AbstractAsyncContextManager

    from panager.agent.turns.result import TurnResult
    from panager.app import App
    from panager.frontends.shared.streaming import StreamedReply
    from panager.services.inbox import InboxMessage, InboxService
    from panager.services.media.intake import Attachment
    from panager.services.proposals import Offer
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
        app: App,
    ) -> None:
        self.channel = channel
        self.row = row
        self.inbox = inbox
        self.status_interval = status_interval
        self.app = app

    async def reply(
        self, text: str, link: dict | None = None, offers: Sequence[Offer] = ()
    ) -> None:
        """Post the reply in chunks (nonces `<message id>.<n>`), with the Approve/Deny
        buttons of the held calls it offers."""
        view = None if link else proposal_view(offers)
        await send_reply(self.channel, text, link=link, nonce_base=self.row.message_id,
                         view=view)

    async def attachments(self, user: User) -> Sequence[Attachment]:
        """Stickers get a note; files are downloaded from Discord's CDN and taken in."""
        if self.row.attachments:  # stickers
            await self.channel.send(ATTACHMENT_NOTE, nonce=nonce(self.row.message_id, "a"))
        media = self.app.deps.media
        if not self.row.attachment_refs or media is None:
            return []
        hosts = self.app.settings.runtime.discord_cdn_hosts
        return await DiscordAttachments(media, hosts).take_all(user.id, self.row.attachment_refs)

    async def note(self, text: str) -> None:
        """A line before the answer (nonces `<message id>n.<n>`)."""
        await send_reply(self.channel, text, nonce_base=f"{self.row.message_id}n")

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
        """The final text with the link button (or the question's buttons) last; link
        previews only in an answer not written from outside content."""
        view = question_view(result.question) if result.question is not None else None
        await reply.finish(result.text, result.link, buttons=view, previews=not result.tainted)

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
        chat = DiscordChat(channel, row, self.inbox, self.status_interval, self.app)
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
        await send_followup(interaction, reply.text, link=reply.link,
                            view=proposal_view(reply.offers))

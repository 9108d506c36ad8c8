"""Answering one DM or one slash command: access check, then a command or a turn.

The bot (`discord/bot.py`) decides *when* a message is handled — once, in order,
one at a time per user; `Answerer` decides *how*: it authorises the author
before anything else (a refused person gets a short reply and the model is
never called), runs slash commands from the shared table, and runs everything
else as a turn with a typing indicator and a tool-status message, the answer
streamed into messages as it is written (discord/streaming.py), in chunks with
the link button last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord

from panager.agent.commands import CommandContext, CommandReply, dispatch, is_command, parse
from panager.discord.attachments import DiscordAttachments
from panager.discord.questions import question_view
from panager.discord.replies import nonce, send_followup, send_reply
from panager.discord.status import StatusMessage, typing
from panager.discord.streaming import StreamedReply

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence

    from panager.app import App
    from panager.services.access import AccessService
    from panager.services.inbox import InboxMessage, InboxService
    from panager.services.media.intake import Attachment
    from panager.services.users import User

ATTACHMENT_NOTE = "I can't read stickers — please say in words what you mean."


class Answerer:
    """Answers stored DMs and picked slash commands for their authors."""

    def __init__(
        self,
        app: App,
        access: AccessService,
        inbox: InboxService,
        *,
        status_interval: float = 1.0,
    ) -> None:
        self.app = app
        self.access = access
        self.inbox = inbox
        self.status_interval = status_interval
        self.edit_interval = 1.0  # seconds between edits of a streamed answer's message
        self.first_post_after = 1.0  # an answer done sooner is sent once, without edits

    async def answer(self, row: InboxMessage, channel: discord.PartialMessageable) -> None:
        """Answer one stored DM in its channel."""
        admission = await self.access.admit(row.user_id, row.username, row.display_name)
        text = row.content.strip()
        if not admission.allowed:
            if command_name(text) == "start":
                await self._command(admission.user, text, channel, row)
            else:
                await send_reply(channel, admission.refusal or "", nonce_base=row.message_id)
            return
        if row.attachments:
            await channel.send(ATTACHMENT_NOTE, nonce=nonce(row.message_id, "a"))
        if is_command(text):
            await self._command(admission.user, text, channel, row)
            return
        attachments = await self._attachments(admission.user, row)
        notes = self.app.assistant.attachment_notes(admission.user, attachments)
        if notes:  # what was heard, what could not be used: before the answer
            await send_reply(channel, "\n".join(notes), nonce_base=f"{row.message_id}n")
        if text or any(a.kind != "rejected" for a in attachments):
            await self._turn(admission.user, text, channel, row, attachments)

    async def _attachments(self, user: User, row: InboxMessage) -> list[Attachment]:
        """The DM's attachments downloaded from Discord's CDN and taken in."""
        media = self.app.deps.media
        if not row.attachment_refs or media is None:
            return []
        hosts = self.app.settings.runtime.discord_cdn_hosts
        return await DiscordAttachments(media, hosts).take_all(user.id, row.attachment_refs)

    async def interaction(
        self, interaction: discord.Interaction, name: str, args: str, lock: asyncio.Lock
    ) -> None:
        """Answer a deferred slash command from the command picker (under the user's lock)."""
        person = interaction.user
        admission = await self.access.admit(person.id, person.name, person.global_name)
        if not admission.allowed and name != "start":
            await send_followup(interaction, admission.refusal or "")
            return
        async with lock:
            reply = await self.run_command(admission.user, f"/{name} {args}".strip())
        await send_followup(interaction, reply.text, link=reply.link)

    async def run_command(self, user: User, text: str) -> CommandReply:
        """Run a shared slash command for a Discord user."""
        ctx = CommandContext(user=user, assistant=self.app.assistant, front_end="discord")
        return await dispatch(ctx, text)

    async def _command(
        self, user: User, text: str, channel: discord.PartialMessageable, row: InboxMessage
    ) -> None:
        reply = await self.run_command(user, text)
        await send_reply(channel, reply.text, link=reply.link, nonce_base=row.message_id)

    async def _turn(
        self,
        user: User,
        text: str,
        channel: discord.PartialMessageable,
        row: InboxMessage,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        emitter = self.app.emitter.child()
        status = StatusMessage(
            channel, interval=self.status_interval, nonce=nonce(row.message_id, "s")
        )
        emitter.subscribe(status.on_event)
        reply = StreamedReply(
            channel,
            nonce_base=row.message_id,
            reference=lambda: self._reference(row),
            interval=self.edit_interval,
            first_after=self.first_post_after,
        )
        emitter.subscribe(reply.on_event)
        try:
            async with typing(channel):
                result = await self.app.assistant.run_turn(
                    user,
                    text,
                    emitter=emitter,
                    message_key=f"discord-{row.message_id}",
                    resume=row.attempts > 0,
                    attachments=attachments,
                )
            view = question_view(result.question) if result.question is not None else None
            await reply.finish(
                result.text, result.link, view=view, suppress_embeds=result.tainted
            )
        finally:
            await reply.close()
            await status.close()

    async def _reference(self, row: InboxMessage) -> discord.MessageReference | None:
        """Quote the question when the user has written more since: answers stay matched."""
        if not await self.inbox.queued_count(row.user_id):
            return None
        return discord.MessageReference(
            message_id=row.message_id, channel_id=row.channel_id, fail_if_not_exists=False
        )


def command_name(text: str) -> str | None:
    """'start' for '/start CODE'; None when the text is not a command."""
    parsed = parse(text) if is_command(text) else None
    return parsed[0] if parsed else None

"""Answering stored Discord DMs with any discord.py client: the bot, or REST only.

`DiscordInbox` owns the inbox, its queue and the per-person conversation locks;
its handler answers one stored DM through `DiscordAnswerer` in the DM channel,
which works the same over a client logged in without a gateway (`panager run
--components answers`: frontends/shared/workers.py) as inside the bot that
received the message.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

import discord

from panager.frontends.discord.answers import DiscordAnswerer
from panager.frontends.discord.replies import nonce
from panager.frontends.shared.intake import ERROR_MESSAGE, abandoned_notice, open_inbox

if TYPE_CHECKING:
    from panager.app import App
    from panager.services.inbox import InboxMessage

log = logging.getLogger(__name__)


class DiscordInbox:
    """Discord's stored DMs, answered oldest first per person through `client`."""

    def __init__(
        self,
        app: App,
        client: discord.Client,
        *,
        status_interval: float = 1.0,
        poll_interval: float = 1.0,
        shutdown_grace: float = 20.0,
    ) -> None:
        self.client = client
        self.inbox, self.queue = open_inbox(
            app,
            "discord_inbox",
            self.answer,
            self.notify_abandoned,
            poll_interval=poll_interval,
            shutdown_grace=shutdown_grace,
        )
        self.answerer = DiscordAnswerer(app, self.inbox, status_interval=status_interval)
        self.conversations: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    def channel(self, channel_id: int) -> discord.PartialMessageable:
        """A DM channel by id (no gateway cache needed)."""
        return self.client.get_partial_messageable(channel_id, type=discord.ChannelType.private)

    async def answer(self, row: InboxMessage) -> str:
        """The queue's handler: answer one stored DM; a failure gets the user one line."""
        channel = self.channel(row.channel_id)
        try:
            async with self.conversations[row.user_id]:
                await self.answerer.answer_row(row, channel)
        except Exception:
            log.exception("failed to handle message %s", row.message_id)
            await send_quietly(channel, ERROR_MESSAGE, nonce(row.message_id, "e"))
            return "failed"
        return "done"

    async def notify_abandoned(self, row: InboxMessage) -> None:
        """Tell the person a message that kept failing was given up on."""
        channel = self.channel(row.channel_id)
        await send_quietly(channel, abandoned_notice(row), nonce(row.message_id, "r"))


async def send_quietly(channel: discord.abc.Messageable, text: str, nonce_: str) -> None:
    """A notice; a failure to send it is logged, never raised."""
    try:
        await channel.send(text, nonce=nonce_)
    except Exception as exc:
        log.warning("could not send a notice: %s", exc)

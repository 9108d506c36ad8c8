"""The Discord front end: a discord.py client that answers DMs.

Flow of one DM:

1. `on_message` ignores server messages, bots and system messages, and stores
   the DM in the inbox keyed by its message id (a replayed MESSAGE_CREATE is
   dropped here: exactly once). When the database does not answer, the user is
   told at once and storing is retried until it is back (or given up on, with
   a note to resend).
   A sender's DMs are stored one after the other, in the gateway's order.
   With `receiver_answers: false` this process stops here: `panager run
   --components answers` processes answer the stored rows over REST
   (frontends/discord/worker.py, frontends/shared/workers.py).
2. `InboxQueue` (services/inbox_queue.py, transport-independent) runs a drain
   task per user that takes the user's messages oldest first, one at a time
   (`InboxService.claim_next`), so messages sent during a turn wait their turn
   instead of being dropped or answered out of order; it keeps the claim's
   lease, resumes queued messages after a restart and prunes old rows.
3. `Answerer` (frontends/discord/answers.py) authorises the author before anything else
   (a refused user gets a short reply and the model is never called), then
   runs a slash command or a turn: typing indicator, a tool-status message
   driven by the turn's events, the answer in chunks with a link button.

Discord does not send a bot the messages that arrived while no process was
connected (a restart, a crash): on READY the bot reads the DM history of
everyone who wrote in the last week after the newest message it has seen,
and stores what it missed like any new message.

A message whose process died mid-way is queued again on the next start (the
inbox lease runs out) and answered then; the turn is keyed by the message id,
so an answer produced before the crash is sent, not produced twice, and reply
nonces make Discord drop chunks that already went out.

Application commands (the Discord command picker) run the same commands in
line with the user's messages. Whatever fails inside a handler is logged, the
user gets one short message, and the client keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import discord

from panager.frontends.discord import questions
from panager.frontends.discord.answers import ATTACHMENT_NOTE
from panager.frontends.discord.attachments import describe
from panager.frontends.discord.messenger import DiscordMessenger
from panager.frontends.discord.replies import nonce
from panager.frontends.discord.slash import build_tree, sync_if_changed
from panager.frontends.discord.worker import DiscordInbox, send_quietly
from panager.frontends.shared.intake import ERROR_MESSAGE, STORE_DELAYED, store_patiently
from panager.frontends.shared.workers import answering
from panager.services.inbox import InboxMessage, worker_name

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

__all__ = ["ATTACHMENT_NOTE", "ERROR_MESSAGE", "STORE_DELAYED", "PanagerBot", "worker_name"]

BACKFILL_LIMIT = 20  # missed DMs read back per person on READY
DM_ONLY = "I only work in direct messages — send me a DM."
HANDLED_TYPES = (discord.MessageType.default, discord.MessageType.reply)


def patch_discord_py() -> None:
    """discord.py work-arounds, applied once before any client starts (idempotent).

    - Panager never joins voice channels: discord.py's warnings about missing voice
      libraries (PyNaCl, davey) would only confuse operators, so they are off.
    - discord.py parses gateway JSON with orjson when it is installed, and orjson
      rejects lone UTF-16 surrogate escapes ("\\ud800"), which a hostile message can
      carry; in the gateway that exception takes the whole client down (and the event
      is replayed on RESUME, so it never recovers). Falling back to the stdlib parser,
      which accepts them, keeps the client up; the inbox then cleans the text.
    """
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False
    strict = discord.utils._from_json
    if getattr(strict, "panager_lenient", False):
        return

    def lenient_json(text: str | bytes) -> Any:
        try:
            return strict(text)
        except ValueError:
            return json.loads(text)

    lenient_json.panager_lenient = True  # type: ignore[attr-defined]  # marker on a function
    discord.utils._from_json = lenient_json  # type: ignore[assignment]  # private; typed as orjson.loads


def default_intents() -> discord.Intents:
    """DMs and their content; no server messages, members or presences."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


class PanagerBot(discord.Client):
    """Panager's Discord client; build with the running App and `await bot.start(token)`."""

    def __init__(
        self,
        app: App,
        *,
        status_interval: float = 1.0,
        poll_interval: float = 1.0,
        shutdown_grace: float = 20.0,
        **client_options: Any,
    ) -> None:
        patch_discord_py()
        client_options.setdefault("intents", default_intents())
        # Nothing Panager posts pings anyone: a mention inside a relayed text or a question's
        # values (`@everyone`, `<@id>`) stays text (sent with allowed_mentions parse: []).
        client_options.setdefault("allowed_mentions", discord.AllowedMentions.none())
        super().__init__(**client_options)
        self.app = app
        self.access = app.deps.access
        self.answers = DiscordInbox(
            app,
            self,
            status_interval=status_interval,
            poll_interval=poll_interval,
            shutdown_grace=shutdown_grace,
        )
        self.inbox, self.queue = self.answers.inbox, self.answers.queue
        self.answerer = self.answers.answerer
        # False (`receiver_answers: false`): this process only stores DMs; `panager run
        # --components answers` processes answer them (frontends/shared/workers.py).
        self.answering = app.settings.runtime.receiver_answers
        self.tree = build_tree(self, self.handle_interaction)
        self.messenger = DiscordMessenger(self, app.deps.users)
        self._conversations = self.answers.conversations
        self._intake: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._readied = False

    # ------------------------------------------------------------------ lifecycle

    async def setup_hook(self) -> None:
        """Logged in: reminders and scheduled answers can now go out as DMs."""
        self.app.deps.messenger.add(self.messenger)

    async def on_ready(self) -> None:
        """First READY: sync commands, pick up messages left over, start pruning."""
        if self._readied:
            return
        self._readied = True
        log.info("connected to Discord as %s", self.user)
        self.queue.spawn(self._after_ready())

    async def _after_ready(self) -> None:
        if self.answering:  # presence before any claim: others must see this process alive
            await answering(self.app, self.inbox, self.queue)
        try:
            await sync_if_changed(self.tree)
        except Exception:
            log.exception("could not register slash commands with Discord")
        try:
            await self.backfill()
        except Exception:
            log.exception("could not read back the DMs missed while disconnected")

    async def backfill(self) -> int:
        """Store DMs that arrived while no process was connected; returns how many."""
        taken = 0
        for user_id, channel_id, last_id in await self.inbox.recent_channels():
            channel = self.get_partial_messageable(channel_id, type=discord.ChannelType.private)
            after = discord.Object(id=last_id)
            try:
                async for message in channel.history(after=after, limit=BACKFILL_LIMIT):
                    mine = message.author.id == user_id and message.type in HANDLED_TYPES
                    if mine and not self.queue.stopping and await self._store(message):
                        taken += 1
                        self._kick(user_id)
            except discord.HTTPException as exc:
                log.warning("could not read the DMs of user %s: %s", user_id, exc)
        if taken:
            log.info("answering %d DM(s) sent while the bot was away", taken)
        return taken

    async def close(self) -> None:
        """Let running turns finish (up to shutdown_grace), then disconnect."""
        if not self.queue.stopping:
            await self.queue.close()
            with contextlib.suppress(ValueError):
                self.app.deps.messenger.messengers.remove(self.messenger)
        await super().close()

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        """Log and carry on: a failing handler never takes the client down."""
        log.exception("unhandled error in %s", event_method)

    # ------------------------------------------------------------------- intake

    async def on_message(self, message: discord.Message) -> None:
        """Store a DM (once per message id) and wake its user's queue."""
        if message.author.bot or message.guild is not None:
            return
        if not isinstance(message.channel, discord.DMChannel):
            return
        if message.type not in HANDLED_TYPES:
            return
        # discord.py handles each event in its own task: a sender's DMs are stored one after
        # the other, in the gateway's order, so a claim never sees a later one stored first.
        async with self._intake[message.author.id]:
            stored = await self._store(message)
        if stored:
            self._kick(message.author.id)

    def _kick(self, user_id: int) -> None:
        """Answer the user's new message here, unless answer workers do it (the NOTIFY of
        the stored row wakes them)."""
        if self.answering:
            self.queue.kick(user_id)

    async def _store(self, message: discord.Message) -> bool:
        """Put the DM in the inbox, riding out a database outage; False if not stored."""
        accept = functools.partial(
            self.inbox.accept,
            message_id=message.id,
            user_id=message.author.id,
            channel_id=message.channel.id,
            username=message.author.name,
            display_name=message.author.global_name,
            content=message.content,
            attachments=bool(message.stickers),
            attachment_refs=describe(message),
        )

        async def tell(text: str, suffix: str) -> None:
            await self._tell(message, text, suffix)

        return await store_patiently(accept, tell, lambda: self.queue.stopping, message.id)

    async def _tell(self, message: discord.Message, text: str, suffix: str) -> bool:
        """A short notice about the user's message (sent quietly); returns True (told)."""
        await self._send_quietly(message.channel, text, nonce(message.id, suffix))
        return True

    # --------------------------------------------------------------- answering

    async def _answer(self, row: InboxMessage) -> str:
        """The queue's handler (frontends/discord/worker.py)."""
        return await self.answers.answer(row)

    # ------------------------------------------------------------ app commands

    async def handle_interaction(
        self, interaction: discord.Interaction, name: str, args: str
    ) -> None:
        """Run a slash command picked in Discord's command UI, in line with the user's turns."""
        if interaction.guild is not None:
            await interaction.response.send_message(DM_ONLY, ephemeral=True)
            return
        try:
            await interaction.response.defer(thinking=True)
        except discord.HTTPException as exc:  # already answered (a replayed interaction)
            log.info("interaction %s not deferred: %s", interaction.id, exc)
            return
        try:
            lock = self._conversations[interaction.user.id]
            await self.answerer.interaction(interaction, name, args, lock)
        except Exception:
            log.exception("slash command /%s failed", name)
            with contextlib.suppress(discord.HTTPException):
                await interaction.followup.send(ERROR_MESSAGE)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A pressed Approve/Deny button (any process, after a restart too)."""
        if interaction.type != discord.InteractionType.component:
            return
        if not questions.ours(questions.custom_id_of(interaction)):
            return
        try:
            lock = self._conversations[interaction.user.id]
            await questions.handle_press(self.app, interaction, lock)
        except Exception:
            log.exception("a button press failed")
            with contextlib.suppress(discord.HTTPException):
                await interaction.followup.send(ERROR_MESSAGE)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    async def _send_quietly(channel: discord.abc.Messageable, text: str, nonce_: str) -> None:
        await send_quietly(channel, text, nonce_)

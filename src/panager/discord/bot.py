"""The Discord front end: a discord.py client that answers DMs.

Flow of one DM:

1. `on_message` ignores server messages, bots and system messages, and stores
   the DM in the inbox keyed by its message id (a replayed MESSAGE_CREATE is
   dropped here: exactly once). When the database does not answer, the user is
   told at once and storing is retried until it is back (or given up on, with
   a note to resend).
2. A drain task per user takes the user's messages oldest first, one at a
   time (`InboxService.claim_next`), so messages sent during a turn wait their
   turn instead of being dropped or answered out of order.
3. `Answerer` (discord/answers.py) authorises the author before anything else
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
import itertools
import json
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import discord
import psycopg

from panager.discord.answers import ATTACHMENT_NOTE, Answerer
from panager.discord.messenger import DiscordMessenger
from panager.discord.presence import reclaim_loop, start_presence
from panager.discord.replies import nonce
from panager.discord.slash import build_tree, sync_if_changed
from panager.services.access import access_service
from panager.services.inbox import InboxMessage, InboxService

if TYPE_CHECKING:
    from panager.app import App

log = logging.getLogger(__name__)

__all__ = ["ATTACHMENT_NOTE", "ERROR_MESSAGE", "PanagerBot"]

ERROR_MESSAGE = "Sorry, something went wrong on my side with that message. Please try again."
NOT_STORED = "Sorry, I couldn't take that message just now (database unavailable). Please resend."
STORE_DELAYED = (
    "I can't reach my database right now, so your message is waiting with me; "
    "I'll answer as soon as it's back."
)
STORE_NOTICE_AFTER = 3.0  # seconds of waiting for the database before the user is told
STORE_PATIENCE = 120.0  # then keep trying this long before asking for a resend
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0)  # backoff between database retries (then the last)
BACKFILL_LIMIT = 20  # missed DMs read back per person on READY
DM_ONLY = "I only work in direct messages — send me a DM."
ABANDONED = (
    "Sorry — I was restarted while working on your message “{snippet}”. "
    "Please send it again if you still need an answer."
)
PRUNE_EVERY = 6 * 3600
HANDLED_TYPES = (discord.MessageType.default, discord.MessageType.reply)


# Panager never joins voice channels: skip discord.py's warnings about voice libraries.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False


def _lenient_json(text: str | bytes) -> Any:
    """discord.py's JSON parser (orjson when installed), falling back to the stdlib's.

    orjson rejects lone UTF-16 surrogate escapes ("\\ud800"), which a hostile message can
    carry; in the gateway that exception would take the whole client down (and the event
    is replayed on RESUME). The stdlib parser accepts them; the inbox then cleans them."""
    try:
        return _strict_json(text)
    except ValueError:
        return json.loads(text)


_strict_json = discord.utils._from_json
discord.utils._from_json = _lenient_json


def default_intents() -> discord.Intents:
    """DMs and their content; no server messages, members or presences."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


def worker_name() -> str:
    """Names this process in inbox claims (host:pid:random)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


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
        client_options.setdefault("intents", default_intents())
        super().__init__(**client_options)
        self.app = app
        self.access = access_service(app.deps)
        lease = timedelta(seconds=app.settings.runtime.inbox_lease_seconds)
        self.inbox = InboxService(app.pool, app.clock, worker_name(), lease=lease)
        self.answerer = Answerer(app, self.access, self.inbox, status_interval=status_interval)
        self.tree = build_tree(self, self.handle_interaction)
        self.messenger = DiscordMessenger(self)
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        self._drains: dict[int, asyncio.Task] = {}
        self._dirty: set[int] = set()
        self._conversations: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._background: set[asyncio.Task] = set()
        self._readied = False
        self._stopping = False

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
        self._spawn(self._after_ready())

    async def _after_ready(self) -> None:
        presence = await start_presence(self)  # before any claim: others must see us alive
        if presence is not None:
            self._spawn(reclaim_loop(self, presence))
        try:
            await sync_if_changed(self.tree)
        except Exception:
            log.exception("could not register slash commands with Discord")
        for attempt in itertools.count():  # the database may be down right now: keep at it
            try:
                await self.recover()
                break
            except Exception as exc:
                log.warning("could not resume queued messages yet: %s", exc)
            await asyncio.sleep(RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)])
        try:
            await self.backfill()
        except Exception:
            log.exception("could not read back the DMs missed while disconnected")
        self._spawn(self._prune_loop())

    async def recover(self) -> None:
        """Queue again the messages a dead process left half-done; resume all queued ones."""
        for stale in await self.inbox.recover_stale():
            await self._notify_abandoned(stale)
        for user_id in await self.inbox.queued_users():
            self._kick(user_id)

    async def backfill(self) -> int:
        """Store DMs that arrived while no process was connected; returns how many."""
        taken = 0
        for user_id, channel_id, last_id in await self.inbox.recent_channels():
            channel = self.get_partial_messageable(channel_id, type=discord.ChannelType.private)
            after = discord.Object(id=last_id)
            try:
                async for message in channel.history(after=after, limit=BACKFILL_LIMIT):
                    mine = message.author.id == user_id and message.type in HANDLED_TYPES
                    if mine and not self._stopping and await self._store(message):
                        taken += 1
                        self._kick(user_id)
            except discord.HTTPException as exc:
                log.warning("could not read the DMs of user %s: %s", user_id, exc)
        if taken:
            log.info("answering %d DM(s) sent while the bot was away", taken)
        return taken

    async def close(self) -> None:
        """Let running turns finish (up to shutdown_grace), then disconnect."""
        if not self._stopping:
            self._stopping = True
            await self._finish_drains()
            for task in list(self._background):
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            with contextlib.suppress(ValueError):
                self.app.deps.messenger.messengers.remove(self.messenger)
        await super().close()

    async def _finish_drains(self) -> None:
        running = [t for t in self._drains.values() if not t.done()]
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=self.shutdown_grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

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
        fresh = await self._store(message)
        if fresh and not self._stopping:
            self._kick(message.author.id)

    async def _store(self, message: discord.Message) -> bool:
        """Put the DM in the inbox, riding out a database outage; False if not stored."""
        accept = {
            "message_id": message.id,
            "user_id": message.author.id,
            "channel_id": message.channel.id,
            "username": message.author.name,
            "display_name": message.author.global_name,
            "content": message.content,
            "attachments": bool(message.attachments or message.stickers),
        }
        loop = asyncio.get_running_loop()
        deadline, told, attempt = loop.time() + STORE_PATIENCE, False, 0
        while True:
            task = asyncio.ensure_future(self.inbox.accept(**accept))
            try:
                if not told and not (await asyncio.wait({task}, timeout=STORE_NOTICE_AFTER))[0]:
                    told = await self._tell(message, STORE_DELAYED, "w")
                return await task
            except (TimeoutError, psycopg.OperationalError) as exc:
                log.warning("could not store message %s yet: %s", message.id, exc)
            except Exception:
                log.exception("could not store message %s", message.id)
                await self._tell(message, ERROR_MESSAGE, "x")
                return False
            finally:
                task.cancel()
            if loop.time() >= deadline or self._stopping:
                await self._tell(message, NOT_STORED, "x")
                return False
            told = told or await self._tell(message, STORE_DELAYED, "w")
            await asyncio.sleep(RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)])
            attempt += 1

    async def _tell(self, message: discord.Message, text: str, suffix: str) -> bool:
        """A short notice about the user's message (sent quietly); returns True (told)."""
        await self._send_quietly(message.channel, text, nonce(message.id, suffix))
        return True

    def _kick(self, user_id: int) -> None:
        self._dirty.add(user_id)
        task = self._drains.get(user_id)
        if task is None or task.done():
            self._drains[user_id] = self._spawn(self._drain(user_id))

    async def _drain(self, user_id: int) -> None:
        """Handle the user's queued messages oldest first until none are left."""
        while user_id in self._dirty and not self._stopping:
            self._dirty.discard(user_id)
            try:
                await self._drain_once(user_id)
            except Exception:
                log.exception("inbox of user %s failed; retrying", user_id)
                self._dirty.add(user_id)
                await asyncio.sleep(self.poll_interval)

    async def _drain_once(self, user_id: int) -> None:
        for stale in await self.inbox.recover_stale(user_id):
            await self._notify_abandoned(stale)
        while not self._stopping and (row := await self.inbox.claim_next(user_id)):
            await self._process(row)
        if not self._stopping and await self.inbox.queued_count(user_id):
            # Another process is answering this user's previous message: wait for it.
            self._dirty.add(user_id)
            await asyncio.sleep(self.poll_interval)

    # --------------------------------------------------------------- processing

    async def _process(self, row: InboxMessage) -> None:
        channel = self.get_partial_messageable(row.channel_id, type=discord.ChannelType.private)
        lease = self._spawn(self._keep_lease(row.message_id))
        status = "done"
        try:
            async with self._conversations[row.user_id]:
                await self.answerer.answer(row, channel)
        except asyncio.CancelledError:
            await self.inbox.expire(row.message_id)
            raise
        except Exception:
            log.exception("failed to handle message %s", row.message_id)
            status = "failed"
            await self._send_quietly(channel, ERROR_MESSAGE, nonce(row.message_id, "e"))
        finally:
            lease.cancel()
        await self._finish(row.message_id, status)

    async def _finish(self, message_id: int, status: str) -> None:
        """Record the message as handled, retrying while the database is away.

        Left unrecorded, the row would be taken for a crash and handled again."""
        for attempt in itertools.count():
            try:
                await self.inbox.finish(message_id, status)
                return
            except Exception as exc:
                if self._stopping:
                    raise
                log.warning("could not record message %s as %s yet: %s", message_id, status, exc)
            await asyncio.sleep(RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)])

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

    # ------------------------------------------------------------------ helpers

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    async def _keep_lease(self, message_id: int) -> None:
        period = self.inbox.lease.total_seconds() / 3
        while True:
            await asyncio.sleep(period)
            try:
                await self.inbox.renew(message_id)
            except Exception:
                log.exception("could not renew the claim on message %s", message_id)

    async def _prune_loop(self) -> None:
        while True:
            try:
                pruned = await self.inbox.prune()
                log.debug("pruned %d inbox rows", pruned)
            except Exception:
                log.exception("inbox pruning failed")
            await asyncio.sleep(PRUNE_EVERY)

    async def _notify_abandoned(self, row: InboxMessage) -> None:
        snippet = row.content.strip().replace("\n", " ")
        snippet = snippet[:60] + ("…" if len(snippet) > 60 else "")
        channel = self.get_partial_messageable(row.channel_id, type=discord.ChannelType.private)
        text = ABANDONED.format(snippet=snippet or "(attachment)")
        await self._send_quietly(channel, text, nonce(row.message_id, "r"))

    @staticmethod
    async def _send_quietly(channel: discord.abc.Messageable, text: str, nonce_: str) -> None:
        try:
            await channel.send(text, nonce=nonce_)
        except Exception as exc:
            log.warning("could not send a notice: %s", exc)

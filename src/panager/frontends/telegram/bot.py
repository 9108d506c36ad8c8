"""The Telegram front end: updates into the inbox, answers back, private chats only.

Flow of one update:

1. Intake. With long polling, one process polls `getUpdates` — Telegram allows a
   single consumer per bot (a second gets 409) — elected by a PostgreSQL
   advisory lock (db/leader.py) and taken over within about a second when it
   dies. With `telegram_webhook: true` and an https `PANAGER_PUBLIC_URL`, the
   web component receives updates instead (frontends/web/telegram_hook.py). Either way an
   update is stored (services/telegram_updates.py: private chats only, keyed by
   `update_id`, so a repeated update is dropped) before it is confirmed to
   Telegram (the next `offset`) or answered 200.
2. Any process running this front end (unless `receiver_answers: false`), and
   any `panager run --components answers` process, handles stored updates: the
   shared `InboxQueue` drains each person's rows oldest first, one at a time,
   even across processes; it hears of rows stored elsewhere from the inbox's
   NOTIFY (frontends/shared/workers.py), and takes back a dead process's rows at
   once (frontends/shared/reclaim.py).
3. The shared `Answerer` (frontends/shared/answering.py) admits the sender before any
   model call and runs a command or a turn; `TelegramChat` shows it. A button
   press is checked against who pressed it (frontends/telegram/buttons.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, BotCommandScopeAllPrivateChats, Update

from panager.agent.commands import offered_in
from panager.db.leader import Leadership
from panager.frontends.shared.answering import Answerer
from panager.frontends.shared.intake import (
    ERROR_MESSAGE,
    abandoned_notice,
    open_inbox,
    store_patiently,
)
from panager.frontends.shared.workers import answering
from panager.frontends.telegram import questions
from panager.frontends.telegram.api import close_bot, describe_error, make_bot
from panager.frontends.telegram.buttons import Buttons
from panager.frontends.telegram.chat import TelegramChat, incoming
from panager.frontends.telegram.messenger import TelegramMessenger
from panager.services.inbox import InboxMessage
from panager.services.inbox_queue import retry_delay
from panager.services.telegram_updates import (
    TelegramState,
    invite_link,
    read_update,
    store_update,
)

if TYPE_CHECKING:
    from aiogram import Bot

    from panager.app import App

log = logging.getLogger(__name__)
T = TypeVar("T")

ALLOWED_UPDATES = ["message", "callback_query"]
WEBHOOK_PATH = "/telegram/webhook"
COMMAND_NAME = r"^[a-z0-9_]{1,32}$"
DOWNLOAD_TIMEOUT = 30
MAX_RETRY_AFTER = 60.0  # seconds: a longer flood wait is cut short (Telegram says again)
# Telegram's final answer to a call (not worth repeating it): the webhook URL is refused.
REFUSED = (TelegramBadRequest, TelegramForbiddenError, TelegramNotFound, TelegramUnauthorizedError)


def retry_after(exc: Exception, failures: int) -> float:
    """Seconds before calling the Bot API again: what Telegram asks (429), else a backoff."""
    if isinstance(exc, TelegramRetryAfter):
        return min(float(exc.retry_after), MAX_RETRY_AFTER)
    return retry_delay(failures)


def webhook_url(app: App) -> str | None:
    """Where Telegram should post updates, or None to poll (module doc)."""
    settings = app.settings
    if not settings.runtime.telegram_webhook:
        return None
    if not settings.public_url.startswith("https://"):
        log.warning("telegram_webhook needs an https PANAGER_PUBLIC_URL; polling instead")
        return None
    return settings.public_url.rstrip("/") + WEBHOOK_PATH


def telegram_commands() -> list[BotCommand]:
    """The shared commands offered in Telegram's command menu."""
    return [
        BotCommand(command=c.name, description=(c.help or c.usage)[:256])
        for c in offered_in("telegram")
        if not c.admin_only and re.match(COMMAND_NAME, c.name)
    ]


class TelegramFrontEnd:
    """Panager's Telegram bot; `await front.start()`, later `await front.close()`."""

    def __init__(
        self,
        app: App,
        *,
        bot: Bot | None = None,
        poll_timeout: int | None = None,
        poll_interval: float = 1.0,
        shutdown_grace: float = 20.0,
    ) -> None:
        settings = app.settings
        self.app = app
        self.bot = bot or make_bot(settings.telegram_bot_token or "", settings.telegram_api_url)
        self.inbox, self.queue = open_inbox(
            app,
            "telegram_inbox",
            self._handle,
            self._notify_abandoned,
            poll_interval=poll_interval,
            shutdown_grace=shutdown_grace,
        )
        self.state = TelegramState(app.pool)
        self.answerer = Answerer(app, "telegram")
        self.buttons = Buttons(self)
        questions.register(self.buttons)
        self.messenger = TelegramMessenger(self.bot, app.deps.users)
        self.poll_timeout = poll_timeout or settings.runtime.telegram_poll_seconds
        self.poll_interval = poll_interval
        self.leader = Leadership(app.url, f"telegram-poller:{self.bot.id}")
        self.username = ""
        self.answering = app.settings.runtime.receiver_answers  # False: intake only
        self.polled = 0  # getUpdates calls that returned (tests, metrics)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Check the token (getMe), then run intake and answering in the background."""
        me = await self.bot.get_me()
        self.username = me.username or ""
        await self.state.put("bot_username", self.username)
        self.app.deps.messenger.add(self.messenger)
        self.queue.spawn(self._after_start())

    async def start_answering(self) -> None:
        """Answer what another process stored, without intake (`--components answers`)."""
        me = await self.bot.get_me()
        self.username = me.username or ""
        self.app.deps.messenger.add(self.messenger)
        await answering(self.app, self.inbox, self.queue, worker=True)

    async def _after_start(self) -> None:
        if self.answering:  # the presence lock comes before any claim
            await answering(self.app, self.inbox, self.queue)
        await self._register_commands()
        url = webhook_url(self.app)
        if url is not None and await self._set_webhook(url):
            return
        await self._persist("deleteWebhook", self.bot.delete_webhook)
        if not self.queue.stopping:
            self.leader.start()
            self.queue.spawn(self._poll_loop())

    async def _register_commands(self) -> None:
        """The command menu is a convenience: a failure is logged once, not retried."""
        try:
            scope = BotCommandScopeAllPrivateChats()
            await self.bot.set_my_commands(telegram_commands(), scope=scope)
        except Exception as exc:
            why = describe_error(exc, self.bot.token)
            log.warning("could not register the command menu with Telegram (%s)", why)

    async def _set_webhook(self, url: str) -> bool:
        """Have Telegram post updates to `url`; False (poll instead) when Telegram refuses it."""
        secret = await self.state.webhook_secret()

        async def call() -> bool:
            return await self.bot.set_webhook(
                url, secret_token=secret, allowed_updates=ALLOWED_UPDATES
            )

        try:
            done = await self._persist("setWebhook", call, refused=REFUSED)
        except REFUSED as exc:
            why = describe_error(exc, self.bot.token)
            log.warning("Telegram refused the webhook %s (%s); polling instead", url, why)
            return False
        if done is not None:
            log.info("Telegram posts updates to %s", url)
        return True

    async def close(self) -> None:
        """Let running turns finish (up to shutdown_grace), then stop polling and disconnect."""
        if self.queue.stopping:
            return
        await self.queue.close()
        if self.messenger in self.app.deps.messenger.messengers:
            self.app.deps.messenger.messengers.remove(self.messenger)
        await self.leader.close()
        await close_bot(self.bot)

    # ------------------------------------------------------------------- intake

    async def _poll_loop(self) -> None:
        """While this process leads: long-poll, store each update, then confirm it."""
        offset: int | None = None
        while not self.queue.stopping:
            await self.leader.held.wait()

            async def poll(offset: int | None = offset) -> list[Update]:
                return await self.bot.get_updates(
                    offset=offset,
                    timeout=self.poll_timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    request_timeout=self.poll_timeout + 10,
                )

            updates = await self._persist("getUpdates", poll, leading=True)
            if updates is None:
                continue
            self.polled += 1
            for update in updates:
                await self.take(update)
                offset = update.update_id + 1

    async def _persist(
        self,
        what: str,
        call: Callable[[], Awaitable[T]],
        *,
        refused: tuple[type[Exception], ...] = (),
        leading: bool = False,
    ) -> T | None:
        """`call()`'s result, calling again after any failure (a 5xx, an HTML error page, the
        network) with a bounded backoff; None once the front end stops (or, when `leading`,
        this process no longer leads). Errors in `refused` are raised: Telegram's final word.
        A streak of failures logs one line each at attempts 1, 2, 4, 8…, never a traceback."""
        failures = 0
        while not self.queue.stopping and (self.leader.held.is_set() or not leading):
            try:
                result = await call()
            except refused:
                raise
            except Exception as exc:
                delay = retry_after(exc, failures)
                failures += 1
                level = logging.WARNING if failures & (failures - 1) == 0 else logging.DEBUG
                why = describe_error(exc, self.bot.token)
                log.log(level, "%s failed (%s); retry %d in %.1f s", what, why, failures, delay)
                await asyncio.sleep(delay)
                continue
            if failures:
                log.info("%s works again after %d failed attempts", what, failures)
            return result
        return None

    async def take(self, update: Update) -> bool:
        """Store one update (once) and wake its sender's queue; False when ignored or seen."""
        data = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        row = read_update(data)
        if row is None:
            return False

        async def accept() -> bool:
            return await store_update(self.inbox, data)

        async def tell(text: str, suffix: str) -> None:
            await self.tell(row.chat_id, text)

        if not await store_patiently(accept, tell, lambda: self.queue.stopping, update.update_id):
            return False
        if self.answering:
            self.queue.kick(row.user_id)
        return True

    # --------------------------------------------------------------- answering

    async def _handle(self, row: InboxMessage) -> str:
        """The queue's handler: a button press or a message; a failure gets one line."""
        try:
            if (row.payload or {}).get("kind") == "button":
                await self.buttons.press(row)
            else:
                await self.answerer.answer(incoming(row), self.chat(row))
        except Exception:
            log.exception("failed to handle Telegram update %s", row.message_id)
            await self.tell(row.channel_id, ERROR_MESSAGE)
            return "failed"
        return "done"

    def chat(self, row: InboxMessage) -> TelegramChat:
        """The private chat of one stored update."""
        return TelegramChat(self, row)

    async def _notify_abandoned(self, row: InboxMessage) -> None:
        await self.tell(row.channel_id, abandoned_notice(row))

    async def tell(self, chat_id: int, text: str) -> None:
        """A short plain notice; failures are logged, never raised."""
        try:
            await self.bot.send_message(chat_id, text)
        except Exception as exc:
            log.warning("could not send a notice: %s", exc)

    async def download(self, file_id: str, cap: int | None = None) -> bytes | None:
        """A file's bytes; None when it cannot be fetched or is larger than `cap` (the file
        URL holds the token: it stays inside this method and is never logged)."""
        try:
            file = await self.bot.get_file(file_id)
            if not file.file_path or (cap is not None and (file.file_size or 0) > cap):
                return None
            buffer = await self.bot.download_file(file.file_path, timeout=DOWNLOAD_TIMEOUT)
        except Exception as exc:
            log.warning("could not download a Telegram file: %s", type(exc).__name__)
            return None
        data = buffer.getvalue() if buffer is not None else None  # type: ignore[attr-defined]
        return None if data is None or (cap is not None and len(data) > cap) else data

    def invite_link(self, code: str) -> str:
        """The deep link that opens the bot with `/start CODE`."""
        return invite_link(self.username, code)


__all__: list[Any] = ["WEBHOOK_PATH", "TelegramFrontEnd", "webhook_url"]

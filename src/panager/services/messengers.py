"""How Panager reaches a user on its own (reminders, scheduled answers, replays).

The scheduler and the OAuth replay talk to a `Messenger`; the terminal and
Discord front ends provide one each. `FanoutMessenger` tries several. A
scheduled answer's held calls travel as `offers` (data, never text): the front
end that delivers the answer puts their Approve/Deny buttons on it; a copy on
another front end (an open terminal or web page) gets none.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from panager.platforms import chat_names, named
from panager.services.schedules.delivery import DeliveryFailed

if TYPE_CHECKING:
    from panager.services.proposals import Offer
    from panager.services.users import User

log = logging.getLogger(__name__)

TOOL_LABELS = {
    "memory_save": "💾 saving a memory",
    "memory_search": "🔎 searching memories",
    "memory_forget": "🗑️ forgetting a memory",
    "schedule_create": "⏰ scheduling",
    "schedule_list": "⏰ checking schedules",
    "schedule_cancel": "⏰ cancelling a schedule",
    "task_list": "✅ reading tasks",
    "task_create": "✅ creating a task",
    "task_update": "✅ updating a task",
    "task_delete": "✅ deleting a task",
    "calendar_list_events": "📅 reading the calendar",
    "calendar_create_event": "📅 creating an event",
    "calendar_update_event": "📅 updating an event",
    "calendar_delete_event": "📅 deleting an event",
    "set_timezone": "🌍 setting the time zone",
    "send_user_message": "✉️ sending a message",
}


def tool_status_label(name: str) -> str:
    """A short progress line for a running tool, e.g. '🔎 searching memories…'."""
    return TOOL_LABELS.get(name, f"🔧 {name}") + "…"


class Messenger(Protocol):
    """Delivers a message to a user; returns True when delivered.

    False: this front end cannot reach the person now. A failure of the front end
    itself raises DeliveryFailed with a short plain sentence for the person ("Telegram
    could not be reached"), never the library's own text, logged where it happened."""

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Deliver `text` (and an optional link button) to `user`.

        `key` names this delivery: sending again with the same key (a retry after a
        crash) must not show the user a second copy where the channel can prevent it.
        `offers`: the held calls this message offers — its only Approve/Deny buttons."""
        ...


# The person's chat front ends ("discord", "telegram") in the order to try: their /notify
# choice first, else the one they wrote from last (services/linking.py).
Route = Callable[["User"], Awaitable[list[str]]]


class FanoutMessenger:
    """Delivers through the person's chat front ends in their order, else the first that can.

    A messenger may name its `platform`. For a person with a chat front end, the chat
    messengers are tried in the person's order and a terminal or web page that is open
    only shows a copy once a chat delivered — it is never the only destination. For
    anyone else (the terminal's own user), each messenger is tried in turn.

    A messenger that raises counts as that front end failing: the next one is tried, and
    only when none delivered does the send raise DeliveryFailed, naming in plain words
    the front ends that failed."""

    def __init__(self, messengers: Sequence[Messenger] = (), route: Route | None = None) -> None:
        self.messengers = list(messengers)
        self.route = route

    def add(self, messenger: Messenger) -> None:
        """Append a delivery route."""
        self.messengers.append(messenger)

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Deliver to the person (see the class doc); True once a destination took it.
        The offers go with the message to where it is delivered; a copy has none."""
        chats = await self.route(user) if self.route is not None else []
        if not chats:
            return await self._first(self.messengers, user, text, link, key, offers)
        ordered = [m for p in chats for m in self.messengers if _platform(m) == p]
        unnamed = [m for m in self.messengers if _platform(m) is None]
        if not await self._first([*ordered, *unnamed], user, text, link, key, offers):
            return False
        for shown in self.messengers:
            if _platform(shown) not in (*chat_names(), None):
                # only a copy: the message was delivered, so a failure here changes nothing
                with contextlib.suppress(DeliveryFailed):
                    await _try_send(shown, user, text, link, key, ())
        return True

    @staticmethod
    async def _first(
        messengers: Sequence[Messenger],
        user: User,
        text: str,
        link: dict | None,
        key: str | None,
        offers: Sequence[Offer],
    ) -> bool:
        failures: list[str] = []
        for messenger in messengers:
            try:
                if await _try_send(messenger, user, text, link, key, offers):
                    return True
            except DeliveryFailed as exc:
                if str(exc) not in failures:
                    failures.append(str(exc))
        if failures:
            raise DeliveryFailed("; ".join(failures))
        return False


async def _try_send(
    messenger: Messenger,
    user: User,
    text: str,
    link: dict | None,
    key: str | None,
    offers: Sequence[Offer],
) -> bool:
    """One front end's send; an unexpected exception becomes DeliveryFailed (logged once)."""
    try:
        return bool(await messenger.send(user, text, link=link, key=key, offers=offers))
    except DeliveryFailed:
        raise
    except Exception as exc:
        log.warning(
            "delivery to person %s through %s failed (%s)",
            user.id, _platform(messenger) or type(messenger).__name__, type(exc).__name__,
            exc_info=True,
        )
        raise DeliveryFailed(unreachable(_platform(messenger))) from exc


def unreachable(platform: str | None) -> str:
    """The plain sentence a person sees when a front end failed ("Telegram could not be …")."""
    known = named(platform)
    return f"{known.title if known else 'A front end'} could not be reached"


def _platform(messenger: Messenger) -> str | None:
    return getattr(messenger, "platform", None)

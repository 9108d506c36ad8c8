"""How Panager reaches a user on its own (reminders, scheduled answers, replays).

The scheduler and the OAuth replay talk to a `Messenger`; the terminal and
Discord front ends provide one each. `FanoutMessenger` tries several.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from panager.services.users import User

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
    """Delivers a message to a user; returns True when delivered."""

    async def send(
        self, user: User, text: str, *, link: dict | None = None, key: str | None = None
    ) -> bool:
        """Deliver `text` (and an optional link button) to `user`.

        `key` names this delivery: sending again with the same key (a retry after a
        crash) must not show the user a second copy where the channel can prevent it."""
        ...


class FanoutMessenger:
    """Tries each messenger in order until one delivers."""

    def __init__(self, messengers: Sequence[Messenger] = ()) -> None:
        self.messengers = list(messengers)

    def add(self, messenger: Messenger) -> None:
        """Append a delivery route."""
        self.messengers.append(messenger)

    async def send(
        self, user: User, text: str, *, link: dict | None = None, key: str | None = None
    ) -> bool:
        """Deliver through the first messenger that accepts the user."""
        for messenger in self.messengers:
            if await messenger.send(user, text, link=link, key=key):
                return True
        return False

"""Lifecycle events of a run; front ends, logs and session recording subscribe.

Order for one user message: agent_start, then per model call turn_start →
(message_delta… message_reset?)* → message_end → (tool_start… tool_end…)*, then
turn_end; agent_end last. `message_delta` carries each new piece of a streamed
answer's text (not the text so far); `message_reset` says the pieces of that
iteration are void (the reply calls tools, or a retry starts it over);
`message_end` always carries the final full text. A node emits through
`emit_event` (state.py), beside the `TurnContext` that holds the run's emitter.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

log = logging.getLogger(__name__)

EventType = Literal[
    "agent_start",
    "turn_start",
    "message_delta",
    "message_reset",
    "tool_start",
    "tool_end",
    "message_end",
    "turn_end",
    "agent_end",
]
EVENT_TYPES: tuple[str, ...] = get_args(EventType)

Subscriber = Callable[["Event"], Awaitable[None] | None]


@dataclass(frozen=True)
class Event:
    """One lifecycle event of one user's run."""

    type: EventType
    user_id: int
    data: dict[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class EventEmitter:
    """Fans events out to subscribers; a failing subscriber never breaks the turn."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Add a subscriber; returns a function that removes it."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def child(self) -> EventEmitter:
        """A new emitter that also forwards to this one's subscribers."""
        child = EventEmitter()
        child.subscribe(self.emit)
        return child

    async def emit(self, event: Event) -> None:
        """Deliver `event` to every subscriber, in subscription order."""
        for callback in list(self._subscribers):
            try:
                result = callback(event)
                if result is not None:
                    await result
            except Exception:
                log.exception("event subscriber failed on %s", event.type)

    async def __call__(self, type_: EventType, user_id: int, **data: Any) -> None:
        """Shorthand: build and emit an Event."""
        await self.emit(Event(type_, user_id, data))


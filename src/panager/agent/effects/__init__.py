"""Effects: hooks that run before and after each model call.

An effect sees a `ModelCall` (phase, iteration, state messages, model input,
user, token estimates) and may change the model input, queue state updates
(e.g. `RemoveMessage`s that shrink the checkpointed thread), or stop the turn
with a reply (budget exhausted, loop detected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from langchain_core.messages import AIMessage, AnyMessage

if TYPE_CHECKING:
    from panager.agent.state import TurnContext


@dataclass
class ModelCall:
    """The iteration context effects receive."""

    phase: Literal["before", "after"]
    iteration: int  # 1-based model call number within the turn
    messages: list[AnyMessage]  # the checkpointed thread as of this call
    model_input: list[AnyMessage]  # what is sent (system prompt excluded); effects may replace
    model_name: str
    turn: TurnContext
    state: dict[str, Any]
    estimated_tokens: int = 0
    last_input_tokens: int | None = None
    context_window: int | None = None
    response: AIMessage | None = None  # set in the "after" phase
    state_updates: list[Any] = field(default_factory=list)  # extra messages/RemoveMessages
    state_patch: dict[str, Any] = field(default_factory=dict)  # e.g. {"summary": ...}
    stop_reply: str | None = None  # set to end the turn with this text, no model call

    @property
    def user(self):
        """The user this call is for."""
        return self.turn.user


class Effect(Protocol):
    """A before/after hook pair; either may be a no-op."""

    name: str

    async def before_model(self, call: ModelCall) -> None:
        """Runs before the model call."""
        ...

    async def after_model(self, call: ModelCall) -> None:
        """Runs after the model call (call.response is set)."""
        ...

"""Effects: hooks that run before and after each model call.

An effect sees a `ModelCall` (phase, iteration, state messages, model input,
user, token estimates) and may change the model input, queue state updates
(e.g. `RemoveMessage`s that shrink the checkpointed thread), add a note to the
system prompt, replace the response, or stop the turn with a reply (budget
exhausted, loop detected). The built-ins live in this package; `build_effects`
(registry.py) turns the YAML `effects:` list into instances.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
from langchain_core.messages.utils import count_tokens_approximately

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from panager.agent.graph.state import TurnContext
    from panager.services.users import User


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
    last_input_tokens: int | None = None
    context_window: int | None = None
    response: AIMessage | None = None  # set in the "after" phase
    state_updates: list[Any] = field(default_factory=list)  # extra messages/RemoveMessages
    state_patch: dict[str, Any] = field(default_factory=dict)  # e.g. {"summary": ...}
    stop_reply: str | None = None  # set to end the turn with this text, no model call
    system_notes: list[str] = field(default_factory=list)  # appended to the system prompt
    model: BaseChatModel | None = None  # the model this call goes to (e.g. for summaries)
    system_tokens: int | None = None  # the system prompt without the summary, when known
    count_tokens: Callable[[Sequence[BaseMessage]], int] = count_tokens_approximately

    @property
    def user(self) -> User:
        """The user this call is for."""
        return self.turn.user

    @property
    def estimated_tokens(self) -> int:
        """Approximate tokens of the thread as of this call (counted on first use)."""
        return self.count_tokens(self.messages)

    @property
    def summary(self) -> str | None:
        """The running summary as of this call (including a patch queued by an effect)."""
        return self.state_patch.get("summary", self.state.get("summary"))

    def replace(self, messages: Sequence[AnyMessage]) -> None:
        """Swap in new versions of messages (same ids), in the state and in the model input."""
        by_id: dict[str | None, AnyMessage] = {m.id: m for m in messages if m.id}
        if not by_id:
            return
        self.state_updates.extend(by_id.values())
        self.messages = [by_id.get(m.id, m) for m in self.messages]
        self.model_input = [by_id.get(m.id, m) for m in self.model_input]

    def remove(self, ids: Iterable[str | None]) -> None:
        """Delete messages from the checkpointed thread (and from this call's input)."""
        gone = {i for i in ids if i}
        self.state_updates.extend(RemoveMessage(id=i) for i in gone)
        self.messages = [m for m in self.messages if m.id not in gone]
        self.model_input = [m for m in self.model_input if m.id not in gone]


class Effect(Protocol):
    """A before/after hook pair; either may be a no-op."""

    name: str

    async def before_model(self, call: ModelCall) -> None:
        """Runs before the model call."""
        ...

    async def after_model(self, call: ModelCall) -> None:
        """Runs after the model call (call.response is set)."""
        ...

"""A scripted LangChain chat model for graph tests (no HTTP).

LangChain's fake chat models lack `bind_tools` and reuse message objects (so
`add_messages` replaces instead of appending). This one returns a fresh
AIMessage with a new id on every call, supports tool calls, an optional delay,
usage metadata, and a callable script step that sees the request.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

Step = str | AIMessage | dict | Callable[[list[BaseMessage]], "str | AIMessage | dict"]


def call(name: str, args: dict | None = None, id: str | None = None) -> dict:
    """A tool call spec for a script step."""
    return {"name": name, "args": args or {}, "id": id or f"call_{uuid.uuid4().hex[:12]}"}


def calls(*specs: dict, content: str = "") -> AIMessage:
    """A reply with several tool calls."""
    return AIMessage(content=content, tool_calls=[dict(s, type="tool_call") for s in specs])


class ScriptedChatModel(BaseChatModel):
    """Replies from a script (FIFO); when empty, `default` (text) or an echo of the last message."""

    script: list[Any] = Field(default_factory=list)
    default: str | None = None
    delay: float = 0.0
    model_name: str = "scripted"
    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _bound_tools: list[Any] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """Every message list the model received, in order."""
        return self._requests

    @property
    def bound_tools(self) -> list[Any]:
        """Tools of the most recent bind_tools call."""
        return self._bound_tools

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """Record the tools; return self (the script decides the calls)."""
        self._bound_tools = list(tools)
        return self

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        self.script.extend(steps)

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        step: Any = self.script.pop(0) if self.script else None
        if callable(step) and not isinstance(step, AIMessage | dict):
            step = step(messages)
        if step is None:
            step = self.default if self.default is not None else f"echo: {messages[-1].content}"
        if isinstance(step, dict):
            step = calls(step)
        if isinstance(step, str):
            step = AIMessage(content=step)
        tool_calls = [
            dict(c, id=c.get("id") or f"call_{uuid.uuid4().hex[:12]}") for c in step.tool_calls
        ]
        tokens = sum(len(str(m.content)) for m in messages) // 4
        return AIMessage(
            content=step.content,
            tool_calls=tool_calls,
            id=f"run-{uuid.uuid4()}",
            usage_metadata={"input_tokens": tokens, "output_tokens": 5, "total_tokens": tokens + 5},
            response_metadata={"model_name": self.model_name},
        )

    def _generate(
        self, messages: list[BaseMessage], stop=None, run_manager=None, **kw: Any
    ) -> ChatResult:
        self._requests.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop=None, run_manager=None, **kw: Any
    ) -> ChatResult:
        self._requests.append(list(messages))
        if self.delay:
            await asyncio.sleep(self.delay)
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

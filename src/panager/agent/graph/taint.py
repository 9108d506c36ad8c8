"""Taint: whether a model call was sent text that did not come from the person.

A call is tainted when anything it was sent — the system prompt (summary,
recalled memories, loaded skills), the trimmed history, this turn's tool
results, the definitions of the tools bound to it — holds framed outside
content (`panager.framing`), or when a message
in it was itself written in a tainted call (the mark rides on AIMessages and on
notes such as relays, so a model's own words about an injected text do not
launder it). The mark is stored on the reply (`TAINT_KEY` in
`additional_kwargs`; defined in `panager.framing`, so a saved conversation
file keeps it too); tools read it for the call they are running through
`CALL_TAINTED`, and anything they write from it (a memory, a schedule, a
summary, a `/save` file) keeps the mark.

The person's own words are the human messages that carry neither mark: what a
classification rule may treat as "written by the person" (`person_text`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import BaseTool

from panager.framing import TAINT_KEY, holds_outside

# True while the tools of a tainted reply run (asyncio.gather copies it into each call).
CALL_TAINTED: ContextVar[bool] = ContextVar("panager_call_tainted", default=False)


def marked(message: AnyMessage) -> bool:
    """Whether the message carries the taint mark itself."""
    return bool((message.additional_kwargs or {}).get(TAINT_KEY))


def is_outside(message: AnyMessage) -> bool:
    """Outside content in this message: framed text, or the taint mark."""
    return marked(message) or holds_outside(message.content)


def call_tainted(
    system_prompt: str, messages: Sequence[AnyMessage], tools: Sequence[BaseTool] = ()
) -> bool:
    """Whether a model call sending `system_prompt` + `messages` (and the definitions of
    `tools`: descriptions and argument schemas) is tainted."""
    return (
        holds_outside(system_prompt)
        or any(is_outside(m) for m in messages)
        or any(tool_outside(t) for t in tools)
    )


def tool_outside(tool: BaseTool) -> bool:
    """Whether a tool's definition as the model gets it holds outside content (an MCP
    server's words the operator never reviewed)."""
    schema = tool.args_schema if isinstance(tool.args_schema, dict) else None
    return holds_outside(tool.description or "") or (
        schema is not None and holds_outside(json.dumps(schema, ensure_ascii=False))
    )


def mark(reply: AIMessage, tainted: bool) -> AIMessage:
    """The reply with the taint mark set (a no-op for an untainted call)."""
    if not tainted:
        return reply
    reply.additional_kwargs = {**(reply.additional_kwargs or {}), TAINT_KEY: True}
    return reply


def person_text(messages: Sequence[AnyMessage]) -> str:
    """Everything the person typed themselves: human messages without any outside mark."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, HumanMessage) and not message.name and not is_outside(message):
            parts.append(_text(message.content))
    return "\n".join(parts)


def latest_person_text(messages: Sequence[AnyMessage]) -> str:
    """The person's latest message, when it is their own words ("" when it holds outside
    content, e.g. a forward, or when there is none)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not message.name:
            return "" if is_outside(message) else _text(message.content)
    return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)

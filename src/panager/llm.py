"""Model factories and the retrying model call, with fallback across named endpoints.

`ChatOpenAI` talks to any OpenAI-compatible endpoint (SPEC §1). The SDK's own
retries are off (`max_retries=0`): `invoke_with_retries` retries 429/5xx and
connection errors itself, with exponential backoff and jitter, honouring
`Retry-After`, so the policy is ours, testable, and reported once to the user.

A model made by a `ModelRouter` (model_router.py) belongs to a named endpoint and
its calls go down the endpoint's `fallback:` list; what counts as transient and
the plain retry loop are in model_retries.py. LangChain's `with_retry` /
`with_fallbacks` are not used: see docs/models.md.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Sequence

from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, message_chunk_to_message
from langchain_core.messages.tool import tool_call
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from panager.config import Settings
from panager.endpoints import Endpoint, model_endpoints
from panager.errors import ContextOverflow, ModelUnavailable
from panager.model_retries import TextSink, raise_if_cancelled, with_retries
from panager.model_router import TOOLLESS_KEY, endpoint_model, routed_by

__all__ = [
    "ContextOverflow",
    "ModelUnavailable",
    "TextSink",
    "invoke_with_retries",
    "make_chat_model",
    "stream_with_retries",
]

NO_MODEL_MESSAGE = (
    "No model is configured. Set OPENAI_API_KEY (and optionally PANAGER_MODEL), or "
    "OPENAI_BASE_URL for a local OpenAI-compatible server such as Ollama, then restart."
)
MAX_CACHED_TOOLS = 512
_OPENAI_TOOLS: dict[tuple, dict] = {}


def make_chat_model(settings: Settings, model_name: str | None = None) -> BaseChatModel | None:
    """A ChatOpenAI for the configured endpoint, or None when no model is configured.

    `model_name` is an endpoint's name (or a model id, served by the default endpoint)."""
    if not settings.model_configured:
        return None
    endpoints = model_endpoints(settings)
    endpoint = endpoints.resolve(model_name or endpoints.default)
    if endpoint is None:
        endpoint = endpoints.for_model_id(model_name or settings.model)
    return endpoint_model(endpoint, settings.runtime.model_timeout_seconds)


def openai_tool(tool: BaseTool) -> dict:
    """The tool's OpenAI function schema, converted once per (name, description, schema).

    `bind_tools` would rebuild the JSON schema of every tool on every model call (about
    40 ms a turn with the full tool set); per-user tools share their schema class
    (`agent/graph/tool.py`), so the converted form is reused across users and turns."""
    key = (tool.name, tool.description, tool.args_schema)
    try:
        found = _OPENAI_TOOLS.get(key)
    except TypeError:  # an unhashable (dict) schema: convert every time
        return convert_to_openai_tool(tool)
    if found is None:
        found = _OPENAI_TOOLS[key] = convert_to_openai_tool(tool)
        while len(_OPENAI_TOOLS) > MAX_CACHED_TOOLS:
            _OPENAI_TOOLS.pop(next(iter(_OPENAI_TOOLS)))
    return copy.deepcopy(found)  # the request builders may adjust what they are given


async def invoke_with_retries(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    messages: list[AnyMessage],
    *,
    retries: int = 3,
    sleep=asyncio.sleep,
) -> AIMessage:
    """Call the model, retrying transient failures; raise ContextOverflow or ModelUnavailable."""
    routed = routed_by(model)
    if routed is not None:
        router, name = routed
        return await router.run(
            name, lambda m, e: _toolless(e, tools, _bind(m, tools, e).ainvoke(
                _messages_for(e, tools, messages))), retries=retries,
        )
    bound = model.bind_tools([openai_tool(t) for t in tools]) if tools else model
    return await with_retries(lambda: bound.ainvoke(messages), retries=retries, sleep=sleep)


def _bind(model: BaseChatModel, tools: Sequence[BaseTool], endpoint: Endpoint):
    """The model with the tools bound (none for an endpoint that takes no tools)."""
    if tools and endpoint.tools:
        return model.bind_tools([openai_tool(t) for t in tools])
    return model


NO_TOOLS_NOTE = (
    "You cannot use tools in this answer. Do not claim to have done anything; if the "
    "person asked for an action, say plainly that you could not do it now."
)


def _messages_for(
    endpoint: Endpoint, tools: Sequence[BaseTool], messages: list[AnyMessage]
) -> list[AnyMessage]:
    """What an endpoint that takes no tools is sent: tool calls and their results as the
    assistant's own text (many servers refuse `tool` messages when no tools are declared),
    and a note that it cannot act. Others get the messages as they are."""
    if endpoint.tools or not (tools or any(m.type == "tool" for m in messages)):
        return messages
    from langchain_core.messages import SystemMessage

    rendered: list[AnyMessage] = []
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            calls = "; ".join(f"{c['name']}({c['args']})" for c in message.tool_calls)
            text = f"{message.text}\n[I called: {calls}]".strip()
            rendered.append(AIMessage(content=text, id=message.id))
        elif message.type == "tool":
            result = f"[result of {getattr(message, 'name', None) or 'the call'}: {message.text}]"
            rendered.append(AIMessage(content=result, id=message.id))
        else:
            rendered.append(message)
    if rendered and isinstance(rendered[0], SystemMessage):
        first = rendered[0]
        rendered[0] = SystemMessage(f"{first.text}\n\n{NO_TOOLS_NOTE}", id=first.id)
    else:
        rendered.insert(0, SystemMessage(NO_TOOLS_NOTE))
    return rendered


async def _toolless(
    endpoint: Endpoint, tools: Sequence[BaseTool], reply: Awaitable[AIMessage]
) -> AIMessage:
    """Mark a reply written without the tools it was offered (the turn says it could not act)."""
    answer = await reply
    if tools and not endpoint.tools:
        answer.response_metadata = {**(answer.response_metadata or {}), TOOLLESS_KEY: True}
    return answer


async def decide_with_retries(
    model: BaseChatModel,
    schema: type,
    messages: list[AnyMessage],
    *,
    retries: int = 3,
    sleep=asyncio.sleep,
) -> AIMessage:
    """One structured decision: the model must call the `schema` tool (tool_choice forced)."""
    routed = routed_by(model)
    if routed is not None:
        router, name = routed
        forced = schema.__name__
        return await router.run(
            name, lambda m, e: m.bind_tools([schema], tool_choice=forced).ainvoke(messages),
            retries=retries,
        )
    bound = model.bind_tools([schema], tool_choice=schema.__name__)
    return await with_retries(lambda: bound.ainvoke(messages), retries=retries, sleep=sleep)


async def stream_with_retries(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    messages: list[AnyMessage],
    sink: TextSink,
    *,
    retries: int = 3,
    sleep=asyncio.sleep,
) -> AIMessage:
    """`invoke_with_retries`, streamed: text pieces go to `sink` as they arrive.

    A reply that turns out to call tools shows no text (the sink is reset when it had
    some); a failure mid-stream resets the sink before the retry starts the answer over."""
    routed = routed_by(model)
    if routed is not None:
        router, name = routed
        return await router.run(
            name,
            lambda m, e: _toolless(e, tools, _stream_once(
                _bind(m, tools, e), _messages_for(e, tools, messages), sink)),
            sink, retries=retries,
        )
    bound = model.bind_tools([openai_tool(t) for t in tools]) if tools else model
    return await with_retries(
        lambda: _stream_once(bound, messages, sink), retries=retries, sleep=sleep, sink=sink
    )


async def _stream_once(bound, messages: list[AnyMessage], sink: TextSink) -> AIMessage:
    """One streamed call: the chunks summed into the same AIMessage `ainvoke` returns."""
    chunks: list[AIMessageChunk] = []
    calls_tools = False
    async for chunk in bound.astream(messages):
        raise_if_cancelled()
        if not isinstance(chunk, AIMessageChunk):  # a model that cannot stream: whole reply
            if not chunk.tool_calls and chunk.text:
                await sink.delta(chunk.text)
            return chunk
        chunks.append(chunk)
        if calls_tools:
            continue
        if chunk.tool_call_chunks:
            calls_tools = True
            await sink.reset()
        elif text := chunk.text:
            await sink.delta(text)
    return whole_message(chunks)


def whole_message(chunks: list[AIMessageChunk]) -> AIMessage:
    """The chunks summed once, tool arguments parsed as a plain call parses them.

    Adding chunks one by one would re-parse the growing arguments at every step
    (quadratic: minutes for 200 KB of arguments), and the sum parses them as
    *partial* JSON, which "completes" cut-off arguments a plain call would refuse."""
    if not chunks:
        return AIMessage(content="")
    full = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
    message = message_chunk_to_message(full)
    assert isinstance(message, AIMessage)  # AIMessageChunks sum to an AIMessageChunk
    if not full.tool_call_chunks:
        return message
    calls, invalid = [], []
    for piece in full.tool_call_chunks:
        raw = {
            "function": {"name": piece.get("name") or "", "arguments": piece.get("args") or ""},
            "id": piece.get("id"),
        }
        try:
            parsed = parse_tool_call(raw, return_id=True) or {}
            calls.append(tool_call(name=parsed["name"], args=parsed["args"], id=parsed["id"]))
        except (OutputParserException, KeyError, TypeError) as exc:
            invalid.append(make_invalid_tool_call(raw, str(exc)))
    return message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})



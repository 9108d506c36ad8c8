"""Model factories and the retrying model call, with fallback across named endpoints.

`ChatOpenAI` talks to any OpenAI-compatible endpoint (SPEC §1). The SDK's own
retries are off (`max_retries=0`): `invoke_with_retries` retries 429/5xx and
connection errors itself, with exponential backoff and jitter, honouring
`Retry-After`, so the policy is ours, testable, and reported once to the user.

A model made by a `ModelRouter` belongs to a named endpoint (panager/endpoints.py).
Its calls go down the endpoint's `fallback:` list: a 429, 5xx, timeout or refused
connection waits for a short `Retry-After` (up to `retry_after_max_seconds`) and
otherwise moves on at once; an endpoint whose circuit breaker is open is skipped;
a stream that breaks is discarded (the sink is reset, naming the endpoint it
restarts on) and written again by the next. Within a turn (`TURN_ROUTE`) the
endpoint that answered stays in use, and the turn gets one note saying so. The
last endpoint of the list keeps the plain retry policy. LangChain's
`with_retry` / `with_fallbacks` are not used: see docs/models.md.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import random
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import NoReturn, Protocol

import openai
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, message_chunk_to_message
from langchain_core.messages.tool import tool_call
from langchain_core.output_parsers.openai_tools import make_invalid_tool_call, parse_tool_call
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import SecretStr

from panager.config import Settings
from panager.endpoints import Endpoint, Endpoints
from panager.errors import ContextOverflow, ModelUnavailable

log = logging.getLogger(__name__)

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
UNAVAILABLE_MESSAGE = (
    "The model service is not answering right now ({reason}), so I could not reply — your "
    "message is kept, please try again in a minute."
)
MAX_CACHED_TOOLS = 512
_OPENAI_TOOLS: dict[tuple, dict] = {}
CONTEXT_ERROR_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
    "prompt is too long",
    "request too large",
)


def make_chat_model(settings: Settings, model_name: str | None = None) -> BaseChatModel | None:
    """A ChatOpenAI for the configured endpoint, or None when no model is configured.

    `model_name` is an endpoint's name (or a model id, served by the default endpoint)."""
    if not settings.model_configured:
        return None
    endpoints = settings.endpoints
    endpoint = endpoints.resolve(model_name or endpoints.default)
    if endpoint is None:
        endpoint = endpoints.for_model_id(model_name or settings.model)
    return endpoint_model(endpoint, settings.runtime.model_timeout_seconds)


def endpoint_model(
    endpoint: Endpoint, timeout: float, metadata: dict | None = None
) -> BaseChatModel:
    """A ChatOpenAI for one endpoint."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=endpoint.model,
        api_key=SecretStr(endpoint.api_key or "not-needed"),
        base_url=endpoint.base_url,
        use_responses_api=endpoint.api_type == "responses",
        stream_usage=True,
        max_retries=0,
        timeout=timeout,  # also bounds a stalled stream
        # Its per-chunk `asyncio.wait_for` loses a cancellation (Ctrl+C) on Python 3.11
        # when a chunk arrives as the cancel does, and the turn then runs to its end.
        stream_chunk_timeout=0,
        metadata=metadata,
    )


def is_context_overflow(exc: BaseException) -> bool:
    """True for 400/413 errors that say the prompt is over the context window."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 413):
        return False
    code = str(getattr(exc, "code", "") or "")
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in CONTEXT_ERROR_MARKERS)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, or `Retry-After` (seconds or date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name in ("retry-after-ms", "retry-after"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            return _seconds_until(value)
        return seconds / 1000 if name.endswith("ms") else seconds
    return None


def _seconds_until(http_date: str) -> float | None:
    """Seconds from now until an HTTP-date (`Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`)."""
    from datetime import UTC, datetime
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _retryable(exc: BaseException) -> str | None:
    """A short reason when `exc` is worth retrying, else None."""
    if isinstance(exc, openai.RateLimitError):
        return "rate limited"
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "cannot connect"
    if isinstance(exc, openai.APIStatusError):
        return f"server error {exc.status_code}" if exc.status_code >= 500 else None
    if isinstance(exc, openai.APIError):  # an error event in the middle of a stream
        return "the answer stream broke off"
    return None


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


def backoff_delay(
    attempt: int, retry_after: float | None, *, base: float = 0.5, cap: float = 30.0
) -> float:
    """Seconds before retry `attempt` (1-based): Retry-After if given, else jittered backoff."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap)
    return min(cap, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


async def invoke_with_retries(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    messages: list[AnyMessage],
    *,
    retries: int = 3,
    sleep=asyncio.sleep,
) -> AIMessage:
    """Call the model, retrying transient failures; raise ContextOverflow or ModelUnavailable."""
    routed = _routed(model)
    if routed is not None:
        router, name = routed
        return await router.run(
            name, lambda m, e: _toolless(e, tools, _bind(m, tools, e).ainvoke(
                _messages_for(e, tools, messages))), retries=retries,
        )
    bound = model.bind_tools([openai_tool(t) for t in tools]) if tools else model
    return await _with_retries(lambda: bound.ainvoke(messages), retries=retries, sleep=sleep)


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
    routed = _routed(model)
    if routed is not None:
        router, name = routed
        forced = schema.__name__
        return await router.run(
            name, lambda m, e: m.bind_tools([schema], tool_choice=forced).ainvoke(messages),
            retries=retries,
        )
    bound = model.bind_tools([schema], tool_choice=schema.__name__)
    return await _with_retries(lambda: bound.ainvoke(messages), retries=retries, sleep=sleep)


class TextSink(Protocol):
    """Where a streamed reply's text goes while it arrives."""

    async def delta(self, text: str) -> None:
        """A new piece of the reply's text."""

    async def reset(self, restarted_on: str | None = None) -> None:
        """Forget the text sent so far (a tool-call reply, or the call starts over;
        `restarted_on`: on that fallback endpoint)."""


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
    routed = _routed(model)
    if routed is not None:
        router, name = routed
        return await router.run(
            name,
            lambda m, e: _toolless(e, tools, _stream_once(
                _bind(m, tools, e), _messages_for(e, tools, messages), sink)),
            sink, retries=retries,
        )
    bound = model.bind_tools([openai_tool(t) for t in tools]) if tools else model
    return await _with_retries(
        lambda: _stream_once(bound, messages, sink), retries=retries, sleep=sleep, sink=sink
    )


def raise_if_cancelled() -> None:
    """Raise the cancellation of the running task if something below swallowed it (Python
    3.11's `asyncio.wait_for` returns a result that arrived as its caller was cancelled);
    the task still counts the request, so a Ctrl+C is never lost."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


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


def _give_up(exc: Exception) -> NoReturn:
    """A failure not worth retrying: one sentence for an API error, else the error itself."""
    if isinstance(exc, openai.APIStatusError):
        log.warning("model API error %s", exc.status_code)
        raise ModelUnavailable(
            UNAVAILABLE_MESSAGE.format(reason=f"error {exc.status_code}")
        ) from exc
    raise exc


async def _with_retries(
    call: Callable[[], Awaitable[AIMessage]],
    *,
    retries: int,
    sleep,
    sink: TextSink | None = None,
) -> AIMessage:
    """Run `call`, retrying transient failures with backoff (see the module doc)."""
    attempt = 0
    while True:
        try:
            reply = await call()
            raise_if_cancelled()
            return reply
        except Exception as exc:
            if sink is not None:
                await sink.reset()
            if is_context_overflow(exc):
                raise ContextOverflow(str(exc)) from exc
            reason = _retryable(exc)
            if reason is None:
                _give_up(exc)
            attempt += 1
            if attempt > retries:
                log.warning("model API failed after %d attempts: %s", attempt, reason)
                raise ModelUnavailable(UNAVAILABLE_MESSAGE.format(reason=reason)) from exc
            delay = backoff_delay(attempt, _retry_after(exc))
            log.info("model API %s; retry %d in %.1fs", reason, attempt, delay)
            await sleep(delay)


# -- fallback across named endpoints ---------------------------------------------------------

FALLBACK_NOTE = "answered by {used}: {wanted} is not answering"
TOOLLESS_NOTE = "{used} cannot use tools, so I could not act on anything"
TOOLLESS_KEY = "panager_toolless"
TOOLS_REFUSED = ("tool", "function")  # words of a 400 from a server that takes no tools
ENDPOINT_KEY = "panager_endpoint"  # in a routed model's metadata and a reply's response_metadata
_ROUTERS: weakref.WeakValueDictionary[int, ModelRouter] = weakref.WeakValueDictionary()
_ROUTER_IDS = itertools.count(1)


class Breakers(Protocol):
    """The per-endpoint circuit breakers (db/breaker.py keeps them in PostgreSQL)."""

    async def is_open(self, endpoint: str) -> bool:
        """Whether calls should skip `endpoint` now."""
        ...

    async def failed(self, endpoint: str, reason: str) -> bool:
        """Count a failed call; True when the breaker is open now."""
        ...

    async def succeeded(self, endpoint: str) -> None:
        """A call answered."""
        ...


@dataclass
class TurnRoute:
    """Which endpoint answers for which during one turn, and what the person is told."""

    sticky: dict[str, str] = field(default_factory=dict)  # wanted endpoint -> the one used
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Add `text` once."""
        if text not in self.notes:
            self.notes.append(text)


TURN_ROUTE: ContextVar[TurnRoute | None] = ContextVar("panager_turn_route", default=None)


def endpoint_name(model: object) -> str | None:
    """The endpoint a routed model belongs to (None: a model made elsewhere)."""
    return (getattr(model, "metadata", None) or {}).get(ENDPOINT_KEY)


def answered_by(reply: AIMessage, default: str) -> str:
    """The endpoint that wrote `reply` (usage is counted against it), else `default`."""
    return str((reply.response_metadata or {}).get(ENDPOINT_KEY) or default)


class _Down(Exception):
    """One endpoint gave up (its retries used, or a fallback is better than waiting)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refuses_tools(exc: BaseException) -> bool:
    """A 400 (or 422) saying the server takes no tools / function calling."""
    if getattr(exc, "status_code", None) not in (400, 404, 422, 501):
        return False
    text = str(exc).lower()
    return any(word in text for word in TOOLS_REFUSED) and "support" in text


def _routed(model: object) -> tuple[ModelRouter, str] | None:
    meta = getattr(model, "metadata", None) or {}
    router = _ROUTERS.get(meta.get("panager_router", 0))
    if router is None or ENDPOINT_KEY not in meta:
        return None
    return router, meta[ENDPOINT_KEY]


async def _reset(sink: TextSink | None, restarted_on: str | None = None) -> None:
    if sink is None:
        return
    if restarted_on is None:
        await sink.reset()
    else:
        await sink.reset(restarted_on=restarted_on)


class ModelRouter:
    """Models for named endpoints, and their calls down each one's `fallback:` list."""

    def __init__(
        self,
        endpoints: Endpoints,
        breakers: Breakers | None = None,
        *,
        retries: int = 3,
        retry_after_max: float = 10.0,
        timeout: float = 120.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.endpoints = endpoints
        self.breakers = breakers
        self.retries = retries
        self.retry_after_max = retry_after_max
        self.timeout = timeout
        self.sleep = sleep
        self.key = next(_ROUTER_IDS)
        self._models: dict[str, BaseChatModel] = {}
        self._extra: dict[str, Endpoint] = {}  # an admin's model ids no entry declares
        self._toolless: dict[str, Endpoint] = {}  # endpoints whose server refused `tools`
        _ROUTERS[self.key] = self

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint called `name` (a model id no entry declares: on the default server)."""
        if name in self._toolless:
            return self._toolless[name]
        found = self.endpoints.resolve(name)
        if found is not None:
            return found
        if name not in self._extra:
            self._extra[name] = self.endpoints.for_model_id(name)
        return self._extra[name]

    def model(self, name: str) -> BaseChatModel:
        """The model for endpoint `name`, made once; its calls go through this router."""
        endpoint = self.endpoint(name)
        if endpoint.name not in self._models:
            meta = {ENDPOINT_KEY: endpoint.name, "panager_router": self.key}
            self._models[endpoint.name] = endpoint_model(endpoint, self.timeout, meta)
        return self._models[endpoint.name]

    def background(self) -> BaseChatModel | None:
        """The `background_model` (None: background work uses the person's model)."""
        name = self.endpoints.background
        return self.model(name) if name else None

    async def run(
        self,
        name: str,
        call: Callable[[BaseChatModel, Endpoint], Awaitable[AIMessage]],
        sink: TextSink | None = None,
        *,
        retries: int | None = None,
    ) -> AIMessage:
        """`call` on endpoint `name`, then on its fallbacks (see the module doc); `retries`
        per endpoint (default: the router's)."""
        endpoint = self.endpoint(name)
        chain = self.endpoints.chain(endpoint.name) if endpoint.name in self.endpoints.by_name \
            else [endpoint]
        chain = [self._toolless.get(e.name, e) for e in chain]
        route = TURN_ROUTE.get()
        start = 0
        if route is not None and endpoint.name in route.sticky:
            used = route.sticky[endpoint.name]
            start = next((i for i, e in enumerate(chain) if e.name == used), 0)
        restarting = False  # an endpoint gave up: the next one writes the answer again
        for i in range(start, len(chain)):
            here, last = chain[i], i == len(chain) - 1
            if not last and self.breakers is not None and await self.breakers.is_open(here.name):
                log.info("model endpoint %s skipped: its circuit is open", here.name)
                continue
            if restarting:  # front ends replace what the endpoint before showed
                await _reset(sink, restarted_on=here.name)
                restarting = False
            try:
                reply = await self._attempts(
                    here, call, sink, not last, self.retries if retries is None else retries)
            except _Down as down:
                if self.breakers is not None:
                    await self.breakers.failed(here.name, down.reason)
                if last:
                    raise ModelUnavailable(UNAVAILABLE_MESSAGE.format(reason=down.reason)) from None
                log.warning("model endpoint %s failed (%s); trying its fallback", here.name,
                            down.reason)
                restarting = True
                continue
            if self.breakers is not None:
                await self.breakers.succeeded(here.name)
            if here.name != endpoint.name and route is not None:
                route.sticky[endpoint.name] = here.name
                route.note(FALLBACK_NOTE.format(used=here.name, wanted=endpoint.name))
                if (reply.response_metadata or {}).get(TOOLLESS_KEY):
                    route.note(TOOLLESS_NOTE.format(used=here.name))
            reply.response_metadata = {**(reply.response_metadata or {}), ENDPOINT_KEY: here.name}
            return reply
        raise AssertionError("unreachable: the last endpoint returns or raises")

    async def _attempts(
        self,
        endpoint: Endpoint,
        call: Callable[[BaseChatModel, Endpoint], Awaitable[AIMessage]],
        sink: TextSink | None,
        has_fallback: bool,
        retries: int,
    ) -> AIMessage:
        """Calls to one endpoint: retried as `_with_retries` does when it is the last
        one; with a fallback after it, only a short `Retry-After` is waited for."""
        model = self.model(endpoint.name)
        attempt = 0
        while True:
            try:
                reply = await call(model, endpoint)
                raise_if_cancelled()
                return reply
            except Exception as exc:
                if is_context_overflow(exc):
                    await _reset(sink)
                    raise ContextOverflow(str(exc)) from exc
                reason = _retryable(exc)
                if reason is None and endpoint.tools and _refuses_tools(exc):
                    log.warning("model endpoint %s refuses tools; answering without", endpoint.name)
                    await _reset(sink)
                    endpoint = replace(endpoint, tools=False)
                    self._toolless[endpoint.name] = endpoint
                    continue
                if reason is None:
                    await _reset(sink)
                    _give_up(exc)
                attempt += 1
                wait = _retry_after(exc)
                if has_fallback and (
                    wait is None or wait > self.retry_after_max or attempt > retries
                ):
                    raise _Down(reason) from None  # the text shown stays until the next starts
                if attempt > retries:
                    await _reset(sink)
                    log.warning("model API failed after %d attempts: %s", attempt, reason)
                    raise _Down(reason) from None
                await _reset(sink)
                delay = backoff_delay(attempt, wait)
                log.info("model endpoint %s %s; retry %d in %.1fs", endpoint.name, reason,
                         attempt, delay)
                await self.sleep(delay)

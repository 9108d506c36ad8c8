"""Models for named endpoints, and each call down an endpoint's `fallback:` list.

A model made by a `ModelRouter` belongs to a named endpoint (panager/endpoints.py).
Its calls go down the endpoint's `fallback:` list: a 429, 5xx, timeout or refused
connection waits for a short `Retry-After` (up to `retry_after_max_seconds`) and
otherwise moves on at once; an endpoint whose circuit breaker is open is skipped;
a stream that breaks is discarded (the sink is reset, naming the endpoint it
restarts on) and written again by the next. Within a turn (`TURN_ROUTE`) the
endpoint that answered stays in use, and the turn gets one note saying so. The
last endpoint of the list keeps the plain retry policy (model_retries.py).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from pydantic import SecretStr

from panager.endpoints import Endpoint, Endpoints
from panager.errors import ContextOverflow, ModelUnavailable
from panager.model_retries import (
    UNAVAILABLE_MESSAGE,
    TextSink,
    backoff_delay,
    give_up,
    is_context_overflow,
    raise_if_cancelled,
    retry_after,
    retryable,
)

log = logging.getLogger("panager.llm")


def plain_json_body(payload: dict) -> dict:
    """A Chat Completions request whose messages and tools ride in `extra_body`.

    They are plain JSON already (LangChain converted them), but the openai SDK walks them
    against its TypedDicts on every call to change nothing — about 13 ms a call with the
    built-in tools, more than the rest of a turn's own work. `extra_body` is sent as it
    is, merged over the body, so the request on the wire is the same."""
    if "response_format" in payload or "messages" not in payload:
        return payload
    moved = {key: payload.pop(key) for key in ("messages", "tools") if key in payload}
    payload["extra_body"] = {**(payload.get("extra_body") or {}), **moved}
    payload["messages"] = []  # required by the SDK's signature; replaced by extra_body's
    return payload


# Keyword arguments of `create` that are request options, not fields of the JSON body.
REQUEST_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")


class PlainJsonCompletions:
    """The openai SDK's `chat.completions` as ChatOpenAI calls it, in plain JSON both ways.

    `create` posts the body as it is (`plain_json_body`'s `extra_body` merged in: the same
    request on the wire) and hands back the parsed JSON — the reply, or each streamed chunk
    — as a dict, which LangChain reads as it reads the SDK's objects. The SDK would build
    a typed object field by field for every streamed chunk only for LangChain to dump it
    back into a dict (`model_dump`): per answer, more of the process's time than parsing
    it. Errors (HTTP statuses, an error event in the stream) are raised by the SDK as
    before. Everything else (`with_raw_response`, `parse`) is the SDK's own."""

    def __init__(self, completions: Any) -> None:
        self._completions = completions
        self._plain = _plain_posting_supported() and callable(getattr(completions, "_post", None))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._completions, name)

    async def create(self, **payload: Any) -> Any:
        """POST /chat/completions; the reply (or a stream of chunks) as parsed JSON."""
        from openai import AsyncStream, NotGiven
        from openai._base_client import make_request_options

        if "response_format" in payload or not self._plain:
            # structured output (the SDK's own checks), or an SDK whose request layer is
            # not the one this was written against: the SDK's own `create`
            return await self._completions.create(**payload)
        options = {key: payload.pop(key) for key in REQUEST_OPTIONS if key in payload}
        body = {**payload, **(options.pop("extra_body", None) or {})}
        timeout = options.pop("timeout", NotGiven())  # None stays None: no timeout
        return await self._completions._post(
            "/chat/completions",
            body=body,
            options=make_request_options(
                **options,
                timeout=timeout,
                security={"bearer_auth": True},
            ),
            cast_to=object,
            stream=bool(body.get("stream")),
            stream_cls=AsyncStream[object],
        )


@functools.cache
def _plain_posting_supported() -> bool:
    """Whether the installed openai SDK has the request layer `PlainJsonCompletions` uses
    (`make_request_options(security=…)`, `AsyncStream`; `_post` is checked on the client):
    private parts, so a newer SDK that changed them falls back to its public `create`."""
    import inspect

    try:
        from openai import AsyncStream  # noqa: F401
        from openai._base_client import make_request_options
    except ImportError:
        return False
    return "security" in inspect.signature(make_request_options).parameters


@functools.cache
def _chat_openai() -> Any:  # Any: a ChatOpenAI subclass, imported only when a model is made
    """ChatOpenAI sending Chat Completions requests through `plain_json_body` and reading
    the replies as plain JSON (`PlainJsonCompletions`)."""
    from langchain_openai import ChatOpenAI
    from pydantic import model_validator

    class PlainJsonChatOpenAI(ChatOpenAI):
        @model_validator(mode="after")
        def _plain_json_replies(self) -> Any:
            if self.async_client is not None and not isinstance(
                self.async_client, PlainJsonCompletions
            ):
                self.async_client = PlainJsonCompletions(self.async_client)
            return self

        def _get_request_payload(self, input_: Any, *, stop: Any = None, **kwargs: Any) -> dict:
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
            return payload if self._use_responses_api(payload) else plain_json_body(payload)

    return PlainJsonChatOpenAI


def endpoint_model(
    endpoint: Endpoint, timeout: float, metadata: dict | None = None
) -> BaseChatModel:
    """A ChatOpenAI for one endpoint (see `plain_json_body`)."""
    return _chat_openai()(
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


def routed_by(model: object) -> tuple[ModelRouter, str] | None:
    """The router that made `model` and its endpoint (None: a model made elsewhere)."""
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
                reason = retryable(exc)
                if reason is None and endpoint.tools and _refuses_tools(exc):
                    log.warning("model endpoint %s refuses tools; answering without", endpoint.name)
                    await _reset(sink)
                    endpoint = replace(endpoint, tools=False)
                    self._toolless[endpoint.name] = endpoint
                    continue
                if reason is None:
                    await _reset(sink)
                    give_up(exc)
                attempt += 1
                wait = retry_after(exc)
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

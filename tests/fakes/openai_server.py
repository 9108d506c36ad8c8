"""Local fake OpenAI-compatible HTTP server (aiohttp) for scripting model replies in tests.

Usage (``async with`` serves on the running loop, so call the model with ``ainvoke``/
``astream``; plain ``with`` serves from a background thread for synchronous code)::

    async with FakeOpenAI() as fake:
        fake.script("hello", tool_call("add_task", {"title": "milk"}))
        llm = ChatOpenAI(model="gpt-4o-mini", base_url=fake.base_url,
                         api_key="test", max_retries=0)

Endpoints: ``POST /v1/chat/completions`` (plain and SSE streaming),
``POST /v1/responses`` (plain and SSE streaming), ``POST /v1/embeddings`` and
``GET /v1/models`` (entries extended by :attr:`FakeOpenAI.model_fields`), and any native
metadata endpoint put in :attr:`FakeOpenAI.native` (Ollama's ``/api/show``, LM Studio's
``/api/v0/models``, llama.cpp's ``/props``).  Replies come from the FIFO queue filled by :meth:`FakeOpenAI.script`,
then from :attr:`FakeOpenAI.handler`, then from :attr:`FakeOpenAI.default_reply`.
Tool call ids are generated fresh for every reply unless given explicitly.

Notes for test authors:

* The openai SDK retries 429/5xx (and connection errors) itself, ``max_retries=2`` by
  default, honouring ``Retry-After``.  Build ``ChatOpenAI``/``OpenAIEmbeddings`` with
  ``max_retries=0`` to see errors from :meth:`FakeOpenAI.fail_next` directly; with
  retries on, each retry consumes one scripted failure.
* Failed requests are still recorded in :attr:`FakeOpenAI.requests`; a failure never
  consumes a scripted reply, so the reply goes to the next successful request.
* Streaming chat completions report usage only when the client sends
  ``stream_options.include_usage`` (``ChatOpenAI(stream_usage=True)``).
* ``OpenAIEmbeddings`` needs ``check_embedding_ctx_length=False`` offline (else tiktoken
  tries to download its vocabulary).  The openai SDK asks for base64 embeddings by
  default; both ``float`` and ``base64`` are served.
* langchain-openai caches its default httpx client per ``base_url`` for the whole process.
  With ``port=0`` this server never reuses a port within one process, so a client cached
  by an earlier test (bound to a closed event loop) is never picked up again; passing a
  fixed ``port`` in several async tests can hit that cached, dead client.  Every response
  carries ``Connection: close`` so no pooled socket outlives the server (no ResourceWarning).
* A sync ``llm.invoke`` inside ``async with FakeOpenAI()`` blocks the loop the server runs
  on and hangs: use ``ainvoke`` there, or ``with FakeOpenAI()`` (thread) for sync code.
* An exception raised by :attr:`FakeOpenAI.handler` becomes a plain 500 (logged by aiohttp).
* langchain-openai 1.7.3 does not turn OpenAI's real context-length 400 into
  ``ContextOverflowError`` with this openai SDK (it greps ``str(e)``, which holds only the
  message): check ``isinstance(e, openai.BadRequestError) and e.code ==
  "context_length_exceeded"``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json
import math
import re
import socket
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeOpenAI", "Reply", "embed", "text", "tool_call", "tool_calls"]

CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 128000 tokens. However, your messages "
    "resulted in 131072 tokens. Please reduce the length of the messages."
)
RESPONSES_CONTEXT_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
_DEFAULT_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided: test.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this model.", "invalid_request_error", None),
    404: ("The model does not exist.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}
_USED_PORTS: set[int] = set()
_WORD_RE = re.compile(r"\w+")


@dataclass
class Reply:
    """One scripted model answer: text and/or tool calls, token usage and latency."""

    content: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    delay: float = 0.0
    # Streaming only: the text's pieces (default: word by word), a pause before each
    # piece after the first, and a failure after that many pieces (an SSE error event,
    # as OpenAI sends when a stream breaks; the reply is used up).
    pieces: list[str] | None = None
    piece_delay: float = 0.0
    fail_after: int | None = None


def text(content: str, **kw: Any) -> Reply:
    """Return a plain text reply."""
    return Reply(content=content, **kw)


def tool_call(name: str, args: dict | str, id: str | None = None, **kw: Any) -> Reply:
    """Return a reply with one tool call (a ``str`` args is sent verbatim, e.g. bad JSON)."""
    return Reply(tool_calls=[{"name": name, "args": args, "id": id}], **kw)


def tool_calls(*calls: tuple, **kw: Any) -> Reply:
    """Return a reply with several tool calls, each ``(name, args)`` or ``(name, args, id)``."""
    parsed = [{"name": c[0], "args": c[1], "id": c[2] if len(c) > 2 else None} for c in calls]
    return Reply(tool_calls=parsed, **kw)


@dataclass
class _Failure:
    """A scripted HTTP error response."""

    status: int
    body: dict
    headers: dict
    responses_body: dict | None = None  # replaces ``body`` on /v1/responses when set


@dataclass
class _Call:
    """A tool call resolved for one response: fresh id and JSON arguments string."""

    id: str
    name: str
    arguments: str


@dataclass
class _Answer:
    """Everything needed to render one reply in any wire format."""

    model: str
    content: str
    calls: list[_Call]
    prompt_tokens: int
    completion_tokens: int
    pieces: list[str] | None = None
    piece_delay: float = 0.0
    fail_after: int | None = None

    @property
    def total_tokens(self) -> int:
        """Return prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def _new_id(prefix: str, size: int = 24) -> str:
    """Return an OpenAI-looking random id such as ``call_ab12...``."""
    return f"{prefix}{uuid.uuid4().hex[:size]}"


def _error_body(status: int, message: str | None, code: str | None) -> dict:
    """Return an OpenAI error body for ``status``."""
    default_msg, err_type, default_code = _DEFAULT_ERRORS.get(
        status,
        (
            f"Fake error {status}.",
            "server_error" if status >= 500 else "invalid_request_error",
            None,
        ),
    )
    return {
        "error": {
            "message": message or default_msg,
            "type": err_type,
            "param": None,
            "code": code if code is not None else default_code,
        }
    }


def _resolve_calls(calls: list[dict]) -> list[_Call]:
    """Give each scripted tool call an id and serialise its arguments."""
    out = []
    for c in calls:
        args = c.get("args", {})
        arguments = args if isinstance(args, str) else json.dumps(args)
        out.append(_Call(c.get("id") or _new_id("call_"), c["name"], arguments))
    return out


def _estimate(payload: Any) -> int:
    """Estimate tokens as characters / 4 (at least 1)."""
    raw = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    return max(1, len(raw) // 4)


def _make_answer(body: dict, reply: Reply) -> _Answer:
    """Resolve ``reply`` against the request ``body`` (ids, token counts)."""
    calls = _resolve_calls(reply.tool_calls)
    prompt = body.get("messages", body.get("input", ""))
    completion = reply.content + "".join(c.name + c.arguments for c in calls)
    return _Answer(
        model=body.get("model") or "gpt-4o-mini",
        content=reply.content,
        calls=calls,
        prompt_tokens=(
            reply.prompt_tokens if reply.prompt_tokens is not None else _estimate(prompt)
        ),
        completion_tokens=(
            reply.completion_tokens
            if reply.completion_tokens is not None
            else _estimate(completion)
        ),
        pieces=reply.pieces,
        piece_delay=reply.piece_delay,
        fail_after=reply.fail_after,
    )


def _text_pieces(a: _Answer) -> list[str]:
    """The streamed pieces of the answer's text: scripted, else word by word."""
    if a.pieces is not None:
        return [p for p in a.pieces if p]
    return [p for p in re.findall(r"\S*\s*", a.content) if p]


def _arg_piece(arguments: str) -> int:
    """Tool arguments stream 8 characters at a time, in at most ~64 pieces (huge ones too)."""
    return max(8, len(arguments) // 64 + 1)


def _split(value: str, size: int = 8) -> list[str]:
    """Split ``value`` into streaming pieces of ``size`` characters."""
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def _content_text(content: Any) -> str:
    """Return the text of a message ``content`` (string or list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _messages_of(body: dict) -> list[dict]:
    """Return the chat-style messages of a chat or Responses request body."""
    if "messages" in body:
        return list(body["messages"])
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    msgs = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    return msgs + [i for i in items if isinstance(i, dict) and "role" in i]


# ----------------------------------------------------------------- chat completions


def _usage_chat(a: _Answer) -> dict:
    """Return a Chat Completions ``usage`` object."""
    return {
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "total_tokens": a.total_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _tool_call_json(c: _Call) -> dict:
    """Return one Chat Completions ``tool_calls`` entry."""
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


def _finish_reason(a: _Answer) -> str:
    """Return ``tool_calls`` when the answer calls tools, else ``stop``."""
    return "tool_calls" if a.calls else "stop"


def _chat_completion(a: _Answer) -> dict:
    """Return a non-streaming ``chat.completion`` object."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": a.content if (a.content or not a.calls) else None,
        "refusal": None,
        "annotations": [],
    }
    if a.calls:
        message["tool_calls"] = [_tool_call_json(c) for c in a.calls]
    return {
        "id": _new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": a.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(a)}
        ],
        "usage": _usage_chat(a),
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _chat_deltas(a: _Answer) -> list[tuple[dict, str | None]]:
    """Return ``(delta, finish_reason)`` pairs for a streamed answer."""
    out: list[tuple[dict, str | None]] = [
        ({"role": "assistant", "content": "", "refusal": None}, None)
    ]
    if a.content:
        out += [({"content": piece}, None) for piece in _text_pieces(a)]
    for i, c in enumerate(a.calls):
        head = {
            "index": i,
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": ""},
        }
        out.append(({"tool_calls": [head]}, None))
        out += [
            ({"tool_calls": [{"index": i, "function": {"arguments": p}}]}, None)
            for p in _split(c.arguments, _arg_piece(c.arguments))
        ]
    out.append(({}, _finish_reason(a)))
    return out


def _chat_chunks(a: _Answer, include_usage: bool) -> list[dict]:
    """Return every ``chat.completion.chunk`` of a streamed answer, usage chunk last."""
    base = {
        "id": _new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": a.model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }
    chunks = []
    for delta, finish in _chat_deltas(a):
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunks.append({**base, "choices": [choice]} | ({"usage": None} if include_usage else {}))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": _usage_chat(a)})
    return chunks


# -------------------------------------------------------------------- responses API


def _usage_responses(a: _Answer) -> dict:
    """Return a Responses API ``usage`` object."""
    return {
        "input_tokens": a.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": a.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": a.total_tokens,
    }


def _message_item(msg_id: str, content: str, status: str = "completed") -> dict:
    """Return a Responses ``message`` output item."""
    parts = [_text_part(content)] if status == "completed" else []
    return {
        "type": "message",
        "id": msg_id,
        "status": status,
        "role": "assistant",
        "content": parts,
    }


def _text_part(content: str) -> dict:
    """Return an ``output_text`` content part."""
    return {"type": "output_text", "text": content, "annotations": [], "logprobs": []}


def _function_item(item_id: str, c: _Call, status: str = "completed") -> dict:
    """Return a Responses ``function_call`` output item."""
    arguments = c.arguments if status == "completed" else ""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": c.id,
        "name": c.name,
        "arguments": arguments,
        "status": status,
    }


def _output_items(a: _Answer) -> list[tuple[str, _Call | None]]:
    """Return ``(item_id, call)`` per output item; call is None for the text message."""
    items: list[tuple[str, _Call | None]] = []
    if a.content or not a.calls:
        items.append((_new_id("msg_", 32), None))
    items += [(_new_id("fc_", 32), c) for c in a.calls]
    return items


def _render_item(a: _Answer, item_id: str, call: _Call | None) -> dict:
    """Return the completed output item for ``(item_id, call)``."""
    return _message_item(item_id, a.content) if call is None else _function_item(item_id, call)


def _response_object(a: _Answer, body: dict, resp_id: str, items: list, status: str) -> dict:
    """Return a Responses API ``response`` object."""
    done = status == "completed"
    return {
        "id": resp_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": a.model,
        "output": [_render_item(a, i, c) for i, c in items] if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": _usage_responses(a) if done else None,
        "metadata": {},
    }


def _message_events(a: _Answer, idx: int, item_id: str) -> list[dict]:
    """Return the stream events of a text message output item."""
    ref = {"item_id": item_id, "output_index": idx, "content_index": 0}
    events = [
        {
            "type": "response.output_item.added",
            "output_index": idx,
            "item": _message_item(item_id, "", "in_progress"),
        },
        {"type": "response.content_part.added", **ref, "part": _text_part("")},
    ]
    events += [
        {"type": "response.output_text.delta", **ref, "delta": p, "logprobs": []}
        for p in _text_pieces(a)
    ]
    return [
        *events,
        {"type": "response.output_text.done", **ref, "text": a.content, "logprobs": []},
        {"type": "response.content_part.done", **ref, "part": _text_part(a.content)},
        {
            "type": "response.output_item.done",
            "output_index": idx,
            "item": _message_item(item_id, a.content),
        },
    ]


def _function_events(idx: int, item_id: str, c: _Call) -> list[dict]:
    """Return the stream events of a function call output item."""
    ref = {"item_id": item_id, "output_index": idx}
    events = [
        {
            "type": "response.output_item.added",
            "output_index": idx,
            "item": _function_item(item_id, c, "in_progress"),
        }
    ]
    events += [
        {"type": "response.function_call_arguments.delta", **ref, "delta": p}
        for p in _split(c.arguments, _arg_piece(c.arguments))
    ]
    return [
        *events,
        {
            "type": "response.function_call_arguments.done",
            **ref,
            "name": c.name,
            "arguments": c.arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": idx,
            "item": _function_item(item_id, c),
        },
    ]


def _response_events(a: _Answer, body: dict) -> list[dict]:
    """Return the full, sequence-numbered event list of a streamed Responses answer."""
    resp_id, items = _new_id("resp_", 32), _output_items(a)
    pending = _response_object(a, body, resp_id, items, "in_progress")
    events = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for idx, (item_id, call) in enumerate(items):
        events += (
            _message_events(a, idx, item_id)
            if call is None
            else _function_events(idx, item_id, call)
        )
    events.append(
        {
            "type": "response.completed",
            "response": _response_object(a, body, resp_id, items, "completed"),
        }
    )
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


# ----------------------------------------------------------------------- embeddings


def embed(value: str, dim: int) -> list[float]:
    """Return a deterministic unit vector: hashed bag of words, so shared words add similarity."""
    vec = [0.0] * dim
    tokens = _WORD_RE.findall(value.lower()) or [value]
    for token in tokens:
        digest = hashlib.sha256(token.encode()).digest()
        slot = int.from_bytes(digest[:4], "little") % dim
        vec[slot] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def _embedding_inputs(raw: Any) -> list[str]:
    """Normalise an embeddings ``input`` (str, list of str, or token lists) to strings."""
    if isinstance(raw, str):
        return [raw]
    if raw and all(isinstance(x, int) for x in raw):
        return [" ".join(map(str, raw))]
    return [x if isinstance(x, str) else " ".join(map(str, x)) for x in raw]


def _encode(vec: list[float], fmt: str | None) -> list[float] | str:
    """Encode a vector as floats or as base64 little-endian float32."""
    if fmt == "base64":
        return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
    return vec


# --------------------------------------------------------------------------- server


def _bind_socket(host: str, port: int) -> socket.socket:
    """Bind a listening TCP socket; with port 0 never reuse a port seen in this process."""
    rejected = []
    try:
        for _ in range(50):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            if port or sock.getsockname()[1] not in _USED_PORTS:
                _USED_PORTS.add(sock.getsockname()[1])
                return sock
            rejected.append(sock)
        raise RuntimeError("FakeOpenAI could not find a fresh port")
    finally:
        for extra in rejected:
            extra.close()


class FakeOpenAI:
    """Scriptable fake of the OpenAI HTTP API that records every request it receives."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Configure the server; call :meth:`start` (or use ``async with``) to listen."""
        self.host, self.port = host, port
        self.base_url = ""
        self.requests: list[dict] = []
        self.first_piece_at: list[float] = []  # time.monotonic() of each stream's first text
        self.embedding_requests: list[dict] = []
        self.handler: Callable[[dict], Reply | str | Awaitable[Reply | str]] | None = None
        self.default_reply: Reply = text("ok")
        self.delay = 0.0
        self.embedding_dim = 64
        self.embedding_failures = 0  # the next this many /v1/embeddings requests get a 500
        self._queue: deque[Reply] = deque()
        self._failures: deque[_Failure] = deque()
        self._fail_until = 0.0
        self._fail_status = 500
        self.clock: Callable[[], float] = time.monotonic  # what `fail_for` windows are timed by
        # A local server's own metadata: extra fields of /v1/models entries (vLLM's
        # max_model_len) and native endpoints ({("POST", "/api/show"): body}); others 404.
        self.model_fields: dict[str, dict] = {}
        self.native: dict[tuple[str, str], Any] = {}
        self.native_requests: list[str] = []
        # /v1/audio/transcriptions: each request's model, file name, type and size; the
        # replies (a transcript, or an int: that HTTP status) in order, then
        # ``default_transcript``; ``transcription_delay`` seconds before answering.
        self.transcription_requests: list[dict] = []
        self.transcripts: deque[str | int] = deque()
        self.default_transcript = "hello from a voice message"
        self.transcription_delay = 0.0
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start listening and set :attr:`base_url`."""
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_no_keep_alive])
        app.add_routes(
            [
                web.post("/v1/chat/completions", self._chat),
                web.post("/v1/responses", self._responses),
                web.post("/v1/embeddings", self._embeddings),
                web.post("/v1/audio/transcriptions", self._transcribe),
                web.get("/v1/models", self._models),
                web.get("/v1/models/{model}", self._model),
                web.route("*", "/{tail:.*}", self._native),
            ]
        )
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = _bind_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self.base_url = f"http://{self.host}:{self.port}/v1"

    async def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAI:
        """Start the server and return it."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop the server."""
        await self.stop()

    def __enter__(self) -> FakeOpenAI:
        """Start the server on its own event loop in a daemon thread (for sync callers)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the background server and its thread."""
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        self._loop, self._thread = None, None

    # ---------------------------------------------------------------- scripting

    def script(self, *replies: Reply | str) -> None:
        """Append replies to the FIFO queue; a ``str`` means ``text(str)``."""
        self._queue.extend(text(r) if isinstance(r, str) else r for r in replies)

    def fail_next(
        self,
        status: int,
        times: int = 1,
        *,
        message: str | None = None,
        code: str | None = None,
        headers: dict | None = None,
    ) -> None:
        """Make the next ``times`` chat/responses requests fail with an OpenAI error body."""
        failure = _Failure(status, _error_body(status, message, code), dict(headers or {}))
        self._failures.extend([failure] * times)

    def fail_context_length(self, times: int = 1) -> None:
        """Make the next ``times`` requests fail with OpenAI's context_length_exceeded 400."""
        chat_body = _error_body(400, CONTEXT_LENGTH_MESSAGE, "context_length_exceeded")
        chat_body["error"]["param"] = "messages"
        resp_body = _error_body(400, RESPONSES_CONTEXT_MESSAGE, "context_length_exceeded")
        resp_body["error"]["param"] = "input"
        self._failures.extend([_Failure(400, chat_body, {}, resp_body)] * times)

    def fail_for(self, seconds: float, status: int = 500) -> None:
        """Make every chat/responses request fail with ``status`` for ``seconds`` from now
        (``math.inf``: until :meth:`recover`)."""
        self._fail_until = self.clock() + seconds
        self._fail_status = status

    def recover(self) -> None:
        """End an outage started by :meth:`fail_for` now."""
        self._fail_until = 0.0

    @property
    def pending(self) -> int:
        """Return how many scripted replies are still queued."""
        return len(self._queue)

    # --------------------------------------------------------------- inspection

    def _last(self) -> dict:
        """Return the last chat/responses request body or fail clearly."""
        if not self.requests:
            raise AssertionError("FakeOpenAI has not received any chat/responses request")
        return self.requests[-1]

    def last_system_prompt(self) -> str:
        """Return the text of the system/developer message(s) of the last request."""
        msgs = _messages_of(self._last())
        roles = ("system", "developer")
        return "\n".join(_content_text(m.get("content")) for m in msgs if m.get("role") in roles)

    def last_user_text(self) -> str:
        """Return the text of the last user message of the last request."""
        users = [m for m in _messages_of(self._last()) if m.get("role") == "user"]
        return _content_text(users[-1].get("content")) if users else ""

    def last_tool_names(self) -> list[str]:
        """Return the names of the tools offered in the last request."""
        tools = self._last().get("tools") or []
        return [t.get("function", t).get("name", "") for t in tools]

    # ----------------------------------------------------------------- handlers

    def _failure(self) -> _Failure | None:
        """Pop the scripted failure for this request, if any."""
        if self._failures:
            return self._failures.popleft()
        if self.clock() < self._fail_until:
            return _Failure(self._fail_status, _error_body(self._fail_status, None, None), {})
        return None

    async def _next_reply(self, body: dict) -> Reply:
        """Return the next reply: queue, then handler, then the default reply."""
        if self._queue:
            return self._queue.popleft()
        if self.handler is None:
            return self.default_reply
        reply = self.handler(body)
        if inspect.isawaitable(reply):
            reply = await reply
        return text(reply) if isinstance(reply, str) else reply

    async def _prepare(self, request: web.Request) -> tuple[dict, _Answer | web.Response]:
        """Record the request and return its body plus an answer or an error response."""
        try:
            body = await request.json()
        except ValueError:
            return {}, _json_error(_Failure(400, _error_body(400, "Invalid JSON body.", None), {}))
        self.requests.append(body)
        failure = self._failure()
        if failure is not None:
            return body, _json_error(failure, request.path.endswith("/responses"))
        reply = await self._next_reply(body)
        await asyncio.sleep(self.delay + reply.delay)
        return body, _make_answer(body, reply)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        """Serve ``POST /v1/chat/completions``."""
        body, answer = await self._prepare(request)
        if isinstance(answer, web.Response):
            return answer
        if not body.get("stream"):
            return web.json_response(_chat_completion(answer))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = (("", c) for c in _chat_chunks(answer, usage))
        return await _sse(request, chunks, done=True, answer=answer, seen=self.first_piece_at)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """Serve ``POST /v1/responses``."""
        body, answer = await self._prepare(request)
        if isinstance(answer, web.Response):
            return answer
        if not body.get("stream"):
            items = _output_items(answer)
            return web.json_response(
                _response_object(answer, body, _new_id("resp_", 32), items, "completed")
            )
        events = ((e["type"], e) for e in _response_events(answer, body))
        return await _sse(request, events, done=False, answer=answer, seen=self.first_piece_at)

    async def _embeddings(self, request: web.Request) -> web.Response:
        """Serve ``POST /v1/embeddings`` with deterministic unit vectors."""
        body = await request.json()
        self.embedding_requests.append(body)
        if self.embedding_failures > 0:
            self.embedding_failures -= 1
            return web.json_response(_error_body(500, None, None), status=500)
        dim = int(body.get("dimensions") or self.embedding_dim)
        fmt = body.get("encoding_format")
        inputs = _embedding_inputs(body.get("input", []))
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(embed(s, dim), fmt)}
            for i, s in enumerate(inputs)
        ]
        tokens = sum(_estimate(s) for s in inputs)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "text-embedding-3-small"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _transcribe(self, request: web.Request) -> web.Response:
        """OpenAI's speech-to-text: a multipart form with ``model`` and ``file``."""
        form = await request.post()
        upload = form.get("file")
        data = upload.file.read() if hasattr(upload, "file") else b""
        self.transcription_requests.append({
            "model": form.get("model"), "filename": getattr(upload, "filename", None),
            "content_type": getattr(upload, "content_type", None), "size": len(data),
        })
        if self.transcription_delay:
            await asyncio.sleep(self.transcription_delay)
        reply = self.transcripts.popleft() if self.transcripts else self.default_transcript
        if isinstance(reply, int):
            return web.json_response(_error_body(reply, "Invalid file format.", None),
                                     status=reply)
        return web.json_response({"text": reply})

    def image_parts(self, request: dict | None = None) -> list[dict]:
        """The ``image_url`` content parts of a chat request (default: the last one)."""
        body = request if request is not None else self._last()
        return [part for m in _messages_of(body) if isinstance(m.get("content"), list)
                for part in m["content"] if part.get("type") == "image_url"]

    async def _models(self, request: web.Request) -> web.Response:
        """Serve ``GET /v1/models``."""
        names = ["gpt-4o-mini", "gpt-4o", "text-embedding-3-small", *self.model_fields]
        data = [{**_model_json(n), **self.model_fields.get(n, {})} for n in names]
        return web.json_response({"object": "list", "data": data})

    async def _native(self, request: web.Request) -> web.Response:
        """Serve a native metadata endpoint set in :attr:`native` (else 404)."""
        self.native_requests.append(f"{request.method} {request.path}")
        key = (request.method, request.path)
        if key not in self.native:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(self.native[key])

    async def _model(self, request: web.Request) -> web.Response:
        """Serve ``GET /v1/models/{model}``."""
        return web.json_response(_model_json(request.match_info["model"]))


@web.middleware
async def _no_keep_alive(request: web.Request, handler: Callable) -> web.StreamResponse:
    """Answer with ``Connection: close`` so no client keeps sockets to a stopped server."""
    resp = await handler(request)
    if not resp.prepared:
        resp.force_close()
    return resp


def _model_json(name: str) -> dict:
    """Return a ``model`` object."""
    return {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake-openai"}


def _json_error(failure: _Failure, responses_api: bool = False) -> web.Response:
    """Return the HTTP error response for ``failure`` (Responses variant if it has one)."""
    headers = {"x-request-id": _new_id("req_"), **failure.headers}
    body = failure.responses_body if responses_api and failure.responses_body else failure.body
    return web.json_response(body, status=failure.status, headers=headers)


async def _sse(
    request: web.Request,
    events: Iterable,
    *,
    done: bool,
    answer: _Answer | None = None,
    seen: list[float] | None = None,
) -> web.StreamResponse:
    """Write ``(event_name, data)`` pairs as server-sent events, then ``[DONE]`` if asked.

    Text pieces are paced by ``answer.piece_delay`` (on a fixed schedule from the first
    piece, as a model generates regardless of how fast it is read); after ``answer.fail_after`` pieces the
    stream ends with an error event instead (what OpenAI sends when a stream breaks)."""
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    resp.force_close()
    await resp.prepare(request)
    pause = answer.piece_delay if answer is not None else 0.0
    fail_after = answer.fail_after if answer is not None else None
    pieces, started = 0, time.monotonic()
    for name, data in events:
        if _is_text_piece(data):
            if fail_after is not None and pieces >= fail_after:
                error = _error_body(500, "The server had an error while streaming.", None)
                await resp.write(f"data: {json.dumps(error)}\n\n".encode())
                await resp.write_eof()
                return resp
            if not pieces:
                started = time.monotonic()
            elif pause:  # piece n is due n pauses after the first, however slow the reader
                await asyncio.sleep(max(0.0, started + pieces * pause - time.monotonic()))
            if not pieces and seen is not None:
                seen.append(time.monotonic())
            pieces += 1
        prefix = f"event: {name}\n" if name else ""
        await resp.write(f"{prefix}data: {json.dumps(data)}\n\n".encode())
    if done:
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _is_text_piece(data: dict) -> bool:
    """True for a chunk/event carrying a piece of the answer's text."""
    if data.get("type") == "response.output_text.delta":
        return True
    choices = data.get("choices") or []
    return bool(choices and choices[0].get("delta", {}).get("content"))

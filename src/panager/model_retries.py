"""What a failed model call means, and when to call again.

A 429, a 5xx, a timeout, a refused connection or a stream that broke off is
worth another attempt (`retryable`); a prompt over the context window is
`ContextOverflow`; anything else is given up at once, as one sentence
(`UNAVAILABLE_MESSAGE`). `with_retries` is the plain policy — exponential
backoff with jitter, honouring `Retry-After` — for a model on no router and for
the last endpoint of a fallback list (model_router.py); llm.py holds the calls.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import NoReturn, Protocol

import openai
from langchain_core.messages import AIMessage

from panager.errors import ContextOverflow, ModelUnavailable

log = logging.getLogger("panager.llm")

UNAVAILABLE_MESSAGE = (
    "The model service is not answering right now ({reason}), so I could not reply — your "
    "message is kept, please try again in a minute."
)
CONTEXT_ERROR_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "too many tokens",
    "prompt is too long",
    "request too large",
)


def is_context_overflow(exc: BaseException) -> bool:
    """True for 400/413 errors that say the prompt is over the context window."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 413):
        return False
    code = str(getattr(exc, "code", "") or "")
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in CONTEXT_ERROR_MARKERS)


def retry_after(exc: BaseException) -> float | None:
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


def retryable(exc: BaseException) -> str | None:
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


def backoff_delay(
    attempt: int, retry_after: float | None, *, base: float = 0.5, cap: float = 30.0
) -> float:
    """Seconds before retry `attempt` (1-based): Retry-After if given, else jittered backoff."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap)
    return min(cap, base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


class TextSink(Protocol):
    """Where a streamed reply's text goes while it arrives."""

    async def delta(self, text: str) -> None:
        """A new piece of the reply's text."""

    async def reset(self, restarted_on: str | None = None) -> None:
        """Forget the text sent so far (a tool-call reply, or the call starts over;
        `restarted_on`: on that fallback endpoint)."""


def raise_if_cancelled() -> None:
    """Raise the cancellation of the running task if something below swallowed it (Python
    3.11's `asyncio.wait_for` returns a result that arrived as its caller was cancelled);
    the task still counts the request, so a Ctrl+C is never lost."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def give_up(exc: Exception) -> NoReturn:
    """A failure not worth retrying: one sentence for an API error, else the error itself."""
    if isinstance(exc, openai.APIStatusError):
        log.warning("model API error %s", exc.status_code)
        raise ModelUnavailable(
            UNAVAILABLE_MESSAGE.format(reason=f"error {exc.status_code}")
        ) from exc
    raise exc


async def with_retries(
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
            reason = retryable(exc)
            if reason is None:
                give_up(exc)
            attempt += 1
            if attempt > retries:
                log.warning("model API failed after %d attempts: %s", attempt, reason)
                raise ModelUnavailable(UNAVAILABLE_MESSAGE.format(reason=reason)) from exc
            delay = backoff_delay(attempt, retry_after(exc))
            log.info("model API %s; retry %d in %.1fs", reason, attempt, delay)
            await sleep(delay)

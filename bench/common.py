"""Shared pieces of the benchmarks: a throwaway database, a policy-driven fake model, stats.

The database is real PostgreSQL (the embedded `pgserver` one in a temp dir, or
`DATABASE_URL` when set); each run creates and drops its own database.
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/x.py` from a checkout
    sys.path.insert(0, str(ROOT))


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at database `name`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def create_bench_database(
    prefix: str = "bench", data_dir: str = "panager-bench-pg"
) -> tuple[str, str]:
    """(server URL, URL of a fresh migrated database) on the embedded server or DATABASE_URL's."""
    import os

    from panager.db import migrate
    from panager.db.embedded import start_embedded
    from panager.db.pool import open_pool

    server = os.environ.get("DATABASE_URL") or start_embedded(
        Path(tempfile.gettempdir()) / data_dir
    )
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server, name)
    pool = await open_pool(url, max_size=2)
    try:
        await migrate.upgrade(url, pool)
    finally:
        await pool.close()
    return server, url


@asynccontextmanager
async def bench_database() -> AsyncIterator[str]:
    """A fresh, migrated database (see create_bench_database); dropped after."""
    server, url = await create_bench_database()
    try:
        yield url
    finally:
        from urllib.parse import urlsplit

        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


Policy = Callable[[list[BaseMessage]], AIMessage]
SUMMARY_REPLY = (
    '{"summary": "The user asked a series of numbered questions; each was looked up.", '
    '"memories": []}'
)


def is_summary_request(messages: list[BaseMessage]) -> bool:
    """True for the compaction effect's summary request."""
    return bool(messages) and "You compact a conversation" in str(messages[0].content)


def one_tool_call_policy(tool_name: str, args: Callable[[str], dict]) -> Policy:
    """Reply to a user message with one call of `tool_name`, and to its result with text."""

    def policy(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if is_summary_request(messages):
            return AIMessage(content=SUMMARY_REPLY)
        if isinstance(last, HumanMessage):
            call = {"name": tool_name, "args": args(str(last.content)), "id": _id("call_")}
            return AIMessage(content="", tool_calls=[call])
        return AIMessage(content="Done: " + str(messages[-1].content)[:40])

    return policy


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:16]


class PolicyModel(BaseChatModel):
    """A zero-delay chat model whose reply is computed from the request by `policy`.

    Every reply is a fresh message (new id) with usage metadata; with `record`,
    the prompt size of each request (approximate tokens, system prompt included)
    is kept, and whether it was a compaction summary request.
    """

    policy: Any
    model_name: str = "bench-model"
    record: bool = False
    delay: float = 0.0  # seconds per call (a remote or local model's latency)
    count_tools: bool = False  # recorded prompt tokens include the tool schemas sent
    _prompt_tokens: list[int] = PrivateAttr(default_factory=list)
    _summary_calls: list[bool] = PrivateAttr(default_factory=list)
    _tool_tokens: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "bench-policy"

    @property
    def prompt_tokens(self) -> list[int]:
        """Approximate prompt tokens of every request (when `record` is on)."""
        return self._prompt_tokens

    @property
    def summary_calls(self) -> list[bool]:
        """For each recorded request: True when it was a compaction summary request."""
        return self._summary_calls

    def bind_tools(self, tools: Any, **kwargs: Any) -> PolicyModel:
        """Tools are decided by the policy; binding only notes the schemas' size."""
        self._tool_tokens = sum(len(json.dumps(t, default=str)) // 4 for t in tools)
        return self

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        tokens = count_tokens_approximately(messages) if self.record else 0
        if self.record:
            summary = is_summary_request(messages)
            if self.count_tools and not summary:  # a summary request is sent without tools
                tokens += self._tool_tokens
            self._prompt_tokens.append(tokens)
            self._summary_calls.append(summary)
        step = self.policy(messages)
        message = AIMessage(
            content=step.content,
            tool_calls=step.tool_calls,
            id=_id("run-"),
            usage_metadata={
                "input_tokens": tokens,
                "output_tokens": 5,
                "total_tokens": tokens + 5,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages, stop=None, run_manager=None, **kw: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(self, messages, stop=None, run_manager=None, **kw: Any) -> ChatResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._reply(messages)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) by linear interpolation."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def machine_line() -> str:
    """One line describing where the numbers were measured."""
    return (
        f"machine: {platform.machine()}, python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}, date {date.today().isoformat()}"
    )

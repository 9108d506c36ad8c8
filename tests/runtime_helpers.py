"""Helpers shared by the agent-runtime tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from panager.agent.graph.effects import ModelCall
from panager.agent.graph.state import TurnContext
from panager.services.users import User


def a_user(user_id: int = 1, tz: str = "UTC") -> User:
    """A User value (not stored) for unit tests of effects."""
    return User(user_id, f"u{user_id}", None, tz, "user", "active", None, datetime.now(UTC))


def model_call(messages: list[AnyMessage], **kw) -> ModelCall:
    """A before-phase ModelCall over `messages` for a test user."""
    ctx = kw.pop("turn", None) or TurnContext(user=a_user())
    return ModelCall(
        phase="before",
        iteration=kw.pop("iteration", 1),
        messages=list(messages),
        model_input=list(messages),
        model_name=kw.pop("model_name", "scripted"),
        turn=ctx,
        state=kw.pop("state", {}),
        **kw,
    )


def exchange(n: int, result: str = "x" * 2000, *, ids: bool = True) -> list[AnyMessage]:
    """Turn n of a conversation: question, tool call, tool result, answer (ids set)."""
    call_id = f"call_{n}"
    return [
        HumanMessage(f"question {n}", id=f"h{n}" if ids else None),
        AIMessage("", id=f"a{n}", tool_calls=[{"name": "lookup", "args": {"n": n}, "id": call_id}]),
        ToolMessage(result, id=f"t{n}", tool_call_id=call_id, name="lookup"),
        AIMessage(f"answer {n}", id=f"b{n}"),
    ]


def conversation(turns: int, result: str = "x" * 2000) -> list[AnyMessage]:
    """`turns` exchanges in a row."""
    return [m for n in range(turns) for m in exchange(n, result)]


def write_config(home: Path, **values) -> Path:
    """Write $PANAGER_HOME/config.yaml with `values`."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return home


def pairs_intact(messages: list[AnyMessage]) -> bool:
    """Every tool call has exactly one result after it, and every result has its call."""
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    return sorted(results) == sorted(calls) and len(set(results)) == len(results)


def lookup_tools(size: int = 2000):
    """A tool factory whose `lookup` returns `size` characters."""

    def factory(deps, user):
        @tool
        async def lookup(n: int = 0) -> str:
            """Look something up."""
            return f"result {n} " + "y" * size

        return [lookup]

    return factory

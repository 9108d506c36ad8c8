"""Per-user tools reuse one argument schema and one OpenAI schema per tool."""

from __future__ import annotations

from langchain_core.tools import tool as langchain_tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from panager.agent.graph.tool import tool
from panager.agent.tools import build_tools
from panager.llm import openai_tool


def make(suffix: str):
    async def remind(message: str, at: str, repeat: str | None = None) -> dict:
        """Remind the user of something.

        at: ISO 8601."""
        return {"message": message + suffix, "at": at, "repeat": repeat}

    return remind


async def test_cached_tool_matches_langchain_and_reuses_the_schema():
    ours, again = tool(make("a")), tool(make("b"))
    reference = langchain_tool(make("c"))
    assert ours.args_schema is again.args_schema  # built once
    assert convert_to_openai_tool(ours) == convert_to_openai_tool(reference)
    assert ours.description == reference.description
    assert (await again.ainvoke({"message": "x", "at": "9"}))["message"] == "xb"  # own closure


async def test_every_users_tools_share_schemas_and_convert_once(make_app):
    app = await make_app()
    one = await app.deps.users.ensure(11, "one")
    two = await app.deps.users.ensure(22, "two")
    first, second = build_tools(app.deps, one), build_tools(app.deps, two)
    assert [t.name for t in first] == [t.name for t in second]
    for a, b in zip(first, second, strict=True):
        assert a.args_schema is b.args_schema
        assert openai_tool(a) == openai_tool(b) == convert_to_openai_tool(a)
        assert openai_tool(a) is not openai_tool(a)  # callers get their own copy

"""Compaction on real Postgres: the checkpointed thread shrinks, tool pairs stay intact,
memories are saved, a failed summary falls back to truncation, and a context-length
error from the (fake) model API compacts and retries."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from panager.agent import tools as tools_pkg
from panager.agent.commands import CommandContext, dispatch
from panager.agent.turns.threads import thread_values, update_thread
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.scripted_model import ScriptedChatModel, call, calls
from tests.runtime_helpers import conversation, lookup_tools, pairs_intact, write_config

WINDOW = 6_000
SUMMARY = {"summary": "The user looked up many numbers.", "memories": ["The user likes tea."]}


def is_summary_request(messages) -> bool:
    first = messages[0]
    return isinstance(first, SystemMessage) and "You compact a conversation" in first.content


def policy(summary_reply):
    """Scripted model: summary requests → summary_reply(); a user message → lookup; else answer."""

    def step(messages):
        if is_summary_request(messages):
            return summary_reply()
        if isinstance(messages[-1], HumanMessage):
            return calls(call("lookup", {"n": len(messages)}))
        return "answered"

    return step


def humans(messages) -> list[str]:
    return [m.text.removesuffix(PADDING) for m in messages if isinstance(m, HumanMessage)]


PADDING = " and tell me what it says about the budget, the schedule and the team" * 4


async def long_chat(app, user, turns: int) -> None:
    for i in range(turns):
        result = await app.assistant.run_turn(user, f"please look up item {i}{PADDING}")
        assert result.ok and result.text == "answered", result.text


async def test_compaction_removes_messages_from_the_checkpoint(make_app, tmp_path, monkeypatch):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [lookup_tools(2_000)])
    model = ScriptedChatModel(script=[policy(lambda: json.dumps(SUMMARY))] * 200)
    app = await make_app(model=model, home=write_config(tmp_path / "h", context_window=WINDOW))
    names = [e.name for e in app.graph_config.effects]
    assert names == ["usage", "token_budget", "trim_tool_results", "compact"]  # the defaults
    user = await app.local_user()
    await long_chat(app, user, 25)
    values = await thread_values(app.assistant, user)
    messages = values["messages"]
    # removed from the checkpointed state, not just the prompt
    assert len(messages) < 25 * 4 * 3 / 4 and "please look up item 0" not in humans(messages)
    assert values["summary"] == SUMMARY["summary"]
    assert pairs_intact(messages) and isinstance(messages[0], HumanMessage)
    assert messages[-2].tool_call_id and messages[-1].text == "answered"
    turn_requests = [r for r in model.requests if not is_summary_request(r)]
    assert max(count_tokens_approximately(r) for r in turn_requests) < WINDOW
    summaries = [r for r in model.requests if is_summary_request(r)]
    assert summaries and "please look up item 0" in summaries[0][1].content
    assert "The user looked up many numbers." in turn_requests[-1][0].content  # in the prompt
    memories = await app.deps.memory.list(user.id)
    assert [m.content for m in memories] == ["The user likes tea."]
    assert memories[0].source == "compaction"


async def test_summary_failure_falls_back_to_truncation(make_app, tmp_path, monkeypatch):
    def broken():
        raise RuntimeError("summariser down")

    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [lookup_tools(2_000)])
    model = ScriptedChatModel(script=[policy(broken)] * 200)
    app = await make_app(
        model=model, home=write_config(tmp_path / "h", context_window=WINDOW, daily_token_budget=0)
    )
    user = await app.local_user()
    await long_chat(app, user, 30)
    values = await thread_values(app.assistant, user)
    assert len(values["messages"]) < 30 * 4 and pairs_intact(values["messages"])
    assert "please look up item 0" not in humans(values["messages"])
    assert "removed without a summary" in values["summary"]
    assert "- please look up item 1" in values["summary"]  # the latest removed requests


async def test_compact_command_on_demand(make_app, tmp_path):
    model = ScriptedChatModel(script=[json.dumps(SUMMARY)])
    app = await make_app(model=model, home=write_config(tmp_path / "h", context_window=0))
    user = await app.local_user()
    ctx = CommandContext(user=user, assistant=app.assistant)
    assert "Nothing to compact" in (await dispatch(ctx, "/compact")).text
    await update_thread(app.assistant, user, {"messages": conversation(12)})
    reply = await dispatch(ctx, "/compact")
    assert reply.ok and "removed" in reply.text and "saved 1 memories" in reply.text
    values = await thread_values(app.assistant, user)
    assert len(values["messages"]) < 48 and pairs_intact(values["messages"])
    assert values["summary"] == SUMMARY["summary"]
    assert len(model.requests) == 1  # only the summary call


async def test_context_length_error_compacts_and_retries(make_app):
    async with FakeOpenAI() as srv:
        app = await make_app(openai_base_url=srv.base_url, openai_api_key="test")
        user = await app.local_user()
        await update_thread(app.assistant, user, {"messages": conversation(8, result="r" * 300)})
        srv.fail_context_length()
        srv.script(json.dumps({"summary": "Eight lookups.", "memories": []}), "fits now")
        result = await app.assistant.run_turn(user, "one more thing")
        assert result.ok and result.text == "fits now"
        assert len(srv.requests) == 3  # refused, summary, retry
        retry = srv.requests[2]["messages"]
        assert len(retry) < len(srv.requests[0]["messages"])
        assert "Eight lookups." in retry[0]["content"]
        values = await thread_values(app.assistant, user)
        assert values["summary"] == "Eight lookups." and pairs_intact(values["messages"])
        assert values["messages"][-2].content == "one more thing"


async def test_context_length_error_after_two_retries_keeps_the_message(make_app):
    async with FakeOpenAI() as srv:
        app = await make_app(openai_base_url=srv.base_url, openai_api_key="test")
        user = await app.local_user()
        await update_thread(app.assistant, user, {"messages": conversation(4, result="r" * 300)})
        srv.fail_context_length(times=10)  # every request, summaries included
        result = await app.assistant.run_turn(user, "too long?")
        assert not result.ok and "too long for the model" in result.text
        values = await thread_values(app.assistant, user)
        assert values["messages"][-1].content == "too long?"  # the message is kept
        assert not isinstance(values["messages"][-1], AIMessage | ToolMessage)

"""The graph on real Postgres: tool round-trips, parallel tools, errors, repair, limits."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from panager.agent import tools as tools_pkg
from panager.agent.graph.build import promote_unparsed_calls, unique_call_ids
from panager.agent.graph.confirm_node import UNPARSED_CALLS
from panager.errors import ToolError
from tests.fakes.scripted_model import ScriptedChatModel, call, calls


async def thread(app, user):
    """The checkpointed messages of the user's thread."""
    snap = await app.assistant.graph.aget_state(app.assistant.config_for(user))
    return (snap.values or {}).get("messages", [])


def sleepy_tools(deps, user):
    """Test tools bound to the user by closure."""

    @tool
    async def nap(label: str) -> dict:
        """Sleep 200 ms and echo the label."""
        await asyncio.sleep(0.2)
        return {"label": label, "user": user.id}

    @tool
    async def boom(x: int) -> str:
        """Always fails with a tool error."""
        raise ToolError(f"boom {x} is not allowed; use a value below 3")

    @tool
    async def crash() -> str:
        """Fails with an unexpected exception."""
        raise RuntimeError("secret internal detail")

    return [nap, boom, crash]


async def test_text_reply_is_checkpointed(make_app):
    model = ScriptedChatModel(script=["hello there"])
    app = await make_app(model=model)
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "hi")
    assert result.ok and result.text == "hello there"
    msgs = await thread(app, user)
    assert [type(m).__name__ for m in msgs] == ["HumanMessage", "AIMessage"]


@pytest.mark.timing
async def test_parallel_tools_run_concurrently(make_app, monkeypatch):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [sleepy_tools])
    model = ScriptedChatModel(
        script=[
            calls(
                call("nap", {"label": "a"}),
                call("nap", {"label": "b"}),
                call("nap", {"label": "c"}),
            ),
            "done",
        ]
    )
    app = await make_app(model=model)
    user = await app.local_user()
    spans: dict[str, list[float]] = {}
    loop = asyncio.get_running_loop()
    app.emitter.subscribe(
        lambda e: (
            spans.setdefault(e.data.get("id", ""), []).append(loop.time())
            if e.type in ("tool_start", "tool_end")
            else None
        )
    )
    start = time.perf_counter()
    result = await app.assistant.run_turn(user, "nap three times")
    elapsed = time.perf_counter() - start
    assert result.text == "done"
    # all three started before any finished: they overlapped, not ran one after another
    assert len(spans) == 3
    assert max(s[0] for s in spans.values()) < min(s[1] for s in spans.values())
    assert elapsed < 0.6 * 2, (
        f"three 200 ms tools took {elapsed:.3f}s"
    )  # serial would be >= 0.6 s of sleep alone
    results = [m for m in await thread(app, user) if isinstance(m, ToolMessage)]
    assert [m.content for m in results] == [
        '{"label":"a","user":1}',
        '{"label":"b","user":1}',
        '{"label":"c","user":1}',
    ]


async def test_tool_errors_become_error_messages(make_app, monkeypatch):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [sleepy_tools])
    model = ScriptedChatModel(
        script=[
            calls(
                call("boom", {"x": 5}),
                call("crash"),
                call("nope", {}),
                call("boom", {"x": "not a number"}),
            ),
            "recovered",
        ]
    )
    app = await make_app(model=model)
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "break things")
    assert result.ok and result.text == "recovered"
    results = [m for m in await thread(app, user) if isinstance(m, ToolMessage)]
    assert len(results) == 4 and all(m.status == "error" for m in results)
    assert "use a value below 3" in results[0].content
    assert (
        "RuntimeError" in results[1].content and "secret internal detail" not in results[1].content
    )
    assert "Unknown tool 'nope'" in results[2].content and "nap" in results[2].content
    assert "Invalid arguments" in results[3].content and "x" in results[3].content
    # the model saw every error result paired with its call
    last_request = model.requests[-1]
    assert sum(isinstance(m, ToolMessage) for m in last_request) == 4


async def test_dangling_tool_call_is_repaired(make_app):
    model = ScriptedChatModel(script=["fine again"])
    app = await make_app(model=model)
    user = await app.local_user()
    config = app.assistant.config_for(user)
    dangling = AIMessage(content="", tool_calls=[{"name": "nap", "args": {}, "id": "call_x"}])
    await app.assistant.graph.aupdate_state(
        config, {"messages": [HumanMessage("earlier", id="h1"), dangling]}, as_node="agent"
    )
    result = await app.assistant.run_turn(user, "are you there?")
    assert result.ok and result.text == "fine again"
    msgs = await thread(app, user)
    kinds = [type(m).__name__ for m in msgs]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert msgs[2].tool_call_id == "call_x" and msgs[2].status == "error"


async def test_max_iterations_ends_gracefully(make_app, monkeypatch, tmp_path):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [sleepy_tools])
    loop_forever = lambda messages: calls(call("boom", {"x": 1}))  # noqa: E731
    model = ScriptedChatModel(script=[loop_forever] * 3 + ["best effort answer"])
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text("max_iterations: 4\n")
    app = await make_app(model=model, home=home)
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "loop")
    assert result.text == "best effort answer"
    assert len(model.requests) == 4
    # the last call is made without tools and says so
    assert "limit of tool calls" in model.requests[-1][0].content


async def test_two_users_threads_never_mix(make_app):
    model = ScriptedChatModel()  # echoes the last message
    app = await make_app(model=model)
    alice = await app.deps.users.ensure(111, "alice")
    bob = await app.deps.users.ensure(222, "bob")
    a, b = await asyncio.gather(
        app.assistant.run_turn(alice, "alice secret"), app.assistant.run_turn(bob, "bob secret")
    )
    assert a.text == "echo: alice secret" and b.text == "echo: bob secret"
    alice_text = " ".join(str(m.content) for m in await thread(app, alice))
    bob_text = " ".join(str(m.content) for m in await thread(app, bob))
    assert "bob" not in alice_text and "alice" not in bob_text


async def test_cancelled_turn_leaves_a_valid_thread(make_app, monkeypatch):
    started = asyncio.Event()

    def slow_tools(deps, user):
        @tool
        async def slow() -> str:
            """Takes a long time."""
            started.set()
            await asyncio.sleep(30)
            return "late"

        return [slow]

    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [slow_tools])
    model = ScriptedChatModel(script=[calls(call("slow")), "after cancel"])
    app = await make_app(model=model)
    user = await app.local_user()
    task = asyncio.create_task(app.assistant.run_turn(user, "do the slow thing"))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    result = await app.assistant.run_turn(user, "still there?")
    assert result.ok and result.text == "after cancel"
    msgs = await thread(app, user)
    results = [m for m in msgs if isinstance(m, ToolMessage)]
    assert len(results) == 1 and results[0].status == "error"
    assert msgs[-2].content == "still there?"


async def test_over_long_and_hostile_input(make_app):
    model = ScriptedChatModel()
    app = await make_app(model=model)
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "x" * 20_000)
    assert not result.ok and "20,000 characters" in result.text and "limit is 8,000" in result.text
    assert model.requests == []
    result = await app.assistant.run_turn(user, "hi\x00 there \ud800!")
    assert result.ok and result.text == "echo: hi there ?!"


def test_calls_sharing_an_id_get_distinct_ids_and_an_unparsed_mark_stays_with_its_call():
    """A reply whose calls share one id (a valid call and one with bad JSON): the second
    gets a fresh id, the "unparsed" mark follows it; distinct ids are left alone."""
    shared = AIMessage(
        content="",
        tool_calls=[{"name": "a", "args": {}, "id": "x", "type": "tool_call"}],
        invalid_tool_calls=[
            {"name": "b", "args": "{bad", "id": "x", "error": None, "type": "invalid_tool_call"}
        ],
    )
    fixed = promote_unparsed_calls(unique_call_ids(shared))
    first, second = (c["id"] for c in fixed.tool_calls)
    assert first == "x" and second not in ("x", None)
    assert fixed.additional_kwargs[UNPARSED_CALLS] == {second: True}
    apart = calls(call("a", id="p"), call("b", id="q"))
    assert unique_call_ids(apart) is apart

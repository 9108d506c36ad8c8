"""Events: the documented order, structured logs without bodies, per-user session recording."""

from __future__ import annotations

import asyncio
import json
import logging

from langchain_core.tools import tool

from panager.agent import tools as tools_pkg
from panager.agent.commands import CommandContext, dispatch
from panager.services.sessions import parse_session
from tests.fakes.scripted_model import ScriptedChatModel, call, calls


def two_tools(deps, user):
    """A slow and a fast tool, so they finish in the opposite order of their start."""

    @tool
    async def slow(label: str) -> str:
        """Takes 150 ms."""
        await asyncio.sleep(0.15)
        return f"slow {label}"

    @tool
    async def fast(label: str) -> str:
        """Takes 10 ms."""
        await asyncio.sleep(0.01)
        return f"fast {label} secret-result"

    return [slow, fast]


async def parallel_turn(make_app, monkeypatch, **settings):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [two_tools])
    model = ScriptedChatModel(
        script=[calls(call("slow", {"label": "a"}), call("fast", {"label": "b"})), "both done"]
    )
    app = await make_app(model=model, **settings)
    user = await app.local_user()
    events = []
    app.emitter.subscribe(events.append)
    result = await app.assistant.run_turn(user, "run both, my secret question")
    assert result.text == "both done"
    return app, user, events


async def test_events_arrive_in_the_documented_order(make_app, monkeypatch):
    _, user, events = await parallel_turn(make_app, monkeypatch)
    seen = [(e.type, e.data.get("name")) for e in events]
    assert seen == [
        ("agent_start", None),
        ("turn_start", None),  # model call 1
        ("message_end", None),  # its reply: two tool calls
        ("tool_start", "slow"),  # started in call order, concurrently
        ("tool_start", "fast"),
        ("tool_end", "fast"),  # finished in completion order
        ("tool_end", "slow"),
        ("turn_end", None),
        ("turn_start", None),  # model call 2
        ("message_delta", None),  # the answer's text as it streams (one piece here)
        ("message_end", None),  # the answer, whole
        ("turn_end", None),
        ("agent_end", None),
    ]
    assert all(e.user_id == user.id for e in events)
    assert events[2].data["tool_calls"] == ["slow", "fast"]
    assert events[9].data == {"iteration": 2, "text": "both done"}
    assert events[10].data["text"] == "both done" and events[10].data["usage"]["input_tokens"] > 0


async def test_json_logs_leave_out_bodies_unless_debugging(make_app, monkeypatch, caplog):
    with caplog.at_level(logging.INFO, logger="panager.events"):
        await parallel_turn(make_app, monkeypatch)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "panager.events"]
    assert [line["event"] for line in lines][:3] == ["agent_start", "turn_start", "message_end"]
    assert {"tool_start", "tool_end", "agent_end"} <= {line["event"] for line in lines}
    dumped = json.dumps(lines)
    assert "secret" not in dumped and "both done" not in dumped
    assert lines[2]["tool_calls"] == ["slow", "fast"] and lines[2]["usage"]["total_tokens"] > 0
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="panager.events"):
        await parallel_turn(make_app, monkeypatch)
    debug = " ".join(r.getMessage() for r in caplog.records if r.name == "panager.events")
    assert "both done" in debug and "secret-result" in debug


async def test_session_recording_is_jsonl_with_a_parent_chain(make_app, monkeypatch, tmp_path):
    home = tmp_path / "rec"
    app, user, _ = await parallel_turn(make_app, monkeypatch, home=home)
    path = home / "sessions" / f"{user.id}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    objects = [json.loads(line) for line in lines]  # every line parses on its own
    header, messages = objects[0], objects[1:]
    assert header["type"] == "session" and header["user_id"] == user.id
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert all(m["id"] and m["timestamp"] for m in messages)
    assert messages[0]["parent_id"] is None
    assert [m["parent_id"] for m in messages[1:]] == [m["id"] for m in messages[:-1]]
    assert messages[1]["tool_calls"][0]["name"] == "slow"
    assert {m["tool_call_id"] for m in messages[2:4]} == {c["id"] for c in messages[1]["tool_calls"]}
    assert len(parse_session(path.read_text()).messages) == 5  # /load can read a recording
    # a second turn continues the same file and chain
    app.graph_config.model.add("again")
    await app.assistant.run_turn(user, "once more")
    more = [json.loads(line) for line in path.read_text().splitlines()]
    assert more[6]["parent_id"] == messages[-1]["id"] and more[-1]["content"] == "again"
    assert sum(1 for o in more if o["type"] == "session") == 1


async def test_debug_snapshot_shows_state_usage_and_recent_actions(make_app, monkeypatch):
    app, user, _ = await parallel_turn(make_app, monkeypatch)
    reply = await dispatch(CommandContext(user=user, assistant=app.assistant), "/debug")
    text = reply.text
    assert "messages: 5 (≈" in text and "summary: none" in text and "loaded skills: none" in text
    assert "usage today:" in text and "scripted" in text
    assert "tool fast → success" in text and "tool slow → success" in text
    assert "model scripted → slow, fast" in text

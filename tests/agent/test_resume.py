"""A message seen again after a crash (`message_key` + `resume`) is answered once."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from panager.agent.turns.threads import thread_values, update_thread
from tests.fakes.scripted_model import ScriptedChatModel, call


async def humans(app, user) -> list[str]:
    messages = (await thread_values(app.assistant, user))["messages"]
    return [m.content for m in messages if isinstance(m, HumanMessage)]


async def test_an_answer_given_before_the_crash_is_returned_without_a_model_call(make_app):
    model = ScriptedChatModel(script=["the answer"])
    app = await make_app(model=model)
    user = await app.local_user()
    first = await app.assistant.run_turn(user, "question", message_key="discord-1")
    assert first.text == "the answer" and len(model.requests) == 1
    again = await app.assistant.run_turn(user, "question", message_key="discord-1", resume=True)
    assert again.text == "the answer" and len(model.requests) == 1
    assert await humans(app, user) == ["question"]


async def test_a_message_in_the_thread_without_an_answer_is_continued_in_place(make_app):
    model = ScriptedChatModel(script=[call("schedule_list"), "continued"])
    app = await make_app(model=model)
    user = await app.local_user()
    stranded = AIMessage("", tool_calls=[{"name": "schedule_list", "args": {}, "id": "c1"}])
    await update_thread(
        app.assistant, user, {"messages": [HumanMessage("question", id="discord-2"), stranded]}
    )
    result = await app.assistant.run_turn(user, "question", message_key="discord-2", resume=True)
    assert result.text == "continued"
    assert await humans(app, user) == ["question"]  # not added a second time


async def test_a_message_that_never_reached_the_thread_is_a_normal_turn(make_app):
    app = await make_app(model=ScriptedChatModel(script=["fresh"]))
    user = await app.local_user()
    result = await app.assistant.run_turn(user, "question", message_key="discord-3", resume=True)
    assert result.text == "fresh" and await humans(app, user) == ["question"]

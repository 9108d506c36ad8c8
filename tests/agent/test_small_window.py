"""Small context windows stay cheap: compaction leaves room (hysteresis), what it keeps is a
token budget (older messages shortened first), a message larger than the whole window is
answered cut with a note, the newest message is never cut otherwise, and summary calls are
counted in usage and shown by /debug. Real Postgres, scripted model."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from panager.agent.commands import CommandContext, dispatch
from panager.agent.graph.effects.compact import Compact
from panager.agent.graph.history import SHORTENED_KEY, fit_newest, keep_plan
from panager.agent.turns.threads import thread_values
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import conversation, model_call, pairs_intact, write_config

WINDOW = 4_000
SUMMARY = json.dumps({"summary": "The user talked about their week.", "memories": []})


def is_summary(messages) -> bool:
    return isinstance(messages[0], SystemMessage) and "You compact a conversation" in str(
        messages[0].content
    )


def prose(seed: int, size: int = 700) -> str:
    words = ["meeting", "garden", "Mina", "budget", "train", "coffee", "draft", "Tuesday"]
    text, i = [], seed
    while sum(len(w) + 1 for w in text) < size:
        text.append(f"{words[i % len(words)]}{i}")
        i += 7
    return " ".join(text)[:size]


def chatty(messages):
    """Script step: a summary for summary requests, else a ~700-character answer."""
    if is_summary(messages):
        return SUMMARY
    return "Answer: " + prose(len(messages))


def bound_tokens(model) -> int:
    """Tokens of the tool schemas last bound (as sent: OpenAI-format dicts)."""
    return sum(len(json.dumps(t, ensure_ascii=False)) // 4 for t in model.bound_tools)


def request_tokens(request, tools) -> int:
    """What one request sends: the messages plus the schemas of the tools offered with it."""
    return count_tokens_approximately(request) + (0 if is_summary(request) else tools)


async def small_app(make_app, tmp_path, **config):
    model = ScriptedChatModel(script=[chatty] * 400)
    home = write_config(tmp_path / "h", context_window=WINDOW, **config)
    app = await make_app(model=model, home=home)
    return app, model


async def test_24_turns_of_700_characters_make_at_most_6_summaries_inside_the_window(
    make_app, tmp_path
):
    app, model = await small_app(make_app, tmp_path)
    user = await app.local_user()
    for i in range(24):
        result = await app.assistant.run_turn(user, prose(i * 13))
        assert result.ok and result.text.startswith("Answer: ")
    summaries = [r for r in model.requests if is_summary(r)]
    print(f"summaries in 24 turns: {len(summaries)}")
    assert 1 <= len(summaries) <= 6, len(summaries)
    tools = bound_tokens(model)
    assert max(request_tokens(r, tools) for r in model.requests) <= WINDOW
    values = await thread_values(app.assistant, user)
    assert values["compactions"] == len(summaries) and values["last_compaction"]
    assert values["messages"][-2].content == prose(23 * 13)  # the newest message, whole


async def test_summary_calls_are_counted_in_usage_and_shown_by_debug(make_app, tmp_path, clock):
    app, model = await small_app(make_app, tmp_path, daily_token_budget=1_000_000)
    user = await app.local_user()
    for i in range(12):
        assert (await app.assistant.run_turn(user, prose(i))).ok
    summaries = sum(is_summary(r) for r in model.requests)
    assert summaries >= 1
    today = (await app.deps.usage.report(user)).today
    assert sum(r.calls for r in today) == len(model.requests)  # summaries included
    assert await app.deps.usage.today_total(user) == sum(r.total for r in today)  # the budget's
    text = (await dispatch(CommandContext(user=user, assistant=app.assistant), "/debug")).text
    assert f"compactions: {summaries} " in text
    assert f"last {clock.now():%Y-%m-%d %H:%M:%S}" in text


async def test_a_message_longer_than_the_window_is_answered_cut_with_a_note(make_app, tmp_path):
    app, model = await small_app(make_app, tmp_path, max_message_chars=40_000)
    user = await app.local_user()
    assert (await app.assistant.run_turn(user, "hello")).ok
    huge = prose(1, 20_000)  # ~5,000 tokens: more than the whole window
    result = await app.assistant.run_turn(user, huge)
    assert result.ok and result.text.startswith("Answer: ")
    turn = model.requests[1:]
    answered = [r for r in turn if not is_summary(r)]
    assert len(answered) == 1 and len(turn) <= 2  # answered once, no loop
    sent = answered[0][-1]
    assert isinstance(sent, HumanMessage) and sent.content.startswith(huge[:2_000])
    assert "20,000 characters" in sent.content and "only the first" in sent.content
    tools = bound_tokens(model)
    assert request_tokens(answered[0], tools) <= WINDOW
    stored = await thread_values(app.assistant, user)
    assert huge in [m.content for m in stored["messages"]]  # the thread keeps it whole
    after = len(model.requests)
    assert (await app.assistant.run_turn(user, "and now?")).ok  # the next turn works too
    assert all(request_tokens(r, tools) <= WINDOW for r in model.requests[after:])
    assert model.requests[-1][-1].content == "and now?"


async def test_older_long_texts_are_shortened_in_what_is_sent_before_any_summary():
    model = ScriptedChatModel(script=[SUMMARY])
    effect = Compact(context_window=WINDOW)
    turns = [m for i in range(8) for m in (HumanMessage(prose(i), id=f"h{i}"),
                                           AIMessage(prose(i + 1), id=f"a{i}"))]
    newest = HumanMessage(prose(99, 1_500), id="now")
    call_ = model_call([*turns, newest], model=model)
    assert effect.estimate(call_) > 0.8 * WINDOW
    await effect.before_model(call_)
    assert model.requests == []  # no summary call: shortening what is sent was enough
    assert effect.estimate(call_, reported=False) <= 0.8 * WINDOW
    assert all(SHORTENED_KEY in m.additional_kwargs for m in call_.model_input[:-1])
    assert call_.model_input[-1] is newest
    assert call_.messages == [*turns, newest] and not call_.state_updates  # thread whole


async def test_compaction_leaves_the_prompt_at_the_target():
    model = ScriptedChatModel(script=[SUMMARY])
    effect = Compact(context_window=WINDOW)
    turns = [m for i in range(14) for m in (HumanMessage(prose(i), id=f"h{i}"),
                                            AIMessage(prose(i + 1), id=f"a{i}"))]
    newest = HumanMessage(prose(99, 1_500), id="now")
    call_ = model_call([*turns, newest], model=model)
    assert effect.estimate(call_) > 0.8 * WINDOW
    await effect.before_model(call_)
    assert len(model.requests) == 1
    assert effect.estimate(call_, reported=False) <= 0.4 * WINDOW
    assert call_.model_input[-1] is newest  # the newest message is never cut or copied


def test_keep_plan_shortens_tool_results_first_then_long_texts():
    messages = conversation(6, result="r" * 2_000)
    messages[-5] = AIMessage("a" * 2_000, id=messages[-5].id)  # a long answer, previous turn
    previous = {m.id for m in messages[-8:-4]}
    whole = count_tokens_approximately(messages[-8:])
    cut, shortened = keep_plan(messages, keep_tokens=whole)
    assert cut == len(messages) - 8 and shortened == []  # fits whole: kept whole
    cut, shortened = keep_plan(messages, keep_tokens=whole - 200)
    assert cut <= len(messages) - 8
    assert [m.id for m in shortened if m.id in previous] == ["t4"]  # its result, not its text
    current = count_tokens_approximately(messages[-4:])
    cut, shortened = keep_plan(messages, keep_tokens=current + 250)
    assert cut == len(messages) - 8 and {m.id for m in shortened} == {"t4", "b4"}
    assert all(m.additional_kwargs[SHORTENED_KEY] == 2_000 for m in shortened)
    assert all("shortened when the conversation was compacted" in m.content for m in shortened)
    assert pairs_intact(messages[cut:])
    assert keep_plan(messages, keep_tokens=current) == (len(messages) - 4, [])  # current whole


def test_fit_newest_cuts_only_a_message_larger_than_the_room():
    fits = [*conversation(1), HumanMessage("n" * 8_000, id="now")]
    kept, cut = fit_newest(fits, 2_500)
    assert not cut and kept[-1].content == "n" * 8_000
    too_big = [HumanMessage("n" * 40_000, id="now")]
    kept, cut = fit_newest(too_big, 2_500)
    assert cut and count_tokens_approximately(kept) <= 2_500
    assert kept[0].content.startswith("n" * 5_000) and "40,000 characters" in kept[0].content
    assert too_big[0].content == "n" * 40_000  # the stored message object is untouched

"""Effects one by one: thresholds, defaults, and the registry built from YAML."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage

from panager.agent import tools as tools_pkg
from panager.agent.graph.effects.compact import Compact
from panager.agent.graph.effects.loop_detect import LoopDetect
from panager.agent.graph.effects.registry import (
    EffectServices,
    build_effects,
    resolve_context_window,
)
from panager.agent.graph.effects.summary import digest_summary, parse_summary
from panager.agent.graph.effects.trim import TRIMMED_KEY, TrimToolResults
from panager.agent.graph.effects.windows import context_window_for
from panager.agent.graph.history import keep_plan
from panager.config import ConfigError, EffectSpec, RuntimeConfig
from tests.fakes.scripted_model import ScriptedChatModel, call, calls
from tests.runtime_helpers import (
    conversation,
    lookup_tools,
    model_call,
    pairs_intact,
    write_config,
)

# -- trim_tool_results ------------------------------------------------------------------------


async def test_trim_defaults_keep_four_newest_and_cut_older_to_500():
    messages = conversation(6)
    call = model_call(messages)
    call.phase, call.response = "after", AIMessage("ok")
    await TrimToolResults().after_model(call)
    trimmed = [m for m in call.state_updates if isinstance(m, ToolMessage)]
    assert [m.id for m in trimmed] == ["t0", "t1"]  # 6 results, the 4 newest preserved
    for m in trimmed:
        assert m.content.startswith("x" * 500) and "trimmed: 1,500 of 2,000" in m.content
        assert m.additional_kwargs[TRIMMED_KEY] == 2000
    assert all(len(m.content) == 2000 for m in call.messages if m.id in {"t2", "t5"})


async def test_trim_thresholds_errors_and_never_twice():
    messages = conversation(3, result="z" * 300)
    messages[2] = messages[2].model_copy(update={"status": "error", "content": "e" * 900})
    effect = TrimToolResults(max_result_length=100, preserve_recent=1)
    call = model_call(messages)
    call.response = AIMessage("ok")
    await effect.after_model(call)
    assert [m.id for m in call.state_updates] == ["t1"]  # t0 is an error, t2 is preserved
    again = model_call(call.messages)
    again.response = AIMessage("ok")
    await effect.after_model(again)
    assert again.state_updates == []  # already trimmed: never twice


def test_trim_rejects_bad_params():
    with pytest.raises(ValueError):
        TrimToolResults(max_result_length=10)


# -- loop_detect ---------------------------------------------------------------------------------


def _looping(times: int, args: dict | None = None) -> list:
    msgs = [HumanMessage("find it", id="h")]
    for i in range(times):
        msgs.append(AIMessage("", id=f"a{i}", tool_calls=[call("search", args or {"q": "x"}, id=f"c{i}")]))
        msgs.append(ToolMessage("nothing", id=f"t{i}", tool_call_id=f"c{i}", name="search"))
    return msgs


async def test_loop_detect_notes_once_at_three_then_stops_on_the_fourth():
    effect = LoopDetect()
    two = model_call(_looping(2))
    await effect.before_model(two)
    assert two.system_notes == []
    three = model_call(_looping(3))
    await effect.before_model(three)
    assert len(three.system_notes) == 1 and "search" in three.system_notes[0]
    again = model_call(_looping(3), turn=three.turn)
    await effect.before_model(again)
    assert again.system_notes == []  # one note per turn
    again.response = calls(call("search", {"q": "x"}))
    await effect.after_model(again)
    assert not again.response.tool_calls and "kept repeating" in again.response.text


async def test_loop_detect_ignores_different_arguments_and_earlier_turns():
    effect = LoopDetect(max_repeats=2)
    varied = model_call([*_looping(1, {"q": "a"}), *_looping(1, {"q": "b"})[1:]])
    varied.response = calls(call("search", {"q": "c"}))
    await effect.after_model(varied)
    assert varied.response.tool_calls
    older = model_call([*_looping(2), HumanMessage("new question", id="h2")])
    await effect.before_model(older)
    assert older.system_notes == []


# -- compact (pure parts) ------------------------------------------------------------------------


def test_keep_plan_cuts_at_user_messages_and_keeps_the_current_turn():
    messages = conversation(10)
    cut, _ = keep_plan(messages, keep_tokens=1_200)
    assert isinstance(messages[cut], HumanMessage) and 0 < cut < len(messages) - 4
    assert pairs_intact(messages[cut:])
    assert keep_plan(messages, keep_tokens=0) == (len(messages) - 4, [])  # current turn kept
    assert keep_plan(messages[:4], keep_tokens=0) == (0, [])  # nothing older to remove


def test_parse_summary_accepts_json_fences_and_plain_text():
    text = '```json\n{"summary": "Met Bob.", "memories": ["Bob is a friend", 3, ""]}\n```'
    assert parse_summary(text, 100) == ("Met Bob.", ["Bob is a friend"])
    assert parse_summary("just text", 100) == ("just text", [])
    with pytest.raises(ValueError):
        parse_summary("  ", 100)


def test_digest_summary_lists_the_removed_requests_within_the_cap():
    digest = digest_summary("old summary", conversation(3), 2_000)
    assert digest.startswith("old summary") and "12 earlier messages" in digest
    assert "- question 2" in digest
    assert len(digest_summary("s" * 5_000, conversation(3), 1_000)) <= 1_000


async def test_compact_below_threshold_does_nothing_then_trims_then_removes():
    model = ScriptedChatModel(script=['{"summary": "Lookups 0-7 done.", "memories": []}'])
    effect = Compact(context_window=6_000, history_max_tokens=100_000)
    small = model_call(conversation(2), context_window=6_000, model=model)
    await effect.before_model(small)
    assert small.state_updates == [] and model.requests == []
    # over 80% of 6,000: trimming old results is enough
    medium = model_call(conversation(9), model=model)
    await effect.before_model(medium)
    assert medium.state_updates and all(isinstance(m, ToolMessage) for m in medium.state_updates)
    assert model.requests == []
    # still over once every older result is shortened: summarise and remove (tool pairs
    # intact, current turn kept)
    big = model_call([*conversation(60), HumanMessage("now", id="now")], model=model)
    await effect.before_model(big)
    removed = {m.id for m in big.state_updates if isinstance(m, RemoveMessage)}
    assert removed and "now" not in removed
    assert big.state_patch["summary"] == "Lookups 0-7 done."
    assert pairs_intact(big.model_input) and big.model_input[-1].id == "now"
    assert len(model.requests) == 1


async def test_compact_with_window_zero_is_off():
    effect = Compact(context_window=0)
    call_ = model_call(conversation(40), context_window=8_000)
    await effect.before_model(call_)
    assert call_.state_updates == []


# -- registry and config -----------------------------------------------------------------------


def test_context_windows_per_family():
    assert context_window_for("gpt-4o-mini") == 128_000
    assert context_window_for("openai/gpt-4.1-mini") == 1_047_576
    assert context_window_for("llama3.1:8b") == 128_000
    assert context_window_for("llama3:8b") == 8_192
    assert context_window_for("my-local-model") == 8_192  # the default: compaction stays on
    assert resolve_context_window(RuntimeConfig(context_window=0), "gpt-4o") is None
    assert resolve_context_window(RuntimeConfig(context_window=9_000), "x") == 9_000


def test_defaults_trim_and_compact_unless_the_config_turns_them_off():
    names = lambda effects: [e.name for e in effects]  # noqa: E731
    unlimited = {"daily_token_budget": 0}
    assert names(build_effects(RuntimeConfig(), EffectServices(), "gpt-4o-mini")) == [
        "token_budget", "trim_tool_results", "compact"  # a daily budget by default
    ]
    assert names(build_effects(RuntimeConfig(**unlimited), EffectServices(), "unknown-model")) == [
        "trim_tool_results", "compact"  # an unknown model gets the default window
    ]
    assert names(
        build_effects(RuntimeConfig(context_window=0, **unlimited), EffectServices(), "gpt-4o")
    ) == []
    assert names(
        build_effects(RuntimeConfig(context_window=8_000, **unlimited), EffectServices(), "unknown")
    ) == ["trim_tool_results", "compact"]
    budget = RuntimeConfig(daily_token_budget=1_000)
    assert names(build_effects(budget, EffectServices(), "unknown")) == [
        "token_budget", "trim_tool_results", "compact"
    ]
    assert names(build_effects(RuntimeConfig(effects=[]), EffectServices(), "gpt-4o")) == []


def test_configured_effects_get_params_and_bad_ones_fail_in_one_line():
    config = RuntimeConfig(
        context_window=10_000,
        effects=[
            EffectSpec(kind="loop_detect", params={"max_repeats": 4}),
            EffectSpec(kind="compact", params={"threshold": 0.5}),
            EffectSpec(kind="trim_tool_results", params={"max_result_length": 300}),
        ],
    )
    loop, compact, trim = build_effects(config, EffectServices(), "x")
    assert loop.max_repeats == 4 and trim.max_result_length == 300
    assert compact.threshold == 0.5 and compact.context_window == 10_000
    for spec, fragment in [
        (EffectSpec(kind="nope"), "unknown kind 'nope'"),
        (EffectSpec(kind="compact", params={"treshold": 1}), "no parameter 'treshold'"),
        (EffectSpec(kind="compact", params={"threshold": 3}), "threshold must be"),
        (EffectSpec(kind="token_budget"), "daily_tokens"),
    ]:
        with pytest.raises(ConfigError, match=fragment):
            build_effects(RuntimeConfig(effects=[spec], daily_token_budget=0), EffectServices(), "x")


async def test_yaml_effects_reach_the_graph(make_app, tmp_path, monkeypatch):
    monkeypatch.setattr(tools_pkg, "TOOL_FACTORIES", [lookup_tools()])
    home = write_config(
        tmp_path / "h",
        effects=[{"kind": "trim_tool_results", "params": {"preserve_recent": 1}}],
    )
    model = ScriptedChatModel(
        script=[calls(call("lookup", {"n": 1})), calls(call("lookup", {"n": 2})), "done"]
    )
    app = await make_app(model=model, home=home)
    assert [e.name for e in app.graph_config.effects] == ["usage", "trim_tool_results"]
    user = await app.local_user()
    assert (await app.assistant.run_turn(user, "look twice")).text == "done"
    snap = await app.assistant.graph.aget_state(app.assistant.config_for(user))
    results = [m for m in snap.values["messages"] if isinstance(m, ToolMessage)]
    assert len(results[0].content) < 600 and len(results[1].content) > 2000

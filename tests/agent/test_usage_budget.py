"""Token usage per user/day/model, /usage, and the daily token budget."""

from __future__ import annotations

from datetime import UTC, datetime

from panager.agent.commands import CommandContext, dispatch
from panager.agent.turns.threads import thread_values
from panager.services.usage import UsageReport
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import write_config


async def command(app, user, text):
    return await dispatch(CommandContext(user=user, assistant=app.assistant), text)


async def test_usage_is_recorded_per_user_day_and_model(make_app, clock):
    model = ScriptedChatModel(default="fine")
    app = await make_app(model=model)
    alice = await app.deps.users.ensure(111, "alice")
    bob = await app.deps.users.ensure(222, "bob", timezone="Asia/Seoul")
    await app.assistant.run_turn(alice, "hello there")
    await app.assistant.run_turn(alice, "and again")
    usage = app.deps.usage
    report = await usage.report(alice)
    assert [r.model for r in report.today] == ["scripted"] and report.today[0].calls == 2
    row = report.today[0]
    assert row.total == row.prompt + row.completion and row.prompt > 0 and row.completion == 10
    assert (await usage.report(bob)).all_time == []  # nothing crosses users
    clock.advance(days=1)
    model.model_name = "other-model"
    await app.assistant.run_turn(alice, "next day")
    report = await usage.report(alice)
    assert [r.model for r in report.today] == ["other-model"]
    assert {r.model for r in report.month} == {"scripted", "other-model"}
    assert UsageReport.total(report.all_time) == UsageReport.total(report.month)
    text = (await command(app, alice, "/usage")).text
    assert "Today (2026-11-22, UTC)" in text and "This month" in text and "All time" in text
    assert "other-model" in text and "scripted" in text


async def test_the_usage_day_is_the_utc_date_whatever_the_users_zone(make_app, clock):
    app = await make_app(model=ScriptedChatModel(default="ok"))
    seoul = await app.deps.users.ensure(333, "minji", timezone="Asia/Seoul")
    clock.set(datetime(2026, 11, 21, 16, 0, tzinfo=UTC))  # 01:00 on the 22nd in Seoul
    assert str(app.deps.usage.today()) == "2026-11-21"
    await app.assistant.run_turn(seoul, "hello")
    assert "Today (2026-11-21, UTC)" in (await command(app, seoul, "/usage")).text


async def test_budget_refusal_costs_zero_model_calls(make_app, tmp_path, clock):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home)
    assert [e.name for e in app.graph_config.effects] == ["usage", "token_budget"]
    user = await app.local_user()
    first = await app.assistant.run_turn(user, "spend tokens " * 40)
    assert first.ok and len(model.requests) == 1
    refused = await app.assistant.run_turn(user, "one more question")
    assert "today's token budget" in refused.text and "resets at midnight" in refused.text
    assert len(model.requests) == 1  # no model call at all
    messages = (await thread_values(app.assistant, user))["messages"]
    assert messages[-2].content == "one more question"  # the message is still kept
    assert (await command(app, user, "/usage")).ok  # commands keep working
    clock.advance(days=1)
    assert (await app.assistant.run_turn(user, "new day")).text.startswith("a fairly long")


async def test_budget_warns_once_at_eighty_percent(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=1_000, context_window=0)
    model = ScriptedChatModel(default="ok")
    app = await make_app(model=model, home=home)
    user = await app.local_user()
    small = await app.assistant.run_turn(user, "hi")
    assert "Heads-up" not in small.text
    big = await app.assistant.run_turn(user, "x" * 3_000)  # ≈ 800 tokens: over 80%
    assert "Heads-up: you have used" in big.text and "of today's token budget" in big.text
    again = await app.assistant.run_turn(user, "short")
    assert "Heads-up" not in again.text  # once a day


async def test_admins_of_every_front_end_are_not_capped(make_app, tmp_path):
    home = write_config(tmp_path / "h", daily_token_budget=60, context_window=0)
    model = ScriptedChatModel(default="a fairly long answer to use up the budget")
    app = await make_app(model=model, home=home, telegram_admin_ids=[4242])
    boss = (await app.deps.access.admit_identity("telegram", 4242, "boss")).user
    other = (await app.deps.access.admit_identity("telegram", 4343, "other")).user
    await app.deps.users.set_status(other.id, "active")
    other = await app.deps.users.get(other.id)
    for who in (boss, other):
        await app.assistant.run_turn(who, "spend tokens " * 40)
    assert "today's token budget" not in (await app.assistant.run_turn(boss, "more")).text
    assert "today's token budget" in (await app.assistant.run_turn(other, "more")).text


async def test_recording_usage_adds_up_and_leaves_the_pooled_connection_as_it_was(
    make_app,
):
    """RECORD turns synchronous_commit off for its own statement (one round trip): the pooled
    connection that ran it commits other people's data as usual afterwards."""
    from panager.services.usage import RECORD

    app = await make_app()
    alice = await app.deps.users.ensure(111, "alice")
    params = {"user_id": alice.id, "day": app.deps.usage.today(), "model": "m",
              "prompt": 3, "completion": 4, "total": 7}
    async with app.pool.connection() as conn:
        for _ in range(2):
            await conn.execute(RECORD, params)
        after = await (await conn.execute("SHOW synchronous_commit")).fetchone()
        assert after["synchronous_commit"] == "on"
    (row,) = (await app.deps.usage.report(alice)).today
    assert (row.model, row.calls, row.total) == ("m", 2, 14)

"""A model per kind of work: background work on `background_model`; agent schedules keep
their creator's model, re-checked at every run, and a fallback's answer says so.

Two local fake OpenAI servers; the scheduler worker runs on the injected FakeClock."""

from __future__ import annotations

import math

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from panager.agent.flows.jobs import Item, SystemJobs
from panager.agent.models import current_model
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.runtime_helpers import write_config
from tests.scheduler_helpers import RecordingMessenger, worker


@pytest.fixture
async def servers():
    async with FakeOpenAI() as first, FakeOpenAI() as second:
        yield first, second


async def pinned_app(make_app, tmp_path, servers):
    """Default llama3.1 (second server); gpt-4o (first) may be picked and falls back."""
    first, second = servers
    home = write_config(tmp_path / "h", allowed_models=["llama3.1", "gpt-4o"], models={
        "gpt-4o": {"base_url": first.base_url, "fallback": ["llama3.1"]},
        "llama3.1": {"base_url": second.base_url},
    })
    app = await make_app(openai_base_url=second.base_url, openai_api_key="k",
                         PANAGER_MODEL="llama3.1", home=home)
    recorder = RecordingMessenger()
    app.deps.messenger.add(recorder)
    user = await app.local_user()
    await app.deps.users.set_model(user.id, "gpt-4o")
    user = await app.deps.users.get(user.id)
    schedule = await app.deps.scheduler.create(
        user, "Summarise my day.", "12:05", kind="agent", model=current_model(app.deps, user)
    )
    assert schedule.params == {"model": "gpt-4o"}
    await app.deps.users.set_model(user.id, None)  # the person moves on; the task keeps gpt-4o
    return app, recorder, user


async def test_a_scheduled_run_pinned_to_a_model_that_is_down_is_delivered_marked(
    make_app, tmp_path, servers, clock
):
    first, second = servers
    app, recorder, user = await pinned_app(make_app, tmp_path, servers)
    first.clock = lambda: clock.now().timestamp()
    first.fail_for(math.inf, 503)
    second.script("Your day is calm.")
    clock.advance(minutes=6)
    assert await worker(app).run_once() == 1
    [text] = recorder.texts(user.id)
    assert "Your day is calm." in text
    assert text.count("(answered by llama3.1: gpt-4o is not answering)") == 1
    assert len(first.requests) == 1  # the pinned model was asked first


async def test_a_pin_no_longer_allowed_runs_on_the_default_marked(
    make_app, tmp_path, servers, clock
):
    first, second = servers
    app, recorder, user = await pinned_app(make_app, tmp_path, servers)
    app.deps.config.allowed_models = ["llama3.1"]  # the operator narrowed the list
    second.script("Your day is calm.")
    clock.advance(minutes=6)
    assert await worker(app).run_once() == 1
    [text] = recorder.texts(user.id)
    assert "Your day is calm." in text
    assert ("(run on llama3.1: gpt-4o, the model this was set up with, is not available "
            "to you now)") in text
    assert first.requests == []


async def test_a_heartbeat_decided_by_a_fallback_says_so_once(make_app, tmp_path, servers, clock):
    first, second = servers
    home = write_config(tmp_path / "h", background_model="small", models={
        "gpt-4o": {"base_url": first.base_url},
        "small": {"base_url": second.base_url, "model": "qwen2.5:3b", "fallback": ["gpt-4o"]},
    })
    app = await make_app(openai_base_url=first.base_url, openai_api_key="k",
                         PANAGER_MODEL="gpt-4o", home=home)
    user = await app.local_user()
    second.fail_next(503, times=5)
    first.script(tool_call("heartbeat_decision", {"notify": True, "message": "Stretch soon."}))
    items = [Item("reminder:x", "reminder", {"reminder": "Stretch", "at": "12:10"})]
    decision = await SystemJobs(app.assistant).decide(user, items, clock.now())
    assert decision is not None and decision.notify
    assert decision.message == "Stretch soon.\n\n(answered by gpt-4o: small is not answering)"
    today = (await app.deps.usage.report(user)).today
    assert {r.model for r in today} == {"gpt-4o"}  # counted against the model that answered


async def test_background_work_runs_on_the_background_model(
    make_app, tmp_path, servers, clock
):
    first, second = servers
    home = write_config(tmp_path / "h", background_model="small", models={
        "gpt-4o": {"base_url": first.base_url},
        "small": {"base_url": second.base_url, "model": "qwen2.5:3b"},
    })
    app = await make_app(openai_base_url=first.base_url, openai_api_key="k",
                         PANAGER_MODEL="gpt-4o", home=home)
    user = await app.local_user()
    # the heartbeat's check
    second.script(tool_call("heartbeat_decision", {"notify": True, "message": "Stretch soon."}))
    items = [Item("reminder:x", "reminder", {"reminder": "Stretch", "at": "12:10"})]
    decision = await SystemJobs(app.assistant).decide(user, items, clock.now())
    assert decision is not None and decision.notify and decision.message == "Stretch soon."
    assert second.requests[-1]["model"] == "qwen2.5:3b"
    # a compaction's summary
    second.script('{"summary": "They talked about lunch.", "memories": []}')
    messages = []
    for n in range(6):
        messages += [HumanMessage(f"question {n} " * 40, id=f"h{n}"),
                     AIMessage(f"answer {n} " * 40, id=f"a{n}")]
    compaction = await app.deps.runtime.compactor.compact(
        user, app.assistant.model_for(user), "gpt-4o", messages, None, keep_tokens=200
    )
    assert compaction is not None and compaction.summary == "They talked about lunch."
    assert "Conversation to compact" in second.last_user_text()
    # the nightly tidy-up takes the same model
    assert app.assistant.background_model(user) is app.assistant.background
    assert first.requests == []  # nothing background ran on the chat model
    today = (await app.deps.usage.report(user)).today
    assert {r.model for r in today} == {"small"}
    # the person's own turn still runs on the chat model
    first.script("hello")
    assert (await app.assistant.run_turn(user, "hi")).text == "hello"
    assert len(first.requests) == 1


async def test_an_idle_day_makes_no_model_calls(make_app, tmp_path, servers, clock):
    """A regression guard: heartbeat checks every 30 minutes and the nightly tidy-up, a
    whole day with nothing new and nobody writing — not one model call, on any model."""
    from datetime import time, timedelta

    first, second = servers
    home = write_config(tmp_path / "h", background_model="small", models={
        "gpt-4o": {"base_url": first.base_url}, "small": {"base_url": second.base_url},
    })
    app = await make_app(openai_base_url=first.base_url, openai_api_key="k",
                         PANAGER_MODEL="gpt-4o", home=home)
    user = await app.local_user()
    jobs = app.deps.system_jobs
    await jobs.set_heartbeat(user, timedelta(minutes=30), time(0), time(23, 59))
    await jobs.ensure(user, "tidy", "03:00", "FREQ=DAILY")
    w = worker(app)
    ran = 0
    for _ in range(48):
        clock.advance(minutes=30)
        ran += await w.run_once()
    assert ran >= 48  # the checks did run: 48 heartbeats and a tidy-up
    assert first.requests == [] and second.requests == []
    assert await app.deps.usage.today_total(user) == 0


async def test_the_usage_page_shows_cost_where_a_price_is_known(make_app, tmp_path):
    from tests.web_helpers import ALICE, web_harness

    home = write_config(tmp_path / "h", models={
        "gpt-4o-mini": {"price_per_mtok": {"input": 2.5, "output": 10}}})
    h = await web_harness(make_app, home=home)
    alice = await h.app.deps.users.get(ALICE)
    usage = {"input_tokens": 1_000_000, "output_tokens": 100_000, "total_tokens": 1_100_000}
    await h.app.deps.usage.record(alice, "gpt-4o-mini", usage)
    await h.app.deps.usage.record(alice, "unpriced", usage)
    client = await h.client(ALICE)
    status, body = await client.get("/usage")
    await client.close()
    assert status == 200 and "Cost this month" in body
    assert "<td class=\"num\">3.50</td>" in body and "—" in body  # no price: no cost


async def test_model_lists_names_and_maps_a_choice_stored_as_a_model_id(make_app, tmp_path):
    from panager.agent.commands import CommandContext, dispatch
    from tests.fakes.scripted_model import ScriptedChatModel

    home = write_config(tmp_path / "h", allowed_models=["gpt-4o-mini", "router"], models={
        "router": {"base_url": "https://openrouter.ai/api/v1", "model": "openai/gpt-4o"},
        "home": {"base_url": "http://127.0.0.1:9/v1", "model": "llama3.1:8b"},
    })
    app = await make_app(model=ScriptedChatModel(default="ok"), home=home)
    user = await app.local_user()

    async def command(text):
        return await dispatch(CommandContext(user=user, assistant=app.assistant), text)

    shown = (await command("/model")).text
    assert "Models you can choose: gpt-4o-mini, router." in shown  # names, not "home"
    refused = await command("/model home")
    assert not refused.ok and (await app.deps.users.get(user.id)).model is None
    await app.deps.users.set_model(user.id, "openai/gpt-4o")  # as stored before names
    user = await app.deps.users.get(user.id)
    assert "Model: router (your choice" in (await command("/model")).text
    assert current_model(app.deps, user) == "router"
    assert "Model set to router" in (await command("/model openai/gpt-4o")).text
    assert (await app.deps.users.get(user.id)).model == "router"

"""Named model endpoints and fallback, against two local fake OpenAI servers.

The primary endpoint `gpt-4o` names `llama3.1` (the second server) as its fallback.
Waiting is done by the injected FakeClock (its `sleep` moves it), so nothing here
depends on how fast the machine is.
"""

from __future__ import annotations

import math

import pytest

from panager.db.breaker import CircuitBreakers
from panager.doctor import check_breakers
from tests.fakes.openai_server import FakeOpenAI, Reply, tool_call
from tests.runtime_helpers import write_config

NOTE = "(answered by llama3.1: gpt-4o is not answering)"


@pytest.fixture
async def servers():
    async with FakeOpenAI() as first, FakeOpenAI() as second:
        yield first, second


def models(first: FakeOpenAI, second: FakeOpenAI, **primary) -> dict:
    return {
        "gpt-4o": {"base_url": first.base_url, "fallback": ["llama3.1"], **primary},
        "llama3.1": {"base_url": second.base_url, "api_key_env": "LOCAL_KEY_UNSET"},
    }


async def two_endpoint_app(make_app, tmp_path, servers, **config):
    first, second = servers
    home = write_config(tmp_path / "h", models=models(first, second), **config)
    return await make_app(
        openai_base_url=first.base_url, openai_api_key="k", PANAGER_MODEL="gpt-4o", home=home
    )


def recorder(app) -> list:
    events: list = []
    app.emitter.subscribe(lambda e: events.append((e.type, dict(e.data))))
    return events


async def test_a_short_retry_after_is_waited_for_and_the_primary_answers(
    make_app, tmp_path, servers, clock
):
    first, second = servers
    app = await two_endpoint_app(make_app, tmp_path, servers)
    user = await app.local_user()
    first.fail_next(429, headers={"Retry-After": "1"})
    first.script("from the primary")
    before = clock.now()
    result = await app.assistant.run_turn(user, "hello")
    assert result.ok and result.text == "from the primary"  # no note: the primary answered
    assert (clock.now() - before).total_seconds() >= 1  # waited as the server asked
    assert len(first.requests) == 2 and second.requests == []


async def test_a_long_retry_after_moves_on_at_once(make_app, tmp_path, servers, clock):
    first, second = servers
    app = await two_endpoint_app(make_app, tmp_path, servers, retry_after_max_seconds=5)
    user = await app.local_user()
    first.fail_next(429, headers={"Retry-After": "120"})
    second.script("from the fallback")
    before = clock.now()
    result = await app.assistant.run_turn(user, "hello")
    assert result.text == f"from the fallback\n\n{NOTE}"
    assert clock.now() == before and len(first.requests) == 1


async def test_503_five_times_finishes_on_the_fallback_with_one_note(
    make_app, tmp_path, servers
):
    first, second = servers
    app = await two_endpoint_app(make_app, tmp_path, servers)
    user = await app.local_user()
    first.fail_next(503, times=5)
    second.script(tool_call("set_timezone", {"timezone": "Asia/Seoul"}), "Done, Seoul time.")
    result = await app.assistant.run_turn(user, "I moved to Seoul")
    assert result.ok and result.text == f"Done, Seoul time.\n\n{NOTE}"
    assert result.text.count("answered by") == 1
    # sticky for the turn: the second model call went straight to the fallback
    assert len(first.requests) == 1 and len(second.requests) == 2
    assert (await app.deps.users.get(user.id)).timezone == "Asia/Seoul"
    today = (await app.deps.usage.report(user)).today
    assert {r.model for r in today} == {"llama3.1"}  # counted against the model that answered
    # the next turn asks the primary first again (its 503s are not used up yet)
    second.script("still here")
    assert (await app.assistant.run_turn(user, "hi")).text == f"still here\n\n{NOTE}"
    assert len(first.requests) == 2


async def test_no_implicit_fallback(make_app, tmp_path, servers):
    first, second = servers
    home = write_config(
        tmp_path / "h", model_retries=1,
        models={"gpt-4o": {"base_url": first.base_url},
                "llama3.1": {"base_url": second.base_url}},
    )
    app = await make_app(openai_base_url=first.base_url, openai_api_key="k", PANAGER_MODEL="gpt-4o",
                         home=home)
    user = await app.local_user()
    first.fail_next(503, times=2, headers={"retry-after-ms": "10"})
    result = await app.assistant.run_turn(user, "hello")
    assert not result.ok and "server error 503" in result.text and "message is kept" in result.text
    assert second.requests == []  # never an endpoint nobody named


async def test_the_circuit_opens_after_n_failures_and_closes_after_its_cool_down(
    make_app, tmp_path, servers, clock, make_settings
):
    first, second = servers
    app = await two_endpoint_app(
        make_app, tmp_path, servers, breaker_failures=2, breaker_cooldown_seconds=60
    )
    user = await app.local_user()
    first.clock = lambda: clock.now().timestamp()
    first.fail_for(math.inf, 503)
    for n in (1, 2):  # two failed calls: the second opens the circuit
        second.script(f"fallback {n}")
        assert (await app.assistant.run_turn(user, "hi")).text == f"fallback {n}\n\n{NOTE}"
    assert len(first.requests) == 2
    other = CircuitBreakers(app.pool, clock, failures=2, cooldown=60)  # another process
    assert await other.is_open("gpt-4o")
    ok, detail = await check_breakers(app.settings, {"pool": app.pool, "clock": clock})  # panager doctor
    assert ok is False and "gpt-4o skipped until" in detail and "server error 503" in detail
    second.script("fallback 3")
    assert (await app.assistant.run_turn(user, "hi")).text == f"fallback 3\n\n{NOTE}"
    assert len(first.requests) == 2  # skipped while open: no call to the primary
    clock.advance(61)
    first.recover()
    first.script("primary again")
    assert (await app.assistant.run_turn(user, "hi")).text == "primary again"
    assert not await other.is_open("gpt-4o")
    [state] = [s for s in await other.states() if s.endpoint == "gpt-4o"]
    assert state.failures == 0 and state.open_until is None


async def test_a_stream_cut_after_10_pieces_is_written_again_by_the_fallback(
    make_app, tmp_path, servers
):
    first, second = servers
    app = await two_endpoint_app(make_app, tmp_path, servers)
    user = await app.local_user()
    events = recorder(app)
    words = " ".join(f"w{n}" for n in range(30))
    first.script(Reply(content=words, fail_after=10))
    second.script(words)
    result = await app.assistant.run_turn(user, "count")
    assert result.ok and result.text == f"{words}\n\n{NOTE}"
    kinds = [t for t, _ in events if t.startswith("message_")]
    reset_at = kinds.index("message_reset")
    assert kinds[:reset_at] == ["message_delta"] * 10
    assert events[[t for t, _ in events].index("message_reset")][1]["restarted_on"] == "llama3.1"
    after = events[[t for t, _ in events].index("message_reset") + 1 :]
    assert "".join(d["text"] for t, d in after if t == "message_delta") == words


async def test_a_fallback_that_refuses_tools_answers_without_them_and_says_it_could_not_act(
    make_app, tmp_path, servers
):
    first, second = servers
    app = await two_endpoint_app(make_app, tmp_path, servers)
    user = await app.local_user()
    first.script(tool_call("set_timezone", {"timezone": "Asia/Seoul"}), "Done, Seoul time.")
    assert (await app.assistant.run_turn(user, "I moved to Seoul")).text == "Done, Seoul time."
    first.fail_next(503)
    second.fail_next(400, message="This model does not support tools.")
    second.script("I cannot change that right now.")
    result = await app.assistant.run_turn(user, "and remind me at 9")
    assert result.text == (
        f"I cannot change that right now.\n\n{NOTE} "
        "(llama3.1 cannot use tools, so I could not act on anything)"
    )
    sent = second.requests[-1]
    assert "tools" not in sent and {m["role"] for m in sent["messages"]} <= {
        "system", "user", "assistant"}
    assert any("[I called: set_timezone" in str(m["content"]) for m in sent["messages"])
    assert "You cannot use tools in this answer" in second.last_system_prompt()

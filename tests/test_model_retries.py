"""Model API retries against the local fake OpenAI server: 429 + Retry-After, 5xx, give-up."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace

from langchain_core.messages import HumanMessage

from panager.agent.threads import thread_values
from panager.llm import _retry_after, backoff_delay
from tests.fakes.openai_server import FakeOpenAI
from tests.runtime_helpers import write_config


async def test_rate_limit_honours_retry_after_then_succeeds(make_app):
    async with FakeOpenAI() as srv:
        app = await make_app(openai_base_url=srv.base_url, openai_api_key="test")
        user = await app.local_user()
        srv.fail_next(429, headers={"Retry-After": "1"})
        srv.script("after the wait")
        start = time.perf_counter()
        result = await app.assistant.run_turn(user, "hello")
        assert result.ok and result.text == "after the wait"
        assert time.perf_counter() - start >= 0.95  # waited as the server asked
        assert len(srv.requests) == 2


async def test_server_errors_give_one_sentence_and_keep_the_message(make_app, tmp_path):
    async with FakeOpenAI() as srv:
        home = write_config(tmp_path / "h", model_retries=2)
        app = await make_app(openai_base_url=srv.base_url, openai_api_key="test", home=home)
        user = await app.local_user()
        srv.fail_next(503, times=3, headers={"retry-after-ms": "10"})
        result = await app.assistant.run_turn(user, "remember the milk")
        assert not result.ok and len(srv.requests) == 3  # first try + 2 retries
        assert "server error 503" in result.text and "message is kept" in result.text
        assert result.text.count(". ") == 0 and "Traceback" not in result.text
        messages = (await thread_values(app.assistant, user))["messages"]
        assert isinstance(messages[-1], HumanMessage) and messages[-1].content == "remember the milk"
        srv.script("back again")
        assert (await app.assistant.run_turn(user, "still there?")).text == "back again"
        users = [m["content"] for m in srv.requests[-1]["messages"] if m["role"] == "user"]
        assert users == ["remember the milk", "still there?"]


def test_retry_after_forms_and_backoff_bounds():
    def error(headers):  # what _retry_after reads of an openai.APIStatusError
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert _retry_after(error({"retry-after": "2"})) == 2
    assert _retry_after(error({"retry-after-ms": "250"})) == 0.25
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < _retry_after(error({"retry-after": later})) <= 30
    assert _retry_after(error({"retry-after": "soon"})) is None
    assert _retry_after(error({})) is None
    assert backoff_delay(1, 7.0) == 7.0 and backoff_delay(1, 500.0) == 30.0
    for attempt in (1, 2, 3, 4):
        assert 0.25 * 2 ** (attempt - 1) <= backoff_delay(attempt, None) <= 0.5 * 2 ** (attempt - 1)

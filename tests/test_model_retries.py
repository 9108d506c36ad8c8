"""Model API retries against the local fake OpenAI server: 429 + Retry-After, 5xx, give-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace

from langchain_core.messages import HumanMessage

from panager.agent.turns.threads import thread_values
from panager.model_retries import backoff_delay
from panager.model_retries import retry_after as _retry_after
from tests.fakes.openai_server import FakeOpenAI
from tests.runtime_helpers import write_config


async def test_rate_limit_honours_retry_after_then_succeeds(make_app, clock):
    async with FakeOpenAI() as srv:
        app = await make_app(openai_base_url=srv.base_url, openai_api_key="test")
        user = await app.local_user()
        srv.fail_next(429, headers={"Retry-After": "1"})
        srv.script("after the wait")
        start = clock.now()  # the app waits on its (injected) clock
        result = await app.assistant.run_turn(user, "hello")
        assert result.ok and result.text == "after the wait"
        assert (clock.now() - start).total_seconds() == 1  # waited as the server asked
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


async def test_a_cancel_swallowed_below_the_stream_still_ends_the_turn():
    """A library under the model call may swallow a cancellation (Python 3.11's
    `asyncio.wait_for` does when a chunk arrives as the cancel does): the stream stops at
    the next chunk instead of running to its end, so a Ctrl+C is never lost."""
    import asyncio
    import contextlib

    from langchain_core.messages import AIMessageChunk

    from panager.llm import _stream_once

    arrived = asyncio.Event()
    sent: list[str] = []

    class Swallowing:
        async def astream(self, messages):
            for n in range(50):
                if n == 1:
                    arrived.set()
                    with contextlib.suppress(asyncio.CancelledError):  # wait_for, in the race
                        await asyncio.sleep(5)
                sent.append(str(n))
                yield AIMessageChunk(content=f"w{n} ")

    class Sink:
        async def delta(self, text: str) -> None:
            pass

        async def reset(self) -> None:
            pass

    task = asyncio.create_task(_stream_once(Swallowing(), [HumanMessage("hi")], Sink()))
    await asyncio.wait_for(arrived.wait(), 5)
    task.cancel()
    try:
        await task
        raise AssertionError("the stream ran to its end")
    except asyncio.CancelledError:
        pass
    assert sent == ["0", "1"]  # stopped at the chunk that came with the swallowed cancel


def test_the_model_client_has_no_per_chunk_wait_for(tmp_path):
    from panager.config import Settings
    from panager.llm import make_chat_model

    model = make_chat_model(Settings(_env_file=None, openai_base_url="http://127.0.0.1:9/v1",
                                     openai_api_key="k", model="m", home=tmp_path))
    assert model is not None and not model.stream_chunk_timeout

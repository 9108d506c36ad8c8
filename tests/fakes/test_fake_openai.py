"""Self-test of tests/fakes/openai_server.py driven by the real langchain-openai clients."""

from __future__ import annotations

import math
import time

import openai
import pytest
import pytest_asyncio
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from tests.fakes.openai_server import FakeOpenAI, Reply, text, tool_call, tool_calls

PROMPT = [SystemMessage("You are Panager, a helpful assistant."), HumanMessage("hi there")]


@tool
def add_task(title: str, due: str | None = None) -> str:
    """Add a task to the user's task list."""
    return f"added {title}"


@tool
def get_time(zone: str) -> str:
    """Return the current time in a time zone."""
    return "12:00"


@pytest_asyncio.fixture
async def fake():
    """Yield a started fake server, stopped afterwards."""
    async with FakeOpenAI() as server:
        yield server


def chat(server: FakeOpenAI, **kw) -> ChatOpenAI:
    """Return a ChatOpenAI pointed at the fake server with SDK retries off."""
    kw.setdefault("max_retries", 0)
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.base_url, api_key="test", **kw)


async def collect(llm, messages) -> AIMessageChunk:
    """Stream ``messages`` through ``llm`` and return the merged chunk (must be >1 chunk)."""
    chunks = [c async for c in llm.astream(messages)]
    assert len(chunks) > 1
    merged = chunks[0]
    for c in chunks[1:]:
        merged += c
    return merged


@pytest.mark.asyncio
async def test_text_reply_with_usage_and_recorded_prompt(fake):
    fake.script(text("Hello from the fake", prompt_tokens=11, completion_tokens=4))
    msg = await chat(fake).ainvoke(PROMPT)
    assert msg.content == "Hello from the fake"
    assert msg.usage_metadata["input_tokens"] == 11
    assert msg.usage_metadata["output_tokens"] == 4
    assert msg.usage_metadata["total_tokens"] == 15
    assert msg.response_metadata["finish_reason"] == "stop"
    assert msg.response_metadata["model_name"] == "gpt-4o-mini"
    assert fake.last_system_prompt() == "You are Panager, a helpful assistant."
    assert fake.last_user_text() == "hi there"
    assert fake.requests[-1]["messages"][0] == {
        "role": "system",
        "content": "You are Panager, a helpful assistant.",
    }


@pytest.mark.asyncio
async def test_default_reply_estimates_usage(fake):
    msg = await chat(fake).ainvoke("x" * 400)
    assert msg.content == "ok"
    assert msg.usage_metadata["input_tokens"] >= 100
    assert msg.usage_metadata["output_tokens"] >= 1
    assert fake.pending == 0


@pytest.mark.asyncio
async def test_tool_call_parsed_with_bound_tools(fake):
    fake.script(tool_call("add_task", {"title": "buy milk"}))
    msg = await chat(fake).bind_tools([add_task, get_time]).ainvoke(PROMPT)
    assert msg.content == ""
    assert len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert (call["name"], call["args"]) == ("add_task", {"title": "buy milk"})
    assert call["id"].startswith("call_")
    assert msg.response_metadata["finish_reason"] == "tool_calls"
    assert fake.last_tool_names() == ["add_task", "get_time"]


@pytest.mark.asyncio
async def test_two_tool_calls_in_one_reply_and_fresh_ids(fake):
    fake.default_reply = tool_calls(
        ("add_task", {"title": "a"}), ("get_time", {"zone": "UTC"}, "call_fixed")
    )
    llm = chat(fake).bind_tools([add_task, get_time])
    first, second = await llm.ainvoke(PROMPT), await llm.ainvoke(PROMPT)
    assert [c["name"] for c in first.tool_calls] == ["add_task", "get_time"]
    assert first.tool_calls[1]["args"] == {"zone": "UTC"}
    assert first.tool_calls[1]["id"] == "call_fixed"
    assert first.tool_calls[0]["id"] != second.tool_calls[0]["id"]


@pytest.mark.asyncio
async def test_malformed_tool_arguments_become_invalid_tool_call(fake):
    fake.script(tool_call("add_task", '{"title": "unterminated'))
    msg = await chat(fake).bind_tools([add_task]).ainvoke(PROMPT)
    assert msg.tool_calls == []
    assert msg.invalid_tool_calls[0]["name"] == "add_task"


@pytest.mark.asyncio
async def test_streaming_text_with_usage(fake):
    fake.script(text("Streaming works word by word", prompt_tokens=7, completion_tokens=5))
    merged = await collect(chat(fake, stream_usage=True), PROMPT)
    assert merged.content == "Streaming works word by word"
    assert merged.usage_metadata["input_tokens"] == 7
    assert merged.usage_metadata["total_tokens"] == 12
    assert fake.requests[-1]["stream"] is True
    assert fake.requests[-1]["stream_options"] == {"include_usage": True}


@pytest.mark.asyncio
async def test_streaming_without_stream_usage_has_no_usage(fake):
    fake.script("no usage here")
    merged = await collect(chat(fake), PROMPT)
    assert merged.content == "no usage here"
    assert merged.usage_metadata is None
    assert "stream_options" not in fake.requests[-1]


@pytest.mark.asyncio
async def test_streaming_tool_calls(fake):
    fake.script(
        tool_calls(("add_task", {"title": "a long task title"}), ("get_time", {"zone": "Z"}))
    )
    llm = chat(fake, stream_usage=True).bind_tools([add_task, get_time])
    merged = await collect(llm, PROMPT)
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [
        ("add_task", {"title": "a long task title"}),
        ("get_time", {"zone": "Z"}),
    ]
    assert all(c["id"].startswith("call_") for c in merged.tool_calls)
    assert merged.usage_metadata["total_tokens"] > 0


@pytest.mark.asyncio
async def test_responses_api_text_and_tool_call(fake):
    fake.script(text("Responses hello", prompt_tokens=9, completion_tokens=2))
    fake.script(tool_call("add_task", {"title": "x"}, id="call_r1"))
    llm = chat(fake, use_responses_api=True)
    msg = await llm.ainvoke(PROMPT)
    assert msg.text == "Responses hello"
    assert msg.usage_metadata["input_tokens"] == 9
    assert msg.usage_metadata["total_tokens"] == 11
    assert "input" in fake.requests[-1] and "messages" not in fake.requests[-1]
    assert fake.last_system_prompt() == "You are Panager, a helpful assistant."
    assert fake.last_user_text() == "hi there"
    msg = await llm.bind_tools([add_task]).ainvoke(PROMPT)
    assert msg.tool_calls[0]["name"] == "add_task"
    assert msg.tool_calls[0]["args"] == {"title": "x"}
    assert msg.tool_calls[0]["id"] == "call_r1"
    assert fake.last_tool_names() == ["add_task"]


@pytest.mark.asyncio
async def test_responses_api_streaming(fake):
    fake.script(
        Reply(content="Let me add it", tool_calls=[{"name": "add_task", "args": {"title": "y"}}])
    )
    merged = await collect(chat(fake, use_responses_api=True).bind_tools([add_task]), PROMPT)
    assert merged.text == "Let me add it"
    assert merged.tool_calls[0]["name"] == "add_task"
    assert merged.tool_calls[0]["args"] == {"title": "y"}
    assert merged.usage_metadata["total_tokens"] > 0


@pytest.mark.asyncio
async def test_rate_limit_then_success(fake):
    fake.fail_next(429, headers={"Retry-After": "1"})
    fake.script("after the limit")
    llm = chat(fake)
    with pytest.raises(openai.RateLimitError) as info:
        await llm.ainvoke(PROMPT)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.code == "rate_limit_exceeded"
    assert (await llm.ainvoke(PROMPT)).content == "after the limit"
    assert len(fake.requests) == 2


@pytest.mark.asyncio
async def test_server_error_and_sdk_retries(fake):
    fake.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        await chat(fake).ainvoke(PROMPT)
    fake.fail_next(503, headers={"retry-after-ms": "10"})
    fake.script("recovered")
    msg = await chat(fake, max_retries=1).ainvoke(PROMPT)
    assert msg.content == "recovered"
    assert len(fake.requests) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("responses_api", [False, True])
async def test_context_length_error(fake, responses_api):
    fake.fail_context_length()
    with pytest.raises(openai.BadRequestError) as info:
        await chat(fake, use_responses_api=responses_api).ainvoke(PROMPT)
    assert info.value.code == "context_length_exceeded"
    assert info.value.body["param"] == ("input" if responses_api else "messages")
    # langchain-openai 1.7.3 looks for "context_length_exceeded" in str(e), but openai 3.x
    # puts only the message in str(e): detect overflow by `.code`, not ContextOverflowError.
    assert not isinstance(info.value, ContextOverflowError)
    assert (await chat(fake).ainvoke(PROMPT)).content == "ok"


@pytest.mark.asyncio
async def test_fail_for_window(fake):
    now = [1000.0]  # the fake's clock, moved by the test: no waiting, whatever the load
    fake.clock = lambda: now[0]
    fake.fail_for(3.0, status=502)
    llm = chat(fake)
    with pytest.raises(openai.APIStatusError) as info:
        await llm.ainvoke(PROMPT)
    assert info.value.status_code == 502
    now[0] += 2.9
    with pytest.raises(openai.APIStatusError):
        await llm.ainvoke(PROMPT)
    now[0] += 0.2  # the window is over
    assert (await llm.ainvoke(PROMPT)).content == "ok"
    fake.fail_for(math.inf, status=500)
    now[0] += 1e9
    with pytest.raises(openai.APIStatusError):
        await llm.ainvoke(PROMPT)
    fake.recover()
    assert (await llm.ainvoke(PROMPT)).content == "ok"


@pytest.mark.timing
@pytest.mark.asyncio
async def test_handler_and_delay(fake):
    async def echo(body: dict) -> Reply:
        return text(f"echo: {body['messages'][-1]['content']}", delay=0.2)

    fake.handler = echo
    fake.script("queued first")
    llm = chat(fake)
    assert (await llm.ainvoke("one")).content == "queued first"
    started = time.monotonic()
    assert (await llm.ainvoke("two")).content == "echo: two"
    assert time.monotonic() - started >= 0.2


@pytest.mark.asyncio
async def test_embeddings(fake):
    emb = OpenAIEmbeddings(
        model="text-embedding-3-small",
        base_url=fake.base_url,
        api_key="test",
        max_retries=0,
        check_embedding_ctx_length=False,
    )
    docs = await emb.aembed_documents(["buy milk today", "buy milk tomorrow", "quantum physics"])
    assert [len(v) for v in docs] == [fake.embedding_dim] * 3
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5) for v in docs)
    assert await emb.aembed_query("buy milk today") == pytest.approx(docs[0], abs=1e-6)

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cos(docs[0], docs[1]) > cos(docs[0], docs[2])
    assert fake.embedding_requests[0]["input"][0] == "buy milk today"
    fake.embedding_dim = 16
    assert len(await emb.aembed_query("short")) == 16


@pytest.mark.asyncio
async def test_raw_sdk_embeddings_and_models(fake):
    client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    result = await client.embeddings.create(
        model="m", input="single", encoding_format="float", dimensions=8
    )
    assert len(result.data) == 1 and len(result.data[0].embedding) == 8
    models = await client.models.list()
    assert "gpt-4o-mini" in [m.id for m in models.data]
    await client.close()


def test_sync_mode_in_background_thread():
    with FakeOpenAI() as server:
        server.script("sync hello")
        msg = chat(server).invoke(PROMPT)
        assert msg.content == "sync hello"
        assert server.last_user_text() == "hi there"

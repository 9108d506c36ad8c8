"""What a Chat Completions request carries on the wire, now that its messages and tools ride in
`extra_body` (model_router.plain_json_body: the openai SDK's per-call walk over them is skipped)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

from panager.endpoints import Endpoint
from panager.model_router import endpoint_model, plain_json_body
from tests.fakes.openai_server import FakeOpenAI

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look something up.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]},
    },
}


async def test_the_request_on_the_wire_has_its_messages_and_tools_at_the_top():
    async with FakeOpenAI() as fake:
        fake.handler = lambda body: "fine"
        model = endpoint_model(Endpoint("main", fake.base_url, "m", api_key="k"), timeout=10)
        bound = model.bind_tools([TOOL], tool_choice="auto")
        reply = await bound.ainvoke([SystemMessage("be brief"), HumanMessage("héllo")])
        async for _ in model.astream([HumanMessage("again")]):
            pass
    assert reply.content == "fine"
    first, second = fake.requests
    assert first["messages"] == [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "héllo"}]
    assert first["tools"] == [TOOL] and first["tool_choice"] == "auto"
    assert first["model"] == "m" and "extra_body" not in first
    assert second["messages"] == [{"role": "user", "content": "again"}] and "tools" not in second
    assert second["stream"] is True


def test_structured_output_and_responses_payloads_are_left_alone():
    structured = {"messages": [{"role": "user", "content": "x"}], "response_format": {}}
    assert plain_json_body(dict(structured)) == structured
    responses = {"input": [{"role": "user", "content": "x"}]}
    assert plain_json_body(dict(responses)) == responses


async def test_replies_are_read_as_plain_json_streamed_or_not():
    """The SDK hands back parsed JSON (PlainJsonCompletions): text, tool calls and usage
    arrive as they did through its typed objects, and a server error is still the SDK's."""
    import openai
    import pytest

    from panager.model_router import PlainJsonCompletions
    from tests.fakes.openai_server import tool_call

    async with FakeOpenAI() as fake:
        model = endpoint_model(Endpoint("main", fake.base_url, "m", api_key="k"), timeout=10)
        assert isinstance(model.async_client, PlainJsonCompletions)
        assert model.async_client._plain  # the installed SDK's request layer is the known one
        fake.script("plain answer", tool_call("lookup", {"query": "q"}), "streamed answer")
        whole = await model.ainvoke([HumanMessage("one")])
        called = await model.bind_tools([TOOL]).ainvoke([HumanMessage("two")])
        chunks = [c async for c in model.astream([HumanMessage("three")])]
        fake.fail_next(500)
        with pytest.raises(openai.InternalServerError):
            await model.ainvoke([HumanMessage("four")])
    assert whole.content == "plain answer" and whole.usage_metadata["total_tokens"] > 0
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("lookup", {"query": "q"})]
    streamed = chunks[0]
    for chunk in chunks[1:]:
        streamed += chunk
    assert streamed.content == "streamed answer"
    assert streamed.usage_metadata and streamed.usage_metadata["total_tokens"] > 0


async def test_an_sdk_without_the_known_request_layer_gets_its_own_create():
    from panager.model_router import PlainJsonCompletions

    class Completions:  # no `_post`: a request layer this was not written against
        async def create(self, **payload):
            return {"created_by": "sdk", **payload}

    plain = PlainJsonCompletions(Completions())
    assert not plain._plain
    assert await plain.create(model="m", messages=[]) == {
        "created_by": "sdk", "model": "m", "messages": []}

"""Memory people can rely on (real Postgres, the offline default embedder): a close but
different fact never replaces another, memory_update replaces and keeps history, only exact
repeats merge, and injection shows ids and dates and stays empty when nothing is relevant."""

from __future__ import annotations

import json

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.tools import build_tools
from panager.errors import ToolError
from tests.fakes.openai_server import FakeOpenAI

CLOSE_PAIRS = [
    ("My sister's birthday is March 3.", "My sister's birthday is March 13."),
    ("My dentist appointment is on Tuesday at 3pm.", "My dentist appointment is on Thursday at 3pm."),
    ("I take 20mg of lisinopril daily.", "I take 40mg of lisinopril daily."),
    ("My sister is allergic to peanuts.", "My brother is allergic to peanuts."),
    ("My wife is allergic to peanuts.", "My son is allergic to peanuts."),
]


def tools_of(app, user) -> dict:
    return {t.name: t for t in build_tools(app.deps, user) if t.name.startswith("memory_")}


@pytest.fixture
async def app(make_app):
    return await make_app(embedding_model="local")


@pytest.mark.parametrize(("first", "second"), CLOSE_PAIRS)
async def test_a_close_but_different_fact_is_kept_and_named(app, first, second):
    user = await app.local_user()
    save = tools_of(app, user)["memory_save"]
    one = await save.ainvoke({"content": first})
    two = await save.ainvoke({"content": second})
    assert two["status"] == "saved" and two["memory"]["id"] != one["memory"]["id"]
    assert await app.deps.memory.count(user.id) == 2
    assert {m.content for m in await app.deps.memory.list(user.id)} == {first, second}
    related = two["related"]
    assert related[0] == {"id": one["memory"]["id"], "content": first, "date": "2026-11-21"}
    assert "update or forget" in two["note"]


async def test_compaction_batch_follows_the_same_rule(app):
    user = await app.local_user()
    results = await app.deps.memory.save_many(user.id, [a for a, _ in CLOSE_PAIRS] + [b for _, b in CLOSE_PAIRS])
    assert not any(r.merged for r in results)
    assert await app.deps.memory.count(user.id) == 2 * len(CLOSE_PAIRS)
    assert results[0].memory.id in [r.id for r in results[len(CLOSE_PAIRS)].related]


async def test_an_exact_repeat_is_merged(app, clock):
    user = await app.local_user()
    save = tools_of(app, user)["memory_save"]
    first = await save.ainvoke({"content": "I prefer window seats on flights."})
    clock.advance(days=1)
    again = await save.ainvoke({"content": "  i prefer window seats on flights!"})
    assert again["status"] == "already saved" and again["memory"]["id"] == first["memory"]["id"]
    assert again["memory"]["content"] == "I prefer window seats on flights."
    assert "related" not in again
    assert await app.deps.memory.count(user.id) == 1


async def test_update_replaces_reembeds_and_keeps_the_previous_text(app, clock):
    user = await app.local_user()
    memory, tools = app.deps.memory, tools_of(app, user)
    tea = (await memory.save(user.id, "My favourite tea is jasmine tea.")).memory
    pot = (await memory.save(user.id, "I bought a teapot for the jasmine tea from my aunt.")).memory
    await memory.save(user.id, "My car is a grey Outback.")
    assert (await memory.search(user.id, "favourite jasmine tea", 3))[0].id == tea.id
    clock.advance(days=3)
    result = await tools["memory_update"].ainvoke(
        {"memory_id": tea.id, "content": "My favourite coffee is a flat white."}
    )
    assert result["status"] == "updated" and result["memory"]["id"] == tea.id
    assert result["memory"]["content"] == "My favourite coffee is a flat white."
    assert result["memory"]["was"] == "My favourite tea is jasmine tea."
    assert result["memory"]["saved"] == "2026-11-21" and result["memory"]["updated"] == "2026-11-24"
    # re-embedded (and re-indexed for words): the new wording finds it, the old one no longer
    assert (await memory.search(user.id, "what coffee do I like?", 3))[0].id == tea.id
    assert (await memory.search(user.id, "flat white", 3, mode="text"))[0].id == tea.id
    assert (await memory.search(user.id, "favourite jasmine tea", 3))[0].id == pot.id
    history = await memory.history(user.id, tea.id)
    assert [h["content"] for h in history] == ["My favourite tea is jasmine tea."]
    assert await memory.count(user.id) == 3


async def test_update_is_scoped_to_the_user_and_checks_input(app):
    alice = await app.deps.users.ensure(111, "alice")
    bob = await app.deps.users.ensure(222, "bob")
    secret = (await app.deps.memory.save(alice.id, "Alice's locker code is 3141.")).memory
    update = tools_of(app, bob)["memory_update"]
    with pytest.raises(ToolError, match="No memory with id"):
        await update.ainvoke({"memory_id": secret.id, "content": "Bob was here."})
    with pytest.raises(ToolError, match="not a memory id"):
        await update.ainvoke({"memory_id": "nope", "content": "x"})
    with pytest.raises(ToolError, match="content is empty"):
        await tools_of(app, alice)["memory_update"].ainvoke({"memory_id": secret.id, "content": " "})
    assert (await app.deps.memory.get(alice.id, secret.id)).content == "Alice's locker code is 3141."


async def test_memory_command_shows_what_an_update_replaced(app, clock):
    user = await app.local_user()
    old = (await app.deps.memory.save(user.id, "I work at Acme.", "work")).memory
    clock.advance(days=2)
    await app.deps.memory.update(user.id, old.id, "I work at Globex now.")
    listing = (await dispatch(CommandContext(user=user, assistant=app.assistant), "/memory")).text
    assert f"{old.id[:8]}  2026-11-23  (work) I work at Globex now. (was: I work at Acme.)" in listing


async def test_search_limit_may_exceed_twenty(app):
    user = await app.local_user()
    await app.deps.memory.save_many(user.id, [f"Note number {i} about plant {i * 7}." for i in range(30)])
    found = await tools_of(app, user)["memory_search"].ainvoke({"query": "plant notes", "limit": 25})
    assert len(found["results"]) == 25 and "note" not in found
    capped = await tools_of(app, user)["memory_search"].ainvoke({"query": "plant notes", "limit": 80})
    assert len(capped["results"]) == 30 and "at most 50" in capped["note"]


async def test_injection_shows_ids_and_dates_and_nothing_when_unrelated(make_app, clock):
    async with FakeOpenAI() as fake:
        app = await make_app(openai_base_url=fake.base_url, openai_api_key="t", embedding_model="local")
        user = await app.local_user()
        mina = (await app.deps.memory.save(user.id, "My sister Mina's birthday is March 3.", "people")).memory
        await app.deps.memory.save(user.id, "I take 20mg of lisinopril daily.", "health")
        clock.advance(days=2)
        fake.script("The capital is Canberra.")
        await app.assistant.run_turn(user, "What's the capital of Australia?")
        quiet = fake.last_system_prompt()
        assert "## Memories" not in quiet and "Mina" not in quiet
        assert "## Long-term memory" in quiet and "call memory_search before answering" in quiet
        fake.script("March 3rd!")
        await app.assistant.run_turn(user, "When is my sister Mina's birthday?")
        prompt = fake.last_system_prompt()
        assert f'- [id {mina.id}, 2026-11-21] (people) "My sister Mina\'s birthday is March 3."' in prompt
        assert "memory_update" in prompt
        assert "## Long-term memory" not in prompt and "call memory_search" in prompt
        assert "lisinopril" not in prompt
        saved = json.dumps(fake.requests[-1]["tools"])
        assert "memory_update" in saved

"""The front-end contract, run against an in-memory front end (tests/memory_front_end.py).

The start of the suite every chat front end passes: it answers a message, streams a
long answer into edited messages, splits what is over its message limit, asks before
a consequential call with Approve/Deny and acts on the press, and refuses a stranger
before any model call. The front end is registered here only (its `Platform` and its
`FrontEnd`), so passing shows a new front end needs its package and its registration
line, nothing else in the house.
"""

from __future__ import annotations

import pytest

from panager import platforms
from panager.frontends.shared.front_end import FrontEnd
from tests.fakes.openai_server import Reply, tool_call
from tests.memory_front_end import LIMIT, MEMO, MemoFrontEnd

pytestmark = pytest.mark.timeout(120)

ALICE = 501
STRANGER = 666


@pytest.fixture
async def memo():
    """The front end, registered for this test only."""
    platforms.register(MEMO)
    yield MemoFrontEnd()
    platforms.unregister(MEMO.name)


@pytest.fixture
async def app(make_app, openai, memo):
    app = await make_app(openai_base_url=openai.base_url, openai_api_key="test",
                         access="invite")
    await app.deps.users.ensure_identity(MEMO.name, ALICE, "alice", status="active")
    running = await memo.start(app)
    yield app
    await running.stop()


def test_every_front_end_has_what_the_contract_names(memo):
    from panager.cli.run import FRONT_ENDS

    members = {n for n in vars(FrontEnd) if not n.startswith("_")} | set(FrontEnd.__annotations__)
    assert {"platform", "start", "deliver_only", "check", "explain"} <= members
    for front in (*FRONT_ENDS, memo):
        assert all(hasattr(front, name) for name in members), front
    assert memo.platform.name in platforms.chat_names()  # registered by this test only
    assert "memo" in platforms.identity_names()


async def test_a_message_is_answered(app, memo, openai):
    openai.script("Hello from memory.")
    chat = await memo.say(ALICE, "hello")
    assert chat.shown() == ["Hello from memory."]
    assert openai.last_user_text() == "hello"


async def test_a_slow_answer_streams_into_one_edited_message(app, memo, openai):
    answer = " ".join(f"w{i}" for i in range(20))  # under the limit: one message
    pieces = [answer[i : i + 10] for i in range(0, len(answer), 10)]
    openai.script(Reply(content=answer, pieces=pieces, piece_delay=0.25))
    chat = await memo.say(ALICE, "slowly")
    assert chat.shown() == [answer]
    first = chat.log[0]
    assert first[0] == "send" and answer.startswith(first[2]) and first[2] != answer
    assert [kind for kind, i, _ in chat.log[1:]] and all(
        kind == "edit" and i == 0 for kind, i, _ in chat.log[1:])


async def test_a_long_answer_is_split_under_the_limit(app, memo, openai):
    answer = " ".join(f"word{i}" for i in range(80))  # about 500 characters
    openai.script(answer)
    chat = await memo.say(ALICE, "a long one")
    shown = chat.shown()
    assert len(shown) >= 4 and all(len(text) <= LIMIT for text in shown)
    assert " ".join(shown).split() == answer.split()


async def test_a_question_asks_with_approve_and_deny_and_the_press_acts(app, memo, openai):
    alice = await app.deps.users.get(await app.deps.users.person_id(MEMO.name, ALICE))
    bank = (await app.deps.memory.save(alice.id, "My bank is Hana Bank.")).memory
    openai.script(tool_call("memory_forget", {"memory_id": bank.id}), "Forgotten.")
    # forwarded text is outside content: the turn is tainted, so the forget waits
    chat = await memo.say(ALICE, "forget my bank", forwarded_from="@mallory")
    asking = chat.messages[-1]
    assert [b.label for b in asking.buttons] == ["Approve", "Deny"]
    asked = " ".join(" ".join(chat.shown()).split())  # the question may span messages
    assert "Forget (delete) the memory" in asked and "Hana Bank" in asked
    assert await app.deps.memory.get(alice.id, bank.id) is not None
    assert len(openai.requests) == 1
    await memo.press(ALICE, asking.buttons[0].data)
    assert chat.shown()[-1] == "Forgotten."
    assert await app.deps.memory.get(alice.id, bank.id) is None


async def test_a_stranger_is_refused_before_any_model_call(app, memo, openai):
    chat = await memo.say(STRANGER, "let me in")
    assert len(chat.shown()) == 1 and "invite-only" in chat.shown()[0]
    assert openai.requests == []
    person = await app.deps.users.person_id(MEMO.name, STRANGER)
    stranger = await app.deps.users.get(person)
    assert stranger is not None and stranger.status == "pending"


async def test_an_admin_id_of_the_new_front_end_carries_rights(make_app, memo, monkeypatch):
    """PANAGER_ADMIN_IDS names the new front end's ids as NAME:ID, no settings field of its
    own: its person has admin rights, another of its people has none."""
    monkeypatch.setenv("PANAGER_ADMIN_IDS", f"123,telegram:9,{MEMO.name}:{ALICE}")
    app = await make_app(access="invite")
    assert (MEMO.name, ALICE) in app.settings.admin_identities()
    admin = await app.deps.users.ensure_identity(MEMO.name, ALICE, "alice", status="active")
    other = await app.deps.users.ensure_identity(MEMO.name, STRANGER, "eve", status="active")
    assert (await app.deps.access.standing(admin.id)).admin
    assert not (await app.deps.access.standing(other.id)).admin

"""send_user_message: off by default; DM + injection into the recipient's thread; errors."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, ToolMessage

from panager.agent.tools import build_tools
from panager.agent.turns.threads import thread_values
from tests.fakes.scripted_model import ScriptedChatModel, call, calls
from tests.runtime_helpers import write_config


class Inbox:
    """A messenger that records what it delivers (stands in for Discord DMs)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    async def send(self, user, text, *, link=None, key=None, offers=()) -> bool:
        self.sent.append((user.id, text))
        return True


async def setup(make_app, tmp_path, model, **config):
    app = await make_app(model=model, home=write_config(tmp_path / "h", **config))
    inbox = Inbox()
    app.deps.messenger.add(inbox)
    alice = await app.deps.users.ensure(111, "alice", display_name="Alice")
    bob = await app.deps.users.ensure(222, "bob")
    return app, inbox, alice, bob


async def test_off_by_default(make_app, tmp_path):
    app, _, alice, _ = await setup(make_app, tmp_path, ScriptedChatModel())
    assert "send_user_message" not in {t.name for t in build_tools(app.deps, alice)}


async def test_message_is_delivered_and_lands_in_the_recipients_thread(make_app, tmp_path):
    model = ScriptedChatModel(
        script=[calls(call("send_user_message", {"recipient": "@Bob", "text": "Dinner at 7?"})), "Sent."]
    )
    app, inbox, alice, bob = await setup(make_app, tmp_path, model, allow_user_messages=True)
    result = await app.assistant.run_turn(alice, "tell bob dinner at 7")
    assert result.text == "Sent."
    assert inbox.sent == [(bob.id, inbox.sent[0][1])]
    assert "Message from @alice," in inbox.sent[0][1] and "Dinner at 7?" in inbox.sent[0][1]
    assert "Alice" not in inbox.sent[0][1]  # the unique username, never a display name
    await app.deps.relay.drain()
    bob_thread = (await thread_values(app.assistant, bob))["messages"]
    note = bob_thread[-1]
    assert isinstance(note, HumanMessage) and note.name == "relay"
    assert note.content.startswith("[Relayed message from another person, @alice,")
    assert (
        '<outside_content source="relayed message from @alice">"Dinner at 7?"</outside_content>'
        in note.content
    )
    model.add("Alice asked about dinner at 7.")
    await app.assistant.run_turn(bob, "what did alice want?")
    assert any("Dinner at 7?" in str(m.content) for m in model.requests[-1])  # bob's turn sees it
    alice_thread = (await thread_values(app.assistant, alice))["messages"]
    assert not any(getattr(m, "name", None) == "relay" for m in alice_thread)


async def test_unknown_recipient_and_rate_limit_are_clear_errors(make_app, tmp_path):
    sends = [call("send_user_message", {"recipient": "bob", "text": f"hi {i}"}) for i in range(6)]
    model = ScriptedChatModel(
        script=[calls(call("send_user_message", {"recipient": "carol", "text": "hi"})), "no carol",
                calls(*sends), "some sent"]
    )
    app, inbox, alice, _ = await setup(make_app, tmp_path, model, allow_user_messages=True)
    await app.assistant.run_turn(alice, "message carol")
    await app.assistant.run_turn(alice, "message bob six times")
    results = [m for m in (await thread_values(app.assistant, alice))["messages"] if isinstance(m, ToolMessage)]
    assert results[0].status == "error" and "No user named 'carol' can receive" in results[0].content
    statuses = [r.status for r in results[1:]]  # six concurrent calls: one is over the limit
    assert statuses.count("success") == 5 and statuses.count("error") == 1
    assert "Rate limit" in results[1 + statuses.index("error")].content
    assert len(inbox.sent) == 5
    await app.deps.relay.drain()

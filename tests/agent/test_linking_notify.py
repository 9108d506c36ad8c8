"""Where proactive messages go for a joined person: /notify, auto, and the terminal's copy."""

from __future__ import annotations

from panager.agent.commands import CommandContext, dispatch
from panager.frontends.terminal.chat import Console, TerminalMessenger
from tests.agent.test_linking_join import code_in

TELEGRAM = 777_002


class Recorder:
    """A chat front end's messenger in this process (by platform)."""

    def __init__(self, platform: str, works: bool = True) -> None:
        self.platform = platform
        self.works = works
        self.sent: list[tuple[int, str]] = []

    async def send(self, user, text: str, *, link=None, key=None, offers=()) -> bool:
        if self.works:
            self.sent.append((user.id, text))
        return self.works


async def command(app, identity, text: str) -> str:
    person = await app.deps.users.person_id(*identity)
    user = await app.deps.users.get(person)
    ctx = CommandContext(user=user, assistant=app.assistant, front_end=identity[0],
                         identity=identity)
    return (await dispatch(ctx, text)).text


async def test_the_terminal_is_never_the_only_destination_of_a_person_with_a_chat(
    make_app, capsys
):
    app = await make_app()
    terminal = await app.local_user()
    await app.deps.users.ensure_identity("telegram", TELEGRAM, "me_tg")
    app.deps.messenger.add(TerminalMessenger(Console(interactive=False), app.deps.users))
    # Before linking the terminal's person has no chat: the terminal is its destination.
    assert await app.deps.messenger.send(terminal, "before linking")
    assert "before linking" in capsys.readouterr().out
    code = code_in(await command(app, ("terminal", 1), "/link"))
    assert "Code accepted" in await command(app, ("telegram", TELEGRAM), f"/link {code}")
    assert "Confirmed" in await command(app, ("telegram", TELEGRAM), "/link confirm")
    assert (await command(app, ("terminal", 1), "/link approve")).startswith("Joined")
    person = await app.deps.users.get(await app.deps.users.person_id("telegram", TELEGRAM))
    # No Telegram front end in this process: not delivered (handed back), nothing shown.
    assert not await app.deps.messenger.send(person, "stretch")
    assert "stretch" not in capsys.readouterr().out
    # With one: delivered there, and the open terminal shows a copy.
    telegram = Recorder("telegram")
    app.deps.messenger.add(telegram)
    assert await app.deps.messenger.send(person, "stretch")
    assert telegram.sent == [(person.id, "stretch")]
    assert "stretch" in capsys.readouterr().out


async def test_notify_names_only_joined_front_ends_and_falls_back_when_one_fails(make_app):
    app = await make_app()
    await app.deps.users.ensure_identity("telegram", TELEGRAM, "me_tg")
    refused = await command(app, ("telegram", TELEGRAM), "/notify discord")
    assert "no Discord account joined" in refused
    assert "Usage" in await command(app, ("telegram", TELEGRAM), "/notify pigeon")
    assert "auto" in await command(app, ("telegram", TELEGRAM), "/notify")
    assert "Telegram" in await command(app, ("telegram", TELEGRAM), "/notify telegram")
    person = await app.deps.users.get(await app.deps.users.person_id("telegram", TELEGRAM))
    broken = Recorder("telegram", works=False)
    app.deps.messenger.add(broken)
    assert not await app.deps.messenger.send(person, "hello")  # nowhere else to go


async def test_the_terminals_admin_rights_leave_with_the_terminal(make_app):
    app = await make_app(access="invite")
    access = app.deps.access
    await app.local_user()
    await app.deps.users.ensure_identity("telegram", TELEGRAM, "me_tg")
    code = code_in(await command(app, ("terminal", 1), "/link"))
    assert "Code accepted" in await command(app, ("telegram", TELEGRAM), f"/link {code}")
    assert "Confirmed" in await command(app, ("telegram", TELEGRAM), "/link confirm")
    assert (await command(app, ("terminal", 1), "/link approve")).startswith("Joined")
    joined = (await access.admit_identity("telegram", TELEGRAM, "me_tg")).user
    assert joined.id == 1 and joined.role == "admin" and await access.has_admin_rights(joined.id)
    assert (await command(app, ("terminal", 1), "/unlink")).startswith("Unlinked")
    terminal = await app.deps.users.person_id("terminal", 1)
    assert terminal != 1 and await access.has_admin_rights(terminal)
    assert not await access.has_admin_rights(1)  # Telegram alone is no admin
    rest = (await access.admit_identity("telegram", TELEGRAM, "me_tg")).user
    assert rest.id == 1 and rest.role == "user"


async def test_an_open_web_page_shows_a_reminder_as_it_is_delivered(make_app):
    import asyncio
    import json

    from tests.web_helpers import ALICE, web_harness

    h = await web_harness(make_app)
    client = await h.client(ALICE)
    try:
        status, page = await client.get("/")
        assert status == 200 and 'src="/static/notices.js"' in page and 'id="notices"' in page
        async with client.session.get(h.url + "/notices") as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            alice = await h.app.deps.users.get(ALICE)
            for _ in range(500):  # the page's stream is registered once the handler runs
                if h.server.notices._open.get(ALICE):
                    break
                await asyncio.sleep(0.01)
            assert await h.app.deps.messenger.send(alice, "⏰ stretch your legs")
            line = b""
            while not line.startswith(b"data:"):
                line = await asyncio.wait_for(stream.content.readline(), 5)
            assert json.loads(line[5:])["text"] == "⏰ stretch your legs"
            # Alice has a chat front end (Discord): the chat delivered, the page shows a copy.
            assert h.recorder.sent[-1][1] == "⏰ stretch your legs"
            bob = await h.app.deps.users.get(1002)
            assert await h.server.notices.send(bob, "not for Alice") is False  # no page open
    finally:
        await client.close()
        await h.server.stop()

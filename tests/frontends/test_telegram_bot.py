"""The Telegram front end end-to-end: the real aiogram client against FakeTelegram.

The model is the local fake OpenAI server and the database is the test's own
real PostgreSQL database. A DM sent last works as a barrier: one person's
messages are handled in order, so once its answer is there, everything sent
before it has been handled.
"""

from __future__ import annotations

import itertools
import logging

import pytest

from panager.frontends.shared.chunking import FENCE
from panager.frontends.telegram.bot import TelegramFrontEnd
from tests.fakes.openai_server import Reply
from tests.fakes.telegram_server import BOT_USERNAME
from tests.telegram_helpers import STEP, ask, running_front, telegram_settings

pytestmark = pytest.mark.timeout(120)

ADMIN = 4242
ALICE = 5001
MALLORY = 6666




@pytest.fixture
def fake(telegram):
    """This module calls the fake Bot API `fake`."""
    return telegram


@pytest.fixture
async def app(make_app, openai, fake):
    return await make_app(
        openai_base_url=openai.base_url,
        openai_api_key="test",
        access="invite",
        telegram_admin_ids=[ADMIN],
        **telegram_settings(fake),
    )


def slow(text: str, seconds: float, piece: int = 25) -> Reply:
    """`text` streamed in pieces over about `seconds`."""
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
    return Reply(content=text, pieces=pieces, piece_delay=seconds / max(len(pieces) - 1, 1))


async def inbox_rows(app) -> list[dict]:
    async with app.pool.connection() as conn:
        return await (await conn.execute("SELECT * FROM telegram_inbox")).fetchall()


async def test_a_dm_is_answered_and_streamed_by_editing_one_message(app, fake, openai):
    answer = " ".join(f"word{i}" for i in range(120)) + "\n\nThe **end**."
    openai.script("Hello from Telegram!", slow(answer, 3.5))
    async with running_front(app, fake) as front:
        assert await ask(fake, ADMIN, "hello") == "Hello from Telegram!"
        assert openai.last_user_text() == "hello"
        assert {"chat_id": ADMIN, "action": "typing"} in fake.actions
        fake.dm(ADMIN, "tell me slowly")
        await fake.wait_for(lambda: len(fake.messages_to(ADMIN)) == 2, STEP)
        second = fake.messages_to(ADMIN)[1]
        plain = answer.replace("**", "")
        assert second["text"] != plain and plain.startswith(second["text"])  # a partial first
        await fake.wait_for(lambda: fake.shown_to(ADMIN)[-1] == plain, STEP)
        assert front.username == BOT_USERNAME
    edits = [e for e in fake.edits if e["message_id"] == second["message_id"]]
    assert len(edits) >= 2, "the message was not edited while the answer streamed"
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(edits[:-1])]
    assert all(gap >= 0.9 for gap in gaps), gaps  # about one edit a second
    assert "<b>end</b>" in second["raw"] and second["parse_mode"] == "HTML"
    assert len(fake.messages_to(ADMIN)) == 2 and fake.rejected == []
    assert "help" in [c["command"] for c in fake.commands]  # setMyCommands


async def test_a_stranger_is_refused_with_no_model_call(app, fake, openai):
    async with running_front(app, fake):
        refusal = await ask(fake, MALLORY, "let me in")
        assert "invite-only" in refusal and "/start CODE" in refusal
        assert openai.requests == []
    user = await app.deps.users.get(await app.deps.users.person_id("telegram", MALLORY))
    assert user is not None and user.status == "pending" and user.id < 0


async def test_an_invite_deep_link_lets_a_new_person_in(app, fake, openai):
    invite = await app.deps.access.create_invite(None)
    openai.script("Nice to meet you.")
    async with running_front(app, fake) as front:
        link = front.invite_link(invite.code)
        assert link == f"https://t.me/{BOT_USERNAME}?start={invite.code}"
        # Opening the link makes Telegram send "/start CODE" from the new person.
        welcome = await ask(fake, ALICE, f"/start {invite.code}")
        assert welcome.startswith("Welcome")
        assert await ask(fake, ALICE, "hi") == "Nice to meet you."
    assert len(openai.requests) == 1


async def test_group_messages_are_ignored_without_a_model_call(app, fake, openai):
    openai.script("Only the DM.")
    async with running_front(app, fake):
        fake.group_message(ADMIN, "hello group")
        assert await ask(fake, ADMIN, "hello me") == "Only the DM."
    assert [r["content"] for r in await inbox_rows(app)] == [""]  # the DM only (text cleared)
    assert len(openai.requests) == 1 and fake.messages_to(-100123) == []


async def test_a_repeated_update_is_handled_once(app, fake, openai):
    openai.script("Once.", "Barrier.")
    async with running_front(app, fake):
        update = fake.dm(ADMIN, "only once please")
        await fake.wait_for(lambda: fake.shown_to(ADMIN) == ["Once."], STEP)
        fake.updates.append(update)  # Telegram sends the same update again
        fake._new.set()
        assert await ask(fake, ADMIN, "barrier") == "Barrier."
    assert fake.shown_to(ADMIN) == ["Once.", "Barrier."]
    assert len(openai.requests) == 2


async def test_six_thousand_characters_split_with_the_code_block_intact(app, fake, openai):
    code = "\n".join(f"print('line {i:03d}')" for i in range(150))
    prose = " ".join(f"word{i}" for i in range(500))
    answer = f"{prose}\n\n```python\n{code}\n```\nend."
    assert len(answer) > 6000
    openai.script(answer)
    async with running_front(app, fake):
        fake.dm(ADMIN, "write a lot")
        await fake.wait_for(
            lambda: (
                fake.shown_to(ADMIN)[-1:] == ["end."]
                or (fake.shown_to(ADMIN) and fake.shown_to(ADMIN)[-1].endswith("end."))
            ),
            STEP,
        )
    messages = fake.messages_to(ADMIN)
    assert len(messages) >= 2 and all(len(m["text"]) <= 4096 for m in messages)
    assert all(m["raw"].count("<pre>") == m["raw"].count("</pre>") for m in messages)
    refused = [d for _, d in fake.rejected if "not modified" not in d]  # an unchanged edit is fine
    assert all(m["parse_mode"] == "HTML" for m in messages) and refused == []
    joined = "".join(m["text"] for m in messages)
    positions = [joined.find(f"line {i:03d}") for i in range(150)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert sum(FENCE in m["raw"] for m in messages) == 0  # shown as code blocks, not fences


async def test_text_full_of_markup_characters_is_delivered_exactly(app, fake, openai):
    nasty = "Total: 3.5 (approx)! a+b=c - x_y_z * [note] #1 <tag> & 100% ~ `x` | {y} > z."
    openai.script(nasty)
    async with running_front(app, fake):
        shown = await ask(fake, ADMIN, "be tricky")
    assert shown == nasty.replace("`x`", "x")  # inline code shows as code, without backticks
    assert fake.rejected == []


async def test_markup_telegram_refuses_falls_back_to_plain_text(app, fake, openai, monkeypatch):
    import panager.frontends.telegram.surface as surface

    monkeypatch.setattr(surface, "to_html", lambda text: f"<b>{text}")  # unclosed: refused
    openai.script("Still **delivered**.")
    async with running_front(app, fake):
        assert await ask(fake, ADMIN, "hi") == "Still **delivered**."
    assert fake.rejected and "parse entities" in fake.rejected[0][1]


async def test_a_reminder_reaches_a_telegram_person(app, fake, openai):
    async with running_front(app, fake):
        await ask(fake, ADMIN, "/help")  # the person exists once they wrote
        person = await app.deps.users.get(await app.deps.users.person_id("telegram", ADMIN))
        assert person is not None
        delivered = await app.deps.messenger.send(person, "⏰ Stretch (your legs)!", key="r1")
        assert delivered
        await fake.wait_for(lambda: fake.shown_to(ADMIN)[-1] == "⏰ Stretch (your legs)!", STEP)


async def test_a_button_pressed_by_someone_else_is_refused(app, fake, openai):
    async with running_front(app, fake) as front:
        seen: list[tuple[int, str]] = []

        async def handler(front_, user, row, rest) -> str:
            seen.append((user.id, rest))
            return "Done."

        front.buttons.register("t", handler)
        await ask(fake, ADMIN, "/help")
        message = fake.messages_to(ADMIN)[-1]
        presses = [
            fake.press(MALLORY, message, "t:abc"),  # a stranger (not admitted)
            fake.press(ADMIN, message | {"chat_id": ALICE}, "t:abc"),  # in someone else's chat
            fake.press(ADMIN, message, "t:abc"),
            fake.press(ADMIN, message, "zz:1"),  # no such button
        ]
        await fake.wait_for(lambda: len(fake.answers) == 4, STEP)
    person = await app.deps.users.person_id("telegram", ADMIN)
    assert seen == [(person, "abc")]
    answered = {a["callback_query_id"]: a.get("text") for a in fake.answers}
    texts = [answered[p["callback_query"]["id"]] for p in presses]
    assert "invite-only" in texts[0] and texts[1] == "This button isn't for you."
    assert texts[2] == "Done." and texts[3] == "This button is no longer active."


async def test_the_bot_token_is_in_no_log_line(app, fake, openai, caplog):
    caplog.set_level(logging.DEBUG)
    openai.script("ok")
    async with running_front(app, fake) as front:
        assert await ask(fake, ADMIN, "hi") == "ok"
        assert await front.download("no-such-file") is None  # an HTTP error with the URL
        fake.files["documents/gone.bin"] = b""
        logging.getLogger("panager.test").warning("url: %s/bot%s/getMe", fake.base_url, fake.token)
    assert caplog.records and fake.token not in caplog.text
    assert fake.token.split(":")[1] not in caplog.text
    assert "[telegram-token]" in caplog.text


async def test_a_rejected_token_fails_at_start(app, fake):
    front = TelegramFrontEnd(app)
    fake.token = "999:another-token-entirely-aaaaaaaaaaaaaaaa"
    from aiogram.exceptions import TelegramUnauthorizedError

    with pytest.raises(TelegramUnauthorizedError):
        await front.start()
    await front.close()


async def test_link_previews_only_in_answers_not_written_from_outside_content(
    app, fake, openai, monkeypatch
):
    from panager.agent.turns.result import TurnResult

    tainted = {"see https://outside.example/page": True, "see https://mine.example": False}

    async def run_turn(user, text, **kw):
        answer = (
            "see https://outside.example/page" if "outside" in text else "see https://mine.example"
        )
        return TurnResult(answer, tainted=tainted[answer])

    monkeypatch.setattr(app.assistant, "run_turn", run_turn)
    async with running_front(app, fake):
        await ask(fake, ADMIN, "read the outside page")
        await ask(fake, ADMIN, "my own link")
    outside, mine = fake.messages_to(ADMIN)
    assert outside["link_preview_options"] == {"is_disabled": True}
    assert mine["link_preview_options"] == {"is_disabled": False}


async def test_the_web_sign_in_is_a_url_button_or_text_for_a_local_address(app, fake):
    async with running_front(app, fake):
        local = await ask(fake, ADMIN, "/web")  # PANAGER_PUBLIC_URL is http://localhost:8765
        assert "http://localhost:8765/" in local and fake.rejected == []
        assert fake.buttons(fake.messages_to(ADMIN)[-1]) == []
        app.settings.public_url = "https://panager.example"
        await ask(fake, ADMIN, "/web")
    (button,) = fake.buttons(fake.messages_to(ADMIN)[-1])
    assert button["url"].startswith("https://panager.example/")
    assert fake.messages_to(ADMIN)[-1]["link_preview_options"] == {"is_disabled": True}

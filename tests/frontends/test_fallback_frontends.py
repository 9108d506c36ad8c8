"""A stream that breaks after 10 pieces is written again by the fallback model, and every
front end replaces the partial answer: Discord and Telegram edit their message, the web
page's frames reset it, the terminal prints the new answer under "(restarted on …)".
No word is shown twice, none is lost. Two local fake OpenAI servers; the real discord.py
and aiogram clients against their fakes."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from rich.console import Console

from panager.frontends.terminal.live import LiveAnswer, PlainAnswer
from panager.frontends.web.server import start_web
from tests.discord_helpers import running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.runtime_helpers import write_config
from tests.scheduler_helpers import RecordingMessenger
from tests.telegram_helpers import STEP, running_front, telegram_settings
from tests.web_helpers import ALICE, WebHarness

pytestmark = pytest.mark.timeout(90)

WORDS = " ".join(f"w{n}" for n in range(30))
NOTE = "(answered by llama3.1: gpt-4o is not answering)"
FINAL = f"{WORDS}\n\n{NOTE}"


@pytest.fixture
async def servers():
    async with FakeOpenAI() as first, FakeOpenAI() as second:
        yield first, second


async def fallback_app(make_app, tmp_path, servers, slow=False, **overrides):
    """`slow`: the cut-off stream takes ~1.5 s, so Discord and Telegram post it first."""
    first, second = servers
    first.script(Reply(content=WORDS, pieces=[f"w{n} " for n in range(30)],
                       piece_delay=0.15 if slow else 0.0, fail_after=10))
    second.script(WORDS)
    home = write_config(tmp_path / "h", models={
        "gpt-4o": {"base_url": first.base_url, "fallback": ["llama3.1"]},
        "llama3.1": {"base_url": second.base_url},
    })
    return await make_app(openai_base_url=first.base_url, openai_api_key="k",
                          PANAGER_MODEL="gpt-4o", home=home, **overrides)


def no_repeats(text: str) -> bool:
    counts = Counter(w for w in text.split() if w.startswith("w"))
    return all(n == 1 for n in counts.values())


async def test_discord_edits_the_partial_message_into_the_fallback_answer(
    make_app, tmp_path, servers
):
    app = await fallback_app(make_app, tmp_path, servers, slow=True)
    async with FakeDiscord() as fake:
        with fake.patch_discord():
            async with running_bot(app, fake):
                await fake.send_dm(6001, "count")
                (first,) = await fake.wait_for_messages(6001, 1, timeout=STEP)
                await fake.wait_for(lambda: fake.shown_to(6001) == [FINAL], STEP)
        assert fake.unhandled == []
    assert len(fake.messages_to(6001)) == 1  # one message, edited: never a second copy
    shown = [first["content"], *(e["content"] for e in fake.edits_of(first["id"]))]
    assert "w0" in shown[0] and all(no_repeats(s) for s in shown)


async def test_telegram_edits_the_partial_message_into_the_fallback_answer(
    make_app, tmp_path, servers, telegram
):
    app = await fallback_app(make_app, tmp_path, servers, slow=True,
                             **telegram_settings(telegram))
    async with running_front(app, telegram):
        telegram.dm(5001, "count")
        await telegram.wait_for(lambda: telegram.shown_to(5001)[-1:] == [FINAL], STEP)
    [message] = telegram.messages_to(5001)
    edits = [e["text"] for e in telegram.edits if e["message_id"] == message["message_id"]]
    assert edits and all(no_repeats(t) for t in edits)


async def test_the_web_page_resets_the_partial_answer(make_app, tmp_path, servers):
    app = await fallback_app(make_app, tmp_path, servers, http_port=0)
    await app.deps.users.ensure(ALICE, "alice", display_name="Alice")
    harness = WebHarness(app, await start_web(app), RecordingMessenger(), None)
    client = await harness.client(ALICE)
    status, body = await client.post("/chat", {"text": "count"},
                                     headers={"X-Requested-With": "fetch"})
    await client.close()
    assert status == 200
    frames = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        frames.append((lines["event"], json.loads(lines["data"])))
    names = [n for n, _ in frames]
    reset = names.index("reset")
    assert names[:reset] == ["delta"] * 10
    assert frames[reset][1] == {"iteration": 1, "restarted_on": "llama3.1"}
    after = "".join(d["text"] for n, d in frames[reset + 1:] if n == "delta")
    assert after == WORDS  # what the page shows after the reset: one copy
    assert frames[-1][0] == "done" and frames[-1][1]["text"] == FINAL


@pytest.mark.parametrize("live", [True, False])
async def test_the_terminal_prints_the_answer_once_under_restarted_on(
    make_app, tmp_path, servers, live
):
    app = await fallback_app(make_app, tmp_path, servers)
    user = await app.local_user()
    out = io.StringIO()
    view = LiveAnswer(Console(file=out, width=100)) if live else PlainAnswer(out)

    def follow(event):
        if event.type == "message_delta":
            view.delta(event.data["text"])
        elif event.type == "message_reset":
            view.reset(event.data.get("restarted_on"))

    app.emitter.subscribe(follow)
    view.start()
    result = await app.assistant.run_turn(user, "count")
    view.finish(result.text)
    text = out.getvalue()
    assert text.count("(restarted on llama3.1)") == 1 and text.count("answered by") == 1
    after = text.split("(restarted on llama3.1)", 1)[1]
    assert no_repeats(after) and all(f"w{n}" in after for n in range(30))
    if live:  # the live area is replaced: the cut-off words are not left on screen
        assert no_repeats(text)

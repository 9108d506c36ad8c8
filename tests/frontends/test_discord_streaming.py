"""Streamed answers in Discord: the real discord.py client against the local fake Discord.

The answer's message is posted about a second after the first piece of text and
edited as more arrives (about once a second), continued in new messages before
2,000 characters with code fences intact, and the final edit carries the exact
answer. A short answer is one message without edits.
"""

from __future__ import annotations

import itertools

import pytest

from panager.frontends.shared.chunking import FENCE
from tests.discord_helpers import running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.timeout(90)

USER = 6001
STEP = 20


@pytest.fixture
async def fake():
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server
    assert server.unhandled == [], "the bot called routes the fake does not serve"


@pytest.fixture
async def app(make_app, openai):
    return await make_app(openai_base_url=openai.base_url, openai_api_key="test")


def slow(text: str, seconds: float, piece: int = 40) -> Reply:
    """`text` streamed in pieces of `piece` characters over about `seconds`."""
    pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
    return Reply(content=text, pieces=pieces, piece_delay=seconds / max(len(pieces) - 1, 1))


async def test_a_slow_answer_is_edited_as_it_streams_and_ends_exact(app, fake, openai):
    answer = " ".join(f"word{i}" for i in range(120)) + "\n\nThe **end**."
    openai.script(slow(answer, 3.5, piece=25))
    async with running_bot(app, fake):
        await fake.send_dm(USER, "tell me slowly")
        (first,) = await fake.wait_for_messages(USER, 1, timeout=STEP)
        assert first["content"] != answer and answer.startswith(first["content"])  # partial
        await fake.wait_for(lambda: fake.shown_to(USER) == [answer], STEP)
    edits = fake.edits_of(first["id"])
    assert len(edits) >= 2, "the message was not edited while the answer streamed"
    assert edits[-1]["content"] == answer  # the final edit: exactly the answer
    partial = [e["content"] for e in edits[:-1]]
    assert all(answer.startswith(p) for p in partial) and partial == sorted(partial, key=len)
    live = edits[:-1]  # the final edit goes out as soon as the answer is complete
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(live)]
    assert all(gap >= 0.9 for gap in gaps), gaps  # throttled: about one edit a second
    assert len(fake.messages_to(USER)) == 1


async def test_a_short_answer_is_sent_once_without_edits(app, fake, openai):
    openai.script("Quick one.")
    async with running_bot(app, fake):
        await fake.send_dm(USER, "hi")
        await fake.wait_for(lambda: fake.shown_to(USER) == ["Quick one."], STEP)
    assert fake.edits == [] and fake.sent[0]["content"] == "Quick one."


async def test_a_5000_character_stream_arrives_as_ordered_messages_with_fences(app, fake, openai):
    code = "\n".join(f"    print('line {i:03d}')" for i in range(60))
    prose = " ".join(f"word{i}" for i in range(300))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{prose}\n\n```python\n{code}\n```\nend."
    assert len(answer) > 5000
    openai.script(slow(answer, 4.0, piece=60))
    async with running_bot(app, fake):
        await fake.send_dm(USER, "write a lot")
        await fake.wait_for(lambda: len(fake.messages_to(USER)) >= 2, STEP)
        await fake.wait_for(lambda: fake.shown_to(USER)[-1].endswith("end."), STEP)
    shown = fake.shown_to(USER)
    assert len(shown) >= 3 and all(len(c) < 2000 for c in shown)
    assert all(c.count(FENCE) % 2 == 0 for c in shown), "a message leaves a code block open"
    ids = [m["id"] for m in fake.messages_to(USER)]
    assert ids == sorted(ids)
    joined = "".join(shown)
    positions = [joined.find(f"line {i:03d}") for i in range(60)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert joined.index("word299") < joined.index("line 000")
    # every edit on the way kept its fences balanced too
    assert all(e["content"].count(FENCE) % 2 == 0 for e in fake.edits)
    assert len(fake.edits) >= 3

"""Questions are literal and whole on every front end (SPEC §2): a value holding three
backticks, `</pre>`, `<a href>`, only whitespace and zero-width characters, bidi controls,
`@everyone` or a masked link renders as nothing but its text — in Discord (embeds
suppressed, no mentions), Telegram (HTML escaped inside `<pre>`/`<code>`), the web page
and the terminal — and a question too long for one message comes in parts, never cut.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.markdown import Markdown

from panager.agent.graph.confirm import PendingCall, Question, question_text
from panager.agent.graph.tool import shown_block, shown_text
from panager.agent.tools.messaging import describe_relay
from panager.agent.turns.threads import update_thread
from panager.frontends.shared.chunking import split_message
from panager.frontends.telegram.markup import to_html
from panager.services.relays.relay import relay_note
from tests.discord_helpers import STEP, running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.scripted_model import ScriptedChatModel, call
from tests.runtime_helpers import write_config

pytestmark = pytest.mark.timeout(60)

HOSTILE = [
    "three ``` backticks ```",
    "</pre><b>bold</b></code>",
    '<a href="https://evil.example/?pin=4821">see you Tuesday</a>',
    " \u200b\u200c\ufeff ",
    "invoice \u202egpj.exe \u2066x\u2069",
    "@everyone and <@123456> look",
    "[see you Tuesday](https://evil.example/?pin=4821) ||4821|| **now** # Heading",
    "\x1b[2J\x1b]8;;https://evil.example\x07click\x1b]8;;\x07",
]
# What must never show outside a code span: the values' markup and controls.
MARKERS = ["evil.example", "||", "@everyone", "<@", "<a", "</pre>", "**", "# Heading",
           "\u202e", "\u2066", "\u200c", "\ufeff", "\x1b", "\x07", "<b>"]
FENCED = re.compile(r"```.*?```", re.DOTALL)
INLINE = re.compile(r"`[^`\n]+`")
SUPPRESS_EMBEDS = 1 << 2
ALICE, MALLORY = 1001, 1002


def outside_code(markdown: str) -> str:
    """What Discord (and the terminal's Markdown) would render as markup: the text left
    after the fenced blocks and inline code spans."""
    return INLINE.sub("", FENCED.sub("", markdown))


def hostile_question() -> Question:
    inline = "\n".join(f"value {n}: {shown_text(v)}" for n, v in enumerate(HOSTILE))
    block = "\n".join(HOSTILE)
    calls = (PendingCall("c1", "calendar_update_event", f"Change the event:\n{inline}"),
             PendingCall("c2", "send_user_message",
                         describe_relay({"recipient": "mallory", "text": block})))
    from datetime import UTC, datetime
    return Question("qkey", calls, datetime(2026, 11, 21, tzinfo=UTC))


def test_every_value_sits_in_code_with_its_controls_visible():
    text = question_text(hostile_question())
    rest = outside_code(text)
    for marker in MARKERS:
        assert marker not in rest, marker
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text  # shown as <U+…>
    assert text.count("<U+202E>") == 2 and "<U+001B>" in text and "<U+200B>" in text
    for n in range(len(HOSTILE)):  # each inline value whole, as a JSON string
        assert f"value {n}: `\"" in text
    # the block holds every line, none closing it early
    block = text.split("The whole text:\n" if "The whole text:\n" in text else "text:\n")[1]
    assert block.count("```") == 2


def test_telegram_html_holds_the_values_only_escaped_in_pre_and_code():
    html = to_html(question_text(hostile_question()))
    assert "<a " not in html and "<b>" not in html and "<tg-spoiler" not in html
    assert "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;" in html  # escaped, inside the block
    outside = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", html, flags=re.DOTALL)
    for marker in ["evil.example", "||", "@everyone", "&lt;", "**"]:
        assert marker not in outside, marker
    assert html.count("<pre>") == html.count("</pre>") == 1


def test_the_terminal_renders_no_link_escape_or_markup_from_a_value():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=400, color_system="truecolor")
    console.print(Markdown(question_text(hostile_question()), hyperlinks=False))
    shown = out.getvalue()
    assert "\x1b]8;" not in shown  # no terminal hyperlink
    assert "\x1b[2J" not in shown and "\x07" not in shown  # the value's escapes are text
    assert "<U+001B>[2J" in shown and "<U+202E>" in shown and "see you Tuesday" in shown


def test_a_long_question_comes_in_parts_and_every_line_arrives():
    lines = [f"line {n:04d} {HOSTILE[n % len(HOSTILE)]}" for n in range(120)]
    question = question_text(Question("q", (PendingCall("c", "send_user_message",
                                                        describe_relay({"recipient": "m",
                                                                        "text": "\n".join(lines)})),),
                                      hostile_question().expires_at))
    parts = split_message(question, 2000)
    assert len(parts) > 2 and all(len(p) <= 2000 for p in parts)
    joined = "\n".join(parts)
    for line in lines:
        assert shown_block(line)[4:-4] in joined  # whole, as the block shows it
    for part in parts:
        assert part.count("```") % 2 == 0  # each part's block closed: nothing leaks out
        for marker in MARKERS:
            assert marker not in outside_code(part), marker


@pytest.fixture
async def discord_fake():
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server


async def test_discord_sends_the_question_literal_without_mentions_or_embeds(
    make_app, tmp_path, discord_fake
):
    fake = discord_fake
    text = "\n".join(HOSTILE[:-1])  # a relay is stripped of controls by the model anyway
    model = ScriptedChatModel(script=[call("send_user_message",
                                           {"recipient": "mallory", "text": text}), "ok"])
    app = await make_app(model=model, home=write_config(tmp_path / "h", allow_user_messages=True))
    alice = await app.deps.users.ensure(ALICE, "alice")
    mallory = await app.deps.users.ensure(MALLORY, "mallory")
    await update_thread(app.assistant, alice, {"messages": [relay_note(mallory, "hi")]})
    async with running_bot(app, fake):
        await fake.send_dm(ALICE, "what did mallory want?")
        await fake.wait_for(lambda: any(m["components"] for m in fake.messages_to(ALICE)), STEP)
        sent = [m for m in fake.sent if m["recipient_id"] == ALICE]
    question = "\n".join(m["content"] for m in sent)
    assert "@mallory" in question and "see you Tuesday" in question
    for message in sent:
        assert message["flags"] & SUPPRESS_EMBEDS
        assert message["allowed_mentions"] == {"parse": []}  # @everyone pings nobody
        assert message["embeds"] == []
        for marker in MARKERS:
            assert marker not in outside_code(message["content"]), marker


async def test_telegram_sends_the_values_html_escaped_inside_pre_and_code(
    make_app, tmp_path, telegram
):
    from tests.telegram_helpers import running_front, telegram_settings

    fake, admin = telegram, 5_000_001
    text = "\n".join(HOSTILE[:-1])
    model = ScriptedChatModel(script=[call("send_user_message",
                                           {"recipient": "mallory", "text": text}), "ok"])
    app = await make_app(model=model, home=write_config(tmp_path / "h", allow_user_messages=True),
                         telegram_admin_ids=[admin], **telegram_settings(fake))
    alice = await app.deps.users.ensure_identity("telegram", admin, "alice")
    mallory = await app.deps.users.ensure(MALLORY, "mallory")
    await update_thread(app.assistant, alice, {"messages": [relay_note(mallory, "hi")]})
    async with running_front(app, fake):
        fake.dm(admin, "what did mallory want?")
        await fake.wait_for(lambda: any(fake.buttons(m) for m in fake.messages_to(admin)), STEP)
    [question] = [m for m in fake.messages_to(admin) if fake.buttons(m)]
    raw = question["raw"]
    assert question["parse_mode"] == "HTML"
    assert question["link_preview_options"] == {"is_disabled": True}
    assert "<a " not in raw and "<b>" not in raw and "<tg-spoiler" not in raw
    assert "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;&lt;/code&gt;" in raw
    outside = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", raw, flags=re.DOTALL)
    for marker in ["evil.example", "||", "@everyone", "&lt;", "**"]:
        assert marker not in outside, marker
    # what the person reads is the value itself, tags and all, as text
    assert '<a href="https://evil.example/?pin=4821">see you Tuesday</a>' in question["text"]


async def test_the_web_page_shows_the_question_escaped(make_app, tmp_path):
    from tests.web_helpers import ALICE as WEB_ALICE
    from tests.web_helpers import web_harness

    text = "\n".join(HOSTILE)
    model = ScriptedChatModel(script=[call("send_user_message",
                                           {"recipient": "bob", "text": text}), "ok"])
    h = await web_harness(make_app, model, home=write_config(tmp_path / "h",
                                                             allow_user_messages=True))
    alice = await h.app.deps.users.get(WEB_ALICE)
    bob = await h.app.deps.users.by_username("bob")
    await update_thread(h.app.assistant, alice, {"messages": [relay_note(bob, "hi")]})
    client = await h.client(WEB_ALICE)
    status, page = await client.post("/chat", {"text": "what did bob want?"})
    await client.close()
    assert status == 200 and 'id="question"' in page
    assert '<a href="https://evil.example' not in page and "<b>bold</b>" not in page
    assert "&lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;a href=&#34;https://evil.example/?pin=4821&#34;&gt;" in page or (
        "&lt;a href=&quot;https://evil.example/?pin=4821&quot;&gt;" in page)
    assert "\x1b" not in page and "&lt;U+001B&gt;[2J" in page and "&lt;U+202E&gt;" in page

"""Captures of the question for each consequential tool (docs/questions.md): the terminal's
text as the chat prints it, the Telegram HTML and the Discord message payloads the bots send
for it — and a Chromium screenshot of the web page's question (docs/screenshots/question.png).

Each capture must name the object in words a person can judge (asserted every run). The
documentation files are written when `PANAGER_WRITE_CAPTURES=1` (ids and times vary from
run to run, so an ordinary run leaves the docs alone):
`PANAGER_WRITE_CAPTURES=1 .venv/bin/python -m pytest -n0 tests/frontends/test_question_captures.py`.
"""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.messages import HumanMessage
from rich.console import Console
from rich.markdown import Markdown

from panager.agent.graph.confirm import PendingCall, Question, question_text
from panager.agent.tools.mcp import _describer
from panager.agent.tools.web import describe_fetch, describe_search
from panager.agent.turns.threads import update_thread
from panager.framing import frame
from tests.agent.test_questions import _plain_http_oauth, fake, linked, words  # noqa: F401
from tests.browser_helpers import SCREENSHOTS, Browsers
from tests.discord_helpers import running_bot
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.scripted_model import ScriptedChatModel, call
from tests.google_helpers import ALICE
from tests.telegram_helpers import running_front, telegram_settings
from tests.web_helpers import ALICE as WEB_ALICE
from tests.web_helpers import web_harness

pytestmark = pytest.mark.timeout(120)
DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE = os.environ.get("PANAGER_WRITE_CAPTURES") == "1"
TELEGRAM_ALICE = 5_000_111


def terminal(text: str) -> str:
    """The question as `panager chat` prints it (Markdown, no hyperlinks), as plain text."""
    out = io.StringIO()
    Console(file=out, width=100, color_system=None, force_terminal=False).print(
        Markdown(text, hyperlinks=False))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


async def questions(h, alice, google, clock) -> list[tuple[str, str, list[str]]]:
    """(tool, the question's words, words a person judges it by) for each tool."""
    app = h.app
    memory = (await app.deps.memory.save(
        alice.id, "Our wifi password hint: the cat's name plus 42", tainted=True)).memory
    await app.deps.profiles.update(alice.id, "instructions", "Answer in English, briefly.")
    reminder = await app.deps.scheduler.create(alice, "Water the plants", "2026-11-22T09:00",
                                               repeat="FREQ=WEEKLY;BYDAY=SU,WE")
    start = clock.now() + timedelta(days=2)
    event = google.add_event(ALICE, summary="Dentist — Dr. Kim", start=start.isoformat(),
                           end=(start + timedelta(hours=1)).isoformat(),
                           attendees=[{"email": "kim@seoul-dental.example"}])
    task = google.add_task(ALICE, title="Renew passport", due="2026-12-01T00:00:00.000Z")
    await app.deps.users.ensure(666, "mina", display_name="Mina Park")
    doc = await app.deps.media.documents.add(alice.id, "lease-2026.pdf", "application/pdf",
                                             b"%PDF" + b"x" * 48_000, "The lease.", pages=6)
    offer = SimpleNamespace(tool=SimpleNamespace(name="create_issue"), server="tracker",
                            read_only=False)
    specs = [
        ("memory_forget", {"memory_id": memory.id}, ["cat's name plus 42", "2026-11-21"]),
        ("memory_update", {"memory_id": memory.id, "content": "The wifi password is on the "
                           "fridge."}, ["cat's name plus 42", "on the fridge"]),
        ("profile_update", {"section": "instructions", "text": "Answer in Korean."},
         ["Answer in English, briefly.", "Answer in Korean."]),
        ("schedule_create", {"message": "Summarise my unread mail", "at": "2026-11-23T08:00",
                             "kind": "agent", "repeat": "FREQ=WEEKLY;BYDAY=MO"},
         ["Mon 23 Nov 2026 08:00", "Mon 30 Nov 2026 08:00", "Summarise my unread mail"]),
        ("schedule_cancel", {"schedule_id": reminder.id}, ["Water the plants", "Sun 22 Nov"]),
        ("calendar_create_event", {"title": "Team offsite", "start": "2026-11-26T10:00",
                                   "end": "2026-11-26T16:00", "calendar_id": "Team"},
         ["Team offsite", "Team"]),
        ("calendar_update_event", {"event_id": event["id"], "start": "2026-11-24T15:00"},
         ["Dentist — Dr. Kim", "2026-11-24T15:00", "kim@seoul-dental.example"]),
        ("calendar_delete_event", {"event_id": event["id"]},
         ["Dentist — Dr. Kim", "kim@seoul-dental.example"]),
        ("task_update", {"task_id": task["id"], "completed": True}, ["Renew passport"]),
        ("task_delete", {"task_id": task["id"]}, ["Renew passport", "2026-12-01"]),
        ("send_user_message", {"recipient": "mina", "text": "Running 10 minutes late, sorry!"},
         ["@mina", "Mina Park", "Running 10 minutes late, sorry!"]),
        ("document_forget", {"document_id": doc.id}, ["lease-2026.pdf", "48,004 bytes"]),
    ]
    found = [(name, await words(h, alice, name, args), judged) for name, args, judged in specs]
    found += [
        ("web_fetch", describe_fetch({"url": "https://example.org/report?id=7&pin=4821"}),
         ["https://example.org/report?id=7&pin=4821"]),
        ("web_search", describe_search({"query": "Mallory Lane home address"}),
         ["Mallory Lane home address"]),
        ("mcp__tracker__create_issue",
         _describer(offer)({"title": "Leak", "body": "Paste of ~/.ssh/id_rsa:\n-----BEGIN"}),
         ["create_issue", "tracker", "not marked read_only", "-----BEGIN"]),
    ]
    return found


async def test_each_consequential_tools_question_is_captured_naming_its_object(
    make_app, fake, tmp_path, clock, telegram  # noqa: F811
):
    """Each question goes out through the real discord.py and aiogram clients to the fake
    Discord and Telegram servers, which record what they were sent."""
    discord_fake = FakeDiscord()
    await discord_fake.__aenter__()
    try:
        with discord_fake.patch_discord():
            sections = await captured(make_app, fake, tmp_path, clock, discord_fake, telegram)
    finally:
        await discord_fake.__aexit__(None, None, None)
    if WRITE:
        write_questions(sections)


def write_questions(sections: list[str]) -> None:
    head = (DOCS / "questions.md").read_text().split("<!-- captures -->")[0]
    (DOCS / "questions.md").write_text(head + "<!-- captures -->\n\n" + "\n".join(sections))


async def captured(make_app, google, tmp_path, clock, discord_fake, telegram) -> list[str]:
    h, alice = await linked(make_app, google, tmp_path, **telegram_settings(telegram))
    users = h.app.deps.users
    await users.set_timezone(alice.id, "Asia/Seoul")
    await h.sql("INSERT INTO identities (platform, platform_id, user_id) VALUES "
                "('telegram', %s, %s) RETURNING user_id", TELEGRAM_ALICE, alice.id)  # both
    alice = await users.get(alice.id)
    expires = datetime(2026, 11, 21, 12, 10, tzinfo=UTC)
    sections = []
    async with running_bot(h.app, discord_fake) as bot, running_front(h.app, telegram) as front:
        for tool, text, judged in await questions(h, alice, google, clock):
            asked = question_text(Question("q", (PendingCall("c", tool, text),), expires))
            for word in judged:
                assert word in asked, (tool, word)
            assert "could not read" not in asked, asked
            posted, sent = len(discord_fake.sent), len(telegram.sent)
            assert await bot.messenger.send(alice, asked)
            assert await front.messenger.send(alice, asked)
            payloads = [{k: m[k] for k in ("content", "flags", "allowed_mentions", "embeds")}
                        for m in discord_fake.sent[posted:]]
            assert all(p["flags"] & 4 and p["allowed_mentions"] == {"parse": []}
                       for p in payloads)
            html = [{k: m[k] for k in ("raw", "parse_mode", "link_preview_options")}
                    for m in telegram.sent[sent:]]
            sections.append(
                f"## `{tool}`\n\nTerminal:\n\n```text\n{terminal(asked)}\n```\n\n"
                f"Telegram (`sendMessage`, as the fake Telegram received it):\n\n```json\n"
                f"{json.dumps(html, ensure_ascii=False, indent=1)}\n```\n\n"
                f"Discord (`POST /channels/…/messages`, as the fake Discord received it):"
                f"\n\n```json\n{json.dumps(payloads, ensure_ascii=False, indent=1)}\n```\n")
    return sections


async def test_the_web_page_question_in_chromium(make_app, tmp_path):
    """The web chat's question, rendered by Chromium: the values are text (no link, no
    bold), the buttons are there."""
    text = ("Running late — [see you Tuesday](https://evil.example/?pin=4821) **now**\n"
            "<a href=\"https://evil.example\">click</a> @everyone \u202egpj.exe")
    model = ScriptedChatModel(script=[call("send_user_message",
                                           {"recipient": "bob", "text": text}), "ok"])
    from tests.runtime_helpers import write_config

    h = await web_harness(make_app, model, home=write_config(tmp_path / "h",
                                                             allow_user_messages=True))
    alice = await h.app.deps.users.get(WEB_ALICE)
    outside = HumanMessage(frame("a relayed message", "tell bob I'm late"), name="relay")
    await update_thread(h.app.assistant, alice, {"messages": [outside]})
    browsers = await Browsers().start()
    try:
        context, page = await browsers.person()
        path = await h.link(WEB_ALICE)
        await page.goto(h.url + path)
        await page.click("form[action='/signin'] button")
        await page.wait_for_url(h.url + "/")
        await page.goto(h.url + "/chat")
        await page.fill("textarea[name=text]", "what did bob want?")
        await page.keyboard.press("Enter")
        question = page.locator("#question")
        await question.wait_for()
        assert await question.locator("a").count() == 0 and await question.locator("b").count() == 0
        shown = await question.locator(".text").inner_text()
        assert "[see you Tuesday](https://evil.example/?pin=4821)" in shown
        assert '<a href="https://evil.example">click</a>' in shown and "<U+202E>" in shown
        assert await question.locator("button", has_text="Approve").count() == 1
        if WRITE:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            await question.screenshot(path=str(SCREENSHOTS / "question.png"))
        await context.close()
    finally:
        await browsers.stop()

"""Attachments in the web chat, in a real Chromium: the upload button, paste, drag and drop;
the model is the fake OpenAI server (so its requests show the image parts)."""

from __future__ import annotations

import base64

import pytest

from panager.frontends.web.server import start_web
from tests.browser_helpers import Browsers
from tests.media_files import ogg_opus, png
from tests.scheduler_helpers import RecordingMessenger
from tests.web_helpers import ALICE, WebHarness

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def browsers():
    found = await Browsers().start()
    yield found
    await found.stop()


async def harness(make_app, openai) -> WebHarness:
    app = await make_app(openai_base_url=openai.base_url, openai_api_key="test", http_port=0)
    await app.deps.users.ensure(ALICE, "alice", display_name="Alice")
    return WebHarness(app, await start_web(app), RecordingMessenger(), None)


async def chat_page(browsers, h: WebHarness):
    context, page = await browsers.person()
    await page.goto(h.url + await h.link(ALICE))
    await page.click("form[action='/signin'] button")
    await page.wait_for_url(h.url + "/")
    await page.goto(h.url + "/chat")
    return context, page


def js_file(data: bytes, name: str, mime: str) -> str:
    """JavaScript making a File of these bytes."""
    b64 = base64.b64encode(data).decode()
    return (f"new File([Uint8Array.from(atob('{b64}'), c => c.charCodeAt(0))], "
            f"'{name}', {{type: '{mime}'}})")


async def answer_shown(page, text: str) -> None:
    await page.wait_for_selector(f".msg.panager:not(.streaming) >> text={text}")


async def test_upload_paste_and_drop_reach_the_model(make_app, browsers, openai):
    h = await harness(make_app, openai)
    context, page = await chat_page(browsers, h)

    # 1. the upload button
    openai.script("A red square.")
    await page.set_input_files("#chat-files", files=[
        {"name": "receipt.png", "mimeType": "image/png", "buffer": png(5, 5)}])
    assert "receipt.png" in await page.inner_text("#chat-attached")
    await page.fill("textarea[name=text]", "what is on it?")
    await page.keyboard.press("Enter")
    await answer_shown(page, "A red square.")
    assert len(openai.image_parts()) == 1 and openai.last_user_text() == "what is on it?"

    # 2. paste an image into the message box (no words: the image alone is the message)
    openai.script("A pasted picture.")
    await page.evaluate(f"""() => {{
        const dt = new DataTransfer(); dt.items.add({js_file(png(3, 3), "pasted.png", "image/png")});
        document.querySelector("textarea[name=text]").dispatchEvent(
            new ClipboardEvent("paste", {{clipboardData: dt, bubbles: true, cancelable: true}}));
    }}""")
    assert "pasted.png" in await page.inner_text("#chat-attached")
    await page.click("#chat-form button[type=submit]")
    await answer_shown(page, "A pasted picture.")
    assert len(openai.image_parts()) == 1

    # 3. drop an audio file on the form: heard (shown first), then answered
    openai.transcripts.append("pick up the kids at five")
    openai.script("Noted: kids at five.")
    await page.evaluate(f"""() => {{
        const dt = new DataTransfer(); dt.items.add({js_file(ogg_opus(2.0), "memo.ogg", "audio/ogg")});
        document.getElementById("chat-form").dispatchEvent(
            new DragEvent("drop", {{dataTransfer: dt, bubbles: true, cancelable: true}}));
    }}""")
    await page.fill("textarea[name=text]", "what did I say?")
    await page.keyboard.press("Enter")
    await answer_shown(page, "Noted: kids at five.")
    bubbles = await page.locator(".msg.panager .text").all_inner_texts()
    heard = bubbles.index("Heard in memo.ogg: “pick up the kids at five”")
    assert heard < bubbles.index("Noted: kids at five.")
    framed = [m for m in openai.requests[-1]["messages"] if m.get("name") == "attachments"][-1]
    assert framed["content"].startswith("<outside_content") and "kids at five" in framed["content"]
    assert openai.image_parts() == []  # earlier images are placeholders now

    # 4. a bad file: one line, the words still answered
    openai.script("Here is my answer anyway.")
    await page.set_input_files("#chat-files", files=[
        {"name": "broken.png", "mimeType": "image/png", "buffer": b"\x89PNG\r\n\x1a\nnot really"}])
    await page.fill("textarea[name=text]", "and this?")
    await page.keyboard.press("Enter")
    await answer_shown(page, "Here is my answer anyway.")
    assert "I couldn't use broken.png: it is not a readable image." in await page.inner_text("#log")

    # 5. documents by the upload button: a PDF and a DOCX, found by document_search
    from tests.services.test_documents import PHRASE, long_docx, long_pdf

    openai.script("Both kept.")
    docx_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    await page.set_input_files("#chat-files", files=[
        {"name": "lease.pdf", "mimeType": "application/pdf", "buffer": long_pdf()},
        {"name": "letter.docx", "mimeType": docx_type, "buffer": long_docx()}])
    await page.fill("textarea[name=text]", "keep these")
    await page.keyboard.press("Enter")
    await answer_shown(page, "Both kept.")
    hits = await h.app.deps.media.documents.search(ALICE, "heron copper mill")
    assert {x.name for x in hits if PHRASE in x.content} == {"lease.pdf", "letter.docx"}

    # 6. the Files page: an uploaded HTML page (with an SVG) is text there, never a page
    evil = (b"<!DOCTYPE html><html><body><script>document.title='pwned'</script>"
            b"<svg onload=\"document.title='svg'\"></svg><p>Harmless words</p></body></html>")
    doc = await h.app.deps.media.take(ALICE, "evil.html", evil)
    await page.goto(h.url + "/files")
    assert "lease.pdf" in await page.inner_text("main")
    await page.click(f"a[href='/files/{doc.details['document_id']}']")
    await page.wait_for_selector("pre.extracted")
    assert "Harmless words" in await page.inner_text("pre.extracted")
    assert await page.title() not in ("pwned", "svg")
    async with page.expect_download() as download:
        await page.click("a.button >> text=Download")
    assert (await download.value).suggested_filename == "evil.html"
    assert await page.title() not in ("pwned", "svg")
    await page.goto(h.url + "/chat")

    await page.reload()  # the thread shows file names, not framed data
    log = await page.inner_text("#log")
    assert "📎 receipt.png" in log and "outside_content" not in log
    assert browsers.errors == []
    await context.close()

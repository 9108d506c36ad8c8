"""`/attach PATH [message]` in `panager chat` on a real pseudo-terminal (see test_terminal_pty)."""

from __future__ import annotations

import sys

import pexpect
import pytest

from tests.cli.test_cli import cli_env
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.frontends.test_terminal_pty import COLS, ROWS, Screen, expect, never_garbled
from tests.media_files import png, wav
from tests.services.test_documents import PHRASE, long_docx, long_pdf

pytestmark = pytest.mark.timeout(120)


async def test_attach_sends_an_image_an_audio_file_and_refuses_bad_files(db_url, tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "my photo.png").write_bytes(png(6, 6))
    (files / "memo.wav").write_bytes(wav(1.0))
    (files / "empty.pdf").write_bytes(b"")
    (files / "lease.pdf").write_bytes(long_pdf())
    (files / "letter.docx").write_bytes(long_docx())
    async with FakeOpenAI() as openai:
        env = cli_env(db_url, tmp_path / "home", openai.base_url) | {"TERM": "xterm-256color"}
        screen = Screen()
        child = pexpect.spawn(sys.executable, ["-m", "panager.cli.main", "chat"], env=env,
                              dimensions=(ROWS, COLS), timeout=30)
        child.logfile_read = screen
        try:
            await expect(child, "you ›")
            # an image, its path quoted: the model gets an image part and the words
            openai.script("A small red square.")
            child.sendline(f'/attach "{files / "my photo.png"}" what colour is it?')
            await expect(child, "A small red square.")
            await expect(child, "you ›")
            assert len(openai.image_parts()) == 1
            assert openai.last_user_text() == "what colour is it?"

            # an audio file: transcribed, shown first, framed as outside content
            openai.transcripts.append("buy bread and eggs")
            openai.script("That memo is a shopping list.")
            child.sendline(f"/attach {files / 'memo.wav'} what is in this memo?")
            await expect(child, "That memo is a shopping list.")
            await expect(child, "you ›")
            shown = screen.text()
            assert shown.index("Heard in memo.wav: “buy bread and eggs”") < shown.index(
                "That memo is a shopping list.")
            framed = [m for m in openai.requests[-1]["messages"]
                      if m.get("name") == "attachments"][-1]
            assert framed["content"].startswith("<outside_content")
            assert "buy bread and eggs" in framed["content"]
            # the earlier image is only its placeholder now
            assert openai.image_parts() == []
            assert "[image: my photo.png," in str(openai.requests[-1]["messages"])

            # bad input: one line each, the words still answered; no model call without words
            requests = len(openai.requests)
            child.sendline(f"/attach {files / 'empty.pdf'}")
            await expect(child, "I couldn't use empty.pdf: it is empty (0 bytes).")
            child.sendline(f"/attach {files / 'nope.png'} still answer me")
            await expect(child, "there is no file at")
            await expect(child, "ok")
            assert len(openai.requests) == requests + 1
            assert openai.last_user_text() == "still answer me"
            child.sendline("/attach")
            await expect(child, "Usage: /attach PATH [message]")

            # documents: kept, then found by document_search in a later turn
            openai.script("Stored the lease.", "Stored the letter.")
            child.sendline(f"/attach {files / 'lease.pdf'} keep this")
            await expect(child, "Stored the lease.")
            child.sendline(f"/attach {files / 'letter.docx'} and this")
            await expect(child, "Stored the letter.")
            openai.script(tool_call("document_search", {"query": "heron copper mill"}),
                          "Found it.")
            child.sendline("where is the heron?")
            await expect(child, "Found it.")
            result = next(m for m in openai.requests[-1]["messages"] if m["role"] == "tool")
            assert result["content"].count(PHRASE) == 2
            assert "lease.pdf" in result["content"] and "letter.docx" in result["content"]

            child.sendline("exit")
            await expect(child, pexpect.EOF)
        finally:
            if child.isalive():
                child.terminate(force=True)
        never_garbled(screen)
        assert "Traceback" not in screen.text()

"""`panager chat` in a real pseudo-terminal, its screen rebuilt by a terminal emulator.

pexpect runs the real process on a pty; pyte (a VT100 emulator) replays what it
wrote, so the assertions are about what a person would see: no `?[` and no bare
escape character ever on screen, a Markdown code block drawn without its
backticks, and Ctrl+C in the middle of a streamed answer giving the prompt back
with the conversation still usable; a reminder arriving while a line is being
typed prints above the prompt and leaves that line as it was.
"""

from __future__ import annotations

import asyncio
import re
import sys
from datetime import UTC, datetime, timedelta

import pexpect
import pyte
import pytest

from tests.cli.test_cli import cli_env
from tests.fakes.openai_server import FakeOpenAI, Reply, tool_call

pytestmark = pytest.mark.timeout(120)

COLS, ROWS = 100, 40
CODE_ANSWER = (
    "Here is the script:\n\n```python\nprint('hello from the block')\n```\n\n"
    "It **prints** one line.\n"
)


class Screen:
    """Everything the child wrote, replayed into an emulated terminal."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.snapshots: list[str] = []

    def write(self, data: bytes) -> None:
        self.stream.feed(data)
        self.snapshots.append(self.text())

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)


async def expect(child: pexpect.spawn, pattern, timeout: float = 30) -> None:
    if isinstance(pattern, str):
        pattern = re.escape(pattern).encode()
    await child.expect(pattern, timeout=timeout, async_=True)


def never_garbled(screen: Screen) -> None:
    for shown in screen.snapshots:
        assert "?[" not in shown, shown
        assert "\x1b" not in shown, shown


async def test_chat_in_a_terminal_renders_markdown_and_stops_cleanly(db_url, tmp_path):
    async with FakeOpenAI() as openai:
        env = cli_env(db_url, tmp_path, openai.base_url) | {"TERM": "xterm-256color"}
        screen = Screen()
        child = pexpect.spawn(
            sys.executable, ["-m", "panager.cli.main", "chat"],
            env=env, dimensions=(ROWS, COLS), timeout=30,
        )
        child.logfile_read = screen
        try:
            await expect(child, "you ›")
            # 1. A tool call (its status line), then a Markdown answer streamed in pieces:
            #    the code block is drawn, not fenced.
            openai.script(
                tool_call("set_timezone", {"timezone": "Europe/Berlin"}),
                Reply(content=CODE_ANSWER, piece_delay=0.01),
            )
            child.sendline("show me a script")
            await expect(child, "one line")
            await expect(child, "you ›")
            shown = screen.text()
            never_garbled(screen)  # the status line came without a raw escape
            assert "setting the time zone" in shown
            assert "print('hello from the block')" in shown
            assert "```" not in shown and "**prints**" not in shown
            assert "prints one line" in shown.replace("  ", " ")

            # 2. Ctrl+C while the answer streams: the prompt comes back, the text stays.
            words = [f"word{i} " for i in range(300)]
            openai.script(Reply(content="".join(words), pieces=words, piece_delay=0.03))
            child.sendline("talk for a while")
            await expect(child, "word8 ")
            child.sendintr()
            await expect(child, "stopped — what was shown is kept")
            await expect(child, "you ›")
            assert "[interrupted]" in screen.text()
            assert screen.text().count("panager ›") == 2  # the cut-off answer drawn once
            await asyncio.sleep(0.3)  # nothing of the cut-off answer keeps arriving
            assert "word299" not in screen.text()

            # 3. The thread is valid: the next turn works and carries the kept text.
            openai.script("Still here.")
            child.sendline("are you there?")
            await expect(child, "Still here.")
            await expect(child, "you ›")
            sent = openai.requests[-1]["messages"]
            kept = [m["content"] for m in sent if m["role"] == "assistant"][-1]
            assert kept.startswith("word0 word1") and kept.endswith("[interrupted]")
            assert [m["role"] for m in sent][-3:] == ["user", "assistant", "user"]

            child.sendline("exit")
            await expect(child, pexpect.EOF)
        finally:
            if child.isalive():
                child.terminate(force=True)
        never_garbled(screen)
        assert "Traceback" not in screen.text()


async def test_a_reminder_prints_above_the_line_being_typed(db_url, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("scheduler_poll_seconds: 0.3\n")
    async with FakeOpenAI() as openai:
        env = cli_env(db_url, home, openai.base_url) | {"TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
        screen = Screen()
        child = pexpect.spawn(
            sys.executable, ["-m", "panager.cli.main", "chat"],
            env=env, dimensions=(ROWS, COLS), timeout=30,
        )
        child.logfile_read = screen
        try:
            await expect(child, "you ›")
            at = (datetime.now(UTC) + timedelta(seconds=4)).isoformat(timespec="seconds")
            openai.script(tool_call("schedule_create", {"message": "drink water", "at": at}), "Set.")
            child.sendline("remind me to drink water")
            await expect(child, "Set.")
            await expect(child, "you ›")
            child.send("half typed")
            await expect(child, "drink water", timeout=30)
            await expect(child, "half typed", timeout=10)  # the prompt redrawn below it
            await asyncio.sleep(0.3)  # and nothing drawn after that
            lines = [line for line in screen.text().splitlines() if line.strip()]
            reminder = max(i for i, line in enumerate(lines) if "🔔 drink water" in line)
            assert lines[-1] == "you › half typed", lines[-4:]  # the typed line, intact
            assert reminder == len(lines) - 2  # printed just above it
            openai.script("Noted.")
            child.sendline(" and done")
            await expect(child, "Noted.")
            assert openai.last_user_text() == "half typed and done"
            child.sendline("exit")
            await expect(child, pexpect.EOF)
        finally:
            if child.isalive():
                child.terminate(force=True)
        never_garbled(screen)

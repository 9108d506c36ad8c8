"""Showing an answer in the terminal while it is written.

`LiveAnswer` (a terminal) draws with `rich`: a spinner while the model thinks or
tools run, then the answer rendered as Markdown as its pieces arrive, in a live
area of at most a screenful — finished paragraphs are printed above it for good.
Tool-status lines and reminders print above the live area. `PlainAnswer` (a pipe,
`panager ask`) writes the pieces as plain text, no escape sequences at all.

Nothing here writes a raw escape sequence through prompt_toolkit's stdout proxy:
`rich` writes to the real terminal, and only while no prompt is shown.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import IO, Protocol

from rich.console import Console as RichConsole
from rich.console import Group
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

SPEAKER = "panager › "
RESTARTED = "(the answer was restarted)"
RESTARTED_ON = "(restarted on {model})"
INTERRUPTED = "[interrupted]"
FENCE = "```"


class AnswerView(Protocol):
    """How a front end shows one turn's answer (see the module doc)."""

    def start(self) -> None:
        """The turn began."""

    def delta(self, text: str) -> None:
        """A new piece of the answer."""

    def reset(self, restarted_on: str | None = None) -> None:
        """Drop the pieces shown for this model call (`restarted_on`: the fallback model
        that writes the answer again)."""

    def status(self, line: str) -> None:
        """A tool-status line."""

    def finish(self, text: str) -> None:
        """The turn ended with `text` (the whole answer, or a failure sentence)."""

    def interrupted(self) -> None:
        """The person stopped the answer (Ctrl+C)."""


class PlainAnswer:
    """Pieces written as they come: for pipes and `panager ask`."""

    def __init__(self, out: IO[str] | None = None, prefix: str = "") -> None:
        self.out = out or sys.stdout
        self.prefix = prefix
        self.shown = ""

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def start(self) -> None:
        """Nothing to show yet."""

    def delta(self, text: str) -> None:
        """Write the piece (the speaker first)."""
        self._write(("" if self.shown else self.prefix) + text)
        self.shown += text

    def reset(self, restarted_on: str | None = None) -> None:
        """Text cannot be taken back from a pipe: say the answer starts over."""
        if self.shown:
            line = RESTARTED_ON.format(model=restarted_on) if restarted_on else RESTARTED
            self._write(f"\n{line}\n")
            self.shown = ""

    def status(self, line: str) -> None:
        """A line of its own."""
        self._write(("\n" if self.shown else "") + line + "\n")
        self.shown = ""

    def finish(self, text: str) -> None:
        """Write what is missing of the final text."""
        if self.shown and text.startswith(self.shown):
            self._write(text[len(self.shown) :] + "\n")
        else:
            self._write(("\n" if self.shown else "") + self.prefix + text + "\n")
        self.shown = ""

    def interrupted(self) -> None:
        """Mark the cut-off answer."""
        if self.shown:
            self._write(f" {INTERRUPTED}\n")
        self.shown = ""


class LiveAnswer:
    """A spinner, then the answer as live Markdown (see the module doc)."""

    def __init__(self, console: RichConsole, refresh_per_second: float = 12) -> None:
        self.console = console
        self.text = ""  # the answer so far
        self.printed = 0  # how much of it is printed above the live area for good
        self.spinner = Spinner("dots", Text(" thinking…", style="dim"))
        self.live = Live(
            self.spinner,
            console=console,
            refresh_per_second=refresh_per_second,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def start(self) -> None:
        """Show the spinner."""
        self.live.start()

    def delta(self, text: str) -> None:
        """Add the piece; the first one is drawn at once, the rest at the refresh rate."""
        first = not self.text
        self.text += text
        self._print_finished_part()
        self.live.update(self._tail(), refresh=first)

    def reset(self, restarted_on: str | None = None) -> None:
        """Back to the spinner (a note if part of the answer was printed for good, or when
        a fallback model writes it again: the new answer appears under that line)."""
        if restarted_on and self.text:
            self.live.console.print(Text(RESTARTED_ON.format(model=restarted_on), style="dim"))
        elif self.printed:
            self.live.console.print(Text(RESTARTED, style="dim"))
        self.text, self.printed = "", 0
        self.live.update(self.spinner, refresh=True)

    def status(self, line: str) -> None:
        """Print the line above the live area."""
        self.live.console.print(Text(line), highlight=False)

    def finish(self, text: str) -> None:
        """Replace the live area with the final answer, printed for good."""
        rest = text[self.printed :] if text.startswith(self.text[: self.printed]) else text
        self.live.stop()
        self._print_markdown(rest, speaker=not self.printed)
        self.text, self.printed = "", 0

    def interrupted(self) -> None:
        """Keep what was shown, marked as interrupted."""
        self.live.stop()
        if self.text[self.printed :].strip():
            self._print_markdown(self.text[self.printed :], speaker=not self.printed)
        self.console.print(Text(INTERRUPTED, style="yellow"))

    def say(self, text: str) -> None:
        """Print a line (a reminder) above the live area."""
        self.live.console.print(Text(text), highlight=False)

    def _tail(self) -> Group:
        parts = [] if self.printed else [Text(SPEAKER.strip(), style="bold cyan")]
        return Group(*parts, Markdown(self.text[self.printed :], hyperlinks=False))

    def _print_finished_part(self) -> None:
        """Print finished paragraphs for good when the live area would outgrow the screen."""
        tail = self.text[self.printed :]
        budget = max(self.console.height - 4, 4)
        if _rough_lines(tail, self.console.width) <= budget:
            return
        cut = _paragraph_end(self.text, self.printed)
        if cut > self.printed:
            self._print_markdown(self.text[self.printed : cut], speaker=not self.printed)
            self.printed = cut

    def _print_markdown(self, text: str, *, speaker: bool) -> None:
        if speaker:
            self.console.print(Text(SPEAKER.strip(), style="bold cyan"))
        self.console.print(Markdown(text, hyperlinks=False))


@contextlib.contextmanager
def no_echo(stream: IO[str] | None = None) -> Iterator[None]:
    """While an answer is drawn, keys typed (and the ^C of Ctrl+C) are not echoed into it."""
    stream = stream or sys.stdin
    try:
        import termios

        fd = stream.fileno()
        saved = termios.tcgetattr(fd)
    except Exception:  # no termios, no file descriptor, or not a terminal
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def _rough_lines(text: str, width: int) -> int:
    """About how many screen lines `text` takes (Markdown adds a little)."""
    return sum(1 + len(line) // max(width, 1) for line in text.split("\n"))


def _paragraph_end(text: str, start: int) -> int:
    """The end of the last finished paragraph after `start` (outside code fences), else start."""
    end = text.rfind("\n\n", start)
    while end > start and text.count(FENCE, 0, end) % 2:
        end = text.rfind("\n\n", start, end)
    return end + 2 if end > start else start

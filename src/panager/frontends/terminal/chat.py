"""The terminal front end: `panager chat` (REPL) and `panager ask` (one turn).

Input: prompt_toolkit on a terminal, plain lines when stdin is a pipe (scripts
and tests). A trailing backslash continues a line; `/paste` collects raw lines
until `/submit`. Answers stream in as they are written (frontends/terminal/live.py: Markdown on
a terminal, plain text in a pipe). Ctrl+C stops a running turn: what was shown
stays in the thread, marked as interrupted, and the thread stays valid (the next
turn repairs an unanswered tool call); Ctrl+C or Ctrl+D at an empty prompt
exits, as do `exit`, `quit` and `/q`.

A turn that stops to ask (an action chosen while reading outside content, see
agent/graph/confirm.py) prints the question and asks y/N per action; anything but
y/yes counts as no, and a whole new message instead declines the question and
is answered as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from rich.console import Console as RichConsole
from rich.text import Text

from panager.agent.commands import CommandContext, dispatch, is_command
from panager.agent.graph.confirm import APPROVE, DENY, Question
from panager.agent.graph.events import Event
from panager.app import App
from panager.config import Settings
from panager.frontends.terminal.attach import USAGE, is_attach, parse_attach, take_file
from panager.frontends.terminal.live import SPEAKER, AnswerView, LiveAnswer, PlainAnswer, no_echo
from panager.frontends.web.server import start_for_terminal
from panager.services.media.intake import Attachment
from panager.services.messengers import tool_status_label
from panager.services.proposals import Offer
from panager.services.users import LOCAL_USER_ID, User, UserService

log = logging.getLogger(__name__)

EXIT_WORDS = {"exit", "quit", "/q", "/quit", "/exit"}
YES, NO = {"y", "yes"}, {"n", "no", ""}
CANCELLED = "(stopped — what was shown is kept in the conversation; ask again any time)"


class Console:
    """Writes to the terminal: above the prompt while one is shown, above a live answer
    while one is drawn, else straight to the terminal (made before stdout is patched)."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive
        self.rich = RichConsole(file=sys.stdout, highlight=False, emoji=False)
        self.view: AnswerView | None = None

    def say(self, text: str) -> None:
        """Print a line (safe while a prompt or a live answer is shown)."""
        if isinstance(self.view, LiveAnswer):
            self.view.say(text)
        elif not self.interactive:
            print(text, flush=True)
        elif _prompt_running():
            from prompt_toolkit import print_formatted_text

            print_formatted_text(text)
        else:
            self.rich.print(Text(text))

    def answer_view(self) -> AnswerView:
        """A live Markdown view on a terminal, plain text in a pipe."""
        return LiveAnswer(self.rich) if self.interactive else PlainAnswer(prefix=SPEAKER)


def _prompt_running() -> bool:
    from prompt_toolkit.application.current import get_app_or_none

    app = get_app_or_none()
    return app is not None and app.is_running


class TerminalMessenger:
    """Delivers reminders and scheduled answers for the local user into the open REPL.

    For a person joined with a chat front end it only shows a copy (services/messengers.py)."""

    platform = "terminal"

    def __init__(self, console: Console, users: UserService) -> None:
        self.console = console
        self.users = users

    async def send(
        self,
        user: User,
        text: str,
        *,
        link: dict | None = None,
        key: str | None = None,
        offers: Sequence[Offer] = (),
    ) -> bool:
        """Print the message when it is for the terminal's person (joined or not); each
        held call it offers gets the command that shows it again and asks y/N."""
        if user.id != await self.users.person_id("terminal", LOCAL_USER_ID):
            return False
        self.console.say(f"\n🔔 {text}")
        if link:
            self.console.say(f"   {link.get('label', 'Link')}: {link['url']}")
        for n, offer in enumerate(offers, 1):
            self.console.say(f"   To decide {n}: /approve {offer.id}   (or /deny {offer.id})")
        return True


async def read_lines_tty(session) -> AsyncIterator[str]:
    """Lines from prompt_toolkit; Ctrl+C/Ctrl+D at an empty prompt end the stream."""
    while True:
        try:
            yield await session.prompt_async("you › ")
        except (EOFError, KeyboardInterrupt):
            return


async def read_lines_pipe() -> AsyncIterator[str]:
    """Lines from a non-terminal stdin, without blocking the event loop."""
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        yield line.rstrip("\n")


def _prompt_session():
    from prompt_toolkit import PromptSession
    from prompt_toolkit.key_binding import KeyBindings

    bindings = KeyBindings()

    @bindings.add("c-c")
    def _(event) -> None:
        if event.app.current_buffer.text:
            event.app.current_buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt)

    return PromptSession(key_bindings=bindings)


async def messages(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Join continuation lines and /paste blocks into whole messages."""
    buffer: list[str] = []
    pasting = False
    async for line in lines:
        if pasting:
            if line.strip() == "/submit":
                pasting = False
                yield "\n".join(buffer)
                buffer = []
            else:
                buffer.append(line)
            continue
        if line.strip() == "/paste" and not buffer:
            pasting = True
            continue
        if line.endswith("\\"):
            buffer.append(line[:-1])
            continue
        buffer.append(line)
        yield "\n".join(buffer)
        buffer = []
    if buffer:
        yield "\n".join(buffer)


class Repl:
    """One terminal session for the local user."""

    def __init__(self, app: App, user: User, console: Console, debug: bool = False) -> None:
        self.app = app
        self.user = user
        self.console = console
        self.debug = debug
        self.asking: Question | None = None  # a question waiting for y/N answers
        self.decisions: dict[str, str] = {}
        self.offered: Offer | None = None  # a held call shown again, waiting for y/N
        self.app.emitter.subscribe(self._on_event)

    async def handle(self, text: str) -> bool:
        """Handle one message; returns False when the user wants to leave."""
        stripped = text.strip()
        if self.asking is not None and stripped.lower() in YES | NO:
            await self._decide(stripped.lower() in YES)
            return True
        offered, self.offered = self.offered, None
        if offered is not None and stripped.lower() in YES | NO:
            await self._decide_offer(offered, stripped.lower() in YES)
            return True
        self.asking = None  # a new message instead: the turn declines the question first
        if not stripped:
            return True
        if stripped.lower() in EXIT_WORDS:
            return False
        if is_attach(stripped):
            await self._attach(stripped)
        elif is_command(stripped):
            await self._command(stripped)
        else:
            await self._turn(text)
        return True

    async def _command(self, text: str) -> None:
        ctx = CommandContext(user=self.user, assistant=self.app.assistant, front_end="terminal")
        reply = await dispatch(ctx, text)
        self.console.say(reply.text)
        if reply.link:
            self.console.say(f"  {reply.link.get('label', 'Link')}: {reply.link['url']}")
        if reply.offers:  # a held call shown again: y/N decides it
            self.offered = reply.offers[0]
            self.console.say("Approve? [y/N]")
        # a /link or /unlink may have moved the terminal to another person
        users = self.app.deps.users
        person = await users.person_id("terminal", LOCAL_USER_ID)
        self.user = (await users.get(person) if person is not None else None) or self.user

    async def _attach(self, text: str) -> None:
        """`/attach PATH [message]`: read the file, show what was heard or refused, answer."""
        parsed = parse_attach(text)
        media = self.app.deps.media
        if parsed is None or media is None:
            self.console.say(USAGE)
            return
        path, message = parsed
        attachment = await take_file(media, self.user.id, path)
        for line in self.app.assistant.attachment_notes(self.user, [attachment]):
            self.console.say(line)
        if message or attachment.kind != "rejected":
            await self._turn(message, [attachment])

    async def _decide(self, approve: bool) -> None:
        """One y/N answer; after the last call of the question, resume the turn."""
        question = self.asking
        assert question is not None
        call = question.calls[len(self.decisions)]
        self.decisions[call.id] = APPROVE if approve else DENY
        if len(self.decisions) < len(question.calls):
            self._prompt_next()
            return
        decisions, self.asking, self.decisions = self.decisions, None, {}
        await self._turn(None, answer=(question.key, decisions))

    async def _decide_offer(self, offer: Offer, approve: bool) -> None:
        """The y/N answer to a held call shown again."""
        assistant = self.app.assistant
        if approve:
            result = await assistant.approve_proposal(self.user, offer.id, offer.on)
        else:
            result = await assistant.deny_proposal(self.user, offer.id)
        self.console.say(result.text)
        if result.offers:  # it changed since it was held: shown as it is now, asked again
            self.offered = result.offers[0]
            self.console.say("Approve? [y/N]")

    def _prompt_next(self) -> None:
        assert self.asking is not None
        n, total = len(self.decisions) + 1, len(self.asking.calls)
        which = "" if total == 1 else f" {n} of {total}"
        self.console.say(f"Approve{which}? [y/N]")

    async def _turn(
        self,
        text: str | None,
        attachments: Sequence[Attachment] = (),
        answer: tuple[str, dict] | None = None,
    ) -> None:
        view = self.console.view = self.console.answer_view()
        assistant = self.app.assistant
        if answer is not None:
            run = assistant.answer(self.user, answer[0], answer[1])
        else:
            run = assistant.run_turn(self.user, text or "", attachments=attachments)
        task = asyncio.create_task(run)
        view.start()
        try:
            with _cancel_on_sigint(task), no_echo_if(self.console.interactive):
                result = await task
        except asyncio.CancelledError:
            view.interrupted()
            self.console.view = None
            self.console.say(CANCELLED)
            return
        except BaseException:
            view.interrupted()
            raise
        finally:
            self.console.view = None
        view.finish(result.text)
        if result.link:
            self.console.say(f"  {result.link.get('label', 'Link')}: {result.link['url']}")
        if result.question is not None:
            self.asking, self.decisions = result.question, {}
            self._prompt_next()
        if self.debug:
            await self._print_debug()

    async def _on_event(self, event: Event) -> None:
        view = self.console.view
        if event.user_id != self.user.id or view is None:
            return
        if event.type == "message_delta":
            view.delta(event.data.get("text", ""))
        elif event.type == "message_reset":
            view.reset(event.data.get("restarted_on"))
        elif event.type == "tool_start":
            view.status(f"  {tool_status_label(event.data.get('name', '?'))}")
        elif event.type == "tool_end" and event.data.get("status") == "error":
            view.status(f"  ⚠️ {event.data.get('name')} failed")

    async def _print_debug(self) -> None:
        snapshot = await self.app.assistant.graph.aget_state(
            self.app.assistant.config_for(self.user)
        )
        values = snapshot.values or {}
        msgs = values.get("messages", [])
        info = {
            "messages": len(msgs),
            "model_calls_last_turn": values.get("model_calls"),
            "summary": bool(values.get("summary")),
            "last": [f"{type(m).__name__}: {str(m.content)[:60]}" for m in msgs[-4:]],
        }
        self.console.say("debug " + json.dumps(info, ensure_ascii=False, indent=1))


def no_echo_if(interactive: bool) -> contextlib.AbstractContextManager:
    """No echo of typed keys while a turn runs on a terminal."""
    return no_echo() if interactive else contextlib.nullcontext()


@contextlib.contextmanager
def _cancel_on_sigint(task: asyncio.Task):
    """While a turn runs, Ctrl+C cancels it instead of killing the process."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        installed = True
    except (NotImplementedError, RuntimeError):
        installed = False
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


async def start_app(settings: Settings, console: Console) -> App:
    """Start the app, telling the user what is happening on a first run."""
    if not settings.database_url and not (settings.home / "pgdata").exists():
        console.say(f"Setting up the local database in {settings.home} (first run only)…")
    return await App.start(settings)


def _banner(app: App, user: User) -> str:
    model = app.settings.model if app.model is not None else "none configured"
    lines = [f"Panager — talking as {user.name} ({user.timezone}); model: {model}."]
    if app.model is None:
        lines.append("No model configured: set OPENAI_API_KEY or OPENAI_BASE_URL to chat.")
    lines.append("Type /help for commands, exit to leave.")
    return "\n".join(lines)


async def run_chat(settings: Settings, *, debug: bool = False) -> None:
    """The REPL loop."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    console = Console(interactive)
    app = await start_app(settings, console)
    try:
        user = await app.local_user()
        app.deps.messenger.add(TerminalMessenger(console, app.deps.users))
        await start_background(app)
        console.say(_banner(app, user))
        repl = Repl(app, user, console, debug)
        if interactive:
            from prompt_toolkit.patch_stdout import patch_stdout

            with patch_stdout(raw=True):
                await _loop(repl, read_lines_tty(_prompt_session()))
        else:
            await _loop(repl, read_lines_pipe())
    finally:
        await app.stop()


async def _loop(repl: Repl, lines: AsyncIterator[str]) -> None:
    async for text in messages(lines):
        if not await repl.handle(text):
            break


async def start_background(app: App) -> None:
    """Start the in-process services the terminal needs (scheduler, web) if available."""
    for starter in BACKGROUND_STARTERS:
        await starter(app)


async def start_terminal_worker(app: App) -> None:
    """Run a scheduler worker for the local user, so reminders print in this terminal."""
    stop = asyncio.Event()
    task = asyncio.create_task(app.run_worker(stop, only_users=[LOCAL_USER_ID], skip_users=()))

    async def close() -> None:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:
            log.exception("scheduler worker stopped with an error")

    app.closers.append(close)


BACKGROUND_STARTERS: list[Callable[[App], Awaitable[object]]] = [
    start_terminal_worker,
    start_for_terminal,
]


"""Answering one stored message on any chat front end: access first, then a command or a turn.

The front end decides *when* a message is handled (once, in order, one at a
time per person: services/inbox.py and inbox_queue.py); `Answerer` decides
*how*, the same way everywhere: it admits the sender by their front-end
identity before anything else (a refused person gets a short reply and the
model is never called; `/start CODE` still reaches the invite command), runs
slash commands from the shared table, and runs everything else as a turn
whose answer streams into the platform's messages (frontends/shared/streaming.py)
while the typing indicator and, where the platform has one, a progress
message run. Files a message carries are downloaded by the platform and taken
in by the media intake (services/media/intake.py) before the turn; what was
heard and what could not be used is said first. A question before a
consequential call comes with Approve/Deny buttons (frontends/shared/questions.py).
Text that is not the sender's own (a forwarded message, `Incoming.outside_source`)
is framed as outside content where it enters, so it taints the turn, never
counts as the person's words, and is never run as a slash command.
The platform itself is a `Conversation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from panager.agent.commands import CommandContext, CommandReply, dispatch, is_command, parse

if TYPE_CHECKING:
    from panager.agent.graph.events import Event
    from panager.agent.turns.result import TurnResult
    from panager.app import App
    from panager.frontends.shared.streaming import StreamedReply
    from panager.services.inbox import InboxMessage
    from panager.services.media.intake import Attachment
    from panager.services.proposals import Offer
    from panager.services.users import User

# Commands a person not (yet) let in may send: an invite code, or a link to their own account
# elsewhere (which joins only once that account approves).
OPEN_COMMANDS = ("start", "link")
ATTACHMENT_NOTE = "I can't read stickers — please say in words what you mean."


@dataclass(frozen=True)
class Incoming:
    """One stored message, as every front end describes it to the answerer."""

    platform: str  # "discord", "telegram"
    sender_id: int  # the sender's id on that platform
    username: str
    display_name: str | None
    text: str
    key: str  # names the turn (`message_key`): a resumed message is not answered twice
    resume: bool = False  # handled before by a process that died
    attachments: bool = False  # files, stickers: `Conversation.attachments` takes them in
    # Where the text came from when it is not the sender's own words (a forwarded message):
    # it enters the turn framed as outside content and is never run as a command.
    outside_source: str | None = None

    def command_text(self) -> str:
        """The text when it may be a command: only the sender's own words can be."""
        return "" if self.outside_source else self.text.strip()

    @classmethod
    def from_row(cls, platform: str, row: InboxMessage) -> Incoming:
        """A stored inbox row; the turn is keyed `<platform>-<id>`."""
        return cls(
            platform=platform,
            sender_id=row.user_id,
            username=row.username,
            display_name=row.display_name,
            text=row.content,
            key=f"{platform}-{row.message_id}",
            resume=row.attempts > 0,
            attachments=bool(row.attachments or row.attachment_refs),
        )


class Progress(Protocol):
    """A turn's progress display (Discord's tool-status message)."""

    def on_event(self, event: Event) -> None:
        """Follow the turn's events."""
        ...

    async def close(self) -> None:
        """Remove the display once the answer is there."""
        ...


class Conversation(Protocol):
    """The chat one message came from, as the answerer uses it."""

    async def reply(
        self, text: str, link: dict | None = None, offers: Sequence[Offer] = ()
    ) -> None:
        """Post a whole reply (a command's answer, a refusal); `offers`: the held calls it
        asks about again (their Approve/Deny buttons)."""
        ...

    async def attachments(self, user: User) -> Sequence[Attachment]:
        """The message's files downloaded and taken in (a refused one carries its notice);
        what the platform cannot hand over at all (stickers) it says itself."""
        ...

    async def note(self, text: str) -> None:
        """Post a short line before the answer (what was heard, what could not be used)."""
        ...

    def typing(self) -> AbstractAsyncContextManager[None]:
        """The typing indicator while a turn runs."""
        ...

    def progress(self) -> Progress | None:
        """A progress display for this turn, if the platform shows one."""
        ...

    def stream(self, interval: float, first_after: float) -> StreamedReply[Any]:
        """The streamed answer's messages."""
        ...

    async def finish(self, reply: StreamedReply[Any], result: TurnResult) -> None:
        """Show the turn's final answer (and its link, question or buttons)."""
        ...


class Answerer:
    """Answers stored messages for their senders (see the module doc)."""

    def __init__(self, app: App, front_end: str) -> None:
        self.app = app
        self.access = app.deps.access
        self.front_end = front_end
        self.edit_interval = 1.0  # seconds between edits of a streamed answer's message
        self.first_post_after = 1.0  # an answer done sooner is sent once, without edits

    async def answer(self, incoming: Incoming, chat: Conversation) -> None:
        """Admit the sender, then answer one stored message in its chat."""
        admission = await self.access.admit_identity(
            incoming.platform, incoming.sender_id, incoming.username, incoming.display_name
        )
        text = incoming.command_text()
        identity = (incoming.platform, incoming.sender_id)
        if not admission.allowed:
            if command_name(text) in OPEN_COMMANDS and admission.user.status != "blocked":
                await self.command(admission.user, text, chat, identity)
            else:
                await chat.reply(admission.refusal or "")
            return
        if is_command(text):
            await self.command(admission.user, text, chat, identity)
            return
        attachments = await chat.attachments(admission.user) if incoming.attachments else ()
        if incoming.text.strip() or any(a.kind != "rejected" for a in attachments):
            await self.turn(admission.user, chat, incoming, attachments)
            return
        notes = self.app.assistant.attachment_notes(admission.user, attachments)
        if notes:  # nothing to answer: only what could not be used
            await chat.note("\n".join(notes))

    async def run_command(
        self, user: User, text: str, identity: tuple[str, int] | None = None
    ) -> CommandReply:
        """Run a shared slash command for this front end's user (sent from `identity`)."""
        ctx = CommandContext(
            user=user, assistant=self.app.assistant, front_end=self.front_end, identity=identity
        )
        return await dispatch(ctx, text)

    async def command(
        self, user: User, text: str, chat: Conversation, identity: tuple[str, int] | None = None
    ) -> None:
        """Run a slash command and post its reply."""
        reply = await self.run_command(user, text, identity)
        await chat.reply(reply.text, reply.link, reply.offers)

    async def turn(
        self,
        user: User,
        chat: Conversation,
        incoming: Incoming,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """Run a turn: one call to the runner, which says first what was heard and what could
        not be used (`chat.note`), frames text that is not the sender's own, and answers;
        progress and the streamed answer follow its events."""

        async def note(lines: list[str]) -> None:
            await chat.note("\n".join(lines))

        emitter = self.app.emitter.child()
        progress = chat.progress()
        if progress is not None:
            emitter.subscribe(progress.on_event)
        reply = chat.stream(self.edit_interval, self.first_post_after)
        emitter.subscribe(reply.on_event)
        try:
            async with chat.typing():
                result = await self.app.assistant.run_turn(
                    user,
                    incoming.text,
                    emitter=emitter,
                    message_key=incoming.key,
                    resume=incoming.resume,
                    attachments=attachments,
                    outside_source=incoming.outside_source,
                    on_notes=note,
                )
            await chat.finish(reply, result)
        finally:
            await reply.close()
            if progress is not None:
                await progress.close()


def command_name(text: str) -> str | None:
    """'start' for '/start CODE'; None when the text is not a command."""
    parsed = parse(text) if is_command(text) else None
    return parsed[0] if parsed else None

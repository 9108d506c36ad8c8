"""An in-memory chat front end: the smallest thing that implements the front-end contract.

It touches nothing outside itself but its registration: a `Platform` (its name,
`memo`) registered by the test, a `FrontEnd` for the composition root, a
`Conversation` for the shared answerer and a `Surface` for the streamed reply
(frontends/shared/). Messages are handed to it directly (no inbox table, so no
migration of its own); what it would post is kept in lists to read back.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from panager.frontends.shared.answering import Answerer, Incoming
from panager.frontends.shared.chunking import split_message
from panager.frontends.shared.front_end import Running
from panager.frontends.shared.questions import ButtonSpec, press, proposal_buttons, question_buttons
from panager.frontends.shared.streaming import StreamedReply
from panager.platforms import Platform

MEMO = Platform("memo", "Memo")
LIMIT = 120  # characters in one message: long answers are split


@dataclass
class Shown:
    """One posted message as it stands now."""

    text: str
    buttons: list[ButtonSpec] = field(default_factory=list)
    deleted: bool = False


class MemoChat:
    """One person's chat: a `Conversation` and the `Surface` its answers are written on."""

    def __init__(self, sender: int) -> None:
        self.sender = sender
        self.messages: list[Shown] = []
        self.log: list[tuple[str, int, str]] = []  # ("send" | "edit", message index, text)

    # ---------------------------------------------------------------- Surface

    def split(self, text: str) -> list[str]:
        """Messages of at most LIMIT characters, fences balanced."""
        return split_message(text, LIMIT)

    def button_ok(self, url: str) -> bool:
        """Links become buttons."""
        return True

    async def send(self, i: int, text: str, link: dict | None, *, buttons: Any = None,
                   previews: bool = False) -> int:
        """Post a message; its handle is its index."""
        self.messages.append(Shown(text, list(buttons or [])))
        self.log.append(("send", len(self.messages) - 1, text))
        return len(self.messages) - 1

    async def edit(self, message: int, i: int, text: str, link: dict | None, *,
                   buttons: Any = None, previews: bool | None = None) -> int:
        """Change a posted message."""
        self.messages[message] = Shown(text, list(buttons or []))
        self.log.append(("edit", message, text))
        return message

    async def delete(self, message: int) -> None:
        """Mark a message deleted."""
        self.messages[message].deleted = True

    # ----------------------------------------------------------- Conversation

    async def reply(self, text: str, link: dict | None = None, offers: Sequence[Any] = ()
                    ) -> None:
        """A whole reply (a command's answer, a refusal)."""
        buttons = None if link else proposal_buttons(offers) or None
        await StreamedReply(self).finish(text, link, buttons=buttons)

    async def attachments(self, user: Any) -> Sequence[Any]:
        """This front end carries no files."""
        return ()

    async def note(self, text: str) -> None:
        """A line before the answer."""
        await self.send(len(self.messages), text, None)

    def typing(self) -> contextlib.AbstractAsyncContextManager[None]:
        """No typing indicator."""
        return _nothing()

    def progress(self) -> None:
        """No progress display."""
        return None

    def stream(self, interval: float, first_after: float) -> StreamedReply[int]:
        """The answer's messages, edited while it streams."""
        return StreamedReply(self, interval=interval, first_after=first_after)

    async def finish(self, reply: StreamedReply[int], result: Any) -> None:
        """The final text, with the question's (or held calls') buttons on the last message."""
        if result.question is not None:
            buttons = question_buttons(result.question)
        else:
            buttons = proposal_buttons(result.offers) or None
        await reply.finish(result.text, result.link, buttons=buttons,
                           previews=not result.tainted)

    # ----------------------------------------------------------------- reading

    def shown(self) -> list[str]:
        """The texts of the messages not deleted, in order."""
        return [m.text for m in self.messages if not m.deleted]


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


class MemoFrontEnd:
    """The composition root's view (frontends/shared/front_end.py `FrontEnd`)."""

    platform = MEMO

    def __init__(self) -> None:
        self.answerer: Answerer | None = None
        self.app: Any = None
        self.chats: dict[int, MemoChat] = {}
        self.sent = 0

    def configured(self, settings: Any) -> bool:
        return False

    def settings_problem(self, settings: Any, *, chosen: bool) -> str | None:
        return None

    async def check(self, settings: Any) -> None:
        return None

    async def start(self, app: Any) -> Running:
        """Answer with the shared answerer; streamed answers edit at once (no waiting)."""
        self.app = app
        self.answerer = Answerer(app, MEMO.name)
        self.answerer.edit_interval = 0.05
        self.answerer.first_post_after = 0.05

        async def stop() -> None:
            self.answerer = None

        return Running(MEMO.name, stop)

    async def deliver_only(self, app: Any, *, alone: bool) -> list[Running]:
        return []

    async def answer_only(self, app: Any) -> list[Running]:
        """It stores nothing: no answers without intake."""
        return []

    def explain(self, exc: BaseException) -> str | None:
        return None

    def chat(self, sender: int) -> MemoChat:
        """The chat with `sender`."""
        return self.chats.setdefault(sender, MemoChat(sender))

    async def say(self, sender: int, text: str, *, forwarded_from: str | None = None
                  ) -> MemoChat:
        """`sender` writes `text` (or forwards it); returns their chat once it is answered."""
        assert self.answerer is not None, "start() first"
        self.sent += 1
        incoming = Incoming(
            platform=MEMO.name, sender_id=sender, username=f"memo{sender}", display_name=None,
            text=text, key=f"{MEMO.name}-{self.sent}",
            outside_source=f"a message forwarded from {forwarded_from}" if forwarded_from else None,
        )
        chat = self.chat(sender)
        await self.answerer.answer(incoming, chat)
        return chat

    async def press(self, sender: int, data: str) -> MemoChat:
        """`sender` presses a button; the answer is posted in their chat."""
        user = await self.app.deps.users.get(
            await self.app.deps.users.person_id(MEMO.name, sender))
        result = await press(self.app, user, data)
        chat = self.chat(sender)
        if result is not None:
            await chat.finish(StreamedReply(chat), result)
        return chat

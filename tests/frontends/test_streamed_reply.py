"""`StreamedReply`'s first post: only while the answer is still arriving (frontends/shared/
streaming.py). Text that is all there when `first_after` has passed (the turn is only winding
up, as when many turns share the process) is sent once by `finish`, never posted and edited."""

from __future__ import annotations

import asyncio

from panager.agent.graph.events import Event
from panager.frontends.shared.streaming import StreamedReply


class Surface:
    """Records sends and edits."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.edited: list[str] = []
        self.posted = asyncio.Event()

    def split(self, text: str) -> list[str]:
        return [text] if text else []

    def button_ok(self, url: str) -> bool:
        return True

    async def send(self, i, text, link, *, buttons=None, previews=False):
        self.sent.append(text)
        self.posted.set()
        return i

    async def edit(self, message, i, text, link, *, buttons=None, previews=None):
        self.edited.append(text)
        return message

    async def delete(self, message) -> None:
        raise AssertionError("nothing to delete")


def piece(text: str) -> Event:
    return Event("message_delta", 1, {"text": text})


async def test_an_answer_complete_before_first_after_is_sent_once_however_late_the_finish():
    surface = Surface()
    reply = StreamedReply(surface, interval=0.01, first_after=0.01)
    for text in ("All ", "of ", "it."):
        reply.on_event(piece(text))
    await asyncio.sleep(0.05)  # the turn winds up well past first_after: no piece since
    assert surface.sent == []
    await reply.finish("All of it.")
    assert surface.sent == ["All of it."] and surface.edited == []


async def test_a_piece_after_a_pause_posts_the_answer_then():
    surface = Surface()
    reply = StreamedReply(surface, interval=0.01, first_after=0.01)
    reply.on_event(piece("Start"))
    await asyncio.sleep(0.05)
    assert surface.sent == []  # paused: nothing posted yet
    reply.on_event(piece(" and more"))  # arriving again: posted at once
    await asyncio.wait_for(surface.posted.wait(), 10)
    assert surface.sent == ["Start and more"]
    await reply.finish("Start and more, done.")
    assert surface.edited[-1] == "Start and more, done."

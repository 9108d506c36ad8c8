"""Keeping an answer cut off mid-stream (Ctrl+C): what the person saw stays in the thread.

`ShownText` follows one user's turn events and holds the text streamed so far for
the current model call; when the turn is cancelled, `keep_interrupted` appends it
to the thread as the answer, marked as interrupted, so the conversation reads as
the person saw it and the next turn starts from a valid thread. It keeps the taint
mark of the call it was cut from: text written after outside content is the model's
words about it, however it ended.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from panager.agent.graph.events import Event
from panager.agent.graph.taint import mark

log = logging.getLogger(__name__)

INTERRUPTED_MARK = "\n\n[interrupted]"
INTERRUPTED_KEY = "panager_interrupted"
# `TurnContext.extra` key: whether the model call running now is tainted (set by the
# graph before each call), so a cut-off answer keeps the mark the call would have set.
RUNNING_CALL_TAINTED = "running_call_tainted"


class ShownText:
    """The streamed text of the model call running now, for one user."""

    def __init__(self, user_id: int) -> None:
        self.user_id = user_id
        self.text = ""

    def on_event(self, event: Event) -> None:
        """Collect message_delta pieces; start over on a reset or a new model call."""
        if event.user_id != self.user_id:
            return
        if event.type == "message_delta":
            self.text += event.data.get("text", "")
        elif event.type in ("turn_start", "message_reset", "message_end"):
            self.text = ""


async def keep_interrupted(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    config: RunnableConfig,
    text: str,
    asked: AnyMessage | None,
    tainted: bool = False,
) -> bool:
    """Append the cut-off answer (and the question, if the thread lacks it); True if kept.

    `tainted`: the cut-off model call was tainted, so the kept answer carries the mark."""
    if not text.strip():
        return False
    try:
        snapshot = await graph.aget_state(config)
        messages = snapshot.values.get("messages", []) if snapshot.values else []
        updates: list[AnyMessage] = []
        if asked is not None and all(m.id != asked.id for m in messages):
            updates.append(asked)
        kept = AIMessage(
            content=text.rstrip() + INTERRUPTED_MARK, additional_kwargs={INTERRUPTED_KEY: True}
        )
        updates.append(mark(kept, tainted))
        await graph.aupdate_state(config, {"messages": updates}, as_node="agent")
    except Exception:
        log.exception("could not keep the interrupted answer")
        return False
    return True
